"""Component packages (.plc): contract + LTO-IR variants + producing toolchain + content hash.

A package is a deterministic zip archive:
  manifest.json      name, version, toolchain, compile options, variants, content hash
  contract.toml      the contract as written
  variants/N.fatbin  LTO-IR (sm_90a), one per set of compile-time facts
  source/FILE        the source and the headers of its folder it includes, unless packed --closed
                     (needed only for the monolithic control and sanitize builds)
A package links without its source: a vendor can ship LTO-IR plus a contract. It names no folder
of the machine that packed it: the same inputs packed in any folder give the same bytes.

This module reads, checks and writes packages; making one (compiling, probing) is packer.py.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
import zlib
from dataclasses import dataclass, field, fields
from pathlib import Path

from .backend.nvcc import ALL_ARCH_FLAGS, COMMON_FLAGS
from .contract import Contract, parse_contract_text
from .errors import FactDomainError, PackageError, PipelinkError
from .fsutil import read_bounded, write_atomic
from .findings import Finding

# 2: LTO-IR carries line info (conformance attribution). 3: the content hash covers every manifest
# field that is not derived from the contract or the LTO-IR, and load checks the derived ones.
# 4: no source_dir; the package carries the headers its source includes from its folder (headers),
# and the compile options are checked against ALLOWED_OPTIONS.
# 5: pl_ctx ends with k_begin, k_end and stage_base (component.h): LTO-IR packed against the shorter
# struct would be called with a different parameter type, so older packages are refused, not linked.
FORMAT_VERSION = 5
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)
PACKAGE_LIMIT = 256 << 20  # bytes, the archive and everything it holds unpacked
TEXT_LIMIT = 16 << 20      # bytes, one source, header or contract
_MANIFEST_KEYS = {"format", "name", "version", "origin", "toolchain", "compile_options", "variants", "source",
                  "headers", "conformance", "content_hash"}

# What compile options a package may record and a link may replay (docs/guide.md, "Packages from
# elsewhere"). A package comes from another team or vendor, and the monolithic control and sanitize
# builds compile its source with its options: an option that names a program (--compiler-bindir,
# -ccbin), passes flags on to one (-Xcompiler), or reads or writes outside the package (an absolute
# or escaping -I, -include, -o) would run or read what the package chooses. Only these may.
ALLOWED_OPTIONS = {
    "-DNAME, -DNAME=VALUE (VALUE of letters, digits, _ . + -)": r"-D[A-Za-z_]\w*(=[\w.+-]*)?",
    "-UNAME": r"-U[A-Za-z_]\w*",
    "-IFOLDER (relative, inside the source folder)": r"-I(?!-)[\w.+-]+(/[\w.+-]+)*",
    "-std=c++17, -std=c++20": r"-std=c\+\+(17|20)",
    "-O0 to -O3": r"-O[0-3]",
    "-lineinfo": r"-lineinfo",
    "--use_fast_math": r"--use_fast_math",
    "--expt-relaxed-constexpr, --expt-extended-lambda": r"--expt-(relaxed-constexpr|extended-lambda)",
    "--ftz, --prec-div, --prec-sqrt, --fmad =true|false": r"--(ftz|prec-div|prec-sqrt|fmad)=(true|false)",
}
_ALLOWED = [re.compile(p, re.ASCII) for p in ALLOWED_OPTIONS.values()]


def _lto_flag(option) -> bool:
    return isinstance(option, str) and (option in COMMON_FLAGS or option in ALL_ARCH_FLAGS)


def check_compile_options(options: list, *, file: str, field: str) -> None:
    """PackageError for the first option that is neither in ALLOWED_OPTIONS nor one of the LTO flags (nvcc.lto_flags
    of any target: pack records them and a build never replays them, it passes its own)."""
    for option in options:
        allowed = _lto_flag(option) or isinstance(option, str) and any(p.fullmatch(option) for p in _ALLOWED)
        if allowed and option.startswith("-I"):
            allowed = safe_path(option[2:])
        if not allowed:
            raise PackageError(f"compile option {option!r} is not allowed in a package", file=file, field=field,
                               hint="allowed: " + "; ".join(ALLOWED_OPTIONS)
                               + " (docs/guide.md, Packages from elsewhere)")


def safe_path(name: str) -> bool:
    """A relative path that stays where it is put and passes through nvcc's option parsing as it
    is: letters, digits and _ . + - in each part, no . or .. part, no leading - (an option)."""
    return (re.fullmatch(r"(?!-)[\w.+-]+(/[\w.+-]+)*", name, re.ASCII) is not None
            and all(part not in (".", "..") for part in name.split("/")))


@dataclass
class Variant:
    facts: dict[str, int]  # compile-time facts of this variant
    ltoir: bytes


@dataclass
class Package:
    contract: Contract
    contract_text: str
    variants: list[Variant]
    toolchain: dict[str, str]          # {"nvcc": "13.0.88"}
    compile_options: list[str]         # nvcc.lto_flags(its targets) and options from ALLOWED_OPTIONS
    source_name: str | None = None
    source_text: str | None = None
    headers: dict[str, str] = field(default_factory=dict)  # path relative to the source's folder -> text
    conformance: dict | None = None    # the pack-time probe's result (probe.py)
    path: Path | None = field(default=None, compare=False)
    # SHA-256 of the package file's bytes as load_package read them (None: not loaded from a file). A
    # link spec's pin ([[instance]] sha256) is checked against it: the very bytes parsed, not a re-read.
    file_sha256: str | None = field(default=None, compare=False)
    # The source file a link packed it from (a spec's `source =` instance; no package file): what errors and
    # the plan name in place of a package path.
    packed_from: Path | None = field(default=None, compare=False)

    @property
    def name(self) -> str:
        return self.contract.name

    @property
    def closed(self) -> bool:
        return self.source_text is None

    def content_hash(self) -> str:
        """SHA-256 over everything the package holds that is not derived from another part of it:
        every field of the manifest except those load_package recomputes and compares (name,
        version and origin come from the contract; each variant's path, size and sha256 from its
        LTO-IR). Each part is length-prefixed, so no bytes can move from one part to the next."""
        h = hashlib.sha256()
        for part in (self.contract_text, self.toolchain, self.compile_options, self.source_name, self.source_text,
                     self.headers, self.conformance, [v.facts for v in self.variants],
                     [hashlib.sha256(v.ltoir).hexdigest() for v in self.variants]):
            blob = json.dumps(part, sort_keys=True).encode()
            h.update(len(blob).to_bytes(8, "little"))
            h.update(blob)
        return h.hexdigest()

    def variant_for(self, facts: dict[str, int]) -> Variant | None:
        return next((v for v in self.variants if all(facts.get(k) == x for k, x in v.facts.items())), None)

    def source_files(self, folder: str) -> dict[str, str]:
        """The source and its headers as a build writes them: under ``folder``, as they lay in the
        source's folder (an include by a relative name finds the same file it found at pack)."""
        return {f"{folder}/{self.source_name}": self.source_text,
                **{f"{folder}/{name}": text for name, text in self.headers.items()}}

    def replay_flags(self, folder: str) -> list[str]:
        """The options the source was packed with (less the LTO flags: every build passes its own), for
        a build that puts ``source_files(folder)`` in its working folder: the source's folder and
        each -I folder inside it move to ``folder``."""
        return [f"-I{folder}", *(f"-I{folder}/{o[2:]}" if o.startswith("-I") else o
                                 for o in self.compile_options if not _lto_flag(o))]

    def manifest(self) -> dict:
        return {
            "format": FORMAT_VERSION, "name": self.name, "version": self.contract.component.version,
            "origin": self.contract.component.origin, "toolchain": self.toolchain,
            "compile_options": self.compile_options,
            "variants": [{"facts": v.facts, "ltoir": f"variants/{i}.fatbin", "bytes": len(v.ltoir),
                          "sha256": hashlib.sha256(v.ltoir).hexdigest()} for i, v in enumerate(self.variants)],
            "source": f"source/{self.source_name}" if self.source_text is not None else None,
            "headers": [f"source/{name}" for name in sorted(self.headers)],
            "conformance": self.conformance, "content_hash": self.content_hash(),
        }

    def to_bytes(self) -> bytes:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            def add(name: str, data: bytes, compress: bool = True) -> None:
                info = zipfile.ZipInfo(name, date_time=_ZIP_DATE)
                info.compress_type = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
                info.external_attr = 0o644 << 16
                z.writestr(info, data)
            add("manifest.json", json.dumps(self.manifest(), indent=2, sort_keys=True).encode())
            add("contract.toml", self.contract_text.encode())
            for i, v in enumerate(self.variants):
                add(f"variants/{i}.fatbin", v.ltoir, compress=False)  # LTO-IR fatbins are compressed already
            if self.source_text is not None:
                add(f"source/{self.source_name}", self.source_text.encode())
            for name in sorted(self.headers):
                add(f"source/{name}", self.headers[name].encode())
        return buf.getvalue()

    def save(self, path: str | Path) -> Path:
        return write_atomic(path, self.to_bytes())


def check_fact_domain(contract: Contract, name: str, value: int, *, file: str | None, source: str) -> None:
    """Raise FactDomainError if ``value`` is outside what ``contract`` requires of fact ``name``."""
    req = contract.facts.requires.get(name)
    if req is None:
        return
    problems = req.problems(value)
    if problems:
        raise FactDomainError(f"{name}={value} (from {source}) is {' and '.join(problems)}", file=file,
                              component=contract.name, field=f"facts.requires.{name}",
                              hint=f"choose a value the component supports{' — ' + req.doc if req.doc else ''}")


def load_package(path: str | Path) -> Package:
    """Read a package and check it whole: the manifest's every field (types, ranges, names, the
    compile options against ALLOWED_OPTIONS), every LTO-IR against its recorded sha256, the content
    hash against everything it covers, the contract, the rest of the manifest against what it is
    derived from, and that the archive holds nothing else. The file is read once, bounded by
    PACKAGE_LIMIT. Anything wrong, an edit made without repacking included, is a PackageError."""
    path = Path(path)
    data = read_bounded(path, PACKAGE_LIMIT, "package", error=PackageError, missing_hint="make it with `pipelink pack`")
    try:
        z = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise PackageError(f"not a pipelink package ({exc})", file=str(path),
                           hint="make it with `pipelink pack`") from None
    with z:
        try:
            names = z.namelist()
            pkg, manifest = _read_archive(_Archive(z, str(path)), path)
        except KeyError as exc:
            raise PackageError(f"package is missing {exc}", file=str(path), hint="repack the component") from None
        except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as exc:
            raise PackageError(f"package is corrupted ({type(exc).__name__}: {exc})", file=str(path),
                               hint="repack the component") from None
    pkg.contract = _packaged_contract(pkg, str(path))
    _check_derived(pkg, manifest, names, str(path))
    pkg.file_sha256 = hashlib.sha256(data).hexdigest()
    return pkg


class _Archive:
    """The entries of one package archive, read bounded."""

    def __init__(self, z: zipfile.ZipFile, file: str):
        self.z, self.file = z, file
        if sum(i.file_size for i in z.infolist()) > PACKAGE_LIMIT:
            raise PackageError(f"the package unpacks to more than {PACKAGE_LIMIT} bytes", file=file,
                               hint="repack the component")

    def member(self, name: str) -> bytes:
        # Read no more than the entry declares (checked against the limit above): a
        # deflated entry could otherwise expand far beyond it before zipfile cuts it off.
        with self.z.open(name) as f:
            return f.read(self.z.getinfo(name).file_size)

    def text(self, name: str, field: str) -> str:
        try:
            return self.member(name).decode()
        except UnicodeDecodeError as exc:
            raise PackageError(f"{name} is not UTF-8 (byte {exc.start})", file=self.file, field=field,
                               hint="repack the component") from None


def _read_archive(a: _Archive, path: Path) -> tuple[Package, dict]:
    """The package (its contract not parsed yet) and its manifest, checked against the content hash."""
    try:
        manifest = json.loads(a.text("manifest.json", "manifest"))
    except (ValueError, RecursionError) as exc:  # not JSON, an integer of 4300+ digits, nested too deep
        raise PackageError(f"manifest.json is not JSON pipelink can read ({exc})", file=str(path),
                           field="manifest", hint="repack the component") from None
    _check_manifest(manifest, str(path))
    variants = []
    for v in manifest["variants"]:
        blob = a.member(v["ltoir"])
        if hashlib.sha256(blob).hexdigest() != v["sha256"]:
            raise PackageError(f"LTO-IR {v['ltoir']} does not match its recorded hash: the package is "
                               "corrupted", file=str(path), field="manifest.variants",
                               hint="repack the component")
        variants.append(Variant(dict(v["facts"]), blob))
    source = manifest["source"]
    # The contract is parsed only once the hash says it is the packed one (an edited contract is a
    # PackageError, not whatever its parser makes of the edit).
    pkg = Package(contract=None, contract_text=a.text("contract.toml", "contract"), variants=variants,
                  toolchain=manifest["toolchain"], compile_options=manifest["compile_options"],
                  source_name=source.removeprefix("source/") if source else None,
                  source_text=a.text(source, "manifest.source") if source else None,
                  headers={h.removeprefix("source/"): a.text(h, "manifest.headers") for h in manifest["headers"]},
                  conformance=manifest["conformance"], path=path)
    if pkg.content_hash() != manifest["content_hash"]:
        raise PackageError("content hash does not match the manifest: the package was modified or corrupted",
                           file=str(path), hint="repack the component")
    return pkg, manifest


def _check_derived(pkg: Package, manifest: dict, names: list[str], file: str) -> None:
    """What the hash leaves out is derived: it must equal what this package's content gives, and the
    archive must hold the package's entries and nothing else."""
    derived = pkg.manifest()
    for key in sorted(set(manifest) | set(derived)):
        if json.dumps(manifest.get(key), sort_keys=True) != json.dumps(derived.get(key), sort_keys=True):
            raise PackageError(f"manifest field '{key}' does not match the package's content: the package was "
                               "modified", file=file, component=pkg.name, field=f"manifest.{key}",
                               hint="repack the component")
    expected = {"manifest.json", "contract.toml", *(v["ltoir"] for v in derived["variants"]),
                *([derived["source"]] if derived["source"] else []), *derived["headers"]}
    if sorted(names) != sorted(expected):
        raise PackageError(f"the archive holds {sorted(set(names) - expected) or 'a duplicate entry'} besides the "
                           "package's entries", file=file, component=pkg.name, hint="repack the component")


def _check_manifest(m: object, file: str) -> None:
    """The manifest's shape, field by field: what load_package and the link read from it is there,
    of its type and in its range, so that nothing downstream meets a value it cannot use."""
    def bad(field: str, message: str) -> PackageError:
        return PackageError(message, file=file, field=field, hint="repack the component with this pipelink")

    def expect(field: str, value: object, ok: bool, want: str) -> None:
        if not ok:
            raise bad(field, f"is {json.dumps(value)[:80]}, expected {want}")

    if not isinstance(m, dict):
        raise bad("manifest", f"the manifest is a JSON {type(m).__name__.replace('list', 'array')}, not an object")
    fmt = m.get("format")
    if type(fmt) is not int or fmt != FORMAT_VERSION:
        raise bad("manifest.format", f"package format {json.dumps(fmt)} is not supported (this pipelink reads "
                  f"format {FORMAT_VERSION})")
    odd = sorted(_MANIFEST_KEYS ^ set(m))
    if odd:
        raise bad(f"manifest.{odd[0]}", "is missing" if odd[0] in _MANIFEST_KEYS else "is not a manifest field")
    for key in ("name", "version", "origin"):
        expect(f"manifest.{key}", m[key], isinstance(m[key], str), "a string")
    tc = m["toolchain"]
    expect("manifest.toolchain", tc, isinstance(tc, dict) and set(tc) == {"nvcc"}, 'an object {"nvcc": VERSION}')
    expect("manifest.toolchain.nvcc", tc["nvcc"], isinstance(tc["nvcc"], str)
           and re.fullmatch(r"\d{1,4}(\.\d{1,6}){1,3}", tc["nvcc"], re.ASCII), "a version like 13.0.88")
    opts = m["compile_options"]
    expect("manifest.compile_options", opts, isinstance(opts, list), "an array of nvcc options")
    check_compile_options(opts, file=file, field="manifest.compile_options")
    variants = m["variants"]
    expect("manifest.variants", variants, isinstance(variants, list) and variants, "a non-empty array")
    for i, v in enumerate(variants):
        where = f"manifest.variants[{i}]"
        expect(where, v, isinstance(v, dict) and set(v) == {"facts", "ltoir", "bytes", "sha256"},
               "an object with facts, ltoir, bytes, sha256")
        expect(f"{where}.facts", v["facts"], isinstance(v["facts"], dict) and all(
            isinstance(k, str) and k.isidentifier() and type(x) is int and -2**31 <= x < 2**31
            for k, x in v["facts"].items()), "an object of fact names and 32-bit integers")
        expect(f"{where}.ltoir", v["ltoir"], v["ltoir"] == f"variants/{i}.fatbin", f'"variants/{i}.fatbin"')
        expect(f"{where}.bytes", v["bytes"], type(v["bytes"]) is int and v["bytes"] >= 0, "a byte count")
        expect(f"{where}.sha256", v["sha256"], _is_sha256(v["sha256"]), "a SHA-256 in hex")
    src = m["source"]
    expect("manifest.source", src, src is None or (isinstance(src, str) and src.startswith("source/")
                                                      and safe_path(src[7:]) and "/" not in src[7:]),
           'null or "source/FILE"')
    hdrs = m["headers"]
    expect("manifest.headers", hdrs, isinstance(hdrs, list) and (src or not hdrs) and all(
        isinstance(h, str) and h.startswith("source/") and safe_path(h[7:]) and h != src for h in hdrs),
           'an array of "source/PATH" (empty without a source)')
    conf = m["conformance"]
    if conf is not None:
        keys = {f.name for f in fields(Finding)}
        expect("manifest.conformance", conf, isinstance(conf, dict) and set(conf) == {"checked", "findings", "reason"}
               and type(conf["checked"]) is bool and isinstance(conf["reason"], str)
               and isinstance(conf["findings"], list) and all(
                   isinstance(f, dict) and set(f) == keys and all(isinstance(x, str) for x in f.values())
                   for f in conf["findings"]), "null or the pack-time probe's record")
    expect("manifest.content_hash", m["content_hash"], _is_sha256(m["content_hash"]), "a SHA-256 in hex")


def _is_sha256(value: object) -> bool:
    return isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value) is not None


def _packaged_contract(pkg: Package, file: str) -> Contract:
    """The package's contract, parsed and checked as pack checks one, and the variants against it.
    A contract that pack would have refused is the package's fault: a PackageError naming the field."""
    try:
        contract = parse_contract_text(pkg.contract_text, f"{file}:contract.toml")
    except PipelinkError as exc:
        raise PackageError(f"its contract is invalid: {exc.message}", file=file,
                           field=f"contract.{exc.field}" if exc.field else "contract",
                           hint="repack the component from a valid contract") from None
    names = sorted(contract.compile_facts())
    for i, v in enumerate(pkg.variants):
        if sorted(v.facts) != names:
            raise PackageError(f"variant {i} sets facts {sorted(v.facts)}, but the contract's compile-time facts are "
                               f"{names}", file=file, field=f"manifest.variants[{i}].facts",
                               hint="repack the component")
        for n, x in v.facts.items():
            try:
                check_fact_domain(contract, n, x, file=file, source=f"variant {i} of the package")
            except FactDomainError as exc:
                raise PackageError(exc.message, file=file, field=f"manifest.variants[{i}].facts",
                                   hint="repack the component") from None
    return contract

"""Component packages (.plc): contract + LTO-IR variants + producing toolchain + content hash.

A package is a deterministic zip archive:
  manifest.json      name, version, toolchain, compile options, variants, content hash
  contract.toml      the contract as written
  variants/N.fatbin  LTO-IR (sm_90a), one per set of compile-time facts
  source/FILE        the source, unless packed --closed (needed only for the monolithic control)
A package links without its source: a vendor can ship LTO-IR plus a contract.
"""

from __future__ import annotations

import hashlib
import io
import json
import tempfile
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from . import bindgen
from .backend.nvcc import LTO_FLAGS, compile_ltoir
from .backend.toolchain import find_nvcc, library_build
from .contract import Contract, load_contract, parse_contract_text
from .errors import FactDomainError, PackageError
from .fsutil import write_atomic

# 2: LTO-IR carries line info (conformance attribution). 3: the content hash covers every manifest
# field that is not derived from the contract or the LTO-IR, and load checks the derived ones.
FORMAT_VERSION = 3
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)


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
    compile_options: list[str]
    source_name: str | None = None
    source_text: str | None = None
    source_dir: str | None = None      # where the source lived (include path for the monolithic control)
    conformance: dict | None = None    # the pack-time probe's result (probe.py)
    path: Path | None = field(default=None, compare=False)

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
                     self.source_dir, self.conformance, [v.facts for v in self.variants],
                     [hashlib.sha256(v.ltoir).hexdigest() for v in self.variants]):
            blob = json.dumps(part, sort_keys=True).encode()
            h.update(len(blob).to_bytes(8, "little"))
            h.update(blob)
        return h.hexdigest()

    def variant_for(self, facts: dict[str, int]) -> Variant | None:
        return next((v for v in self.variants if all(facts.get(k) == x for k, x in v.facts.items())), None)

    def manifest(self) -> dict:
        return {
            "format": FORMAT_VERSION, "name": self.name, "version": self.contract.component.version,
            "origin": self.contract.component.origin, "toolchain": self.toolchain,
            "compile_options": self.compile_options,
            "variants": [{"facts": v.facts, "ltoir": f"variants/{i}.fatbin", "bytes": len(v.ltoir),
                          "sha256": hashlib.sha256(v.ltoir).hexdigest()} for i, v in enumerate(self.variants)],
            "source": f"source/{self.source_name}" if self.source_text is not None else None,
            "source_dir": self.source_dir, "conformance": self.conformance, "content_hash": self.content_hash(),
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
        return buf.getvalue()

    def save(self, path: str | Path) -> Path:
        return write_atomic(path, self.to_bytes())


def check_fact_domain(contract: Contract, name: str, value: int, *, file: str | None, source: str) -> None:
    """Raise FactDomainError if ``value`` is outside what ``contract`` requires of fact ``name``."""
    req = contract.facts.requires.get(name)
    if req is None:
        return
    problems = []
    if req.set is not None and value not in req.set:
        problems.append(f"not in the allowed set {req.set}")
    if req.range is not None and not req.range[0] <= value <= req.range[1]:
        problems.append(f"outside the range [{req.range[0]}, {req.range[1]}]")
    if req.multiple_of is not None and value % req.multiple_of:
        problems.append(f"not a multiple of {req.multiple_of}")
    if problems:
        raise FactDomainError(f"{name}={value} (from {source}) is {' and '.join(problems)}", file=file,
                              component=contract.name, field=f"facts.requires.{name}",
                              hint=f"choose a value the component supports{' — ' + req.doc if req.doc else ''}")


def pack(source: str | Path, contract_path: str | Path, output: str | Path | None = None, *,
         variants: list[dict[str, int]] | None = None, closed: bool = False,
         include_dirs: list[str | Path] = (), nvcc_flags: list[str] = (), check: bool = True,
         progress=None) -> Package:
    """Compile ``source`` to LTO-IR once per variant, check the code against the contract (a probe
    link, unless ``check`` is false) and write the package (if ``output``). A component whose code
    breaks its contract is refused: nothing is written."""
    source, contract_path = Path(source), Path(contract_path)
    if not source.is_file():
        raise PackageError("source file not found", file=str(source))
    contract = load_contract(contract_path)
    contract_text = contract_path.read_text()
    compile_names = contract.compile_facts()
    defaults = {n: contract.facts.requires[n].default for n in compile_names}
    requested = variants or [{}]
    resolved: list[dict[str, int]] = []
    for want in requested:
        unknown = set(want) - set(compile_names)
        if unknown:
            raise PackageError(f"variant sets {', '.join(sorted(unknown))}, which the contract does not declare "
                               "as compile-time facts", file=str(contract_path), component=contract.name,
                               field="facts.requires", hint=f"compile-time facts: {', '.join(compile_names) or 'none'}")
        facts = {**defaults, **want}
        for n, v in facts.items():
            check_fact_domain(contract, n, v, file=str(contract_path), source="the variant being packed")
        if facts not in resolved:
            resolved.append(facts)

    built = []
    lib_dirs, lib_flags = library_build(contract.component.headers)
    incs = [source.parent.resolve(), *[Path(d).resolve() for d in include_dirs], *lib_dirs]
    nvcc_flags = [*lib_flags, *nvcc_flags]
    with tempfile.TemporaryDirectory(prefix="pipelink-pack-") as tmp:
        gen = Path(tmp)
        (gen / "bind.h").write_text(bindgen.bind_header(contract))
        for i, facts in enumerate(resolved):
            if progress:
                progress(f"nvcc {source.name} -> LTO-IR (variant {i + 1}/{len(resolved)}: {facts or 'no compile facts'})")
            (gen / "facts.h").write_text(bindgen.facts_header(contract, facts))
            forced = ["-include", "pipelink/component.h", "-include", str(gen / "bind.h"),
                      "-include", str(gen / "facts.h")]
            ltoir, _ = compile_ltoir(source, include_dirs=incs, extra_flags=[*nvcc_flags, *forced],
                                     component=contract.name)
            built.append(Variant(facts, ltoir))
    options = [*LTO_FLAGS, *nvcc_flags]
    pkg = Package(contract=contract, contract_text=contract_text, variants=built,
                  toolchain={"nvcc": find_nvcc().version}, compile_options=options,
                  source_name=None if closed else source.name,
                  source_text=None if closed else source.read_text(),
                  source_dir=None if closed else str(source.parent.resolve()))
    if check:
        from .link.conform import ConformanceError, Finding
        from .probe import probe
        if progress:
            progress(f"conformance: linking {contract.name} alone and checking its code against its contract")
        pkg.conformance = probe(pkg)
        errors = [Finding(**f) for f in pkg.conformance["findings"] if f["severity"] == "error"]
        if errors:
            raise ConformanceError(f"{len(errors)} violation(s) of its own contract:\n  "
                                   + "\n  ".join(f.format() for f in errors), file=str(contract_path),
                                   component=contract.name, field=errors[0].field,
                                   hint=errors[0].hint + " (pack with check=False / --no-check to package it anyway)")
    if output is not None:
        pkg.path = pkg.save(output)
    return pkg


def load_package(path: str | Path) -> Package:
    """Read a package and check it whole: every LTO-IR against its recorded sha256, the content hash
    against everything it covers, the rest of the manifest against what it is derived from, and
    the archive holds nothing else. Any edit made without repacking is a PackageError."""
    path = Path(path)
    try:
        z = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise PackageError("package not found", file=str(path), hint="make it with `pipelink pack`") from None
    except (zipfile.BadZipFile, OSError) as exc:
        raise PackageError(f"not a pipelink package ({exc})", file=str(path)) from None
    with z:
        try:
            manifest = json.loads(z.read("manifest.json"))
            if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_VERSION:
                found = manifest.get("format") if isinstance(manifest, dict) else None
                raise PackageError(f"package format {found} is not supported (this pipelink reads "
                                   f"format {FORMAT_VERSION})", file=str(path), hint="repack it")
            contract_text = z.read("contract.toml").decode()
            variants = []
            for v in manifest["variants"]:
                data = z.read(v["ltoir"])
                if hashlib.sha256(data).hexdigest() != v["sha256"]:
                    raise PackageError(f"LTO-IR {v['ltoir']} does not match its recorded hash: the package is "
                                       "corrupted", file=str(path), hint="repack the component")
                variants.append(Variant({k: int(x) for k, x in v["facts"].items()}, data))
            source = manifest["source"]
            # The contract is parsed only once the hash says it is the packed one (an edited contract is a
            # PackageError, not whatever its parser makes of the edit).
            pkg = Package(contract=None, contract_text=contract_text, variants=variants,
                          toolchain=manifest["toolchain"], compile_options=manifest["compile_options"],
                          source_name=Path(source).name if source else None,
                          source_text=z.read(source).decode() if source else None,
                          source_dir=manifest["source_dir"], conformance=manifest["conformance"], path=path)
            if pkg.content_hash() != manifest["content_hash"]:
                raise PackageError("content hash does not match the manifest: the package was modified or corrupted",
                                   file=str(path), hint="repack the component")
            names = z.namelist()
        except KeyError as exc:
            raise PackageError(f"package is missing {exc}", file=str(path), hint="repack the component") from None
        except (zipfile.BadZipFile, zlib.error, ValueError, TypeError, AttributeError) as exc:
            # ValueError: bad JSON or UTF-8, a fact that is no integer; TypeError, AttributeError: a
            # manifest field of the wrong shape (a list where an object belongs, ...)
            raise PackageError(f"package is corrupted ({type(exc).__name__}: {exc})", file=str(path),
                               hint="repack the component") from None
    pkg.contract = parse_contract_text(contract_text, f"{path}:contract.toml")
    # What the hash leaves out is derived: it must equal what this package's content gives.
    derived = pkg.manifest()
    for key in sorted(set(manifest) | set(derived)):
        if json.dumps(manifest.get(key), sort_keys=True) != json.dumps(derived.get(key), sort_keys=True):
            raise PackageError(f"manifest field '{key}' does not match the package's content: the package was "
                               "modified", file=str(path), component=pkg.name, field=f"manifest.{key}",
                               hint="repack the component")
    expected = {"manifest.json", "contract.toml", *(v["ltoir"] for v in derived["variants"]),
                *([derived["source"]] if derived["source"] else [])}
    if sorted(names) != sorted(expected):
        raise PackageError(f"the archive holds {sorted(set(names) - expected) or 'a duplicate entry'} besides the "
                           "package's entries", file=str(path), component=pkg.name, hint="repack the component")
    return pkg

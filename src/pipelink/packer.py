"""``pipelink.pack``: make a component package. Compile the source to LTO-IR once per variant,
link the new package alone and check its code against its contract (the pack-time probe,
probe.py), and write it (package.py holds the format).

nvcc runs on relative names in a folder of its own that links to the source's folder, and the
package keeps the headers the source includes from that folder under their relative names (never
the folder itself).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import bindgen
from .backend.nvcc import compile_ltoir, component_view, lto_flags
from .backend.toolchain import INCLUDE_DIR, find_nvcc, library_build
from .contract import Contract, parse_contract_text
from .errors import ContractError, ExpressionError, FactDomainError, PackageError, PipelinkError, SpecError
from .fsutil import read_text_bounded
from .findings import ConformanceError, Finding
from .package import TEXT_LIMIT, Package, Variant, check_compile_options, check_fact_domain, safe_path
from .link import facts as link_facts
from .probe import probe


def pack(source: str | Path, contract_path: str | Path, output: str | Path | None = None, *,
         variants: list[dict[str, int]] | None = None, closed: bool = False,
         include_dirs: list[str | Path] = (), nvcc_flags: list[str] = (), check: bool = True,
         progress=None) -> Package:
    """Compile ``source`` to LTO-IR once per variant, check the code against the contract (a probe
    link, unless ``check`` is false) and write the package (if ``output``). A component whose code
    breaks its contract is refused: nothing is written.

    ``include_dirs`` must lie inside the source's folder; ``nvcc_flags`` must be in ALLOWED_OPTIONS."""
    source, contract_path = Path(source), Path(contract_path)
    source_text = read_text_bounded(source, TEXT_LIMIT, "source file", error=PackageError)
    contract_text = read_text_bounded(contract_path, TEXT_LIMIT, "contract", error=ContractError)
    contract = parse_contract_text(contract_text, str(contract_path))
    folder = source.parent.resolve()
    inc_flags = _check_inputs(source, contract_path, output, include_dirs, nvcc_flags)
    resolved = _variant_facts(contract, variants or [{}], str(contract_path))
    lib_dirs, lib_flags = library_build(contract.component.headers)
    targets = lto_flags(contract.component.archs)  # one fatbin with the LTO-IR of every target the contract lists
    options = [*targets, *lib_flags, *nvcc_flags, *inc_flags]
    read: list[str] = []
    built = _compile(source, contract, resolved, options[len(targets):], lib_dirs, read, progress)
    headers = {} if closed else _local_headers(read, folder, source, lib_dirs)
    if not closed:
        _refuse_outside_includes(source, source_text, headers)
    pkg = Package(contract=contract, contract_text=contract_text, variants=built,
                  toolchain={"nvcc": find_nvcc().version}, compile_options=options,
                  source_name=None if closed else source.name, source_text=None if closed else source_text,
                  headers=headers)
    if check:
        _probe(pkg, contract_path, progress)
    if output is not None:
        pkg.path = pkg.save(output)
    return pkg


# This process's source instances, packed: (source, contract, variants) -> the package. A later link reuses one
# while its source, contract and local headers read the same (a tuner links hundreds of configurations).
_PACKED: dict[tuple[str, str, str], Package] = {}


def pack_source_instance(spec, i: int, progress=None) -> Package:
    """The package of ``spec``'s instance ``i``, which names a source (and its contract) in place of a
    package: packed as `pipelink pack` packs it (the same bytes; its nvcc runs are kept in the build cache),
    in memory. The variants are the instance's ``variants``, or one whose compile-time facts come from the
    instance's facts, then the spec's [facts], then the contract's defaults. An error names the instance."""
    inst = spec.instance[i]
    source, contract_path = spec.source_paths(inst)
    for path, key in ((source, "source"), (contract_path, "contract")):
        if not path.is_file():
            default = key == "contract" and inst.contract is None
            raise SpecError(f"instance '{inst.name}': {key} {path} is not a file"
                            + (" (the contract's default path: the source's, with .toml)" if default else ""),
                            file=str(spec.path), field=f"instance[{i}].{key}",
                            hint=f'give contract = "PATH" beside source = "{inst.source}"' if default else
                            "give a path relative to the spec")
    try:
        variants = [dict(v) for v in inst.variants] or [_variant_from_facts(spec, inst, contract_path)]
        key = (str(source.resolve()), str(contract_path.resolve()), json.dumps(variants, sort_keys=True))
        pkg = _PACKED.get(key)
        if pkg is None or not _still_current(pkg, source, contract_path):
            if progress:
                progress(f"packing instance {inst.name} from {inst.source} ({len(variants)} variant(s))")
            pkg = pack(source, contract_path, variants=variants, progress=progress)
            pkg.packed_from = source.resolve()
            _PACKED[key] = pkg
        return pkg
    except PipelinkError as exc:  # the component's own words, and which instance of which spec asked for it
        exc.message = f"instance '{inst.name}' of {spec.path} (packed from its source): {exc.message}"
        exc.args = (exc.format(),)
        raise


def _variant_from_facts(spec, inst, contract_path: Path) -> dict[str, int]:
    """The compile-time facts the spec gives (the instance's own first): the one variant a source instance
    packs when it lists none; a fact the spec leaves out takes the contract's default."""
    contract = parse_contract_text(read_text_bounded(contract_path, TEXT_LIMIT, "contract", error=ContractError),
                                   str(contract_path))
    given = {**spec.facts, **inst.facts}
    return {n: given[n] for n in contract.compile_facts() if n in given}


def _still_current(pkg: Package, source: Path, contract_path: Path) -> bool:
    """Whether the files a packed source instance was made from read as they did (source, contract, the
    local headers it included)."""
    try:
        return (source.read_text() == pkg.source_text and contract_path.read_text() == pkg.contract_text
                and all((source.parent / rel).read_text() == text for rel, text in pkg.headers.items()))
    except (OSError, UnicodeDecodeError):
        return False


link_facts.SOURCE_PACKER = pack_source_instance


def _check_inputs(source: Path, contract_path: Path, output, include_dirs, nvcc_flags) -> list[str]:
    """Refuse a source name, output path, option or include folder a package cannot hold; the
    include folders as -I options relative to the source's folder."""
    folder = source.parent.resolve()
    if not safe_path(source.name):
        raise PackageError(f"source file name '{source.name}' cannot be packed", file=str(source),
                           hint="rename it: letters, digits and _ . + - only, no leading '-'")
    if output is not None:
        out = Path(output)
        if out.resolve() in (source.resolve(), contract_path.resolve()):
            raise PackageError("the package would overwrite its own source or contract", file=str(out),
                               field="output", hint="write the package to another path (.plc)")
        if out.exists() and not out.is_file():
            raise PackageError("the output path exists and is not a file", file=str(out), field="output",
                               hint="give the path of a .plc file to write")
    check_compile_options(list(nvcc_flags), file=str(source), field="compile_options")
    inc_flags = []
    for d in include_dirs:
        rel = Path(d).resolve()
        if not rel.is_relative_to(folder):
            raise PackageError(f"include folder {d} is outside the source's folder {folder}: a package carries "
                               "only headers of its source's folder", file=str(source), field="include_dirs",
                               hint="move the headers into the source's folder (or a folder inside it)")
        if rel != folder:
            inc_flags.append(f"-I{rel.relative_to(folder).as_posix()}")
    check_compile_options(inc_flags, file=str(source), field="include_dirs")
    return inc_flags


def _variant_facts(contract: Contract, requested: list[dict[str, int]], file: str) -> list[dict[str, int]]:
    """Each requested variant's compile-time facts (the defaults where it sets none), checked, once each."""
    compile_names = contract.compile_facts()
    defaults = {n: contract.facts.requires[n].default for n in compile_names}
    resolved: list[dict[str, int]] = []
    for want in requested:
        unknown = set(want) - set(compile_names)
        if unknown:
            raise PackageError(f"variant sets {', '.join(sorted(unknown))}, which the contract does not declare "
                               "as compile-time facts", file=file, component=contract.name,
                               field="facts.requires", hint=f"compile-time facts: {', '.join(compile_names) or 'none'}")
        facts = {**defaults, **want}
        for n, v in facts.items():
            check_fact_domain(contract, n, v, file=file, source="the variant being packed")
        _check_compile_limits(contract, facts, file)
        if facts not in resolved:
            resolved.append(facts)
    return resolved


def _check_compile_limits(contract: Contract, facts: dict[str, int], file: str) -> None:
    """A [[facts.limit]] over compile-time facts alone holds for every link of the variant or for none: check it
    here, so a variant no link could use is refused by name instead of failing later (in nvcc, or at every link)."""
    for i, limit in enumerate(contract.facts.limit):
        if not limit.expr.names() <= facts.keys():
            continue  # it involves link-time facts: the link checks it
        try:
            problem = limit.problem(limit.expr.eval(facts))
        except ExpressionError as exc:
            raise FactDomainError(f"the variant being packed: {limit.expr.text} cannot be evaluated ({exc.message})",
                                  file=file, component=contract.name, field=f"facts.limit[{i}]",
                                  hint="pack only variants the contract allows") from None
        if problem:
            given = ", ".join(f"{n}={facts[n]}" for n in sorted(limit.expr.names()))
            why = f" — {limit.doc}" if limit.doc else ""
            raise FactDomainError(f"the variant being packed ({given}): {limit.expr.text} = {problem}", file=file,
                                  component=contract.name, field=f"facts.limit[{i}]",
                                  hint=f"pack only variants the contract allows{why}")


def _compile(source: Path, contract: Contract, resolved: list[dict[str, int]], flags: list[str],
             lib_dirs: list[Path], read: list[str], progress) -> list[Variant]:
    """One LTO-IR per variant; ``read`` receives the files nvcc read. nvcc runs in a fresh folder
    per variant, where the source's folder is the symlink ``src_COMPONENT`` (its -I folders inside it
    follow), because compile_ltoir links the include trees into its working folder, which must not be
    the user's; the line info then names the source /proc/self/cwd/src_COMPONENT/NAME on every
    machine, and the headers by the component's own include view (nvcc.component_view: two
    components that share a header name two files, so their inlining chains stay apart)."""
    folder = f"src_{contract.name}"
    flags = [f"-I{folder}/{f[2:]}" if f.startswith("-I") else f for f in flags]
    forced = ["-include", "pipelink/component.h", "-include", "bind.h", "-include", "facts.h"]

    def compile_variant(i: int, facts: dict[str, int], tmp: str) -> tuple[bytes, list[str]]:
        work = Path(tmp) / str(i)
        work.mkdir()
        (work / folder).symlink_to(source.parent.resolve(), target_is_directory=True)
        (work / "bind.h").write_text(bindgen.bind_header(contract))
        (work / "facts.h").write_text(bindgen.facts_header(contract, facts))
        deps: list[str] = []
        ltoir, _ = compile_ltoir(f"{folder}/{source.name}", cwd=work, include_dirs=[folder, *lib_dirs],
                                 extra_flags=[*flags, *forced], component=contract.name, deps=deps,
                                 view=component_view(contract.name), archs=contract.component.archs)
        if progress:
            progress(f"nvcc {source.name} -> LTO-IR: variant {i + 1}/{len(resolved)} done "
                     f"({facts or 'no compile facts'})")
        return ltoir, deps

    # The variants are independent nvcc runs: as many at once as there are cores. Each keeps its own list of the
    # files it read, joined in variant order, so the package's bytes do not depend on which finished first.
    workers = max(1, min(len(resolved), os.cpu_count() or 1))
    if progress:
        progress(f"nvcc {source.name} -> LTO-IR: {len(resolved)} variant(s), {workers} at a time")
    with tempfile.TemporaryDirectory(prefix="pipelink-pack-") as tmp, ThreadPoolExecutor(workers) as pool:
        futures = [pool.submit(compile_variant, i, facts, tmp) for i, facts in enumerate(resolved)]
        results = [f.result() for f in futures]  # the first failure in variant order is raised, as before
    built = []
    for facts, (ltoir, deps) in zip(resolved, results):
        read += deps
        built.append(Variant(facts, ltoir))
    return built


def _probe(pkg: Package, contract_path: Path, progress) -> None:
    """The pack-time probe, recorded in the package; a violation of its own contract refuses it."""
    if progress:
        progress(f"conformance: linking {pkg.name} alone and checking its code against its contract")
    pkg.conformance = probe(pkg, file=str(contract_path))
    errors = [Finding(**f) for f in pkg.conformance["findings"] if f["severity"] == "error"]
    if errors:
        raise ConformanceError(f"{len(errors)} violation(s) of its own contract:\n  "
                               + "\n  ".join(f.format() for f in errors), file=str(contract_path),
                               component=pkg.name, field=errors[0].field,
                               hint=errors[0].hint + " (pack with check=False / --no-check to package it anyway)")


_QUOTED_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"\n]+)"', re.M)


def _refuse_outside_includes(source: Path, source_text: str, headers: dict[str, str]) -> None:
    """A package carries its source's folder and nothing above it (-I folders must lie inside it too),
    so the only way out is a quoted include by an absolute or '..' path: refused here, at pack time,
    instead of a monolithic or sanitize build failing at link time on a file it cannot find."""
    for rel, text in {source.name: source_text, **headers}.items():
        for m in _QUOTED_INCLUDE.finditer(text):
            target = Path(rel).parent / m.group(1)
            if m.group(1).startswith("/") or ".." in Path(*target.parts).as_posix().split("/") and \
                    not (source.parent / target).resolve().is_relative_to(source.parent.resolve()):
                line = text.count("\n", 0, m.start()) + 1
                raise PackageError(f"{rel}:{line} includes \"{m.group(1)}\", outside the source's folder "
                                   f"({source.parent}); a package carries only that folder's files",
                                   file=str(source), field="source",
                                   hint="copy the header into the source's folder (or a folder inside it) and include "
                                        "it from there, or pack --closed (no source, no monolithic control)")


def _local_headers(read: list[str], folder: Path, source: Path, lib_dirs: list[Path]) -> dict[str, str]:
    """The files nvcc read from the source's folder besides the source: the component's own headers,
    by their path relative to that folder. A toolchain folder inside the source's folder (a
    virtual environment holding the CUDA wheels, say) is not the component's."""
    toolchain = [r for r in (INCLUDE_DIR, *lib_dirs, find_nvcc().path.resolve().parent.parent)
                 if Path(r).is_relative_to(folder)]
    headers = {}
    for name in read:
        path = Path(name)
        if (path.is_relative_to(folder) and path != source.resolve()
                and not any(path.is_relative_to(r) for r in toolchain)):
            rel = path.relative_to(folder).as_posix()
            if not safe_path(rel):
                raise PackageError(f"header '{rel}' has a name a package cannot hold", file=str(path),
                                   field="headers", hint="rename it: letters, digits and _ . + - only, no leading '-'")
            headers[rel] = read_text_bounded(path, TEXT_LIMIT, "header", error=PackageError)
    return headers

"""Stage 6: the backend. Glue to LTO-IR with nvcc, everything to one cubin with nvJitLink -lto,
then the cubin's SASS and resource usage parsed (cuobjdump). Its result is a Backend; whether every
link-time decision became an immediate is the next stage's question (link/postlink.py).

Modes:
  pipelink    glue + each package's LTO-IR variant, linked with -lto
  symbol      the same, with resources at their packaged positions (glue made that way)
  monolithic  every component source and the glue as one unit, through the same -lto path, so
              that only the linking differs (a plain `nvcc -cubin` control keeps components as
              calls: see docs/guide.md)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import bindgen
from ..backend.cache import Cache, cubin as cubin_payload, fatbin, make_key
from ..backend.inspect import CubinInfo, inspect_cubin, inspector_id
from ..backend.nvcc import CWD_ALIAS, VIEW, compile_ltoir, component_view, lto_flags
from ..backend.nvjitlink import link_cubin, link_options
from ..backend.toolchain import check_lto_compatible, library_build, toolchain_id
from ..errors import PackageError
from ..fsutil import write_atomic
from .glue import bind_header_name
from .plan import LinkPlan

# How line info names the glue (conformance attributes instructions by it): compile_ltoir's relative
# name in the folder cicc is told it runs in.
GLUE_LINE_PATH = f"{CWD_ALIAS}/glue.cu"


def _monolithic_unit(plan: LinkPlan) -> str:
    """One unit holding every source. Each component goes into its own namespace, so that file-local
    helpers of different components cannot clash (extern "C" entries keep their C names); its
    system includes are hoisted in front, where they are included once, at global scope."""
    parts = ["// Monolithic control: every component source and the glue in one unit.",
             "#include <pipelink/component.h>", "#include <cuda_bf16.h>", "#include <cuda_fp16.h>"]
    body = []
    seen = set()
    for inst in plan.instances:
        pkg = inst.package
        if pkg.name in seen:
            continue
        seen.add(pkg.name)
        if pkg.closed:
            raise PackageError("the monolithic control needs every component's source, but this package was "
                               "packed --closed", file=inst.file, component=pkg.name,
                               hint="link it with --mode pipelink or symbol, or repack without --closed")
        parts += re.findall(r"^[ \t]*#[ \t]*include[ \t]*<[^>\n]+>", pkg.source_text, flags=re.M)
        parts.append(f'#include "{bind_header_name(inst)}"')
        body += [f"namespace pl_unit_{pkg.name} {{",
                 bindgen.facts_header(inst.contract, pkg.variants[inst.variant].facts),
                 f'#include "src_{pkg.name}/{pkg.source_name}"', f"}}  // namespace pl_unit_{pkg.name}"]
    return "\n".join(parts + body + ['#include "glue.cu"']) + "\n"


@dataclass(frozen=True)
class CompileInputs:
    """Everything one backend nvcc run reads that is known before it runs, as the list its cache
    key hashes: the files written to its build folder (a component's source and its packaged
    headers among them), the include folders searched after that folder (a header library's: the
    build links them in under relative names, nvcc.include_view), the flags and the tools.
    The headers the run includes from the toolchain (component.h, CUTLASS) cannot be listed in
    advance: the run reports them (nvcc -MD) and the cache re-hashes them at every lookup
    (Cache.get_or_build_tracked)."""
    kind: str                      # glue | unit (monolithic) | sanitize
    main: str                      # the file compiled, one of ``files``
    files: dict[str, str]          # path in the build folder -> text
    include_dirs: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()    # nvcc flags after the LTO flags (nvcc.lto_flags((arch,)))
    forced: tuple[str, ...] = ()   # files of the build folder force-included (-include), in order
    view: str = VIEW               # the include view's folder (a component's own: nvcc.component_view)
    tools: dict = field(default_factory=toolchain_id)
    arch: str = "sm_90a"           # the device's target (its profile's arch)

    def key(self) -> str:
        return make_key(self.kind, self.tools, lto_flags((self.arch,)), self.main, self.files, self.include_dirs,
                        self.flags, self.forced, self.view)


def glue_inputs(plan: LinkPlan) -> CompileInputs:
    """The glue with each instance's bindings header; in monolithic mode, the one unit holding every
    component's source too, compiled with what each component was packed with (CUTLASS's flags, say)."""
    files = {bind_header_name(i): bindgen.bind_header(i.contract) for i in plan.instances}
    files["glue.cu"] = plan.glue.text
    arch = plan.device["arch"]
    if plan.options.mode != "monolithic":
        return CompileInputs("glue", "glue.cu", files, arch=arch)
    files["monolithic.cu"] = _monolithic_unit(plan)
    include_dirs: list[str] = []
    flags: list[str] = []
    for inst in plan.instances:
        pkg = inst.package
        files.update(pkg.source_files(f"src_{pkg.name}"))
        lib_dirs, _ = library_build(pkg.contract.component.headers)
        include_dirs += [d for d in map(str, lib_dirs) if d not in include_dirs]
        flags += [f for f in pkg.replay_flags(f"src_{pkg.name}") if f not in flags]
    return CompileInputs("unit", "monolithic.cu", files, tuple(include_dirs), tuple(flags), arch=arch)


def sanitize_inputs(inst, arch: str = "sm_90a") -> CompileInputs:
    """An open component's packaged source, recompiled with PL_SANITIZE (bounded mbarrier waits)."""
    pkg = inst.package
    variant = pkg.variants[inst.variant]
    folder = f"src_{pkg.name}"
    files = {"bind.h": bindgen.bind_header(inst.contract), "facts.h": bindgen.facts_header(inst.contract, variant.facts),
             **pkg.source_files(folder)}
    include_dirs = [*map(str, library_build(pkg.contract.component.headers)[0])]
    flags = [*pkg.replay_flags(folder), "-DPL_SANITIZE", "-include", "pipelink/component.h"]
    return CompileInputs("sanitize", f"{folder}/{pkg.source_name}", files, tuple(include_dirs), tuple(flags),
                         ("bind.h", "facts.h"), component_view(pkg.name), arch=arch)


def link_key(inputs: list[tuple[str, bytes]], tools: dict, arch: str = "sm_90a") -> str:
    """nvJitLink's output depends on its inputs (in order), its options (the target's among them) and its version."""
    return make_key("link", tools, link_options(arch), [(name, hashlib.sha256(d).hexdigest()) for name, d in inputs])


def inspect_key(cubin: bytes, entry: str) -> str:
    """The parsed SASS depends on the cubin, the kernel, the disassembler and the parser's code."""
    return make_key("inspect", inspector_id(), hashlib.sha256(cubin).hexdigest(), entry)


def compile_cached(inputs: CompileInputs, cache: Cache, say, label: str, component: str | None = None
                   ) -> tuple[bytes, bool]:
    """Compile the inputs to LTO-IR in a fresh build folder, or take the cached LTO-IR. nvcc runs
    there on relative names (compile_ltoir), so neither the folder's path nor where pipelink, the
    toolkit or CUTLASS are installed reaches the output: the same inputs give the same bytes
    wherever the cache is, or with none. Returns (LTO-IR, cache hit)."""
    def compile_it() -> tuple[bytes, list[str]]:
        say(f"nvcc: {label} -> LTO-IR")
        with tempfile.TemporaryDirectory(prefix="pipelink-build-") as tmp:
            work = Path(tmp)
            for name, text in inputs.files.items():
                write_atomic(work / name, text)
                os.utime(work / name, (0, 0))  # line tables record file times: fix them, or outputs differ per build
            read: list[str] = []
            forced = [arg for f in inputs.forced for arg in ("-include", f)]
            ltoir, _ = compile_ltoir(inputs.main, cwd=work, include_dirs=[".", *inputs.include_dirs],
                                     extra_flags=[*inputs.flags, *forced], component=component, deps=read,
                                     view=inputs.view, archs=(inputs.arch,))
            # The build folder's own files are in the key already.
            return ltoir, [p for p in read if not Path(p).is_relative_to(work.resolve())]

    return cache.get_or_build_tracked(inputs.key(), compile_it, fatbin)


@dataclass(frozen=True)
class Resources:
    """What the cubin uses (cuobjdump), and the dynamic smem the plan gives it at launch."""
    registers: int
    stack: int
    local: int
    static_smem: int
    dynamic_smem: int
    instructions: int
    calls: int
    barrier_ids_in_sass: tuple[str, ...]     # every BAR operand, "0x1" or a register

    @classmethod
    def of(cls, info: CubinInfo, dynamic_smem: int) -> Resources:
        return cls(info.registers, info.stack, info.local, info.static_smem, dynamic_smem, len(info.instructions),
                   len(info.calls), tuple(sorted({b[1] for b in info.barriers})))

    def to_json(self) -> dict:
        return {**asdict(self), "barrier_ids_in_sass": list(self.barrier_ids_in_sass)}


@dataclass(frozen=True)
class Backend:
    """What the backend stage produced: the cubin, how it was made, and its parsed SASS."""
    cubin: bytes = field(repr=False)
    glue_path: str                          # how line info names the glue (conformance attributes by it)
    glue_compile: str                       # "compiled" or "cache hit"
    link: str                               # "linked" or "cache hit"
    inputs: tuple[tuple[str, bytes], ...] = field(repr=False)  # (name, LTO-IR) given to nvJitLink, in order
    link_options: tuple[str, ...]
    resources: Resources
    sass: CubinInfo = field(repr=False)     # the cubin's SASS and resource usage (backend/inspect.py)
    sanitize_builds: tuple[str, ...] = ()   # instances recompiled from source with PL_SANITIZE
    warnings: tuple[str, ...] = ()

    def to_json(self) -> dict:
        """plan.json's "backend" object (the post-link stage adds its part)."""
        return {"glue_path": self.glue_path, "glue_compile": self.glue_compile,
                **({"sanitize_builds": list(self.sanitize_builds)} if self.sanitize_builds else {}),
                "link": self.link, "inputs": [name for name, _ in self.inputs], "link_options": list(self.link_options),
                "cubin_sha256": hashlib.sha256(self.cubin).hexdigest(), "cubin_bytes": len(self.cubin),
                "resources": self.resources.to_json(), "opcodes": self.sass.opcode_histogram}


def build(plan: LinkPlan, cache: Cache, progress=None) -> Backend:
    """The stage: the glue to LTO-IR, everything to one cubin, the cubin's SASS parsed."""
    say = progress or (lambda msg: None)
    if plan.options.mode != "monolithic":
        for inst in plan.instances:
            check_lto_compatible(inst.package.toolchain["nvcc"], inst.file)
    glue = glue_inputs(plan)
    arch = glue.arch
    glue_ltoir, glue_hit = compile_cached(glue, cache, say, "monolithic unit" if glue.kind == "unit" else "glue")
    inputs: list[tuple[str, bytes]] = [(f"{plan.spec.link.name}_{plan.options.mode}.fatbin", glue_ltoir)]
    sanitized: list[str] = []
    warnings: list[str] = []
    if plan.options.mode != "monolithic":
        seen = set()
        for inst in plan.instances:
            ltoir = inst.package.variants[inst.variant].ltoir
            if plan.options.sanitize:
                ltoir, warning = _sanitize_build(inst, cache, say, arch)
                sanitized += [] if warning else [inst.name]
                warnings += [warning] if warning else []
            digest = hashlib.sha256(ltoir).hexdigest()
            if digest not in seen:
                seen.add(digest)
                inputs.append((f"{inst.contract.name}.fatbin", ltoir))
    owners = {e.symbol: f"{i.contract.name} ({i.file})" for i in plan.instances for e in i.contract.entry}
    cubin, link_hit = cache.get_or_build(
        link_key(inputs, toolchain_id(), arch),
        lambda: (say(f"nvJitLink -lto ({arch}): {len(inputs)} inputs -> cubin"),
                 link_cubin(inputs, symbol_owners=owners, arch=arch))[1][0],
        cubin_payload)
    info = _inspect(plan, cubin, cache)
    return Backend(cubin, GLUE_LINE_PATH, "cache hit" if glue_hit else "compiled",
                   "cache hit" if link_hit else "linked", tuple(inputs), link_options(arch),
                   Resources.of(info, plan.smem_bytes), info, tuple(sanitized), tuple(warnings))


def _sanitize_build(inst, cache: Cache, say, arch: str = "sm_90a") -> tuple[bytes, str | None]:
    """The component recompiled from its packaged source with PL_SANITIZE (bounded mbarrier waits).
    A closed package has no source: its waits stay unbounded, and the warning says so."""
    pkg = inst.package
    if pkg.closed:
        return pkg.variants[inst.variant].ltoir, (f"sanitize: {inst.name} ({pkg.name}) is closed (no source): its "
                                                  "mbarrier waits are not bounded")
    ltoir, _ = compile_cached(sanitize_inputs(inst, arch), cache, say, f"{pkg.name} with PL_SANITIZE",
                              component=pkg.name)
    return ltoir, None


def linked_ptx(backend: Backend) -> str:
    """The PTX nvJitLink produces after LTO for the same inputs (dumps)."""
    ptx, _ = link_cubin(list(backend.inputs), ptx=True, arch=backend.link_options[0].removeprefix("-arch="))
    return ptx.decode(errors="replace")


def _inspect(plan: LinkPlan, cubin: bytes, cache: Cache) -> CubinInfo:
    key = inspect_key(cubin, plan.entry)
    info = cache.get(key, _cached_info)
    if info is not None:
        return info
    info, _ = inspect_cubin(cubin, plan.entry)
    cache.put(key, json.dumps(info.__dict__).encode())
    return info


def _cached_info(data: bytes) -> CubinInfo:
    """A cached inspection. Each field is converted to its type and the result must encode back to the
    same bytes: anything else (garbage, a field of another type, a key too many) raises, and the cache
    rebuilds the entry. A field added to CubinInfo goes here too (else every lookup warns: the cache
    tests' warm links fail)."""
    d = json.loads(data)
    info = CubinInfo(int(d["registers"]), int(d["stack"]), int(d["static_smem"]), int(d["local"]),
                     [str(i) for i in d["instructions"]],
                     [[(str(f), int(n)) for f, n in chain] for chain in d["locations"]],
                     [str(c) for c in d["calls"]],
                     [(str(k), str(i), None if t is None else str(t)) for k, i, t in d["barriers"]],
                     {str(k): int(v) for k, v in d["labels"].items()}, int(d["spill_insns"]))
    if json.dumps(info.__dict__).encode() != data:
        raise ValueError("not an inspection as this version stores it")
    return info

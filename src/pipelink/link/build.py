"""Stage 6: the backend. Glue to LTO-IR with nvcc, everything to one cubin with nvJitLink -lto,
then a look at the cubin: resources, and whether every link-time decision became an immediate.

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
from pathlib import Path

from .. import bindgen
from ..backend.cache import Cache, make_key
from ..backend.inspect import CubinInfo, inspect_cubin, opcode
from ..backend.nvcc import LTO_FLAGS, compile_ltoir
from ..backend.nvjitlink import LINK_OPTIONS, link_cubin
from ..backend.toolchain import check_lto_compatible, library_build, toolchain_id
from ..errors import PackageError
from ..fsutil import write_atomic
from . import conform
from .glue import bind_header_name
from .plan import Check, LinkPlan


def _headers(plan: LinkPlan) -> dict[str, str]:
    return {bind_header_name(i): bindgen.bind_header(i.contract) for i in plan.instances}


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


def build(plan: LinkPlan, cache: Cache, progress=None) -> bytes:
    say = progress or (lambda msg: None)
    tools = toolchain_id()
    headers = _headers(plan)
    inputs: list[tuple[str, bytes]] = []
    sources = {i.package.name: i.package.source_text for i in plan.instances
               if plan.mode == "monolithic" and i.package.source_text is not None}
    unit = _monolithic_unit(plan) if plan.mode == "monolithic" else None
    if unit is None:
        for inst in plan.instances:
            check_lto_compatible(inst.package.toolchain["nvcc"], inst.file)
    options = [i.package.compile_options for i in plan.instances] if unit else None
    key = make_key("unit" if unit else "glue", tools, LTO_FLAGS, plan.glue, headers, unit, sources, options)
    # A build folder named by the inputs' hash: line info records the glue's path, so a fixed path
    # keeps the cubin byte-identical from one link of the same inputs to the next.
    build_dir = cache.root / "build" / key[:24]
    build_dir.mkdir(parents=True, exist_ok=True)
    for name, text in headers.items():
        write_atomic(build_dir / name, text)
    write_atomic(build_dir / "glue.cu", plan.glue)
    include_dirs, unit_flags = [build_dir], []
    if unit is not None:
        for inst in plan.instances:
            pkg = inst.package
            if pkg.source_text is not None:
                write_atomic(build_dir / f"src_{pkg.name}" / pkg.source_name, pkg.source_text)
                if pkg.source_dir:
                    include_dirs.append(Path(pkg.source_dir))
            # The unit is compiled with what each component was packed with (CUTLASS's flags, say).
            lib_dirs, _ = library_build(pkg.contract.component.headers)
            include_dirs += [d for d in lib_dirs if d not in include_dirs]
            unit_flags += [f for f in pkg.compile_options if f not in LTO_FLAGS and f not in unit_flags]
        write_atomic(build_dir / "monolithic.cu", unit)
    for path in build_dir.rglob("*"):
        if path.is_file():
            os.utime(path, (0, 0))  # line tables record file times: fix them, or cubins differ per link
    main, label = (build_dir / "monolithic.cu", "monolithic unit") if unit else (build_dir / "glue.cu", "glue")
    plan.backend["glue_path"] = str(build_dir / "glue.cu")
    glue_ltoir, hit = cache.get_or_build(
        key, lambda: (say(f"nvcc: {label} -> LTO-IR"), compile_ltoir(main, include_dirs=include_dirs,
                                                                             extra_flags=unit_flags))[1][0])
    plan.backend["glue_compile"] = "cache hit" if hit else "compiled"
    inputs.append((f"{plan.spec.link.name}_{plan.mode}.fatbin", glue_ltoir))
    if plan.mode != "monolithic":
        seen = set()
        for inst in plan.instances:
            ltoir = inst.package.variants[inst.variant].ltoir
            if plan.sanitize:
                ltoir = _sanitize_build(plan, inst, cache, tools, say)
            digest = hashlib.sha256(ltoir).hexdigest()
            if digest not in seen:
                seen.add(digest)
                inputs.append((f"{inst.contract.name}.fatbin", ltoir))
    owners = {e.symbol: f"{i.contract.name} ({i.file})" for i in plan.instances for e in i.contract.entry}
    link_key = make_key("link", tools, LINK_OPTIONS, [hashlib.sha256(d).hexdigest() for _, d in inputs])
    cubin, hit = cache.get_or_build(
        link_key, lambda: (say(f"nvJitLink -lto: {len(inputs)} inputs -> cubin"),
                           link_cubin(inputs, symbol_owners=owners))[1][0])
    plan.backend["link"] = "cache hit" if hit else "linked"
    plan.backend_inputs = inputs  # kept for dumps (PTX); not serialized
    plan.backend["inputs"] = [name for name, _ in inputs]
    plan.backend["link_options"] = list(LINK_OPTIONS)
    plan.backend["cubin_sha256"] = hashlib.sha256(cubin).hexdigest()
    plan.backend["cubin_bytes"] = len(cubin)
    info = _inspect(plan, cubin, cache)
    post_link_checks(plan, info)
    conform.record(plan, conform.check(plan, info), strict=plan.strict_conformance)
    return cubin


def _sanitize_build(plan: LinkPlan, inst, cache: Cache, tools: dict, say) -> bytes:
    """The component recompiled from its packaged source with PL_SANITIZE (bounded mbarrier waits).
    A closed package has no source: its waits stay unbounded, and the plan says so."""
    pkg = inst.package
    variant = pkg.variants[inst.variant]
    if pkg.closed:
        plan.warnings.append(f"sanitize: {inst.name} ({pkg.name}) is closed (no source): its mbarrier waits are not "
                             "bounded")
        return variant.ltoir
    user_flags = [f for f in pkg.compile_options if f not in LTO_FLAGS]
    key = make_key("sanitize", tools, LTO_FLAGS, user_flags, pkg.content_hash(), variant.facts)
    work = cache.root / "build" / f"sanitize-{key[:24]}"

    def compile_it() -> bytes:
        say(f"nvcc: {pkg.name} with PL_SANITIZE -> LTO-IR")
        write_atomic(work / "bind.h", bindgen.bind_header(inst.contract))
        write_atomic(work / "facts.h", bindgen.facts_header(inst.contract, variant.facts))
        source = write_atomic(work / pkg.source_name, pkg.source_text)
        forced = ["-include", "pipelink/component.h", "-include", str(work / "bind.h"), "-include", str(work / "facts.h")]
        incs = [work, *([Path(pkg.source_dir)] if pkg.source_dir else []), *library_build(pkg.contract.component.headers)[0]]
        return compile_ltoir(source, include_dirs=incs, extra_flags=[*user_flags, "-DPL_SANITIZE", *forced],
                             component=pkg.name)[0]

    ltoir, _ = cache.get_or_build(key, compile_it)
    plan.backend.setdefault("sanitize_builds", []).append(inst.name)
    return ltoir


def linked_ptx(plan: LinkPlan) -> str:
    """The PTX nvJitLink produces after LTO for the same inputs (dumps)."""
    ptx, _ = link_cubin(plan.backend_inputs, ptx=True)
    return ptx.decode(errors="replace")


def _inspect(plan: LinkPlan, cubin: bytes, cache: Cache) -> CubinInfo:
    key = make_key("inspect-v4", hashlib.sha256(cubin).hexdigest(), plan.entry)
    data = cache.get(key)
    if data is not None:
        d = json.loads(data)
        return CubinInfo(**{**d, "barriers": [tuple(b) for b in d["barriers"]],
                            "locations": [[tuple(x) for x in chain] for chain in d["locations"]]})
    info, _ = inspect_cubin(cubin, plan.entry)
    cache.put(key, json.dumps(info.__dict__).encode())
    return info


def post_link_checks(plan: LinkPlan, info: CubinInfo) -> None:
    """Did LTO inline every component and fold every binding? Findings go into plan.backend."""
    findings: list[str] = []
    imms = info.immediates()
    bar_ids = {b[1] for b in info.barriers}
    folded = {}
    for b in plan.barriers:
        if b.threads is None:
            continue  # reserved IDs live inside opaque code; nothing of ours to look for
        hit = hex(b.id) in bar_ids
        folded[f"barrier {b.name} = {b.id}"] = hit
        if not hit:
            findings.append(f"named barrier {b.name} (ID {b.id}) does not appear as an immediate BAR operand")
    for s in plan.smem:
        if s.offset == 0:
            folded[f"smem {s.name} @ 0"] = True  # offset 0 leaves nothing to see
            continue
        hit = any(s.offset <= x < s.offset + s.bytes for x in imms)
        folded[f"smem {s.name} @ {s.offset}"] = hit
        if not hit:
            findings.append(f"smem buffer {s.name} at offset {s.offset} is never addressed by an immediate "
                            f"in [{s.offset}, {s.offset + s.bytes})")
    register_ids = [b for b in info.barriers if not b[1].startswith("0x")]
    if register_ids:
        findings.append(f"{len(register_ids)} barrier instruction(s) take the ID from a register: a binding was "
                        "not folded")
    # CALL.REL targets code in the cubin: a component that LTO did not inline. CALL.ABS goes to a
    # system routine (assert -> __assertfail, printf -> vprintf): slow, but not a linking failure.
    relative = [c for c in info.calls if opcode(c).startswith("CALL.REL")]
    absolute = [c for c in info.calls if not opcode(c).startswith("CALL.REL")]
    if relative:
        findings.append(f"{len(relative)} call(s) remain: a component was not inlined ({relative[0]})")
    if absolute:
        plan.warnings.append(f"{len(absolute)} call(s) to system routines remain ({absolute[0]}): device-side "
                             "assert or printf; define NDEBUG / drop printf for a release build")
    if info.spill_insns or info.local:
        findings.append(f"local memory in use ({info.local} bytes, {info.spill_insns} LDL/STL): register spills")
    limit = plan.device["smem_optin_bytes"]
    static = max(0, info.static_smem - plan.device["smem_reserved_bytes"])  # the reserved KB is not ours
    if static + plan.smem_bytes > limit:
        findings.append(f"static ({static}) + dynamic ({plan.smem_bytes}) smem exceed {limit} bytes by "
                        f"{static + plan.smem_bytes - limit}")
    plan.backend["resources"] = {"registers": info.registers, "stack": info.stack, "local": info.local,
                                 "static_smem": info.static_smem, "dynamic_smem": plan.smem_bytes,
                                 "instructions": len(info.instructions), "calls": len(info.calls),
                                 "barrier_ids_in_sass": sorted(bar_ids)}
    plan.backend["opcodes"] = info.opcode_histogram
    plan.backend["folded"] = folded
    plan.backend["findings"] = findings
    plan.checks.append(Check("post-link", not findings, "; ".join(findings) or
                             f"inlined, {sum(folded.values())}/{len(folded)} bindings seen as immediates, "
                             f"{info.registers} registers, no spills"))

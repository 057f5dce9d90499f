"""``pipelink.link()``: the stages in order, and the LinkedKernel they produce."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from .backend.cache import Cache
from .contract import DTYPES
from .errors import OutputError, SpecError
from .fsutil import write_atomic
from .link import alloc, audit, build, check, facts, glue
from .link.plan import MODES, Check, LinkPlan
from .spec import LinkSpec, load_spec


@dataclass
class LinkedKernel:
    """A linked kernel: the cubin, the plan that made it, and how to launch it."""
    cubin: bytes
    plan: LinkPlan

    @property
    def manifest(self) -> dict:
        return manifest(self.plan, self.cubin)

    def report(self, console=None) -> None:
        from .report import print_report
        print_report(self.plan, console=console)

    def save(self, out_dir: str | Path) -> dict[str, Path]:
        """Write cubin, manifest, plan JSON, glue source, the report (text) and the smem-map PNG.
        Everything is rendered before the first file is written and each file is written
        atomically; if a write fails, the files this call wrote are removed again (a cubin beside
        another link's plan would mislead) and OutputError names the file."""
        from .report import report_text, smem_map_png
        out, name = Path(out_dir), self.plan.spec.link.name
        outputs = {"cubin": (".cubin", self.cubin),
                   "manifest": (".manifest.json", json.dumps(self.manifest, indent=2)),
                   "plan": (".plan.json", json.dumps(self.plan.to_json(), indent=2)),
                   "glue": (".glue.cu", self.plan.glue),
                   "report": (".report.txt", report_text(self.plan)),
                   "smem_map": (".smem.png", smem_map_png(self.plan))}
        written: dict[str, Path] = {}
        for key, (suffix, payload) in outputs.items():
            path = out / f"{name}{suffix}"
            try:
                written[key] = write_atomic(path, payload)
            except OSError as exc:
                for done in written.values():
                    done.unlink(missing_ok=True)
                raise OutputError(f"cannot write: {exc.strerror}", file=str(path),
                                  hint="choose an output folder you can write to, with free space") from None
        return written


def link(spec: str | Path | LinkSpec, *, mode: str = "pipelink", trace: bool = False, sanitize: bool = False,
         cache: Cache | None = None, progress=None, strict: bool = True) -> LinkedKernel:
    """Link the components a spec names. Each stage fills the plan; nothing is generated before
    every fact and resource is resolved (errors are typed and name both sides). With ``trace`` the
    glue records %globaltimer at component boundaries (a kernel parameter more); without it the
    glue has no tracing code at all. With ``sanitize`` each buffer gets a canary after it, checked
    after every component call (a host-mapped report parameter says who overran what). With
    ``strict`` (default) a component whose code breaks its contract fails the link
    (ConformanceError); otherwise the findings are only reported."""
    plan = plan_link(spec, mode=mode, trace=trace, sanitize=sanitize)
    plan.strict_conformance = strict
    return build_plan(plan, cache=cache, progress=progress)


def plan_link(spec: str | Path | LinkSpec, *, mode: str = "pipelink", trace: bool = False,
              probe: bool = False, sanitize: bool = False) -> LinkPlan:
    """The stages that need no toolchain: load, facts, check, allocate (verify's pre-checks).
    ``probe``: a pack-time probe linking one component alone (its in-ports stay unconnected)."""
    if mode not in MODES:
        raise SpecError(f"unknown link mode '{mode}'", hint=f"one of {', '.join(MODES)}")
    spec = spec if isinstance(spec, LinkSpec) else load_spec(spec)
    plan = facts.load(spec, mode)
    plan.trace = trace
    plan.probe = probe
    plan.sanitize = sanitize and mode != "symbol"
    facts.resolve(plan)
    check.check(plan)
    alloc.allocate(plan)
    _audited(plan, audit.check_plan(plan))
    return plan


def _audited(plan: LinkPlan, result: audit.AuditResult) -> None:
    """The independent audit of the stage just run; a broken invariant stops the link (AuditError)."""
    audit.enforce(result)
    plan.checks.append(Check(f"audit ({result.stage})", True, f"{result.checked} invariants hold"))


def build_plan(plan: LinkPlan, *, cache: Cache | None = None, progress=None) -> LinkedKernel:
    """Glue and backend: the generated kernel, linked and inspected."""
    glue.generate(plan)
    _audited(plan, audit.check_glue(plan))
    cubin = build.build(plan, cache or Cache(), progress=progress)
    return LinkedKernel(cubin, plan)


def manifest(plan: LinkPlan, cubin: bytes) -> dict:
    """Everything a runtime needs to launch the kernel: entry, geometry, parameter layout."""
    params, offset = [], 0
    for inst, o in glue.operands(plan):
        shape = [inst.facts_eval(e, f"operand.{o.name}.shape") for e in o.shape]
        param = {"name": f"{inst.name}.{o.name}", "dtype": o.dtype, "shape": shape, "access": o.access,
                 "element_bytes": DTYPES[o.dtype][1], "offset": offset, "bytes": 8}
        if o.tma is not None:  # a 128-byte, 64-byte aligned CUtensorMap in place of the pointer
            offset = -(-offset // 64) * 64
            param.update(offset=offset, bytes=128, tma={
                "box": [inst.facts_eval(e, f"operand.{o.name}.tma.box") for e in o.tma.box],
                "swizzle": o.tma.swizzle})
        params.append(param)
        offset += param["bytes"]
    trace = None
    if plan.trace:
        shape = [plan.grid, plan.trace_iters, len(plan.trace_slots), 2]
        params.append({"name": "glue.trace", "dtype": "uint64", "shape": shape, "access": "write",
                       "element_bytes": 8, "offset": offset, "bytes": 8})
        offset += 8
        trace = {"param": "glue.trace", "shape": shape, "slots": plan.trace_slots, "clock": "%globaltimer (ns)"}
    sanitize = None
    if plan.sanitize:
        params.append({"name": "glue.report", "dtype": "uint32", "shape": [8], "access": "write", "element_bytes": 4,
                       "offset": offset, "bytes": 8, "host_mapped": True})
        offset += 8
        sanitize = {"param": "glue.report", "sites": plan.sanitize_sites,
                    "buffers": [{"name": b.name, "users": b.users, "offset": b.offset, "bytes": b.bytes,
                                 "guard": b.guard} for b in plan.smem],
                    "mbarriers": [{"name": m.name, "users": m.users, "offset": m.offset, "count": m.count}
                                  for m in plan.mbarriers],
                    "roles": [{"name": r.name, "warp_start": r.warp_start, "warps": r.warps,
                               "instances": [i.name for i in plan.instances if r.name in i.roles.values()]}
                              for r in plan.roles]}
    if any("tma" in p for p in params):
        offset = -(-offset // 64) * 64  # the struct's size is a multiple of its alignment
    return {
        "format": 1, "kernel": plan.spec.link.name, "entry": plan.entry, "mode": plan.mode,
        "arch": plan.device["arch"], "grid": [plan.grid, 1, 1], "block": [plan.block, 1, 1],
        "dynamic_smem": plan.smem_bytes, "params": params, "param_bytes": offset,
        "cubin_sha256": hashlib.sha256(cubin).hexdigest(),
        "resources": plan.backend.get("resources", {}), "trace": trace, "sanitize": sanitize,
    }

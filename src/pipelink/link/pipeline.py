"""``pipelink.link()``: the stages in order, and the LinkedKernel they produce.

    load -> facts -> check -> allocate -> audit    plan_link (no toolchain: verify's pre-checks)
    glue -> audit -> backend -> post-link           build_plan

Each stage takes the results it needs and the option fields it reads (facts.FactsInputs, check.CheckInputs,
alloc.AllocInputs, glue.GlueInputs: the options are fixed once, before the first) and returns its own frozen
result; the plan is assembled from them (plan.resolved, plan.checked, plan.allocation, then plan.glue,
plan.backend, plan.postlink); the kernel's ABI (link/abi.py) is derived from the plan and the glue once.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from ..abi import KernelABI
from ..backend.cache import Cache
from ..errors import OutputError
from ..fsutil import write_atomic
from ..refs import refs_json
from ..spec import LinkSpec, load_spec
from . import alloc, audit, build, check, facts, glue, postlink
from .abi import kernel_abi
from .options import LinkOptions, for_stages, with_overrides
from .plan import Check, LinkPlan, Planned


@dataclass(frozen=True)
class LinkedKernel:
    """A linked kernel: the plan that made it (with the cubin, plan.backend.cubin) and its ABI."""
    plan: LinkPlan
    abi: KernelABI

    @property
    def cubin(self) -> bytes:
        return self.plan.backend.cubin

    @property
    def manifest(self) -> dict:
        return manifest(self.plan, self.abi)

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
                   "glue": (".glue.cu", self.plan.glue.text),
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


def link(spec: str | Path | LinkSpec, options: LinkOptions | None = None, **kwargs) -> LinkedKernel:
    """Link the components a spec names, with ``options`` (LinkOptions; keyword arguments set its
    fields: ``link(spec, mode="monolithic", strict=False)``). Nothing is generated before every
    fact and resource is resolved (errors are typed and name both sides)."""
    options = for_stages(with_overrides(LinkOptions, options, kwargs))
    return _built(_planned(spec, options), options)


def plan_link(spec: str | Path | LinkSpec, options: LinkOptions | None = None, **kwargs) -> LinkPlan:
    """The stages that need no toolchain: load, facts, check, allocate (verify's pre-checks), for
    ``options`` (or its fields as keyword arguments; mode, trace, sanitize and probe matter here), fixed
    once (for_stages) and carried by the plan (plan.options) for every stage after."""
    return _planned(spec, for_stages(with_overrides(LinkOptions, options, kwargs)))


def _planned(spec: str | Path | LinkSpec, options: LinkOptions) -> LinkPlan:
    """Each stage takes the results it needs and the options' fields it reads, fixed before the first
    (``options``), and returns its own; the plan is assembled from them once they are audited."""
    spec = spec if isinstance(spec, LinkSpec) else load_spec(spec)
    loaded = facts.load(spec, options.progress)
    resolved = facts.resolve(facts.FactsInputs(spec, loaded.device, loaded.instances, options.mode))
    checked = check.check(check.CheckInputs(spec, loaded.device, resolved.instances, resolved.link_facts,
                                            options.mode, options.probe))
    allocation = alloc.allocate(alloc.AllocInputs(spec, loaded.device, resolved.instances, resolved.link_facts,
                                                  checked, options.mode, options.sanitize, options.trace))
    planned = Planned(spec, loaded.device, options.mode, allocation.instances, resolved, checked, allocation)
    audited = _audited(audit.check_plan(planned))
    return LinkPlan(spec, options, loaded.entry, loaded.device, instances=list(allocation.instances),
                    resolved=resolved, checks=[audited], checked=checked, allocation=allocation)


def _audited(result: audit.AuditResult) -> Check:
    """The independent audit of the stage just run; a broken invariant stops the link (AuditError), else
    the plan's check that says it held."""
    audit.enforce(result)
    return Check(f"audit ({result.stage})", True, f"{result.checked} invariants hold")


def build_plan(plan: LinkPlan, options: LinkOptions | None = None, **kwargs) -> LinkedKernel:
    """Glue, backend and post-link checks: the generated kernel, linked and checked. Of ``options``
    (or its fields as keyword arguments) this uses cache, progress and strict."""
    return _built(plan, with_overrides(LinkOptions, options, kwargs))


def _built(plan: LinkPlan, options: LinkOptions) -> LinkedKernel:
    plan.glue = glue.generate(glue.GlueInputs.of(plan))
    plan.checks.append(_audited(audit.check_glue(plan)))
    plan.backend = build.build(plan, options.cache or Cache(), progress=options.progress)
    plan.postlink = postlink.check_linked(plan, strict=options.strict)
    return LinkedKernel(plan, kernel_abi(plan, plan.glue.trace_iters, len(plan.glue.trace_slots)))


def manifest(plan: LinkPlan, abi: KernelABI) -> dict:
    """Everything a runtime needs to launch the kernel: entry, geometry, the parameters (the ABI),
    and the tables that explain the trace buffer and the sanitize report."""
    trace = sanitize = None
    if abi.trace is not None:
        trace = {"param": abi.trace.name, "shape": list(abi.trace.shape),
                 "slots": [t.to_json() for t in plan.glue.trace_slots], "clock": "%globaltimer (ns)"}
    if abi.report is not None:
        sanitize = {"param": abi.report.name, "sites": [s.label for s in plan.glue.sanitize_sites],
                    "buffers": [{"name": b.name, "users": refs_json(b.users), "offset": b.offset, "bytes": b.bytes,
                                 "guard": b.guard} for b in plan.smem],
                    "mbarriers": [{"name": m.name, "users": refs_json(m.users),
                                   "instances": list(dict.fromkeys(u.instance for u in m.users)),
                                   "offset": m.offset, "count": m.count} for m in plan.mbarriers],
                    "roles": [{"name": r.name, "warp_start": r.warp_start, "warps": r.warps,
                               "instances": [i.name for i in plan.instances if r.name in i.roles.values()]}
                              for r in plan.roles]}
    return {
        "format": 1, "kernel": plan.spec.link.name, "entry": plan.entry, "mode": plan.options.mode,
        "arch": plan.device["arch"], "grid": [plan.grid, 1, 1], "block": [plan.block, 1, 1],
        "cluster": plan.spec.launch.cluster,
        "coordinated_by": alloc.coordination(plan.checked.tile_source, plan.instances),
        "dynamic_smem": plan.smem_bytes, "params": [p.to_json() for p in abi.params], "param_bytes": abi.size,
        "cubin_sha256": hashlib.sha256(plan.backend.cubin).hexdigest(),
        "resources": plan.backend.resources.to_json(), "trace": trace, "sanitize": sanitize,
    }

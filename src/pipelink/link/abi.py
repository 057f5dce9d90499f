"""The link stage that lays out the kernel's ABI (pipelink/abi.py) for a plan: its parameter struct's
members in order (every instance's operands and workspaces, the split schedule's workspaces, the
trace buffer, the sanitize report), each at its offset.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Sequence

from ..abi import (PARTIALS, POINTER_BYTES, REPORT, REPORT_LAYOUT, REPORT_WORDS, TENSOR_MAP_ALIGN, TENSOR_MAP_BYTES,
                   TILE_COUNTS, TRACE, KernelABI, Param, ReportKind)
from ..refs import GLUE, Ref
from ..stream_k import whole_tiles

if TYPE_CHECKING:
    from .options import LinkOptions
    from .plan import Allocation, InstancePlan, KeptWorkspace, LaunchFact, LinkPlan, SplitMainloop


def kernel_abi(plan: LinkPlan, trace_iters: int = 0, trace_slots: int = 0) -> KernelABI:
    """The ABI of the plan's kernel (``layout_abi`` of its stages' results)."""
    return layout_abi(plan.spec.link.name, plan.instances, plan.checked.split, plan.allocation, plan.options,
                      trace_iters, trace_slots, plan.resolved.launch, plan.checked.kept)


def fact_param(fact: LaunchFact) -> Param:
    """The parameter that gives a launch fact: one int64 in device memory (a torch index tensor as it is)."""
    return Param(Ref(GLUE, f"fact_{fact.name}"), "int64", (1,), "read", 0, POINTER_BYTES,
                 note=f"fact {fact.name} at launch, {fact.low} .. {fact.high}",
                 fact={"name": fact.name, "low": fact.low, "high": fact.high})


def layout_abi(name: str, instances: Sequence[InstancePlan], split: SplitMainloop | None, allocation: Allocation,
               options: LinkOptions, trace_iters: int = 0, trace_slots: int = 0,
               launch: Sequence[LaunchFact] = (), kept: Sequence[KeptWorkspace] = ()) -> KernelABI:
    """The ABI of link ``name``'s kernel: the facts given at launch (``launch``), its instances' operands and
    workspaces (those ``kept`` as write operands of their port's dtype and shape, in the workspace's place), the
    split schedule's workspaces, and with tracing the trace buffer, whose shape takes the glue's tile iterations
    per block and traced spans (``trace_iters``, ``trace_slots``), with sanitize the report."""
    members: list[Param] = [fact_param(f) for f in launch]
    kept_as = {k.workspace: k for k in kept}
    for inst in instances:
        for o in inst.contract.operand:
            shape = tuple(inst.facts_eval(e, f"operand.{o.name}.shape") for e in o.shape)
            ref = Ref(inst.name, o.name)
            if o.tma is None:
                members.append(Param(ref, o.dtype, shape, o.access, 0, POINTER_BYTES, align=o.align))
                continue
            tma = {"box": [inst.facts_eval(e, f"operand.{o.name}.tma.box") for e in o.tma.box],
                   "swizzle": inst.facts_eval(o.tma.swizzle, f"operand.{o.name}.tma.swizzle")}  # encoded at launch
            members.append(Param(ref, o.dtype, shape, o.access, 0, TENSOR_MAP_BYTES, tma,
                                 note=f"TMA tensor map of {o.dtype}{[str(x) for x in o.shape]}", align=o.align))
        for w in inst.contract.workspace:
            k = kept_as.get(Ref(inst.name, w.name))
            if k is not None:  # the caller's output ([link] keep): the kernel writes it before reading
                members.append(Param(k.workspace, k.dtype, k.shape, "write", 0, POINTER_BYTES,
                                     note=f"kept workspace (port {k.port})", kept=k.port))
                continue
            size = inst.facts_eval(w.bytes, f"workspace.{w.name}.bytes")
            members.append(Param(Ref(inst.name, w.name), "uint8", (size,), "readwrite", 0, POINTER_BYTES,
                                 note="workspace" + (", zeroed before each launch" if w.zero else
                                                     ", zeroed before the first launch" if w.zero_once else ""),
                                 workspace={"zero": w.zero, **({"zero_once": True} if w.zero_once else {})}))
    members += _split_workspaces(split, allocation)
    if options.trace:
        members.append(Param(TRACE, "uint64", (allocation.grid, trace_iters, trace_slots, 2), "write", 0, POINTER_BYTES,
                             note="[grid][iters][slots][start, end], from %globaltimer"))
    if options.sanitize:
        words = ", ".join([*REPORT_LAYOUT[ReportKind.CANARY], "1"])
        members.append(Param(REPORT, "uint32", (REPORT_WORDS,), "write", 0, POINTER_BYTES, host_mapped=True,
                             note=f"host-mapped: {{{words}}}"))
    params, offset = [], 0
    for p in members:
        align = TENSOR_MAP_ALIGN if p.tma is not None else POINTER_BYTES
        offset = -(-offset // align) * align
        params.append(replace(p, offset=offset))
        offset += p.bytes
    align = TENSOR_MAP_ALIGN if any(p.tma is not None for p in params) else POINTER_BYTES
    return KernelABI(f"pl_params_{name}", tuple(params), -(-offset // align) * align)


def split_slot_floats(split: SplitMainloop, allocation: Allocation) -> int:
    """fp32 values in one partials slot: the summed ports' values, for every thread of their role."""
    threads = allocation.role(split.role).used_threads
    return sum(split.instance.facts_eval(p.values, "values") for p in split.ports) * threads


def split_tiles(split: SplitMainloop, allocation: Allocation) -> int:
    """The tiles a split schedule may cut (those after the data-parallel part)."""
    return allocation.num_tiles - whole_tiles(split.mode, allocation.num_tiles, allocation.grid)


def _split_workspaces(split: SplitMainloop | None, allocation: Allocation) -> list[Param]:
    if split is None:
        return []
    slots = 2 * allocation.grid * split_slot_floats(split, allocation) * 4
    counts = max(1, split_tiles(split, allocation)) * 4
    return [Param(PARTIALS, "uint8", (slots,), "readwrite", 0, POINTER_BYTES, workspace={"zero": False},
                  note="workspace: [grid][2 slots][value][thread] fp32 partial sums of split tiles"),
            Param(TILE_COUNTS, "uint8", (counts,), "readwrite", 0, POINTER_BYTES,
                  workspace={"zero": False, "zero_once": True},
                  note="workspace, zeroed before the first launch: k-tiles summed so far, per split tile; the "
                       "block that completes a tile sets its count back to 0")]

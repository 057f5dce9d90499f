"""Stage 3: check contracts against each other before anything is allocated.

Takes CheckInputs (not the plan) and returns Checks. Tile schedule agreement, port connections (direction, space, dtype, shape, layout, the
mbarriers of a hand-over with their arrival counts and transaction bytes), which transfer each
connection becomes, and whether whole-block phases can run. Device limits are checked where
they are allocated (alloc.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ..contract import DTYPES, TMEM_LANES, Port
from ..errors import ContractError, PipelinkError, PortMismatch, RegisterBudgetError, ScheduleMismatch, SpecError
from ..refs import Ref
from ..spec import LinkSpec, tile_grid
from .plan import Check, Checks, InstancePlan, KeptWorkspace, LinkParts, SplitMainloop, TileSource, Transfer
from .queries import port_of

CONVERTIBLE = {("fp32", "bf16"), ("fp32", "fp16"), ("fp16", "fp32"), ("bf16", "fp32")}
_MAX_LAYOUT_POINTS = 1 << 22


@dataclass(frozen=True)
class CheckInputs(LinkParts):
    """What the check stage reads: the spec, the device, the instances with their facts and the link-wide
    facts (the facts stage's Resolved), whether mismatches are refused (every mode but symbol), and whether
    in-ports may stay unconnected (a pack-time probe)."""
    spec: LinkSpec
    device: dict
    instances: tuple[InstancePlan, ...]
    facts: Mapping[str, int]
    mode: str
    probe: bool


def check(link: CheckInputs) -> Checks:
    _check_targets(link)
    warnings: list[str] = []
    whole_block = _check_whole_block_phases(link)
    tiles, tile_source = _check_dynamic_tiles(link, warnings)
    split = _split_mainloop(link)  # decided here, once: the later stages read Checks.split
    checks = [whole_block, tiles, _check_split(link, split)]  # the glue needs them
    if link.mode != "symbol":  # symbol linking checks nothing; the plan still records what it would have missed
        checks += [_check_schedule(link), _check_tma_operands(link)]
    transfers, ports = _check_ports(link, link.mode != "symbol", warnings)
    grid = _check_tile_grid(link, warnings)  # after the ports: a tile shape that differs there is the first thing to fix
    kept_check, kept = _check_kept(link)
    return Checks(tuple(c for c in [*checks, ports, grid, kept_check] if c), tuple(warnings), tuple(transfers), split,
                  tile_source, kept)


def _check_kept(link: CheckInputs) -> tuple[Check | None, tuple[KeptWorkspace, ...]]:
    """[link] keep: each names a global out-port whose buffer is one of its component's [[workspace]]s, one the
    kernel writes before it reads (not cleared: a caller's output arrives with whatever it held), exactly the
    port's bytes (the caller gets the port's dtype and shape, so nothing past them may be written)."""
    kept = []
    for i, ref in enumerate(link.spec.link.keep):
        where = dict(file=str(link.spec.path), field=f"link.keep[{i}]")
        inst_name, _, name = ref.partition(".")
        inst = link.instance(inst_name)
        port = next((p for p in inst.contract.port if p.name == name), None)
        if port is None or port.direction != "out" or port.space != "global":
            have = ", ".join(p.name for p in inst.contract.port if p.direction == "out" and p.space == "global")
            raise SpecError(f"{ref}: component '{inst.contract.name}' has no global out-port '{name}'", **where,
                            component=inst.contract.name, hint=f"its global out-ports: {have or 'none'}")
        ws = next((w for w in inst.contract.workspace if w.name == port.buffer), None)
        if ws is None:
            raise SpecError(f"{ref} holds operand '{port.buffer}', which the caller passes already; only a "
                            "[[workspace]] is kept", **where, component=inst.contract.name,
                            hint=f"drop {ref} from [link] keep: the caller has {inst.name}.{port.buffer}")
        if link.spec.schedule.tiles_from == f"{inst.name}.{ws.name}":
            raise SpecError(f"{ref}: workspace '{ws.name}' holds the tile count the glue reads ([schedule] tiles_from)",
                            **where, component=inst.contract.name,
                            hint="keep a port of another workspace; the count stays the kernel's own")
        cleared = [what for what, on in (("zero", ws.zero), ("zero_once", ws.zero_once),
                                         ("grid_sync", ws.grid_sync)) if on]
        if cleared:
            raise SpecError(f"{ref}: workspace '{ws.name}' is declared {', '.join(cleared)}: the kernel counts on "
                            "finding it cleared, which a caller's output is not", **where,
                            component=inst.contract.name,
                            hint="keep only data the kernel writes before reading (`zero = false`)")
        size = inst.facts_eval(ws.bytes, f"workspace.{ws.name}.bytes")
        shape = tuple(inst.facts_eval(e, f"port.{port.name}.shape") for e in port.shape.values())
        holds = math.prod(shape) * DTYPES[port.dtype][1]
        if holds != size:
            raise SpecError(f"{ref}: the port holds {port.dtype}{list(shape)} = {holds} bytes, its workspace "
                            f"'{ws.name}' {size} ({ws.bytes.text}): the caller's output would "
                            + ("miss what the kernel writes past the port" if size > holds else
                               "be larger than what the kernel writes"), **where, component=inst.contract.name,
                            hint="give the workspace exactly the port's bytes, or keep another port")
        kept.append(KeptWorkspace(Ref(inst.name, ws.name), ref, port.dtype, shape))
    if not kept:
        return None, ()
    said = ", ".join(f"{k.port} -> {k.workspace} {k.dtype}{list(k.shape)}" for k in kept)
    return Check("kept workspaces", True, f"outputs, not scratch: {said}"), tuple(kept)


def _check_targets(link: CheckInputs) -> None:
    """Every package holds LTO-IR for the device's target, or nvJitLink has nothing to link (in any mode)."""
    arch = link.device["arch"]
    for inst in link.instances:
        archs = inst.contract.component.archs
        if arch not in archs:
            raise ContractError(f"instance '{inst.name}' holds code for {', '.join(archs)}, not for the "
                                f"{link.device['name']}'s target {arch}", file=inst.file, component=inst.contract.name,
                                field="component.archs",
                                hint=f"repack the component with {arch} in its contract's [component] archs, or link "
                                     "for a device of one of its targets ([link] device)")


def _check_whole_block_phases(link: CheckInputs) -> Check | None:
    """An entry of scope "block" runs once per block in every warp, before (when = "start") or after
    the tile loops. It takes no register port (a role's registers live only in its loop), and every
    warp must come to a phase at the end with the same register budget: the glue returns each role
    that set `registers` to the entry budget after its loop, but a component's own setmaxnreg
    (internal_setmaxnreg) it cannot undo; a phase at the start runs before any."""
    phases = [(inst, i, e) for inst in link.instances for i, e in enumerate(inst.contract.entry) if e.scope == "block"]
    if not phases:
        return None
    for inst, i, e in phases:
        if e.ports:
            raise ContractError(f"whole-block phase '{e.phase}' takes register ports {e.ports}, but it runs outside "
                                "the tile loops, where no role's registers live", file=inst.file,
                                component=inst.contract.name, field=f"entry[{i}].ports",
                                hint="hand the data over in an [[smem]] buffer live in both phases")
    budgets = [f"{inst.name} ({inst.contract.name}) role '{name}'" for inst in link.instances
               for name, role in inst.contract.roles.items() if role.internal_setmaxnreg]
    at_end = [(inst, i, e) for inst, i, e in phases if e.when == "end"]  # "start" runs before any setmaxnreg
    if budgets and at_end:
        inst, i, e = at_end[0]
        raise RegisterBudgetError(f"whole-block phase {inst.name}.{e.phase} runs in every warp, but "
                                  f"{', '.join(budgets)} change the register budget with their own setmaxnreg: "
                                  "warps would reach it with different budgets", file=inst.file, component=inst.contract.name,
                                  field=f"entry[{i}].scope",
                                  hint="let the link set the budget (the role's `registers`, which the glue undoes after "
                                       "the loop) instead of internal_setmaxnreg, or make the phase scope = \"role\"")
    said = [f"{inst.name}.{e.phase} ({'before' if e.when == 'start' else 'after'} the tile loops)"
            for inst, _, e in phases]
    return Check("whole-block phases", True, ", ".join(said) + ": in every warp")


def _check_dynamic_tiles(link: CheckInputs, warnings: list[str]) -> tuple[Check | None, TileSource | None]:
    """schedule.tiles_from names a workspace of 4 bytes or more whose contract bounds the count it writes
    there (count_max), the schedule's tiles are at least that bound (fewer would leave tiles past them
    unrun: output never written), and a phase before the tile loops exists to write the count (the
    runtime zeroes workspaces: unwritten, the loops run no tile). Symbol linking checks none of the
    bounds: it runs the schedule's number, as a hand-written glue does, and the plan says so."""
    ref = link.spec.schedule.tiles_from
    if ref is None:
        return None, None
    inst_name, _, name = ref.partition(".")
    inst = link.instance(inst_name)
    index, ws = next(((i, w) for i, w in enumerate(inst.contract.workspace) if w.name == name), (None, None))
    where = dict(file=str(link.spec.path), field="schedule.tiles_from")
    if ws is None:
        have = ", ".join(w.name for w in inst.contract.workspace) or "none"
        raise SpecError(f"{ref}: component '{inst.contract.name}' has no [[workspace]] '{name}'", **where,
                        hint=f"its workspaces: {have}")
    size = inst.facts_eval(ws.bytes, f"workspace.{name}.bytes")
    if size < 4:
        raise SpecError(f"{ref} holds {size} bytes; the tile count is an int32 at its start", **where,
                        hint="declare the workspace with bytes >= 4")
    writers = [f"{i.name}.{e.phase}" for i in link.instances for e in i.contract.entry if e.when == "start"]
    if not writers:
        raise SpecError(f"the tile count comes from {ref}, but no whole-block phase runs before the tile loops to "
                        "write it (the runtime zeroes the workspace: the loops would run no tile)", **where,
                        hint='give the component that counts an [[entry]] with scope = "block", when = "start"')
    schedule = " x ".join(e.text for e in link.spec.schedule.tiles)
    problem = _count_bound_problem(link, inst, index, ws, schedule)
    source = TileSource(Ref(inst.name, ws.name), bounded=link.mode != "symbol")
    if problem is not None:
        if link.mode != "symbol":
            raise problem
        warnings.append(f"unchecked by symbol linking: {problem.message}")
        return Check("dynamic tiles", True, f"tile count read from {ref}, cut at {schedule} (unchecked)"), source
    return Check("dynamic tiles", True, f"tile count read from {ref} after {', '.join(writers)}; at most "
                 f"{ws.count_max.text} = {inst.facts_eval(ws.count_max, 'count_max')} <= {schedule}"), source


def _check_tile_grid(link: CheckInputs, warnings: list[str]) -> Check | None:
    """Each component that says which tile grid its per-tile entries cover ([schedule] tiles) gets exactly
    the link's: fewer tiles leave its output unwritten, more run past its operands. The spec's grid is a
    number its writer computes; a component updated to other tiles must not meet a stale one. Symbol linking
    runs the spec's grid whatever the components say, and the plan says so."""
    declared = [inst for inst in link.instances if inst.contract.schedule.tiles]
    if not declared:
        return None
    grid = tile_grid(link.spec, link.facts)
    spec_text = ", ".join(e.text for e in link.spec.schedule.tiles)
    covered = []
    for inst in declared:
        exprs = inst.contract.schedule.tiles
        theirs = [inst.facts_eval(e, f"schedule.tiles[{i}]") for i, e in enumerate(exprs)]
        if _padded(theirs) == _padded(grid):
            covered.append(f"{inst.name} {theirs}")
            continue
        runs, needs = math.prod(grid), math.prod(theirs)
        what = (f"{needs - runs} of its tiles would never run (output left unwritten)" if needs > runs else
                f"{runs - needs} tile(s) past its grid would run past its operands" if runs > needs else
                "the tiles would land on other rows and columns of its output")
        problem = ScheduleMismatch(
            f"the link spec's [schedule] tiles = [{spec_text}] = {grid}, but {inst.name} ({inst.contract.name}, "
            f"{inst.file}) covers its operands with tiles = [{', '.join(e.text for e in exprs)}] = {theirs}: {what}",
            file=str(link.spec.path), component=inst.contract.name, field="schedule.tiles",
            hint="name the component's grid in the spec: tiles = [" + ", ".join(f'"{e.text}"' for e in exprs) + "]")
        if link.mode != "symbol":
            raise problem
        warnings.append(f"unchecked by symbol linking: {problem.message}")
    return Check("tile grid", True, f"{grid} covers " + (", ".join(covered) or "none (unchecked)"))


def _padded(grid: list[int]) -> list[int]:
    """A grid of one dimension is [rows, 1]."""
    return [*grid, 1][:2]


def _count_bound_problem(link: CheckInputs, inst: InstancePlan, index: int, ws, schedule: str) -> PipelinkError | None:
    """What is wrong with the tile loops' bound for the count ``ws`` holds (None: nothing): the contract
    does not bound the count, or the schedule's tiles are fewer than the bound."""
    ref = link.spec.schedule.tiles_from
    if ws.count_max is None:
        return ContractError(f"the link reads its tile count from {ref}, but {inst.contract.name} does not say how "
                             f"large that count can be, so no schedule can be shown to run every tile",
                             file=inst.file, component=inst.contract.name, field=f"workspace[{index}].count_max",
                             hint="declare count_max = <expression over facts> on the workspace (the most tiles it "
                                  "can list) and repack")
    bound = inst.facts_eval(ws.count_max, f"workspace.{ws.name}.count_max")
    tiles = math.prod(tile_grid(link.spec, link.facts))
    if tiles >= bound:
        return None
    return ScheduleMismatch(f"[schedule] tiles = {schedule} = {tiles} cuts the tile count read from {ref}, but "
                            f"{inst.name} ({inst.contract.name}, {inst.file}) can write up to count_max = "
                            f"{ws.count_max.text} = {bound}: {bound - tiles} tile(s) would never run",
                            file=str(link.spec.path), field="schedule.tiles",
                            hint=f"name the guarantee instead of a number: tiles = [\"{ws.count_max.text}\"] if it is "
                                 f"a fact {inst.contract.name} guarantees, or at least {bound}")


def _split_mainloop(link: CheckInputs) -> SplitMainloop | None:
    """The mainloop a split schedule cuts (None under split = "tiles"). Refused, naming what to change:
    a cluster (the blocks sharing B by multicast would stream different k-ranges), a tile count read in
    the kernel, a grid that is not persistent; no instance with k_tiles, two that disagree on it; an
    out-port of theirs that is not a register port declared reduce = "sum"; a per-tile entry of any other
    instance that does not run after the summed ports in their role (it would see a partial tile)."""
    split = link.spec.schedule.split
    if split == "tiles":
        return None
    spec = dict(file=str(link.spec.path), field="schedule.split")
    why = ("[launch] cluster > 1: the blocks of a cluster share B by multicast and would stream different k-ranges"
           if link.spec.launch.cluster > 1 else
           "[schedule] tiles_from: the tile count is known only in the kernel" if link.spec.schedule.tiles_from else
           "persistent = false: stream-K needs every block to loop over its units" if not link.spec.schedule.persistent
           else None)
    if why:
        raise SpecError(f"split = {split!r} cannot be used with {why}", **spec, hint='use split = "tiles"')
    cut = [i for i in link.instances if i.contract.schedule.k_tiles is not None]
    if not cut:
        raise SpecError(f"split = {split!r} cuts tiles along k, but no instance declares [schedule] k_tiles", **spec,
                        hint='link a mainloop whose contract has [schedule] k_tiles, or use split = "tiles"')
    k_tiles = {i.name: i.facts_eval(i.contract.schedule.k_tiles, "schedule.k_tiles") for i in cut}
    if len(set(k_tiles.values())) > 1:
        raise ScheduleMismatch(f"split = {split!r}: the instances that cut k disagree on k_tiles ("
                               + ", ".join(f"{n} {k}" for n, k in k_tiles.items()) + ")", **spec,
                               hint="link mainloops with the same K and k-tile")
    summed = []
    for inst in cut:
        for i, e in enumerate(inst.contract.entry):
            ports = [inst.contract.port_by_name(n) for n in e.ports]
            outs = [p for p in ports if p.direction == "out"]
            for p in outs:
                if p.reduce != "sum":  # the contract allows "sum" on fp32 register out-ports only
                    raise ContractError(f"split = {split!r} cuts {inst.name}'s tiles along k, but its out-port "
                                        f"'{p.name}' ({p.space}, reduce = {p.reduce!r}) is not a register port whose "
                                        "parts add up", file=inst.file, component=inst.contract.name,
                                        field=f"port[{inst.contract.port.index(p)}].reduce",
                                        hint='declare reduce = "sum" on an fp32 accumulator, or use split = "tiles"')
            if outs:
                summed.append((inst, e, tuple(outs)))
    if len(summed) != 1:
        said = ", ".join(f"{i.name}.{e.phase}" for i, e, _ in summed) or "none"
        raise ContractError(f"split = {split!r} needs exactly one entry with reduce = \"sum\" out-ports among the "
                            f"instances with k_tiles; found {said}", file=str(link.spec.path), field="schedule.split",
                            hint="the glue sums the partial fragments of one mainloop entry per tile")
    inst, entry, ports = summed[0]
    role = inst.roles[entry.role]
    order = [i.name for i in link.instances]
    for other in link.instances:
        if other.name in k_tiles:
            continue
        for i, e in enumerate(other.contract.entry):
            if e.scope != "role":
                continue
            after = other.roles[e.role] == role and order.index(other.name) > order.index(inst.name)
            if not after:
                raise ContractError(f"split = {split!r}: {other.name}.{e.phase} runs on each tile but not after "
                                    f"{inst.name}.{entry.phase} in role '{role}', so it would see a tile whose k-range "
                                    "is cut between blocks", file=other.file, component=other.contract.name,
                                    field=f"entry[{i}].role",
                                    hint=f"run it in role '{role}' and list its instance after '{inst.name}' in the "
                                         'spec, or use split = "tiles"')
    return SplitMainloop(split, next(iter(k_tiles.values())), inst, entry, role, ports)


def _check_split(link: CheckInputs, sm: SplitMainloop | None) -> Check | None:
    if sm is None:
        return None
    return Check("split", True, f"{link.spec.schedule.split}: {sm.instance.name}.{sm.entry.phase} cut along k "
                 f"({sm.k_tiles} k-tiles a tile), {', '.join(p.name for p in sm.ports)} summed in role '{sm.role}'")


def _check_tma_operands(link: CheckInputs) -> Check | None:
    """What cuTensorMapEncodeTiled would refuse at launch, refused at link time with the field named."""
    seen = []
    for inst in link.instances:
        for i, o in enumerate(inst.contract.operand):
            if o.tma is None:
                continue
            field = f"operand[{i}].tma.box"
            shape = [inst.facts_eval(e, f"operand.{o.name}.shape") for e in o.shape]
            box = [inst.facts_eval(e, field) for e in o.tma.box]
            swizzle = inst.facts_eval(o.tma.swizzle, f"operand[{i}].tma.swizzle")
            esize = DTYPES[o.dtype][1]
            # Each extent's 1..256 is the contract field's own limit (checked with these facts in facts.py).
            problems = []
            if swizzle and box[-1] * esize > swizzle:
                problems.append(f"the inner box is {box[-1] * esize} bytes, over the {swizzle}-byte swizzle "
                                f"span by {box[-1] * esize - swizzle}")
            if len(shape) > 1 and (shape[-1] * esize) % 16:
                problems.append(f"rows are {shape[-1] * esize} bytes; TMA needs row pitches in multiples of 16")
            problems += [f"box {b} does not divide dimension {j} ({n}): the last box would read past the tensor"
                         for j, (b, n) in enumerate(zip(box, shape)) if n % b and j not in o.tma.partial]
            if problems:
                raise SpecError(f"TMA operand {inst.name}.{o.name} {shape} with box {box}: " + "; ".join(problems),
                                file=inst.file, component=inst.contract.name, field=field,
                                hint="change the facts that size the tensor or the box (tile facts), or the contract's "
                                     "tma box / swizzle (or its `partial`, where the code expects a partial last box)")
            seen.append(f"{inst.name}.{o.name} box {box}")
    return Check("tma", True, ", ".join(seen)) if seen else None


def _check_schedule(link: CheckInputs) -> Check:
    order = link.spec.schedule.order
    for inst in link.instances:
        theirs = inst.contract.schedule.order
        if theirs not in ("any", order):
            raise ScheduleMismatch(f"{inst.name} ({inst.contract.name}) assumes tile order '{theirs}', but the link "
                                   f"spec ({link.spec.path}) schedules '{order}'", file=inst.file,
                                   component=inst.contract.name, field="schedule.order",
                                   hint="use one tile order for every component: change [schedule] order in the "
                                        "spec or use a component built for that order")
    return Check("schedule", True, f"all components accept {order} tile order")


def port_role(inst: InstancePlan, port: Port) -> str | None:
    """Kernel role whose threads hold a register port (the role of the entry that passes it)."""
    for e in inst.contract.entry:
        if port.name in e.ports:
            return inst.roles[e.role]
    return None


def _shape(inst: InstancePlan, port: Port) -> list[int]:
    return [inst.facts_eval(e, f"port.{port.name}.shape.{d}") for d, e in port.shape.items()]


def _index_grid(shape: list[int]) -> list[np.ndarray]:
    """Every index of ``shape`` (or an even sample of at most _MAX_LAYOUT_POINTS), one array per dim."""
    total = int(np.prod(shape))
    flat = np.arange(total) if total <= _MAX_LAYOUT_POINTS else np.linspace(0, total - 1, _MAX_LAYOUT_POINTS).astype(np.int64)
    return list(np.unravel_index(flat, shape))


def _smem_layout_overrun(inst: InstancePlan, port: Port) -> str | None:
    """Whether an smem port's layout leaves its buffer (what it says, or None). The glue's copies write a
    consumer port's layout into its buffer and read a producer's from its own, and the conformance check
    looks at components' code, not the glue's: a layout past the buffer would write over its neighbour."""
    if port.space != "smem":
        return None
    shape = _shape(inst, port)
    grid = _index_grid(shape)
    off = inst.facts_eval_array(port.offset, f"port.{port.name}.offset", dict(zip(port.shape, grid)))
    lo, hi = int(np.min(off)), int(np.max(off))
    size = DTYPES[port.dtype][1]
    buffer = next(b for b in inst.contract.smem if b.name == port.buffer)
    have = inst.facts_eval(buffer.bytes, f"smem.{buffer.name}.bytes")
    where = f"port '{port.name}' of {inst.contract.name} ({inst.file}) lays its {'x'.join(map(str, shape))} {port.dtype} tile"
    if lo < 0:
        return f"{where} at element offset {lo}, before the start of its buffer '{buffer.name}'"
    if (hi + 1) * size > have:
        return (f"{where} up to byte {(hi + 1) * size}, but its buffer '{buffer.name}' holds {have} bytes "
                f"(over by {(hi + 1) * size - have})")
    return None


def smem_offsets_equal(a: tuple[InstancePlan, Port], b: tuple[InstancePlan, Port], shape: list[int]) -> bool:
    (ia, pa), (ib, pb) = a, b
    grid = _index_grid(shape)
    off_a = ia.facts_eval_array(pa.offset, f"port.{pa.name}.offset", dict(zip(pa.shape, grid)))
    off_b = ib.facts_eval_array(pb.offset, f"port.{pb.name}.offset", dict(zip(pb.shape, grid)))
    return bool(np.array_equal(np.broadcast_to(off_a, grid[0].shape), np.broadcast_to(off_b, grid[0].shape)))


def fragment_map(inst: InstancePlan, port: Port, threads: int) -> np.ndarray:
    """Coordinates held at each (thread, value): shape (dims, threads * values)."""
    values = inst.facts_eval(port.values, f"port.{port.name}.values")
    t, v = np.unravel_index(np.arange(threads * values), (threads, values))
    return np.stack([np.broadcast_to(inst.facts_eval_array(e, f"port.{port.name}.fragment.{d}", {"t": t, "v": v}),
                                      t.shape) for d, e in port.fragment.items()])


def _check_ports(link: CheckInputs, strict: bool, warnings: list[str]) -> tuple[list[Transfer], Check]:
    """The transfer each connection needs; mismatches raise, or (not strict) become warnings."""
    fed: set[Ref] = set()
    transfers: list[Transfer] = []
    for i, (src, dst) in enumerate(link.connections):
        where = f"connect[{i}]"
        (si, sp), (di, dp) = port_of(link, src, f"{where}.from"), port_of(link, dst, f"{where}.to")

        def mismatch(what: str, hint: str) -> PortMismatch:
            return PortMismatch(f"{src} -> {dst}: {what}", file=str(link.spec.path), field=where,
                                component=f"{si.contract.name} -> {di.contract.name}", hint=hint)

        def complain(exc: PortMismatch) -> None:
            if strict:
                raise exc
            warnings.append(f"unchecked by symbol linking: {exc.message}")

        if sp.direction != "out" or dp.direction != "in":
            raise mismatch(f"'{src}' is an {sp.direction}-port and '{dst}' an {dp.direction}-port",
                           "connect an out-port (from) to an in-port (to)")
        s_shape, d_shape = _shape(si, sp), _shape(di, dp)
        if s_shape != d_shape:
            complain(mismatch(f"shape {s_shape} ({si.contract.name}) differs from {d_shape} ({di.contract.name})",
                           "the tile facts of the two components must agree"))
        # A global or tensor-memory tensor is read in place (nothing converts it): _global_transfer and _tmem_transfer
        # refuse any dtype difference there, in their own words; the conversions below are the glue's copies.
        if sp.dtype != dp.dtype and not {"global", "tmem"} & {sp.space, dp.space} and \
                (sp.dtype, dp.dtype) not in CONVERTIBLE:
            raise mismatch(f"dtype {sp.dtype} ({si.contract.name}) cannot be converted to {dp.dtype} "
                           f"({di.contract.name})", f"convertible pairs: {sorted(CONVERTIBLE)}")
        for inst, port in ((si, sp), (di, dp)):
            over = _smem_layout_overrun(inst, port)
            if over:
                complain(mismatch(over, f"declare '{port.buffer}' with the bytes the layout reaches, or fix the port's "
                                        f"offset; then repack {inst.contract.name}"))
        kind = _transfer_kind(link, src, dst, (si, sp), (di, dp), s_shape, mismatch, complain)
        fed.add(dst)
        transfers.append(kind)
    sources = {src for src, _ in link.connections}
    for inst in link.instances:
        for p in inst.contract.port:
            ref = Ref(inst.name, p.name)
            if p.direction == "in" and ref not in fed and not link.probe:
                raise SpecError(f"in-port '{ref}' of {inst.contract.name} is not connected: nothing produces its data",
                                file=str(link.spec.path), field="connect",
                                hint=f"add [[connect]] from = '<instance>.<port>' to = '{ref}'")
            if p.direction == "out" and ref not in sources:
                warnings.append(f"out-port '{ref}' is not connected; its data is dropped")
    return transfers, Check("ports", True, f"{len(link.spec.connect)} connection(s): " +
                            ", ".join(f"{t.src}->{t.dst} ({t.kind})" for t in transfers))


def _transfer_kind(link, src, dst, s, d, shape, mismatch, complain) -> Transfer:
    (si, sp), (di, dp) = s, d
    if "global" in (sp.space, dp.space):
        return _global_transfer(src, dst, s, d, shape, mismatch, complain)
    if "tmem" in (sp.space, dp.space):
        return _tmem_transfer(src, dst, s, d, shape, mismatch, complain)
    if sp.space == "smem" and dp.space == "smem":
        same_layout = sp.dtype == dp.dtype and smem_offsets_equal(s, d, shape)
        if sp.protocol == "mbarrier_ring" or dp.protocol == "mbarrier_ring":
            if not same_layout:
                complain(mismatch("a ring hand-over needs one layout on both sides, and the layouts differ",
                                  "use the same offset expression (and dtype) on both ports"))
            _check_mbarriers(s, d, mismatch, complain)
            return Transfer("alias", src, dst, note="one buffer, handed over on the shared mbarriers")
        roles = {r for r in (_smem_role(si), _smem_role(di))}
        if len(roles) != 1:
            raise mismatch("a barrier-protocol smem hand-over must stay within one kernel role",
                           "use protocol = 'mbarrier_ring' between roles")
        role = roles.pop()
        if same_layout:
            return Transfer("alias", src, dst, role=role, note="one buffer; glue barrier between the phases")
        return Transfer("smem_to_smem", src, dst, role=role, note="glue copies with layout/dtype conversion")
    if sp.space == "registers":
        s_role, d_role = port_role(si, sp), (port_role(di, dp) if dp.space == "registers" else _smem_role(di))
        if s_role != d_role:
            raise mismatch(f"registers held by role '{s_role}' cannot reach role '{d_role}'",
                           "hand registers only to a component running in the same kernel role")
        if dp.space == "registers":
            threads = 32 * max(si.contract.roles[r].warps for r, k in si.roles.items() if k == s_role)
            a, b = fragment_map(si, sp, threads), fragment_map(di, dp, threads)
            if sp.dtype != dp.dtype:
                raise mismatch(f"register fragments differ in dtype ({si.contract.name}: {sp.dtype}, "
                               f"{di.contract.name}: {dp.dtype}) and registers have no in-place conversion",
                               "make the dtypes equal, or hand over through smem")
            if a.shape != b.shape or not np.array_equal(a, b):
                complain(mismatch(_fragment_difference(si, sp, a, di, dp, b),
                                  "registers cannot be moved between threads in place: make the consumer's "
                                  "fragment expressions equal to the producer's, or hand over through smem"))
            return Transfer("reg_to_reg", src, dst, role=s_role, note="same array passed by reference")
        return Transfer("reg_to_smem", src, dst, role=s_role, note="glue stores the fragment in the consumer's layout")
    raise mismatch("an smem out-port cannot feed a register in-port", "have the consumer read smem itself")


def _global_transfer(src, dst, s, d, shape, mismatch, complain) -> Transfer:
    """A global hand-over: the consumer reads the producer's workspace in place, so both sides must be
    global, of one dtype (nothing converts it), and the workspace must hold the whole tensor. The last two
    the symbol control only reports: a hand-written host passes the pointer whatever the two sides say."""
    (si, sp), (di, dp) = s, d
    if sp.space != dp.space:
        raise mismatch(f"a {sp.space} out-port ({si.contract.name}) cannot feed a {dp.space} in-port "
                       f"({di.contract.name})", "global ports connect only to global ports")
    if sp.dtype != dp.dtype:
        complain(mismatch(f"dtype {sp.dtype} ({si.contract.name}) differs from {dp.dtype} ({di.contract.name}), and a "
                          "global tensor is read in place: no conversion is possible",
                          f"repack one side so both declare one dtype: the consumer's package {di.file} (port."
                          f"{dp.name}.dtype = \"{dp.dtype}\") or the producer's package {si.file} (port.{sp.name}.dtype "
                          f"= \"{sp.dtype}\")"))
    ws = next((w for w in si.contract.workspace if w.name == sp.buffer), None)
    if ws is not None:
        what, have = "workspace", si.facts_eval(ws.bytes, f"workspace.{ws.name}.bytes")
    else:
        o = next(o for o in si.contract.operand if o.name == sp.buffer)
        what = "operand"
        have = int(np.prod([si.facts_eval(d, f"operand.{o.name}.shape") for d in o.shape])) * DTYPES[o.dtype][1]
    need = int(np.prod(shape)) * DTYPES[sp.dtype][1]
    if have < need:
        complain(mismatch(f"{what} '{sp.buffer}' of {si.contract.name} ({si.file}) holds {have} bytes but port "
                          f"'{sp.name}' is {'x'.join(map(str, shape))} {sp.dtype} = {need} bytes ({need - have} over)",
                          f"size the {what} from the same facts as the port's shape"))
    return Transfer("global", src, dst, note=f"{si.name}.{sp.buffer} read in place; the components order the hand-over")


def tmem_map(inst: InstancePlan, port: Port, shape: list[int]) -> np.ndarray:
    """Coordinates held at each tensor-memory cell (lane, col) of a tmem port: shape (dims, 128 * columns), the
    columns being the port's elements over the 128 lanes."""
    cols = int(np.prod(shape)) // TMEM_LANES
    lane, col = np.unravel_index(np.arange(TMEM_LANES * cols), (TMEM_LANES, cols))
    return np.stack([np.broadcast_to(inst.facts_eval_array(e, f"port.{port.name}.fragment.{d}",
                                                           {"lane": lane, "col": col}), lane.shape)
                     for d, e in port.fragment.items()])


def _tmem_transfer(src, dst, s, d, shape, mismatch, complain) -> Transfer:
    """A tensor-memory hand-over: the consumer reads the producer's [[tmem]] buffer in place (nothing moves
    tensor memory between layouts), so both sides lay one dtype over (lane, col) alike, every element of the
    tile exactly once, inside the producer's columns; tensor memory lanes 32i .. 32i + 31 are open only to warps
    whose index is i modulo 4, so the reader works in whole warpgroups; and the two sides share the mbarriers."""
    (si, sp), (di, dp) = s, d
    if {sp.space, dp.space} != {"tmem"}:
        raise mismatch(f"a {sp.space} out-port ({si.contract.name}) cannot feed a {dp.space} in-port "
                       f"({di.contract.name})", "tmem ports connect only to tmem ports (the consumer reads the "
                       "producer's tensor memory in place)")
    if sp.dtype != dp.dtype:
        complain(mismatch(f"{si.contract.name} hands over {sp.dtype} in tensor memory and {di.contract.name} reads "
                          f"{dp.dtype}: it is read in place, and nothing converts it",
                          "declare one dtype on both ports"))
    elements = int(np.prod(shape))
    if elements % TMEM_LANES:
        raise mismatch(f"port '{sp.name}' is {'x'.join(map(str, shape))} = {elements} elements, not a whole number "
                       f"of columns of {TMEM_LANES} lanes", "size the tile to fill every lane of its columns")
    a, b = tmem_map(si, sp, shape), tmem_map(di, dp, shape)
    flat = np.ravel_multi_index(tuple(a), shape, mode="clip")
    inside = np.all((a >= 0) & (a < np.array(shape)[:, None]), axis=0)
    if not inside.all() or len(np.unique(flat)) != elements:
        k = int(np.argmin(inside)) if not inside.all() else None
        what = (f"lane {k // (elements // TMEM_LANES)} col {k % (elements // TMEM_LANES)} lies outside the "
                f"{'x'.join(map(str, shape))} tile" if k is not None else "some element is held twice and another "
                "not at all")
        complain(mismatch(f"the tmem layout of {si.contract.name} ({si.file}) does not cover its tile once: {what} "
                          f"[port.{sp.name}.fragment]", "make the fragment a one-to-one map of lanes x columns onto "
                          "the tile"))
    if not np.array_equal(a, b):
        k = int(np.argmax(np.any(a != b, axis=0)))
        cols = elements // TMEM_LANES
        at = ", ".join(f"{dim}={int(x)}" for dim, x in zip(sp.fragment, a[:, k]))
        bt = ", ".join(f"{dim}={int(x)}" for dim, x in zip(dp.fragment, b[:, k]))
        complain(mismatch(f"tensor-memory layouts differ: lane {k // cols} col {k % cols} holds ({at}) in "
                          f"{si.contract.name} ({si.file}) but ({bt}) in {di.contract.name} ({di.file}) "
                          "[port.fragment]", "tensor memory is read in place: make the consumer's fragment "
                          "expressions equal to the producer's"))
    buffer = next(t for t in si.contract.tmem if t.name == sp.buffer)
    have = si.facts_eval(buffer.columns, f"tmem.{buffer.name}.columns")
    if have < elements // TMEM_LANES:
        complain(mismatch(f"[[tmem]] '{buffer.name}' of {si.contract.name} ({si.file}) holds {have} columns but port "
                          f"'{sp.name}' lays {elements // TMEM_LANES} ({elements // TMEM_LANES - have} over)",
                          "size the buffer from the same facts as the port's shape"))
    if not any(r.warpgroup_aligned for r in di.contract.roles.values()):
        complain(mismatch(f"{di.contract.name} ({di.file}) reads tensor memory, whose lanes 32i .. 32i + 31 only warps "
                          "with index i modulo 4 reach, but none of its roles is warpgroup-aligned",
                          "set warpgroup_aligned = true on the role that reads the port"))
    _check_mbarriers(s, d, mismatch, complain)
    return Transfer("tmem", src, dst, note=f"{si.name}.{sp.buffer} read in place, handed over on the shared mbarriers")


def _fragment_difference(si, sp, a, di, dp, b) -> str:
    """Names the first (thread, value) whose coordinates differ between two fragment maps."""
    va, vb = a.shape[1], b.shape[1]
    if va != vb:
        return (f"{si.contract.name} ({si.file}) holds {va} values per role and {di.contract.name} ({di.file}) "
                f"expects {vb} (port.{sp.name}.values / port.{dp.name}.values)")
    k = int(np.argmax(np.any(a != b, axis=0)))
    values = si.facts_eval(sp.values, "values")
    t, v = divmod(k, values)
    dims = list(sp.fragment)
    at = ", ".join(f"{d}={int(x)}" for d, x in zip(dims, a[:, k]))
    bt = ", ".join(f"{d}={int(x)}" for d, x in zip(dp.fragment, b[:, k]))
    return (f"register fragments differ: thread {t} value {v} holds ({at}) in {si.contract.name} ({si.file}) but "
            f"({bt}) in {di.contract.name} ({di.file}) [port.fragment]")


def _smem_role(inst: InstancePlan) -> str | None:
    roles = set(inst.roles.values())
    return roles.pop() if len(roles) == 1 else None


def _check_mbarriers(s, d, mismatch, complain) -> None:
    (si, sp), (di, dp) = s, d
    if sorted(sp.mbarriers) != sorted(dp.mbarriers):
        raise mismatch(f"{si.contract.name} synchronizes on mbarriers {sp.mbarriers} but {di.contract.name} on "
                       f"{dp.mbarriers}", "both sides of a ring must declare the same mbarrier names")
    for name in sp.mbarriers:
        ms = next(m for m in si.contract.mbarrier if m.name == name)
        md = next(m for m in di.contract.mbarrier if m.name == name)
        for key in ("count", "arrivals", "tx_bytes"):
            a = si.facts_eval(getattr(ms, key), f"mbarrier.{name}.{key}")
            b = di.facts_eval(getattr(md, key), f"mbarrier.{name}.{key}")
            if a != b:
                complain(mismatch(f"mbarrier '{name}' {key}: {si.contract.name} ({si.file}) expects {a} but "
                               f"{di.contract.name} ({di.file}) declares {b}",
                               "a barrier that expects more arrivals than happen hangs, fewer releases data early: "
                               "make the two counts equal (repackage the component whose fact is stale)"))

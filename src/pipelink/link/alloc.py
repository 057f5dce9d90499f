"""Stage 4: allocate the block's shared resources jointly, within the device's limits.

warps (contiguous ranges per kernel role, warpgroup-aligned where WGMMA/setmaxnreg need it),
registers (setmaxnreg per role, the sum within the register file), shared memory
(lifetime-aware first-fit packing with alignment, pinned buffers kept), mbarrier slots (one
array per hand-over, merged across connected ports), named barriers (IDs 1..15 around pinned
ones). In symbol mode nothing is allocated: every resource sits where its package put it. Takes
AllocInputs (not the plan) and returns the Allocation, with each instance given its bindings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping

from ..errors import BarrierExhausted, PinnedCollision, ScheduleMismatch, SmemOverflow, SpecError, WarpLayoutError
from ..refs import GLUE, Ref
from ..spec import LinkSpec, tile_grid
from ..stream_k import cut_tiles, stream_blocks, whole_tiles
from .layout import BLOCK_THREADS, warp_layout
from .plan import (WHOLE_KERNEL, Allocation, BarrierAlloc, BarrierPurpose, Check, Checks, ComponentBarrier,
                   InstancePlan, LinkParts, LiveRange, MbarAlloc, ReservedBarriers, ReuseFence, RoleAlloc,
                   SmemAlloc, SplitFence, TileSource, Transfer, TransferFence)
from .queries import port_of
from .tmem import TMEM_SLOT, TMEM_SLOT_BYTES, TmemAllocation, allocate_tmem, tmem_bindings

MBARRIERS = Ref(GLUE, "mbarriers")  # the smem region holding every mbarrier array
MBARRIER_REGION = str(MBARRIERS)
GUARD_BYTES = 32  # sanitize mode: 8 canary words after each relocatable buffer


@dataclass(frozen=True)
class AllocInputs(LinkParts):
    """What the allocation stage reads: the spec, the device, the instances with their facts and the link-wide
    facts (Resolved), the check stage's result (its transfers, the split mainloop, the tile source), and of the
    options the mode (symbol linking allocates nothing), sanitize (canaries) and trace (no clusters yet)."""
    spec: LinkSpec
    device: dict
    instances: tuple[InstancePlan, ...]
    facts: Mapping[str, int]
    checked: Checks
    mode: str
    sanitize: bool
    trace: bool


def allocate(link: AllocInputs) -> Allocation:
    """The block's resources for the link's instances and the check stage's transfers, and each
    instance's bindings (the values its bindings struct gets; Allocation.instances holds each instance
    with them)."""
    draft = _Draft([replace(t) for t in link.checked.transfers])
    _warps(link, draft)
    _schedule(link, draft)
    if link.mode == "symbol":
        if any(i.contract.tmem or i.facts_eval(i.contract.reserve.tmem_columns, "reserve.tmem_columns")
               for i in link.instances):
            raise SpecError("symbol linking places every resource where its package put it, and a package holds no "
                            "tensor-memory position: the glue allocates it", file=str(link.spec.path),
                            field="link.mode", hint="link tensor-memory components in pipelink mode")
        _packaged_positions(link, draft)
    else:
        draft.tmem = allocate_tmem(link, draft.transfers, _tmem_groups, _place, _ordered)
        phase_roles = _smem(link, draft)
        _barriers(link, draft, phase_roles)
    _bindings(link, draft)
    return draft.frozen(link.instances)


@dataclass
class _Draft:
    """The allocation while the helpers below build it up; allocate() returns it frozen."""
    transfers: list[Transfer]   # copies of the check stage's, given their barriers here
    roles: list[RoleAlloc] = field(default_factory=list)
    smem: list[SmemAlloc] = field(default_factory=list)
    smem_bytes: int = 0
    barriers: list[BarrierAlloc] = field(default_factory=list)
    mbarriers: list[MbarAlloc] = field(default_factory=list)
    mbar_of: dict[tuple[str, str], MbarAlloc] = field(default_factory=dict)
    tiles: list[int] = field(default_factory=list)
    num_tiles: int = 0
    grid: int = 0
    block: int = 0
    checks: list[Check] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    bindings: dict[str, dict[str, int]] = field(default_factory=dict)
    tmem: TmemAllocation | None = None

    def role(self, name: str) -> RoleAlloc:
        return next(r for r in self.roles if r.name == name)

    def frozen(self, instances: Iterable[InstancePlan]) -> Allocation:
        """The allocation, with each of ``instances`` given its bindings (a new InstancePlan)."""
        bound = tuple(replace(i, bind=dict(self.bindings[i.name])) for i in instances)
        return Allocation(tuple(self.roles), tuple(self.smem), self.smem_bytes, tuple(self.barriers),
                          tuple(self.mbarriers), self.mbar_of, tuple(self.transfers), tuple(self.tiles),
                          self.num_tiles, self.grid, self.block, tuple(self.checks), tuple(self.warnings),
                          self.bindings, bound, self.tmem)


# --- warps and registers -----------------------------------------------------------------

def _warps(link: AllocInputs, draft: _Draft) -> None:
    """The warp layout (layout.py: the fact stage already offered its block size as block_threads)."""
    layout = warp_layout(link)
    draft.roles, draft.block = list(layout.roles), layout.block
    draft.checks += layout.checks
    draft.warnings += layout.warnings
    if link.mode == "symbol":
        _symbol_block_threads(link, draft)


def _symbol_block_threads(link: AllocInputs, draft: _Draft) -> None:
    """Symbol linking: a component compiled for another block size than the block it runs in (a whole-block
    phase's CUB BLOCK_DIM_X) is launched anyway, as a hand-written host would; the plan says what it let
    through. (In the other modes the fact stage sets block_threads to the block, and the audit checks it.)"""
    for inst in link.instances:
        if BLOCK_THREADS in inst.contract.facts.requires and inst.facts[BLOCK_THREADS] != draft.block:
            layout = ", ".join(f"{r.name} {r.threads}" for r in draft.roles)
            draft.warnings.append(f"unchecked by symbol linking: {inst.name} ({inst.contract.name}) is built for "
                                  f"block_threads = {inst.facts[BLOCK_THREADS]}, but the block has {draft.block} "
                                  f"threads ({layout})")


def coordination(source: TileSource | None, instances: Iterable[InstancePlan]) -> list[str]:
    """What makes the link's blocks wait on each other (empty when nothing does): the tile count read in the
    kernel (``source``: Checks.tile_source), the instances' grid_sync workspaces. Then every block must be
    resident at once, here (at most one block an SM) and at load (runtime: the driver's occupancy, clusters
    included)."""
    return ([f"schedule.tiles_from = {str(source.workspace)!r}"] if source else []) \
        + [f"{i.name}.{w.name} (grid_sync)" for i in instances for w in i.contract.workspace if w.grid_sync]


def _schedule(link: AllocInputs, draft: _Draft) -> None:
    draft.tiles = tile_grid(link.spec, link.facts)
    draft.num_tiles = math.prod(draft.tiles)
    group = link.spec.schedule.group
    if group:
        banded = _fast_dimension(link, draft)
        if len(draft.tiles) != 2 or group < 1 or banded % group:
            raise SpecError(f"schedule.group = {group} must divide the banded tile dimension ({banded} tiles, "
                            f"grid {draft.tiles}, {link.spec.schedule.order})", file=str(link.spec.path),
                            field="schedule.group", hint="choose a divisor of that dimension, or 0 for no bands")
    if link.spec.launch.grid:
        draft.grid = link.spec.launch.grid
    elif link.spec.schedule.persistent and link.checked.split is not None:
        # a split schedule spreads k-tiles, not tiles: every SM takes a share even where the tiles are fewer
        # (the Llama MLP's down projection: 16 tiles of 128 k-tiles each)
        draft.grid = link.device["sms"]
    elif link.spec.schedule.persistent:
        draft.grid = min(draft.num_tiles, link.device["sms"])
    else:
        draft.grid = draft.num_tiles
    waiting = coordination(link.checked.tile_source, link.instances)
    if waiting and draft.grid > link.device["sms"]:
        # Blocks wait on each other's writes: a block that is not resident waits forever.
        raise SpecError(f"the blocks coordinate through {', '.join(waiting)}, so all of them must be resident at "
                        f"once: the grid is {draft.grid} blocks, over the {link.device['sms']} SMs (one block "
                        f"each) by {draft.grid - link.device['sms']}", file=str(link.spec.path),
                        field="launch.grid" if link.spec.launch.grid else "schedule.persistent",
                        hint="use a persistent schedule (the default) and leave [launch] grid out")
    _check_split_size(link, draft)
    _report_split(link, draft)
    _check_cluster(link, draft)


# A split schedule's table holds 7 ints a block in constant memory (64 KB), and its counts, k-ranges and
# ring positions are C ints: the grid and the k-tiles of the whole problem stay within these.
MAX_SPLIT_GRID = 2048
MAX_SPLIT_K_TILES = 2 ** 31 - 1


def _check_split_size(link: AllocInputs, draft: _Draft) -> None:
    split = link.checked.split
    if split is None:
        return
    where = dict(file=str(link.spec.path), field="launch.grid" if link.spec.launch.grid else "schedule.split")
    if draft.grid > MAX_SPLIT_GRID:
        raise SpecError(f"split = {split.mode!r} with a grid of {draft.grid} blocks: its table of units "
                        f"holds at most {MAX_SPLIT_GRID}, over by {draft.grid - MAX_SPLIT_GRID}", **where,
                        hint="leave [launch] grid out (one block per SM)")
    total = draft.num_tiles * split.k_tiles
    if total > MAX_SPLIT_K_TILES:
        raise SpecError(f"split = {split.mode!r}: {draft.num_tiles} tiles x {split.k_tiles} k-tiles = "
                        f"{total} k-tiles, over the {MAX_SPLIT_K_TILES} a C int counts by {total - MAX_SPLIT_K_TILES}",
                        file=str(link.spec.path), field="schedule.split", hint='use split = "tiles" for this size')


def _report_split(link: AllocInputs, draft: _Draft) -> None:
    """What a split link decided: the tiles run whole, the tiles left and the blocks they are spread over."""
    split = link.checked.split
    if split is None:
        return
    mode, tiles, grid = split.mode, draft.num_tiles, draft.grid
    dp, cut = whole_tiles(mode, tiles, grid), cut_tiles(mode, tiles, split.k_tiles, grid)
    blocks = stream_blocks(mode, tiles, split.k_tiles, grid)
    draft.checks.append(Check("split_units", True, f"{mode}: {dp} of {tiles} tiles whole, the {tiles - dp} left over "
                              f"{blocks} of {grid} blocks, {cut} cut between blocks" +
                              ("" if cut else ': nothing to sum, the work of split = "tiles" plus its workspaces')))


def _fast_dimension(link: AllocInputs, draft: _Draft) -> int:
    """Tiles along the dimension the linear tile index walks first (rows for column_major)."""
    if link.spec.schedule.order == "column_major" or len(draft.tiles) == 1:
        return draft.tiles[0]
    return draft.tiles[1]


def _check_cluster(link: AllocInputs, draft: _Draft) -> None:
    """A cluster of c blocks works on c consecutive tiles of the fast dimension at once: the grid, the
    fast dimension and any band must be multiples of c, so that every block of a cluster is handed a
    tile in the same step, in the same column (column_major) or row (row_major). A link whose entries are
    all whole-block phases has no tile loop (its components spread their own work over the blocks, the
    Llama decode block's projections among them): only the grid must be a multiple of c."""
    c = link.spec.launch.cluster
    if c == 1:
        return
    tile_loop = any(e.scope == "role" for inst in link.instances for e in inst.contract.entry)
    fast = _fast_dimension(link, draft)
    problems = []
    if draft.grid % c:
        problems.append(f"the grid ({draft.grid} blocks) is not a multiple of it")
    if tile_loop and fast % c:
        problems.append(f"the fast tile dimension ({fast} tiles) is not a multiple of it")
    if tile_loop and link.spec.schedule.group % c:
        problems.append(f"schedule.group ({link.spec.schedule.group}) is not a multiple of it")
    if link.trace:
        problems.append("tracing does not support clusters yet")
    if problems:
        raise SpecError(f"[launch] cluster = {c}: " + "; ".join(problems), file=str(link.spec.path),
                        field="launch.cluster", hint="use cluster = 1, or make grid, tiles and group multiples of it")
    _check_cluster_shares(link, draft)


def _check_cluster_shares(link: AllocInputs, draft: _Draft) -> None:
    """The blocks of a cluster run consecutive tiles of the fast dimension: one column's rows under
    column_major (or a single tile dimension), one row's columns under row_major. A component that
    multicasts one operand's tile within a cluster computes wrong results where they do not share it."""
    shared = "tile_col" if link.spec.schedule.order == "column_major" or len(draft.tiles) == 1 else "tile_row"
    for inst in link.instances:
        needs = inst.contract.schedule.shares(inst.facts)
        if needs not in ("none", shared):
            order = "column_major" if needs == "tile_col" else "row_major"
            by = inst.contract.schedule.cluster_shares_by
            why = "" if by is None else f" (its fact {by.fact} = {inst.facts[by.fact]})"
            raise ScheduleMismatch(
                f"{inst.name} ({inst.contract.name}) shares data between the {link.spec.launch.cluster} blocks of a "
                f"cluster that have the same {needs}{why}, but the spec's {link.spec.schedule.order} order gives them "
                f"the same {shared}", file=str(link.spec.path), component=inst.contract.name,
                field="schedule.order", hint=f"use order = \"{order}\" with [launch] cluster, or cluster = 1" +
                ("" if by is None else f", or the value of {by.fact} that shares the {shared}"))


# --- shared memory -------------------------------------------------------------------------

Lifetime = frozenset[LiveRange] | None  # the phases a buffer is live in; WHOLE_KERNEL (None) = always


@dataclass
class _Group:
    """Buffers that are one allocation (aliased through ports)."""
    members: list[Ref]          # each instance's buffer in it (MBARRIERS: the glue's mbarrier region)
    bytes: int = 0
    align: int = 16
    pinned: int | None = None
    pinned_by: str = ""
    live: Lifetime = frozenset()
    guard: int = 0          # sanitize mode: canary bytes placed right after the buffer
    strictest: Ref | None = None  # the member whose alignment the group has (None: the first)

    @property
    def span(self) -> int:
        return self.bytes + self.guard

    @property
    def name(self) -> str:
        return str(self.members[0])


def _live(inst: InstancePlan, phases: list[str]) -> Lifetime:
    if not phases:
        return WHOLE_KERNEL
    owner = inst.contract.phases()
    return frozenset(LiveRange(inst.roles[owner[p]], inst.name, p) for p in phases)


def _union(a: Lifetime, b: Lifetime) -> Lifetime:
    return WHOLE_KERNEL if a is WHOLE_KERNEL or b is WHOLE_KERNEL else a | b


def _ordered(live: Lifetime) -> tuple[LiveRange, ...] | None:
    """A lifetime as the plan holds it, in the order plan.json lists it."""
    return WHOLE_KERNEL if live is WHOLE_KERNEL else tuple(sorted(live, key=str))


def _concurrent(a: Lifetime, b: Lifetime) -> bool:
    if a is WHOLE_KERNEL or b is WHOLE_KERNEL:
        return True
    roles = {x.role for x in a | b}
    return len(roles) > 1 or bool(a & b)


def _smem(link: AllocInputs, draft: _Draft) -> set[str]:
    """Place every buffer; returns the kernel roles whose phases share memory (each needs a glue
    barrier between those phases)."""
    unique = _smem_groups(link, draft)
    # mbarriers: one array per hand-over (merged by name across ring connections).
    slots = _mbarrier_arrays(link, draft)
    mbar_bytes = 8 * sum(m.count for m in slots)
    if mbar_bytes:
        unique.append(_Group([MBARRIERS], mbar_bytes, 8, live=WHOLE_KERNEL))
    if draft.tmem is not None and draft.tmem.columns:  # where the glue's tcgen05.alloc writes the address
        unique.append(_Group([TMEM_SLOT], TMEM_SLOT_BYTES, 16, live=WHOLE_KERNEL))
    if link.sanitize:  # a canary after every relocatable buffer catches writes past its end
        for g in unique:
            if g.pinned is None and g.members[0] not in (MBARRIERS, TMEM_SLOT):  # (glue regions, not buffers so named)
                g.guard = GUARD_BYTES
    placed = _place(unique)
    total, limit = _smem_total(link, placed)
    draft.smem_bytes = total
    for g, off in sorted(placed, key=lambda p: p[1]):
        draft.smem.append(SmemAlloc(g.name, off, g.bytes, g.align, g.pinned is not None, _ordered(g.live),
                                   list(g.members), off + g.bytes if g.guard else None))
        if g.members[0] is MBARRIERS:
            cursor = off
            for m in slots:
                m.offset = cursor
                cursor += 8 * m.count
    draft.mbarriers = slots

    # Buffers sharing memory at different times need a barrier across the role between its phases in
    # the tile loop (whole-block phases are already fenced by __syncthreads).
    reuse: set[str] = set()
    for (a, oa), (b, ob) in ((p, q) for i, p in enumerate(placed) for q in placed[i + 1:]):
        if oa < ob + b.bytes and ob < oa + a.bytes:
            in_a, in_b = ({r for r in g.live if link.in_tile_loop(r)} for g in (a, b))
            if in_a and in_b:
                reuse |= {r.role for r in in_a | in_b}
    draft.checks.append(Check("smem", True, f"{total} of {limit} bytes"
                             + (f"; memory reused across phases in {len(reuse)} role(s)" if reuse else "")))
    return reuse


def _smem_groups(link: AllocInputs, draft: _Draft) -> list[_Group]:
    """Every declared buffer as an allocation, buffers aliased through ports merged into one."""
    groups: dict[tuple[str, str], _Group] = {}
    for inst in link.instances:
        for b in inst.contract.smem:
            g = _Group([Ref(inst.name, b.name)])
            g.bytes = inst.facts_eval(b.bytes, f"smem.{b.name}.bytes")
            g.align = inst.facts_eval(b.align, f"smem.{b.name}.align")
            g.live = _live(inst, b.live)
            if b.offset is not None:
                g.pinned, g.pinned_by = inst.facts_eval(b.offset, f"smem.{b.name}.offset"), f"{inst.name} ({inst.file})"
            groups[(inst.name, b.name)] = g
    for t in draft.transfers:
        if t.kind != "alias":
            continue
        (si, sp), (di, dp) = port_of(link, t.src, "connect"), port_of(link, t.dst, "connect")
        a, b = groups[(si.name, sp.buffer)], groups[(di.name, dp.buffer)]
        if a is b:
            continue
        if a.pinned is not None and b.pinned is not None and a.pinned != b.pinned:
            raise PinnedCollision(f"{t.src} and {t.dst} share one buffer, pinned at {a.pinned} by {a.pinned_by} and "
                                  f"at {b.pinned} by {b.pinned_by}", component=f"{si.contract.name}, {di.contract.name}",
                                  hint="a hand-over buffer can be pinned by at most one side")
        merged = _Group(a.members + b.members, max(a.bytes, b.bytes), max(a.align, b.align),
                        a.pinned if a.pinned is not None else b.pinned, a.pinned_by or b.pinned_by,
                        _union(a.live, b.live))
        strict = b if b.align >= a.align else a
        merged.strictest = strict.strictest or strict.members[0]  # in a chain maybe neither side of t
        if merged.pinned is not None and merged.pinned % merged.align:
            # the shared buffer needs the strictest alignment of its sides; a pin cannot move to meet it
            raise PinnedCollision(f"{t.src} and {t.dst} share one buffer: {merged.pinned_by} pins it at "
                                  f"{merged.pinned}, but {merged.strictest} needs it aligned to {merged.align} bytes "
                                  f"({merged.pinned} is {merged.pinned % merged.align} bytes past a multiple)",
                                  component=f"{si.contract.name}, {di.contract.name}",
                                  hint=f"pin the buffer at a multiple of {merged.align}, or leave it unpinned")
        for key, g in groups.items():
            if g is a or g is b:
                groups[key] = merged
    # A copy between two buffers reads one while writing the other, just before the consumer's phase:
    # the source stays live into that phase, so the two never share memory.
    for t in draft.transfers:
        if t.kind == "smem_to_smem":
            (si, sp), (di, dp) = port_of(link, t.src, "connect"), port_of(link, t.dst, "connect")
            first = next(e.phase for e in di.contract.entry if di.roles[e.role] == t.role)
            g = groups[(si.name, sp.buffer)]
            g.live = _union(g.live, _live(di, [first]))
    unique = list({id(g): g for g in groups.values()}.values())
    steps = _role_steps(link)
    for g in unique:
        g.live = _filled(g.live, steps)
    return unique


def _tmem_groups(link: AllocInputs, transfers) -> list[_Group]:
    """Every [[tmem]] buffer as a _Group of columns (bytes: columns), with its lifetime; a tmem in-port reads the
    producer's buffer in place, so the consumer's phases join its lifetime."""
    groups: dict[Ref, _Group] = {}
    for inst in link.instances:
        for b in inst.contract.tmem:
            g = _Group([Ref(inst.name, b.name)], inst.facts_eval(b.columns, f"tmem.{b.name}.columns"),
                       inst.facts_eval(b.align, f"tmem.{b.name}.align"), live=_live(inst, b.live))
            groups[Ref(inst.name, b.name)] = g
    for t in transfers:
        if t.kind == "tmem":
            (si, sp), (di, _) = port_of(link, t.src, "connect"), port_of(link, t.dst, "connect")
            g = groups[Ref(si.name, sp.buffer)]
            g.live = _union(g.live, _live(di, [e.phase for e in di.contract.entry if e.scope == "role"]))
    steps = _role_steps(link)
    for group in groups.values():
        group.live = _filled(group.live, steps)
    return list(groups.values())


def _role_steps(link: AllocInputs) -> dict[str, list[tuple[str, str]]]:
    """kernel role -> its component phases on each tile, in the order the glue calls them (instances in
    spec order, each instance's entries in contract order; whole-block phases run outside the loop)."""
    steps: dict[str, list[tuple[str, str]]] = {}
    for inst in link.instances:
        for e in inst.contract.entry:
            if e.scope == "role":
                steps.setdefault(inst.roles[e.role], []).append((inst.name, e.phase))
    return steps


def _filled(live: Lifetime, steps: dict[str, list[tuple[str, str]]]) -> Lifetime:
    """A buffer live in two phases of one role is live in every phase the role runs between them: the
    data a producer hands over waits there for its reader (without this, a buffer of an instance whose
    phase runs in between could share its memory and overwrite the hand-over)."""
    if live is WHOLE_KERNEL or len({x.role for x in live}) != 1:
        return live  # several roles: live at the same time as anything anyway (_concurrent)
    role = next(iter(live)).role
    order = steps.get(role, [])
    at = [order.index((x.instance, x.phase)) for x in live if (x.instance, x.phase) in order]
    if len(at) < 2:
        return live
    return live | {LiveRange(role, i, p) for i, p in order[min(at):max(at) + 1]}


def _place(unique: list[_Group]) -> list[tuple[_Group, int]]:
    """Pinned buffers where they are pinned, then first-fit: largest alignment and size first, each at
    the lowest aligned offset clear of every buffer live at the same time."""
    placed: list[tuple[_Group, int]] = []
    for g in sorted([g for g in unique if g.pinned is not None], key=lambda g: g.pinned):
        for other, off in placed:
            if off < g.pinned + g.bytes and g.pinned < off + other.bytes and _concurrent(g.live, other.live):
                raise PinnedCollision(f"pinned smem [{g.pinned}, {g.pinned + g.bytes}) of {g.name} by {g.pinned_by} "
                                      f"overlaps pinned [{off}, {off + other.bytes}) of {other.name} by "
                                      f"{other.pinned_by}", component=f"{g.name}, {other.name}",
                                      hint="pinned buffers cannot move; link only one of these components, or "
                                           "repackage one with a relocatable (unpinned) buffer")
        placed.append((g, g.pinned))
    for g in sorted([g for g in unique if g.pinned is None], key=lambda g: (-g.align, -g.bytes, g.name)):
        blockers = sorted((off, off + o.span) for o, off in placed if _concurrent(g.live, o.live))
        candidate = 0
        for start, end in blockers:
            if candidate + g.span <= start:
                break
            candidate = max(candidate, -(-end // g.align) * g.align)
        placed.append((g, candidate))
    return placed


def _smem_total(link: AllocInputs, placed: list[tuple[_Group, int]]) -> tuple[int, int]:
    """The block's dynamic smem (16-byte multiple) and the device's limit; over it is an error."""
    total = max((off + g.span for g, off in placed), default=0)
    total = -(-total // 16) * 16
    limit = link.device["smem_optin_bytes"]
    if total > limit:
        biggest = sorted(placed, key=lambda p: -p[0].bytes)[:4]
        listing = ", ".join(f"{g.name} {g.bytes} B" for g, _ in biggest)
        raise SmemOverflow(f"shared memory needs {total} bytes, over the {link.device['name']} opt-in limit of "
                           f"{limit} bytes per block by {total - limit} bytes; largest buffers: {listing}",
                           file=str(link.spec.path), field="facts",
                           hint="reduce stages or tile sizes in [facts], or give buffers used in different phases of "
                                "one role disjoint `live` lists so they can share memory")
    return total, limit


def _mbarrier_arrays(link: AllocInputs, draft: _Draft) -> list[MbarAlloc]:
    key_of: dict[tuple[str, str], MbarAlloc] = {}
    arrays: list[MbarAlloc] = []
    for inst in link.instances:
        for m in inst.contract.mbarrier:
            a = MbarAlloc(f"{inst.name}.{m.name}", 0, inst.facts_eval(m.count, f"mbarrier.{m.name}.count"),
                          inst.facts_eval(m.arrivals, f"mbarrier.{m.name}.arrivals"),
                          inst.facts_eval(m.tx_bytes, f"mbarrier.{m.name}.tx_bytes"), [Ref(inst.name, m.name)])
            key_of[(inst.name, m.name)] = a
            arrays.append(a)
    for t in draft.transfers:
        if t.kind not in ("alias", "tmem"):  # ring hand-overs: one array for both sides' mbarriers
            continue
        (si, sp), (di, _) = port_of(link, t.src, "connect"), port_of(link, t.dst, "connect")
        for name in sp.mbarriers:
            keep, drop = key_of[(si.name, name)], key_of[(di.name, name)]
            if keep is drop:
                continue
            keep.users += drop.users  # counts were checked equal in check.py
            arrays.remove(drop)
            for k, v in key_of.items():
                if v is drop:
                    key_of[k] = keep
    draft.mbar_of = key_of
    return arrays


# --- named barriers ------------------------------------------------------------------------

def _barriers(link: AllocInputs, draft: _Draft, reuse: set[str]) -> None:
    pinned: dict[int, tuple[str, str]] = {}  # id -> (owner instance, description)
    limit = link.device["named_barriers"] - 1

    def pin(bid: int, inst: InstancePlan, what: str, threads: int | None, purpose: BarrierPurpose) -> None:
        if bid in pinned and pinned[bid][0] != inst.name:
            owner, desc = pinned[bid]
            raise PinnedCollision(f"named barrier ID {bid} is pinned by {desc} and by {inst.name} "
                                  f"({inst.contract.name}, {inst.file}, {what})",
                                  component=f"{owner}, {inst.name}",
                                  hint="pinned IDs are fixed inside opaque code and cannot move: these two components "
                                       "cannot share a block as packaged; repackage one with relocatable barriers")
        if bid not in pinned or threads is not None:
            draft.barriers[:] = [b for b in draft.barriers
                                if not (b.id == bid and isinstance(b.purpose, ReservedBarriers))]
            draft.barriers.append(BarrierAlloc(purpose, bid, threads, True))
        pinned[bid] = (inst.name, f"{inst.name} ({inst.contract.name}, {inst.file}, {what})")

    for inst in link.instances:
        for bid in inst.contract.reserve.named_barriers:
            if not any(b.id == bid for b in draft.barriers if b.purpose.owner == inst.name):
                pin(bid, inst, "reserve.named_barriers", None, ReservedBarriers(inst.name))
        for i, nb in enumerate(inst.contract.named_barrier):
            if nb.id is not None:
                pin(nb.id, inst, f"named_barrier[{i}].id", _threads(link, draft, inst, nb),
                    ComponentBarrier(inst.name, nb.name))

    wanted: list[tuple[BarrierPurpose, int]] = []
    for inst in link.instances:
        for nb in inst.contract.named_barrier:
            if nb.id is None:
                wanted.append((ComponentBarrier(inst.name, nb.name), _threads(link, draft, inst, nb)))
    for t in _fenced(link, draft):
        wanted.append((TransferFence(t.src, t.dst), draft.role(t.role).used_threads))
    for role in sorted(reuse):
        wanted.append((ReuseFence(role), draft.role(role).used_threads))
    split = link.checked.split
    if split is not None:
        wanted.append((SplitFence(split.role), draft.role(split.role).used_threads))
    free = [i for i in range(1, limit + 1) if i not in pinned]
    if len(wanted) > len(free):
        users = ", ".join(str(p) for p, _ in wanted)
        raise BarrierExhausted(f"the link needs {len(wanted)} relocatable named barriers ({users}) but only "
                               f"{len(free)} IDs are free: IDs 1..{limit} minus pinned {sorted(pinned)}; over by "
                               f"{len(wanted) - len(free)}", file=str(link.spec.path),
                               hint="merge barriers inside a component, or use a component that pins fewer IDs")
    for (purpose, threads), bid in zip(wanted, free):
        draft.barriers.append(BarrierAlloc(purpose, bid, threads, False))
    for t in draft.transfers:
        t.barrier = next((b.id for b in draft.barriers if b.purpose == TransferFence(t.src, t.dst)), None)
    draft.barriers.sort(key=lambda b: b.id)
    draft.checks.append(Check("named_barriers", True, f"{len(draft.barriers)} in use, pinned {sorted(pinned)}"))


def _threads(link: AllocInputs, draft: _Draft, inst: InstancePlan, nb) -> int:
    threads = inst.facts_eval(nb.threads, f"named_barrier.{nb.name}.threads")
    if threads % 32 or not 32 <= threads <= draft.block:
        raise WarpLayoutError(f"named barrier '{nb.name}' counts {threads} threads; it must be a multiple of 32 "
                              f"between 32 and the block's {draft.block}", file=inst.file,
                              component=inst.contract.name, field=f"named_barrier.{nb.name}.threads")
    return threads


def _fenced(link: AllocInputs, draft: _Draft) -> list:
    """Transfers the glue fences with a named barrier of their own: copies and register stores, and
    hand-overs through a shared buffer within one role."""
    return [t for t in draft.transfers if t.kind in ("reg_to_smem", "smem_to_smem") or (t.kind == "alias" and t.role)]


# --- symbol mode: every resource where its package put it ---------------------------------

def _packaged_positions(link: AllocInputs, draft: _Draft) -> None:
    end = 0
    key_of = {}
    buffers, arrays = [], []  # smem regions: (owner instance, name, offset, bytes, lifetime)
    for inst in link.instances:
        for b in inst.contract.smem:
            off = inst.facts_eval(b.offset if b.offset is not None else b.default_offset, f"smem.{b.name}")
            size = inst.facts_eval(b.bytes, f"smem.{b.name}.bytes")
            live = _live(inst, b.live)
            draft.smem.append(SmemAlloc(f"{inst.name}.{b.name}", off, size, 16, b.offset is not None,
                                       _ordered(live), [Ref(inst.name, b.name)]))
            buffers.append((inst.name, f"{inst.name}.{b.name}", off, size, live))
            end = max(end, off + size)
        for m in inst.contract.mbarrier:
            a = MbarAlloc(f"{inst.name}.{m.name}", inst.facts_eval(m.default_offset, f"mbarrier.{m.name}"),
                          inst.facts_eval(m.count, "count"), inst.facts_eval(m.arrivals, "arrivals"),
                          inst.facts_eval(m.tx_bytes, "tx_bytes"), [Ref(inst.name, m.name)])
            draft.mbarriers.append(a)
            key_of[(inst.name, m.name)] = a
            arrays.append((inst.name, a.name, a.offset, 8 * a.count, WHOLE_KERNEL))
            end = max(end, a.offset + 8 * a.count)
        for bid in inst.contract.reserve.named_barriers:
            draft.barriers.append(BarrierAlloc(ReservedBarriers(inst.name), bid, None, True))
        for nb in inst.contract.named_barrier:
            draft.barriers.append(BarrierAlloc(ComponentBarrier(inst.name, nb.name), nb.id or nb.default_id,
                                              _threads(link, draft, inst, nb), nb.id is not None))
    # A hand-written glue picks its own IDs; take them from the top, where packages rarely sit.
    glue_id = link.device["named_barriers"] - 1
    for t in _fenced(link, draft):
        t.barrier = glue_id
        draft.barriers.append(BarrierAlloc(TransferFence(t.src, t.dst), glue_id, draft.role(t.role).used_threads, False))
        glue_id -= 1
    draft.mbar_of = key_of
    draft.smem_bytes = -(-end // 16) * 16
    _symbol_hazards(link, draft, buffers + arrays)
    draft.checks.append(Check("symbol-link", True, "no contract checks: resources at packaged positions"))


def _symbol_hazards(link: AllocInputs, draft: _Draft, regions: list[tuple[str, str, int, int, Lifetime]]) -> None:
    """Symbol linking stops at none of these; the plan still says what it let through."""
    for i, (owner_a, a, oa, ba, la) in enumerate(regions):
        for owner_b, b, ob, bb, lb in regions[i + 1:]:
            if owner_a != owner_b and oa < ob + bb and ob < oa + ba and _concurrent(la, lb):
                draft.warnings.append(f"unchecked by symbol linking: smem {a} [{oa}, {oa + ba}) overlaps {b} "
                                     f"[{ob}, {ob + bb})")
    by_id: dict[int, list[BarrierAlloc]] = {}
    for b in draft.barriers:
        by_id.setdefault(b.id, []).append(b)
    for bid, bars in sorted(by_id.items()):
        if len({b.purpose.owner for b in bars}) > 1:
            draft.warnings.append(f"unchecked by symbol linking: named barrier ID {bid} is used by "
                                 f"{', '.join(b.name for b in bars)}")


def _bindings(link: AllocInputs, draft: _Draft) -> None:
    by_name = {s_user: s for s in draft.smem for s_user in s.users}
    for inst in link.instances:
        c = inst.contract
        bind = {n: inst.facts[n] for n, r in c.facts.requires.items() if not r.compile}
        bind.update({n: inst.facts[n] for n in c.facts.guarantees})
        for b in c.smem:
            bind[b.name] = by_name[Ref(inst.name, b.name)].offset
        for m in c.mbarrier:
            bind[m.name] = draft.mbar_of[(inst.name, m.name)].offset
        for nb in c.named_barrier:
            bind[nb.name] = next(b.id for b in draft.barriers if b.purpose == ComponentBarrier(inst.name, nb.name))
        draft.bindings[inst.name] = bind
    for name, columns in tmem_bindings(link, draft.transfers, draft.tmem).items():
        draft.bindings[name].update(columns)

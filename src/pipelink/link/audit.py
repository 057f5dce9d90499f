"""An independent audit of the link plan: the invariants every plan must keep, re-derived from the
contracts and the spec.

The allocator and the glue generator decide; this module only checks, with code of its own (it
imports nothing from alloc.py or glue.py), so that a bug in a stage is not repeated by the check
that should catch it. It runs at every link: ``check_plan`` after allocation, ``check_glue`` after
the glue is generated (it reads the glue's statements, glue_ir.py, the one place where the numbers
the plan holds become code, and runs the model of what they mean, glue_model.py). A failed invariant is a pipelink bug, not a user error: ``enforce``
raises AuditError naming the invariant.

Invariants (names as reported):
  facts.*        every required fact has a value inside its domain; a compile-time fact equals the
                 selected variant's; an instance value, another component's guarantee, the spec's
                 [facts] and [launch] are honoured in that order; every guarantee holds
  roles.*        warp ranges contiguous from warp 0 and inside the device; each role as wide as
                 its components declare; warpgroup alignment; register budgets in range and in
                 the register file
  smem.*         every buffer placed once, as large and as aligned as declared, pinned ones where
                 pinned; buffers live at the same time never overlap (nor mbarriers, nor canaries);
                 the total fits the device; memory shared across phases has a reuse barrier
  barrier.*      IDs unique, in 1..15, pinned and reserved IDs kept; each barrier's thread count
                 equals the threads that reach it (padding warps return before it)
  mbarrier.*     each declared array with the count, arrivals and tx bytes its users declare
  bind.*         the bindings handed to each component equal the plan's positions and facts
  schedule.*     tile count and grid
  glue.*         the generated code uses exactly those numbers; under a split schedule, its table of
                 units gives every block the units of stream_k.block_units (so every k-tile of every
                 tile is computed once), and a tile completes at its k-tile count
  model.*        what the statements do, run for every block (glue_model.py): every tile computed
                 once by its block at its place, ring positions, ctx.last, the count told to the
                 whole-block phases, each stream-K contributor summed once, every smem hand-over and
                 reuse ordered by a sync of the role both ways round the loop
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import bindgen
from ..errors import ExpressionError, PipelinkError
from ..package import check_fact_domain
from ..refs import Ref
from ..stream_k import ROW_FIELDS, block_units, contributors, row_units, whole_tiles
from . import glue_ir as ir
from . import glue_model
from .plan import ComponentBarrier, LinkPlan, LiveRange, ReuseFence, StageResults, TransferFence

SETMAXNREG = (24, 256)
BARRIER_KINDS = ("reg_to_smem", "smem_to_smem")  # transfers the glue fences with a named barrier
# Facts the link decides (facts.py offers them): the [launch] cluster, and the block the roles add up to.
LAUNCH_FACTS = {"cluster_ctas": lambda plan: plan.spec.launch.cluster, "block_threads": lambda plan: plan.block}


class AuditError(PipelinkError):
    """Internal error: the linker produced a plan that breaks one of its own invariants."""


@dataclass(frozen=True)
class Violation:
    invariant: str
    detail: str

    def format(self) -> str:
        return f"[{self.invariant}] {self.detail}"


@dataclass(frozen=True)
class AuditResult:
    stage: str                      # "plan" or "glue"
    checked: int                    # invariant instances evaluated
    violations: tuple[Violation, ...]

    @property
    def ok(self) -> bool:
        return not self.violations


def enforce(result: AuditResult) -> AuditResult:
    if result.violations:
        first = result.violations[0]
        raise AuditError(f"internal error: the link plan breaks {len(result.violations)} invariant(s) after "
                         f"{result.stage}:\n  " + "\n  ".join(v.format() for v in result.violations),
                         field=first.invariant,
                         hint="this is a pipelink bug, not a problem with your inputs: please report it with the "
                              "spec and packages (pipelink inspect plan.json shows the plan)")
    return result


class _Auditor:
    def __init__(self, plan: StageResults):
        self.plan = plan
        self.violations: list[Violation] = []
        self.checked = 0

    def expect(self, ok: bool, invariant: str, detail: str) -> bool:
        self.checked += 1
        if not ok:
            self.violations.append(Violation(invariant, detail))
        return ok

    def value(self, inst, expr, extra=None) -> int | None:
        try:
            return expr.eval({**inst.facts, **(extra or {})}, where="audit")
        except (ExpressionError, PipelinkError) as exc:
            self.expect(False, "facts.evaluable", f"{inst.name}: {expr.text!r} does not evaluate ({exc.message})")
            return None

    def each_placed(self, declared: str, records: list, invariant: str, what: tuple[str, str]):
        """(instance, declaration, record) for each of the contracts' ``declared`` ("smem", "mbarrier")
        that exactly one record (allocation, array) lists among its users; a violation for the others."""
        for inst in self.plan.instances:
            for d in getattr(inst.contract, declared):
                key = Ref(inst.name, d.name)
                hits = [r for r in records if key in r.users]
                if self.expect(len(hits) == 1, invariant, f"{what[0]} {key} is in {len(hits)} {what[1]}"):
                    yield inst, d, hits[0]

    def result(self, stage: str) -> AuditResult:
        return AuditResult(stage, self.checked, tuple(self.violations))


# --- after allocation ----------------------------------------------------------------------

def check_plan(plan: StageResults) -> AuditResult:
    """The plan's invariants after the allocation, read from the stages' results (plan.Planned, which the
    pipeline audits before it assembles the LinkPlan; a LinkPlan reads the same)."""
    a = _Auditor(plan)
    if plan.mode != "symbol":
        _facts(a)
    _roles(a)
    _schedule(a)
    if plan.mode == "symbol":
        _packaged_positions(a)
        _barrier_range(a)  # collisions are what the control is for; an ID past 15 is not even a barrier
    else:
        _smem(a)
        _barriers(a)
        _mbarriers(a)
        _tmem(a)
    _bindings(a)
    return a.result("allocation")


def _facts(a: _Auditor) -> None:
    plan, spec = a.plan, a.plan.spec
    guaranteed: dict[str, list] = {}
    for inst in plan.instances:
        for name in inst.contract.facts.guarantees:
            guaranteed.setdefault(name, []).append(inst)
    for inst in plan.instances:
        c = inst.contract
        for role, r in c.roles.items():
            a.expect(inst.facts.get(f"{role}_warps") == r.warps and inst.facts.get(f"{role}_threads") == 32 * r.warps,
                     "facts.role_size", f"{inst.name}: {role}_warps/{role}_threads differ from the contract's "
                     f"{r.warps} warps")
        for name, req in c.facts.requires.items():
            if not a.expect(name in inst.facts, "facts.resolved", f"{inst.name} has no value for '{name}'"):
                continue
            value = inst.facts[name]
            try:
                check_fact_domain(c, name, value, file=None, source="audit")
            except PipelinkError as exc:
                a.expect(False, "facts.domain", f"{inst.name}: {exc.message}")
            # Who must win, in order: the [launch] section, the instance's own value, a guarantee of
            # another component, the spec's [facts]. A lower source may never replace a higher one.
            if name in LAUNCH_FACTS:
                want, source = LAUNCH_FACTS[name](plan), "the link's launch geometry"
            elif name in inst.user_facts:
                want, source = inst.user_facts[name], f"[[instance]] {inst.name}"
            elif any(o is not inst for o in guaranteed.get(name, [])):
                other = next(o for o in guaranteed[name] if o is not inst)
                want, source = other.facts.get(name), f"the guarantee of {other.name}"
            elif name in spec.facts:
                want, source = spec.facts[name], "the spec's [facts]"
            else:  # solved across the link: every instance that does not pin it takes one value
                want = None
                others = [o for o in plan.instances if o is not inst and name in o.contract.facts.requires
                          and name not in o.user_facts and name in o.facts]
                a.expect(all(o.facts[name] == value for o in others), "facts.shared",
                         f"{inst.name}.{name} = {value}, but " + ", ".join(f"{o.name} has {o.facts[name]}"
                                                                          for o in others))
            if want is not None:
                a.expect(value == want, "facts.precedence", f"{inst.name}.{name} = {value}, but {source} gives {want}")
            if req.compile:
                variant = inst.package.variants[inst.variant].facts
                a.expect(variant.get(name) == value, "facts.variant",
                         f"{inst.name}.{name} = {value} but the selected variant {inst.variant} was compiled with "
                         f"{variant.get(name)}")
        for name, expr in c.facts.guarantees.items():
            want = a.value(inst, expr)
            a.expect(inst.facts.get(name) == want, "facts.guarantee",
                     f"{inst.name} guarantees {name} = {expr.text} = {want}, the plan holds {inst.facts.get(name)}")
        for name, value in inst.user_facts.items():
            if name in c.facts.requires and name not in LAUNCH_FACTS:
                a.expect(inst.facts.get(name) == value, "facts.instance",
                         f"{inst.name}.{name} = {inst.facts.get(name)}, the instance sets {value}")


def _members(plan: StageResults) -> dict[str, list[tuple]]:
    """kernel role -> [(instance, contract role)], from the instances' role maps."""
    out: dict[str, list[tuple]] = {}
    for inst in plan.instances:
        for crole, krole in inst.roles.items():
            out.setdefault(krole, []).append((inst, crole))
    return out


def _entry_cap(block: int) -> int:
    """Registers per thread the hardware gives each thread at launch under __launch_bounds__(block, 1)."""
    per_thread = 65536 // block
    return min(255, per_thread - per_thread % 8)


def _roles(a: _Auditor) -> None:
    plan = a.plan
    members = _members(plan)
    a.expect(sorted(r.name for r in plan.roles) == sorted(members), "roles.cover",
             f"plan roles {[r.name for r in plan.roles]} differ from the roles instances use {sorted(members)}")
    cursor = 0
    setmaxnreg = any(inst.contract.roles[c].registers for ms in members.values() for inst, c in ms)
    for r in plan.roles:
        a.expect(r.warp_start == cursor, "roles.contiguous", f"role {r.name} starts at warp {r.warp_start}, "
                 f"expected {cursor}")
        cursor = r.warp_start + r.warps
        declared = {inst.contract.roles[c].warps for inst, c in members.get(r.name, [])}
        a.expect(declared == {r.used_warps}, "roles.width",
                 f"role {r.name} runs {r.used_warps} warps of component code, its components declare {sorted(declared)}")
        a.expect(r.warps >= r.used_warps, "roles.width", f"role {r.name} has {r.warps} warps < {r.used_warps} used")
        aligned = any(inst.contract.roles[c].warpgroup_aligned for inst, c in members.get(r.name, []))
        if aligned or setmaxnreg:
            a.expect(r.warp_start % 4 == 0, "roles.warpgroup", f"role {r.name} starts at warp {r.warp_start}, "
                     "not on a warpgroup boundary")
        if setmaxnreg:
            a.expect(r.warps % 4 == 0, "roles.warpgroup", f"role {r.name} has {r.warps} warps: setmaxnreg needs "
                     "whole warpgroups")
        wanted = [inst.contract.roles[c].registers for inst, c in members.get(r.name, [])
                  if inst.contract.roles[c].registers]
        a.expect(r.registers == (max(wanted) if wanted else None), "roles.registers",
                 f"role {r.name} gets setmaxnreg {r.registers}, its components ask for {wanted}")
        if r.registers is not None:
            a.expect(SETMAXNREG[0] <= r.registers <= SETMAXNREG[1] and r.registers % 8 == 0, "roles.registers",
                     f"setmaxnreg {r.registers} of role {r.name} is outside 24..256 or not a multiple of 8")
    a.expect(plan.block == 32 * cursor, "roles.block", f"block of {plan.block} threads, roles span {cursor} warps")
    a.expect(cursor <= plan.device["max_warps"], "roles.device", f"{cursor} warps > {plan.device['max_warps']}")
    if setmaxnreg and plan.block:
        cap = _entry_cap(plan.block)
        total = sum(32 * r.warps * (r.registers or cap) for r in plan.roles)
        a.expect(total <= plan.device["regs_per_block"], "roles.register_file",
                 f"register budgets total {total} > {plan.device['regs_per_block']}")


def _schedule(a: _Auditor) -> None:
    plan = a.plan
    try:
        tiles = [e.eval(plan.facts, where="audit") for e in plan.spec.schedule.tiles]
    except (ExpressionError, PipelinkError) as exc:
        a.expect(False, "schedule.tiles", f"the tile grid does not evaluate: {exc.message}")
        return
    a.expect(plan.tiles == tiles and plan.num_tiles == math.prod(tiles), "schedule.tiles",
             f"tiles {plan.tiles} ({plan.num_tiles}) but the spec gives {tiles} ({math.prod(tiles)})")
    if plan.mode != "symbol":  # a component's own grid ([schedule] tiles) is the link's, or it skips or overruns tiles
        for inst in plan.instances:
            theirs = [a.value(inst, e) for e in inst.contract.schedule.tiles or ()]
            a.expect(not theirs or [*theirs, 1][:2] == [*tiles, 1][:2], "schedule.component_tiles",
                     f"{inst.name} covers a grid of {theirs} tiles, the link runs {tiles}")
    launch = plan.spec.launch
    if launch.grid:
        want = launch.grid
    elif plan.spec.schedule.persistent and plan.spec.schedule.split != "tiles":
        want = plan.device["sms"]  # a split spreads k-tiles over every SM, however few the tiles
    elif plan.spec.schedule.persistent:
        want = min(math.prod(tiles), plan.device["sms"])
    else:
        want = math.prod(tiles)
    a.expect(plan.grid == want, "schedule.grid", f"grid {plan.grid}, expected {want}")
    a.expect(plan.grid % launch.cluster == 0, "schedule.cluster", f"grid {plan.grid} not a multiple of the cluster "
             f"{launch.cluster}")


# --- shared memory -------------------------------------------------------------------------

WHOLE = None  # lifetime of a buffer live in every phase


def _lifetime(inst, buf) -> frozenset | None:
    """The phases the buffer is live in (LiveRange: kernel role, instance, phase); None = the whole kernel."""
    if not buf.live:
        return WHOLE
    role_of_phase = {e.phase: e.role for e in inst.contract.entry}
    return frozenset(LiveRange(inst.roles[role_of_phase[p]], inst.name, p) for p in buf.live)


def _together(x: frozenset | None, y: frozenset | None) -> bool:
    """Can two lifetimes overlap in time? Different kernel roles run at the same time; phases of one
    role run one after the other."""
    if x is WHOLE or y is WHOLE:
        return True
    return len({r.role for r in x | y}) > 1 or bool(x & y)


def _find(plan: StageResults, ref: Ref):
    inst = next(i for i in plan.instances if i.name == ref.instance)
    return inst, inst.contract.port_by_name(ref.name)


def _smem(a: _Auditor) -> None:
    plan = a.plan
    # Every declared buffer: exactly one allocation, as large and aligned as declared.
    where: dict[Ref, object] = {}
    life: dict[Ref, frozenset | None] = {}
    for inst, b, s in a.each_placed("smem", plan.smem, "smem.placed", ("buffer", "allocations")):
        key = Ref(inst.name, b.name)
        where[key] = s
        life[key] = _lifetime(inst, b)
        size, align = a.value(inst, b.bytes), a.value(inst, b.align)
        if size is not None:
            a.expect(s.bytes >= size, "smem.size", f"{key} gets {s.bytes} bytes, declares {size}")
        if align:
            a.expect(s.offset % align == 0, "smem.align", f"{key} at offset {s.offset}, not a multiple of its "
                     f"declared alignment {align}")
        if b.offset is not None:
            pinned = a.value(inst, b.offset)
            a.expect(s.offset == pinned, "smem.pinned", f"{key} is pinned at {pinned}, placed at {s.offset}")
    # Aliased hand-overs share one allocation; a copy's source stays live into the consumer's phase.
    group = {k: k for k in where}

    def root(k: Ref) -> Ref:
        while group[k] != k:
            k = group[k]
        return k

    for t in plan.transfers:
        si, sp = _find(plan, t.src)
        di, dp = _find(plan, t.dst)
        if sp.space != "smem" or dp.space != "smem":
            continue
        ks, kd = Ref(si.name, sp.buffer), Ref(di.name, dp.buffer)
        if t.kind == "alias":
            a.expect(where[ks].offset == where[kd].offset, "smem.alias", f"{t.src} and {t.dst} are one buffer but sit "
                     f"at {where[ks].offset} and {where[kd].offset}")
            group[root(ks)] = root(kd)
        elif t.kind == "smem_to_smem" and life[ks] is not WHOLE:
            first = next(e.phase for e in di.contract.entry if di.roles[e.role] == t.role)
            life[ks] = life[ks] | {LiveRange(t.role, di.name, first)}
    merged: dict[Ref, frozenset | None] = {}
    for k, lt in life.items():
        r = root(k)
        merged[r] = WHOLE if lt is WHOLE or (r in merged and merged[r] is WHOLE) else (merged.get(r) or frozenset()) | lt
    regions = [(str(r), where[r].offset, where[r].offset + max(where[k].bytes for k in where if root(k) == r),
                merged[r]) for r in merged]
    for m in plan.mbarriers:
        a.expect(m.offset % 8 == 0, "mbarrier.align", f"mbarrier array {m.name} at {m.offset}, not 8-byte aligned")
        regions.append((f"mbarrier {m.name}", m.offset, m.offset + 8 * m.count, WHOLE))
    for s in plan.smem:
        if s.name == "glue.tmem_slot":  # the word tcgen05.alloc writes the address to
            regions.append((s.name, s.offset, s.offset + 4, WHOLE))
    for s in plan.smem:
        if s.guard is not None:
            a.expect(s.guard == s.offset + s.bytes, "smem.canary", f"canary of {s.name} at {s.guard}, the buffer ends "
                     f"at {s.offset + s.bytes}")
            owner = next((root(u) for u in s.users if u in group), None)
            regions.append((f"canary of {s.name}", s.guard, s.guard + 32, merged.get(owner, WHOLE)))
    # Live at the same time -> disjoint bytes. Disjoint in time but sharing bytes -> a reuse barrier.
    reuse_roles: set[str] = set()
    for i, (n1, lo1, hi1, l1) in enumerate(regions):
        for n2, lo2, hi2, l2 in regions[i + 1:]:
            if lo1 < hi2 and lo2 < hi1 and lo1 < hi1 and lo2 < hi2:
                if _together(l1, l2) and not (n1.startswith("canary of") and n2.startswith("canary of")):
                    a.expect(False, "smem.overlap", f"{n1} [{lo1}, {hi1}) and {n2} [{lo2}, {hi2}) overlap while both "
                             "are live")
                elif l1 is not WHOLE and l2 is not WHOLE:
                    in1, in2 = ({r for r in lt if plan.in_tile_loop(r)} for lt in (l1, l2))
                    if in1 and in2:  # whole-block phases are fenced by __syncthreads
                        reuse_roles |= {r.role for r in in1 | in2}
    end = max((hi for _, _, hi, _ in regions), default=0)
    a.expect(end <= plan.smem_bytes <= plan.device["smem_optin_bytes"], "smem.total",
             f"buffers end at {end}, the kernel asks {plan.smem_bytes} bytes, the device allows "
             f"{plan.device['smem_optin_bytes']}")
    for role in sorted(reuse_roles):
        bars = [b for b in plan.barriers if b.purpose == ReuseFence(role)]
        a.expect(len(bars) == 1 and bars[0].threads == _role_threads(plan, role), "smem.reuse_barrier",
                 f"role {role} reuses memory across phases; its reuse barrier is {bars}")


def _role_threads(plan: StageResults, role: str) -> int:
    """Threads that run component code in a kernel role: what the contracts declare, without the
    padding warps (which return before any barrier)."""
    declared = {inst.contract.roles[c].warps for inst, c in _members(plan).get(role, [])}
    return 32 * max(declared, default=0)


# --- named barriers and mbarriers ----------------------------------------------------------

def _barriers(a: _Auditor) -> None:
    plan = a.plan
    ids = [b.id for b in plan.barriers]
    a.expect(len(ids) == len(set(ids)), "barrier.unique", f"barrier IDs used twice: "
             f"{sorted({i for i in ids if ids.count(i) > 1})} ({[b.name for b in plan.barriers]})")
    _barrier_range(a)
    for b in plan.barriers:
        if b.threads is not None:
            a.expect(b.threads % 32 == 0 and 32 <= b.threads <= plan.block, "barrier.threads",
                     f"{b.name} counts {b.threads} threads (block {plan.block})")
    by_id = {b.id: b for b in plan.barriers}
    for inst in plan.instances:
        for bid in inst.contract.reserve.named_barriers:
            b = by_id.get(bid)
            a.expect(b is not None and b.pinned and b.purpose.owner == inst.name, "barrier.reserved",
                     f"{inst.name} reserves ID {bid}, the plan gives it to {b.name if b else 'nobody'}")
        for nb in inst.contract.named_barrier:
            hits = [b for b in plan.barriers if b.purpose == ComponentBarrier(inst.name, nb.name)]
            if not a.expect(len(hits) == 1, "barrier.placed", f"{inst.name}.{nb.name} has {len(hits)} IDs"):
                continue
            threads = a.value(inst, nb.threads)
            a.expect(hits[0].threads == threads, "barrier.threads", f"{inst.name}.{nb.name} counts "
                     f"{hits[0].threads} threads, the contract {threads}")
            if nb.id is not None:
                a.expect(hits[0].id == nb.id, "barrier.pinned", f"{inst.name}.{nb.name} is pinned at {nb.id}, got "
                         f"{hits[0].id}")
    for t in plan.transfers:
        if t.kind in BARRIER_KINDS or (t.kind == "alias" and t.role):
            b = by_id.get(t.barrier)
            want = _role_threads(plan, t.role)
            fence = b is not None and b.purpose == TransferFence(t.src, t.dst)
            a.expect(fence and b.threads == want, "barrier.transfer",
                     f"transfer {t.src} -> {t.dst} in role {t.role} syncs on {b} (ID {t.barrier}); the role runs "
                     f"{want} threads of component code")


def _barrier_range(a: _Auditor) -> None:
    top = a.plan.device["named_barriers"] - 1
    for b in a.plan.barriers:
        a.expect(1 <= b.id <= top, "barrier.range", f"{b.name} has ID {b.id}, outside 1..{top}")


def _mbarriers(a: _Auditor) -> None:
    for inst, m, x in a.each_placed("mbarrier", a.plan.mbarriers, "mbarrier.placed", ("mbarrier", "arrays")):
        got = (x.count, x.arrivals, x.tx_bytes)
        want = (a.value(inst, m.count), a.value(inst, m.arrivals), a.value(inst, m.tx_bytes))
        a.expect(got == want, "mbarrier.counts", f"{inst.name}.{m.name}: (count, arrivals, tx_bytes) = {got}, the "
                 f"contract declares {want}")


def _tmem(a: _Auditor) -> None:
    """Tensor memory, from the contracts: every [[tmem]] buffer in one place of the glue's allocation, as wide and
    aligned as declared; buffers live at once in disjoint columns (a tmem in-port's reader keeps the producer's
    buffer live through its phases); the allocation one tcgen05.alloc can take (a power of two, 32 or more); each
    component that allocates itself counted; and all of it within the SM's columns."""
    plan = a.plan
    t = plan.allocation.tmem
    users = [i for i in plan.instances if i.contract.tmem or a.value(i, i.contract.reserve.tmem_columns)]
    if not a.expect((t is None) == (not users), "tmem.present", f"instances using tensor memory: "
                    f"{[i.name for i in users]}; the plan's allocation: {t}"):
        return
    if t is None:
        return
    life: dict[Ref, tuple] = {}
    for inst, b, x in a.each_placed("tmem", list(t.buffers), "tmem.placed", ("tmem buffer", "allocations")):
        columns, align = a.value(inst, b.columns), a.value(inst, b.align)
        key = Ref(inst.name, b.name)
        a.expect(columns is not None and x.columns >= columns, "tmem.size", f"{key} gets {x.columns} columns, "
                 f"declares {columns}")
        a.expect(bool(align) and x.column % align == 0, "tmem.align", f"{key} at column {x.column}, not a multiple "
                 f"of its declared alignment {align}")
        life[key] = (x.column, x.column + x.columns, _lifetime(inst, b))
    for tr in plan.transfers:
        if tr.kind == "tmem":
            si, sp = _find(plan, tr.src)
            di, _ = _find(plan, tr.dst)
            key = Ref(si.name, sp.buffer)
            lo, hi, lt = life[key]
            if lt is not WHOLE:
                lt = lt | {LiveRange(di.roles[e.role], di.name, e.phase) for e in di.contract.entry
                           if e.scope == "role"}
            life[key] = (lo, hi, lt)
    spans = list(life.items())
    for i, (k1, (lo1, hi1, l1)) in enumerate(spans):
        for k2, (lo2, hi2, l2) in spans[i + 1:]:
            a.expect(not (lo1 < hi2 and lo2 < hi1 and _together(l1, l2)), "tmem.overlap",
                     f"{k1} columns [{lo1}, {hi1}) and {k2} [{lo2}, {hi2}) overlap while both are live")
    end = max((hi for _, (_, hi, _) in spans), default=0)
    power = t.columns == 0 or (t.columns >= 32 and t.columns & (t.columns - 1) == 0)
    strictest = max((b.align for b in t.buffers), default=1)
    a.expect(power and end <= t.columns and (t.columns == 0) == (end == 0) and (not end or strictest <= t.columns),
             "tmem.allocation", f"buffers end at column {end}, the strictest alignment is {strictest}; the glue "
             f"allocates {t.columns}")
    own = {i.name: a.value(i, i.contract.reserve.tmem_columns) for i in users}
    own = {n: c for n, c in own.items() if c}
    a.expect(set(own) == {n for n, _ in t.own} and all(c >= own[n] for n, c in t.own), "tmem.own",
             f"components allocating themselves: {own}; the plan counts {dict(t.own)}")
    limit = plan.device.get("tmem_columns", 0)
    total = t.columns + sum(c for _, c in t.own)
    a.expect(total <= limit, "tmem.total", f"the block takes {total} tensor-memory columns, the device has {limit}")


def _packaged_positions(a: _Auditor) -> None:
    """Symbol mode: every resource exactly where its package put it (the control's definition)."""
    plan = a.plan
    for inst in plan.instances:
        for b in inst.contract.smem:
            s = next((s for s in plan.smem if s.name == f"{inst.name}.{b.name}"), None)
            want = a.value(inst, b.offset if b.offset is not None else b.default_offset)
            a.expect(s is not None and s.offset == want, "symbol.smem", f"{inst.name}.{b.name} at "
                     f"{s.offset if s else None}, packaged at {want}")
        for m in inst.contract.mbarrier:
            x = next((x for x in plan.mbarriers if x.name == f"{inst.name}.{m.name}"), None)
            want = a.value(inst, m.default_offset)
            a.expect(x is not None and x.offset == want, "symbol.mbarrier", f"{inst.name}.{m.name} at "
                     f"{x.offset if x else None}, packaged at {want}")
        for nb in inst.contract.named_barrier:
            b = next((b for b in plan.barriers if b.purpose == ComponentBarrier(inst.name, nb.name)), None)
            want = nb.id or nb.default_id
            a.expect(b is not None and b.id == want, "symbol.barrier", f"{inst.name}.{nb.name} = "
                     f"{b.id if b else None}, packaged {want}")


def _bindings(a: _Auditor) -> None:
    plan = a.plan
    for inst in plan.instances:
        c = inst.contract
        for ctype, name, kind in bindgen.bind_fields(c):
            if kind in ("operand", "workspace", "global"):  # kernel parameters, not values the plan allocates
                continue
            got = inst.bind.get(name)
            key = Ref(inst.name, name)
            if kind == "fact":
                want = inst.facts.get(name)
            elif kind == "smem":
                want = next((s.offset for s in plan.smem if key in s.users or s.name == str(key)), None)
            elif kind == "mbarrier":
                want = next((m.offset for m in plan.mbarriers if key in m.users), None)
            elif kind in ("tmem", "tmem_in"):
                want = _tmem_column(plan, key, kind)
            else:
                want = next((b.id for b in plan.barriers if b.purpose == ComponentBarrier(inst.name, name)), None)
            unbound = kind == "tmem_in" and want is None  # a probe's in-port: nothing connected, nothing bound
            a.expect((got is not None or unbound) and got == want, "bind.value", f"{key} ({kind}) is bound to {got}, the plan "
                     f"holds {want}")


# --- after glue ----------------------------------------------------------------------------
# The glue's statements (glue_ir.py) are read by their fields: the text is what glue_ir.render prints
# of them (its expressions refused where C would read them otherwise; the examples' text is pinned by
# tests/link/test_glue_golden.py), so nothing here reads the text back.


def _tmem_column(plan, key: Ref, kind: str) -> int | None:
    """The column a tmem bindings field must hold: its buffer's, or for an in-port that of the producer's buffer."""
    t = plan.allocation.tmem
    if t is None:
        return None
    if kind == "tmem_in":
        src = next((tr.src for tr in plan.transfers if tr.kind == "tmem" and tr.dst == key), None)
        if src is None:
            return None
        si, sp = _find(plan, src)
        key = Ref(si.name, sp.buffer)
    return next((b.column for b in t.buffers if key in b.users), None)


def _of(stmts, kind) -> list:
    return [s for s in stmts if isinstance(s, kind)]


def check_glue(plan: LinkPlan) -> AuditResult:
    """The generated glue against the plan: every number it uses must be the plan's."""
    a = _Auditor(plan)
    stmts = plan.glue.statements
    heads = [s.block for s in _of(stmts, ir.KernelHead)]
    a.expect(heads == [plan.block], "glue.launch_bounds", f"__launch_bounds__ {heads}, block {plan.block}")
    inits = sorted((m.offset, m.count, m.arrivals) for m in _of(stmts, ir.MbarInit))
    want = sorted((m.offset, m.count, m.arrivals) for m in plan.mbarriers)
    a.expect(inits == want, "glue.mbarrier_init", f"glue initializes (offset, count, arrivals) {inits}, the plan "
             f"holds {want}")
    branches = _of(stmts, ir.RoleBranch)
    ends, got = [r.warp_start + r.warps for r in plan.roles], [b.warp_start + b.warps for b in branches]
    a.expect(got == ends and [b.first for b in branches] == [i == 0 for i in range(len(branches))], "glue.dispatch",
             f"role dispatch at warps {got}, roles end at {ends}")
    bases = [32 * t.warp_start for t in _of(stmts, ir.RoleThreads)]
    a.expect(bases == [32 * r.warp_start for r in plan.roles], "glue.role_base", f"role thread bases {bases}")
    guards = [p.used_threads for p in _of(stmts, ir.Padding)]
    padded = [r.used_warps * 32 for r in plan.roles if r.used_warps != r.warps]
    a.expect(guards == padded, "glue.padding", f"padding guards {guards}, padded roles run {padded} threads")
    _glue_registers(a, [(s.kind, s.registers) for s in _of(stmts, ir.SetMaxNReg)])
    _glue_tile_loops(a, stmts)
    threads_of = {b.id: b.threads for b in plan.barriers}
    for sync in _of(stmts, ir.Sync):
        a.expect(threads_of.get(sync.barrier) == sync.threads, "glue.bar_sync",
                 f"glue syncs barrier {sync.barrier} with {sync.threads} threads; the plan gives ID {sync.barrier} "
                 f"{threads_of.get(sync.barrier)} threads")
    _glue_launch_facts(a, _of(stmts, ir.LaunchFactLoad))
    _glue_tmem(a, stmts)
    calls = _of(stmts, ir.EntryCall)
    split = plan.spec.schedule.split
    for inst in plan.instances:
        literal = f"{bindgen.struct_name(inst.contract)}{{{_bind_values(plan, inst)}}}"
        for e in inst.contract.entry:
            made = [c.binding for c in calls if c.instance == inst.name and c.symbol == e.symbol]
            loops = 1 if split == "tiles" or e.scope == "block" else 2  # split: the whole tiles, then the units
            a.expect(made == [literal] * loops, "glue.bindings", f"{inst.name} calls {e.symbol} with {made}, the "
                     f"plan binds {literal!r} in {loops} loop(s)")
    if split != "tiles":
        _split_glue(a, stmts)
    findings, checked = glue_model.check(plan)  # what the statements do, run for every block
    a.checked += checked
    for invariant, detail in findings:
        a.expect(False, invariant, detail)
    return a.result("glue")


def _glue_tmem(a: _Auditor, stmts) -> None:
    """The glue allocates the plan's tensor-memory columns once, into the plan's slot, reads the address there,
    gives up the permit only where no component allocates, and frees the same columns once, after every role."""
    plan = a.plan
    t = plan.allocation.tmem
    columns = t.columns if t else 0
    slot = next((s.offset for s in plan.smem if s.name == "glue.tmem_slot"), None)
    allocs = [(s.columns, s.slot, s.relinquish) for s in _of(stmts, ir.TmemAlloc)]
    want = [(columns, slot, t.relinquish)] if columns else []
    a.expect(allocs == want, "glue.tmem_alloc", f"glue allocates (columns, slot, relinquish) {allocs}, the plan "
             f"holds {want}")
    reads = [s.slot for s in _of(stmts, ir.TmemAddress)]
    a.expect(reads == ([slot] if columns else []), "glue.tmem_address", f"glue reads the address at {reads}, the "
             f"slot is {slot}")
    frees = [(i, s.columns) for i, s in enumerate(stmts) if isinstance(s, ir.TmemDealloc)]
    last_role = max((i for i, s in enumerate(stmts) if isinstance(s, (ir.RoleBranch, ir.EntryCall))), default=-1)
    a.expect([c for _, c in frees] == ([columns] if columns else []) and all(i > last_role for i, _ in frees),
             "glue.tmem_dealloc", f"glue frees {[c for _, c in frees]} columns at statements "
             f"{[i for i, _ in frees]} (the last component call at {last_role}); the plan allocates {columns}")


def _glue_registers(a: _Auditor, got: list[tuple[str, int]]) -> None:
    plan = a.plan
    cap = _entry_cap(plan.block) if plan.block else 0
    at_end = any(e.scope == "block" and e.when == "end" for i in plan.instances for e in i.contract.entry)
    regs = []
    for r in plan.roles:  # each role's budget, and with whole-block phases at the end, the way back to the cap
        if r.registers and r.registers != cap:
            regs.append(("inc" if r.registers > cap else "dec", r.registers))
            if at_end:
                regs.append(("dec" if r.registers > cap else "inc", cap))
    a.expect(got == regs, "glue.setmaxnreg", f"glue setmaxnreg {got}, roles {regs} (entry cap {cap})")


def _glue_tile_loops(a: _Auditor, stmts) -> None:
    """The tile count read in the kernel, each role's tile loop (from blockIdx.x by the grid up to the
    bound) and its ctx.last (the tile past which one more stride leaves the bound)."""
    plan = a.plan
    source, split = plan.spec.schedule.tiles_from, plan.spec.schedule.split
    bound = ir.var("pl_num_tiles") if source else ir.lit(plan.num_tiles) if split == "tiles" else \
        ir.lit(whole_tiles(split, plan.num_tiles, plan.grid))  # a split schedule's data-parallel part
    counts = [(c.name, c.trap, c.bound) for c in _of(stmts, ir.TileCount)]
    trap = None if plan.mode == "symbol" else plan.num_tiles  # a count over the bound stops the kernel
    a.expect(counts == ([(Ref.parse(source).c_name, trap, plan.num_tiles)] if source else []), "glue.tile_count",
             f"the glue reads the tile count as {counts} (name, trap bound, loop bound); the schedule says "
             f"{source or 'a fixed count'} (at most {plan.num_tiles})")
    loops = _of(stmts, ir.TileLoop)
    a.expect([(lp.start, lp.bound, lp.step) for lp in loops] == [(ir.var("blockIdx.x"), bound, plan.grid)] *
             len(plan.roles), "glue.tile_loop", f"tile loops {[ir.c_text(lp.bound) for lp in loops]} by "
             f"{[lp.step for lp in loops]}, the schedule has {ir.c_text(bound)} tiles over {plan.grid} blocks in "
             f"each of {len(plan.roles)} roles")
    last = ir.Bin(">=", ir.add(ir.var("pl_tile"), ir.lit(plan.grid)), bound)
    if split != "tiles":  # a split schedule's units follow the whole tiles
        last = ir.Bin("&&", last, ir.Bin("==", ir.var("pl_units"), ir.lit(0)))
    ctxs = [c for c in _of(stmts, ir.TileCtx) if c.last != _UNIT_LAST]
    a.expect([c.last for c in ctxs] == [last] * len(plan.roles), "glue.last_tile",
             f"ctx.last set as {sorted({ir.c_text(c.last) for c in ctxs})} in {len(ctxs)} loop(s); the last tile of "
             f"a block is the one past which a stride of {plan.grid} leaves {plan.num_tiles} tiles, in each of the "
             f"{len(plan.roles)} roles' loops")


_UNIT_LAST = ir.Bin("==", ir.var("pl_u"), ir.sub(ir.var("pl_units"), ir.lit(1)))


def _split_glue(a: _Auditor, stmts) -> None:
    """A split schedule's table of units and fix-up against stream_k: the units each block's row gives
    (row_units, the glue's loop in Python) are block_units' after its whole tiles, so every k-tile of
    every tile is computed once; the count that completes a tile is its k-tiles, indexed past the whole
    tiles."""
    plan, split = a.plan, a.plan.spec.schedule.split
    k_tiles = next(a.value(i, i.contract.schedule.k_tiles) for i in plan.instances
                   if i.contract.schedule.k_tiles is not None)
    dp = whole_tiles(split, plan.num_tiles, plan.grid)
    tables = _of(stmts, ir.SplitTable)
    if not a.expect(len(tables) == 1 and len(tables[0].rows) == plan.grid and tables[0].fields == ROW_FIELDS,
                    "glue.split_rows", f"the glue's table of units is {[(len(t.rows), t.fields) for t in tables]}, "
                                       f"the plan has {plan.grid} blocks of {ROW_FIELDS}"):
        return
    covered: dict[int, int] = {}
    for b, row in enumerate(tables[0].rows):
        whole = [u for u in block_units(split, plan.num_tiles, k_tiles, plan.grid, b) if u.tile < dp]
        want = block_units(split, plan.num_tiles, k_tiles, plan.grid, b)[len(whole):]
        got = row_units(row, k_tiles, len(whole) * k_tiles)
        a.expect(got == want, "glue.split_rows", f"block {b}'s row {row} gives units {got[:3]}..., the schedule "
                                                 f"{want[:3]}...")
        for u in got:
            covered[u.tile] = covered.get(u.tile, 0) + u.k_end - u.k_begin
    short = {t: n for t, n in covered.items() if n != k_tiles}
    a.expect(set(covered) == set(range(dp, plan.num_tiles)) and not short, "glue.split_rows",
             f"the units cover tiles {min(covered, default=None)}..{max(covered, default=None)} of "
             f"{dp}..{plan.num_tiles - 1}; tiles not covered by {k_tiles} k-tiles: {dict(list(short.items())[:4])}")
    # the loop reads a row as row_units does: the head (slot 0), the run of whole tiles, the tail (slot 1)
    picks = [(p.head, p.tail, p.run) for p in _of(stmts, ir.UnitPick)]
    a.expect(picks == [((0, 1, 2, 0), (5, 6, 1), 3)] * len(plan.roles), "glue.split_units",
             f"the glue reads a row as {picks} ((head tile, k_begin, k_end, slot), (tail tile, k_end, slot), run); "
             f"{ROW_FIELDS} are read as head 0, 1, 2 slot 0, run from 3, tail 5, 6 slot 1, in each of the "
             f"{len(plan.roles)} roles")
    counts = _of(stmts, ir.SplitCount)
    a.expect([(c.whole, c.k_tiles) for c in counts] == [(dp, k_tiles)], "glue.split_count",
             f"the fix-up counts {[(c.whole, c.k_tiles) for c in counts]} (whole tiles before, k-tiles that complete "
             f"a tile); the plan {(dp, k_tiles)}")
    # The runtime clears the counts before its first launch only (zero_once): each must be back at 0 after.
    a.expect(len(counts) == 1 and counts[0].reset, "glue.split_count_reset",
             "the block whose count completes a split tile does not set the count back to 0 right after its "
             "count: the next launch would find the tile complete before it starts")
    _split_contributors(a, stmts, k_tiles, dp)


def _split_contributors(a: _Auditor, stmts, k_tiles: int, dp: int) -> None:
    """The fix-up's contributor formula, as the glue's statements compute it for every split tile: the
    blocks its loop sums, each with its slot, are stream_k.contributors'."""
    plan, split = a.plan, a.plan.spec.schedule.split
    lets = {name: e for s in _of(stmts, ir.Let) for name, e in s.names}
    loops, reads, skips = _of(stmts, ir.ContributorLoop), _of(stmts, ir.SlotRead), _of(stmts, ir.SkipIf)
    names = ("pl_first", "pl_kl", "pl_b0", "pl_b1", "pl_begin", "pl_end")
    if not a.expect(all(n in lets for n in names) and len(loops) == 1 and len(reads) == 1 and len(skips) == 1,
                    "glue.split_contributors", f"the fix-up is not one the audit reads: {sorted(set(names) - set(lets))} "
                                               f"undefined, {len(loops)} contributor loop(s), {len(reads)} slot read(s)"):
        return
    loop = loops[0]
    for tile in range(dp, plan.num_tiles):
        env = {"pl_tile": tile}
        for n in names[:4]:
            env[n] = ir.evaluate(lets[n], env)
        got, b = [], ir.evaluate(loop.first, env)
        # one block's range holds the whole tile: not split, the fix-up never runs on it (pl_slot -1)
        last = b - 1 if env["pl_b0"] == env["pl_b1"] else ir.evaluate(loop.last, env)
        while b <= last if loop.cmp == "<=" else b < last:
            env.update(pl_b=b)
            env.update(pl_begin=ir.evaluate(lets["pl_begin"], env), pl_end=ir.evaluate(lets["pl_end"], env))
            if not ir.evaluate(skips[0].test, env):
                got.append((b, ir.evaluate(reads[0].slot, env)))
            b += 1
        want = contributors(split, plan.num_tiles, k_tiles, plan.grid, tile)
        if not a.expect(tuple(got) == want, "glue.split_contributors",
                        f"tile {tile}: the fix-up sums {tuple(got)}, the schedule's contributors are {want}"):
            return


def _glue_launch_facts(a: _Auditor, loads: list) -> None:
    """Each fact given at launch is read once, and every value it lets through is one each taker allows: its
    domain and its limits hold at every value of [low, high] (the facts stage found the range; this walks it
    again), and high is the value the taker was linked with."""
    plan = a.plan
    facts = plan.resolved.launch
    a.expect(sorted((f.name, f.low, f.high) for f in facts) == sorted((s.name, s.low, s.high) for s in loads),
             "glue.launch_facts", f"the glue reads {[(s.name, s.low, s.high) for s in loads]} at launch, the plan "
             f"gives {[(f.name, f.low, f.high) for f in facts]}")
    for fact in facts:
        for inst in plan.instances:
            req = inst.contract.facts.requires.get(fact.name)
            if req is None:
                continue
            a.expect(req.launch and inst.facts[fact.name] == fact.high, "facts.launch", f"{inst.name} declares "
                     f"{fact.name} launch={req.launch}, linked at {inst.facts[fact.name]}; the kernel reads up to {fact.high}")
            limits = [lim for lim in inst.contract.facts.limit if fact.name in lim.expr.names()]

            def refused(v: int) -> bool:
                try:
                    return bool(req.problems(v)) or any(lim.problem(lim.expr.eval({**inst.facts, fact.name: v}))
                                                        for lim in limits)
                except ExpressionError:
                    return True
            bad = next((v for v in range(fact.low, fact.high + 1) if refused(v)), None)
            a.expect(bad is None, "facts.launch_range", f"{inst.name} does not allow {fact.name} = {bad}, which the "
                     f"kernel takes at launch ({fact.low} .. {fact.high})")


def _kept_workspaces(plan) -> set[Ref]:
    """The workspaces [link] keep hands the caller, from the spec's port names (each port's buffer)."""
    kept = set()
    for ref in plan.spec.link.keep:
        inst_name, _, port = ref.partition(".")
        kept.add(Ref(inst_name, plan.instance(inst_name).contract.port_by_name(port).buffer))
    return kept


def _bind_values(plan, inst) -> str:
    values = []
    kept = _kept_workspaces(plan)
    for ctype, name, kind in bindgen.bind_fields(inst.contract):
        if kind == "workspace" and Ref(inst.name, name) in kept:  # a typed output now: cast like a global port's
            values.append(f"(unsigned char*)p.{inst.name}_{name}")
        elif kind in ("operand", "workspace"):
            values.append(f"{'&' if ctype == 'const pl_tensor_map*' else ''}p.{inst.name}_{name}")
        elif kind == "global":  # the workspace of the out-port the spec connects to this in-port
            src = next((s for s, d in plan.connections if d == Ref(inst.name, name)), None)
            values.append("nullptr" if src is None else
                          f"(unsigned char*)p.{src.instance}_"
                          f"{plan.instance(src.instance).contract.port_by_name(src.name).buffer}")
        elif kind == "fact" and any(f.name == name for f in plan.resolved.launch):
            values.append(f"pl_fact_{name}")
        elif kind in ("tmem", "tmem_in"):
            column = _tmem_column(plan, Ref(inst.name, name), kind)
            values.append("0u" if column is None else f"pl_tmem + {column}u")
        else:
            values.append(f"{inst.bind[name]}{'u' if ctype == 'unsigned' else ''}")
    return ", ".join(values)

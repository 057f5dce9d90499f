"""An executable model of what the glue means (issue 53): the glue's statements (glue_ir.py) run for
every block on the CPU, and what they do is held to what the schedule and the plan say.

For every role of every block, the model runs the tile loop and the stream-K units as the statements
say (the bounds, the coordinates, the table row, the k-ranges: evaluated as C evaluates them), and then:

- **tiles**: every tile is computed by the block the schedule gives it (stream_k.block_units), whole or
  as k-ranges that cover its k-tiles exactly once; its row and column are its place in the schedule's
  order (an enumeration written here, not the glue's formula); a count read in the kernel (tiles_from)
  is tried at several values;
- **ring positions**: each unit's ctx.stage_base is the k-tiles the block streamed before it;
- **ctx.last** is true on the block's last unit only; the whole-block phases at the end are told the
  iterations the block ran (BlockIter);
- **stream-K**: for every split tile the fix-up sums each contributor's slot once, exactly the units
  that stored a partial of that tile, and the counts of the tile's units add up to k_tiles (one add
  completes it);
- **barriers**: in each role's loop, any two statements that touch overlapping shared memory (a glue
  transfer's stores or copies, a component call through its smem ports or its buffers of a phase), one
  of them writing, have a sync of the role's threads between them in both directions round the loop: the
  write is visible before the read, and the read is done before the next iteration's write.

``check(plan)`` returns the findings as (invariant, detail) pairs; the audit turns them into failures.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .glue_ir import (BlockIter, ContributorLoop, EntryCall, KRange, Let, LoopEnd, RegStore, RoleBranch, SkipIf,
                      SlotRead, SmemCopy, SplitCount, SplitTable, Sync, TileCount, TileCtx, TileLoop, UnitInit,
                      UnitLoop, UnitPick, Assign, evaluate)
from ..refs import Ref
from ..stream_k import block_units
from .plan import LinkPlan, LiveRange

# The glue's own smem (the mbarrier region): the components' mbarriers order themselves.
GLUE_PREFIX = "glue."
# The most blocks the model runs one by one (every block of the largest shipped grid, 132 x 2, fits).
MAX_BLOCKS = 4096


@dataclass
class _Role:
    """One role's statements, split where its loops start and end."""
    name: str
    before: list = field(default_factory=list)   # statements before the tile loop (the split row's Lets)
    tiles: TileLoop | None = None
    tile_body: list = field(default_factory=list)
    units_before: list = field(default_factory=list)  # between the loops (pl_stage)
    units: bool = False
    unit_body: list = field(default_factory=list)


@dataclass(frozen=True)
class _Ran:
    """A unit of work a role ran: what its statements set."""
    tile: int
    row: int
    col: int
    k_begin: int
    k_end: int
    stage_base: int
    last: bool
    slot: int


def _sections(stmts) -> tuple[list[_Role], list]:
    """Each role's statements, and the statements after the roles (the whole-block phases at the end)."""
    roles: list[_Role] = []
    after: list = []
    where = None
    for s in stmts:
        if isinstance(s, RoleBranch):
            roles.append(_Role(s.role))
            where = "before"
            continue
        if isinstance(s, BlockIter) or (isinstance(s, EntryCall) and s.scope == "block" and roles):
            where = "after"
        if where is None:
            continue
        r = roles[-1] if roles else None
        if where == "after":
            after.append(s)
        elif isinstance(s, TileLoop):
            r.tiles, where = s, "tiles"
        elif isinstance(s, UnitLoop):
            r.units, where = True, "units"
        elif isinstance(s, LoopEnd):
            where = "units_before" if where == "tiles" else "done"
        elif where == "before":
            r.before.append(s)
        elif where == "tiles":
            r.tile_body.append(s)
        elif where == "units_before":
            r.units_before.append(s)
        elif where == "units":
            r.unit_body.append(s)
    return roles, after


def _lets(stmts, env: dict) -> None:
    for s in stmts:
        if isinstance(s, Let):
            for name, e in s.names:
                env[name] = evaluate(e, env, _FUNCTIONS)


def _split_units(row) -> int:
    head, run, tail = row[0] >= 0, row[4] - row[3], row[5] >= 0
    return int(head) + run + int(tail)


_FUNCTIONS = {"pl_split_units": _split_units}


def _ctx(body, env: dict) -> tuple[TileCtx | None, KRange | None]:
    ctx = next((s for s in body if isinstance(s, TileCtx)), None)
    k = next((s for s in body if isinstance(s, KRange)), None)
    return ctx, k


def _run_role(r: _Role, env: dict, k_tiles: int) -> list[_Ran]:
    """The units one role of one block runs (``env``: blockIdx.x, the table, pl_num_tiles)."""
    env = dict(env)
    _lets(r.before, env)
    ran: list[_Ran] = []
    env["pl_iter"] = 0
    ctx, krange = _ctx(r.tile_body, env)
    if r.tiles is not None:
        tile, bound = evaluate(r.tiles.start, env), evaluate(r.tiles.bound, env)
        while tile < bound:
            env["pl_tile"] = tile
            ran.append(_unit(env, ctx, krange, -1, k_tiles))
            tile += r.tiles.step
            env["pl_iter"] += 1
            if len(ran) > 1 << 20:
                raise _Runaway(f"role '{r.name}' of block {env['blockIdx.x']}: more than 2^20 tiles")
    if not r.units:
        return ran
    _lets(r.units_before, env)
    init = next(s for s in r.unit_body if isinstance(s, UnitInit))
    pick = next(s for s in r.unit_body if isinstance(s, UnitPick))
    stage = [s for s in r.unit_body if isinstance(s, Assign) and s.target == "pl_stage"]
    ctx, krange = _ctx(r.unit_body, env)
    row = env["pl_row"]
    for u in range(env["pl_units"]):
        env.update(pl_u=u, pl_k_begin=0, pl_k_end=init.k_tiles, pl_slot=-1)
        if env["pl_head"] and u == 0:
            env.update(pl_tile=row[pick.head[0]], pl_k_begin=row[pick.head[1]], pl_k_end=row[pick.head[2]],
                       pl_slot=pick.head[3])
        elif env["pl_tail"] and u == env["pl_units"] - 1:
            env.update(pl_tile=row[pick.tail[0]], pl_k_end=row[pick.tail[1]], pl_slot=pick.tail[2])
        else:
            env["pl_tile"] = row[pick.run] + u - env["pl_head"]
        ran.append(_unit(env, ctx, krange, env["pl_slot"], k_tiles))
        for s in stage:
            value = evaluate(s.value, env)
            env["pl_stage"] = env["pl_stage"] + value if s.op == "+=" else value
        env["pl_iter"] += 1
    return ran


class _Runaway(Exception):
    pass


def _unit(env: dict, ctx: TileCtx | None, krange: KRange | None, slot: int, k_tiles: int) -> _Ran:
    """What the unit's statements set (a role that calls no component with k-tiles is given no KRange:
    its unit is the k-range the loop picked, the tile whole in the tile loop)."""
    row = col = -1
    last = False
    if ctx is not None:
        env["pl_tile"] = evaluate(ctx.tile, env)
        row, col, last = evaluate(ctx.row, env), evaluate(ctx.col, env), bool(evaluate(ctx.last, env))
    if krange is not None:
        kb, ke, base = evaluate(krange.begin, env), evaluate(krange.end, env), evaluate(krange.stage_base, env)
    else:
        kb, ke = env.get("pl_k_begin", 0), env.get("pl_k_end", k_tiles)
        base = env.get("pl_stage", env["pl_iter"] * k_tiles)
    return _Ran(env["pl_tile"], row, col, kb, ke, base, last, slot)


def _order(plan: LinkPlan) -> list[tuple[int, int]] | None:
    """Every tile's (row, column), in the order the schedule walks them; None where bands do not
    divide the grid (the check stage refuses those)."""
    rows, cols = (plan.tiles + [1])[:2]
    g, order = plan.spec.schedule.group, plan.spec.schedule.order
    if order == "row_major":
        if not g:
            return [(r, c) for r in range(rows) for c in range(cols)]
        if cols % g:
            return None
        return [(r, band * g + j) for band in range(cols // g) for r in range(rows) for j in range(g)]
    if not g:
        return [(r, c) for c in range(cols) for r in range(rows)]
    if rows % g:
        return None
    return [(band * g + j, c) for band in range(rows // g) for c in range(cols) for j in range(g)]


class _Findings:
    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []
        self.checked = 0

    def expect(self, ok: bool, invariant: str, detail: str) -> bool:
        self.checked += 1
        if not ok and not any(i == invariant for i, _ in self.items):  # the first of each kind says enough
            self.items.append((invariant, detail))
        return ok


def check(plan: LinkPlan) -> tuple[list[tuple[str, str]], int]:
    """The findings of the model on ``plan``'s glue (empty: the glue means what the plan says), and how
    many properties it checked."""
    f = _Findings()
    stmts = plan.glue.statements
    roles, after = _sections(stmts)
    looping = [r for r in roles if r.tiles is not None]
    if not looping or plan.grid > MAX_BLOCKS:
        return f.items, f.checked
    table = next((s for s in stmts if isinstance(s, SplitTable)), None)
    count = next((s for s in stmts if isinstance(s, TileCount)), None)
    split = plan.spec.schedule.split
    k_tiles = _k_tiles(plan)
    counts = [plan.num_tiles]
    if count is not None:
        f.expect(plan.mode == "symbol" or count.trap == plan.num_tiles, "model.tile_count",
                 f"a tile count read in the kernel traps above {count.trap}; the schedule's bound is {plan.num_tiles}")
        counts = sorted({n for n in (0, 1, plan.grid - 1, plan.grid, plan.grid + 1, plan.num_tiles // 2,
                                     plan.num_tiles) if 0 <= n <= min(count.bound, plan.num_tiles)})
    for n in counts:
        ran = {}
        try:
            for b in range(plan.grid):
                env = {"blockIdx.x": b, "pl_num_tiles": n,
                       "pl_split_rows": [list(row) for row in table.rows] if table else []}
                ran[b] = {r.name: _run_role(r, env, k_tiles) for r in looping}
        except _Runaway as exc:
            f.expect(False, "model.tiles", str(exc))
            return f.items, f.checked
        _check_tiles(plan, f, ran, n, split, k_tiles)
        _check_block_iter(f, ran, after, n, table)
        if table is not None and n == plan.num_tiles:
            # the fix-up runs in the role of the summed entry; the other roles (a producer) run the units only
            fixers = [r for r in looping if any(isinstance(s, SplitCount) for s in r.unit_body)]
            f.expect(len(fixers) == 1, "model.fixup", f"{len(fixers)} roles hold the stream-K fix-up, one must")
            for r in fixers:
                _check_fixup(plan, f, r, ran, k_tiles)
    # The symbol control places smem as each component fixed it, overlaps included (its report warns): that
    # is the failure it exists to show, not a glue bug, so its accesses are not held to the glue's syncs.
    for r in looping if plan.mode != "symbol" else ():
        threads = plan.role(r.name).used_threads
        _check_races(plan, f, r.name, r.tile_body, threads, "tile loop")
        if r.units:
            _check_races(plan, f, r.name, r.unit_body, threads, "stream-K units")
    return f.items, f.checked


def _k_tiles(plan: LinkPlan) -> int:
    for inst in plan.instances:
        if inst.contract.schedule.k_tiles is not None:
            return inst.facts_eval(inst.contract.schedule.k_tiles, "schedule.k_tiles")
    return 1


def _check_tiles(plan: LinkPlan, f: _Findings, ran: dict, n: int, split: str, k_tiles: int) -> None:
    """Each role of each block runs the units the schedule gives the block, tile coordinates in order,
    ring positions and ctx.last as they follow from them; together they cover every k-tile once."""
    _check_blocks(plan, f, ran, n, split, k_tiles)
    covered: dict[int, list[tuple[int, int]]] = {}
    for by_role in ran.values():
        units = next(iter(by_role.values()))
        for u in units:
            covered.setdefault(u.tile, []).append((u.k_begin, u.k_end))
    bad = [t for t in range(n) if _joined(covered.get(t, [])) != [(0, k_tiles)]]
    f.expect(set(covered) <= set(range(n)) and not bad, "model.coverage",
             f"{len(bad)} of {n} tiles are not computed exactly once over their {k_tiles} k-tiles (first: tile "
             f"{bad[:1]}, k-ranges {covered.get(bad[0], []) if bad else []}); tiles outside 0..{n - 1}: "
             f"{sorted(set(covered) - set(range(n)))[:4]}")


def _check_blocks(plan: LinkPlan, f: _Findings, ran: dict, n: int, split: str, k_tiles: int) -> None:
    """Block by block (the first finding of a kind is reported)."""
    order = _order(plan)
    for b, by_role in ran.items():
        if split == "tiles":
            want = [(t, 0, k_tiles) for t in range(b, n, plan.grid)]
        else:
            want = [(u.tile, u.k_begin, u.k_end) for u in block_units(split, plan.num_tiles, k_tiles, plan.grid, b)]
        for role, units in by_role.items():
            got = [(u.tile, u.k_begin, u.k_end) for u in units]
            if not f.expect(got == want, "model.tiles", f"block {b}, role '{role}' ({n} tiles): runs (tile, k_begin, "
                                                          f"k_end) {got[:4]}..., the schedule gives it {want[:4]}..."):
                return
            if order is not None:
                bad = [(u.tile, (u.row, u.col), order[u.tile]) for u in units
                       if 0 <= u.tile < len(order) and (u.row, u.col) != order[u.tile]]
                if not f.expect(not bad, "model.tile_coords", f"block {b}, role '{role}': tile {bad[:1] and bad[0][0]} "
                                f"at (row, col) {bad[:1] and bad[0][1]}, the schedule's {plan.spec.schedule.order} "
                                f"order puts it at {bad[:1] and bad[0][2]}"):
                    return
            base = 0
            for u in units:
                if not f.expect(u.stage_base == base, "model.stage_base",
                                f"block {b}, role '{role}': tile {u.tile} starts at ring position {u.stage_base}, "
                                f"after {base} k-tiles the block streamed before it"):
                    return
                base += u.k_end - u.k_begin
            lasts = [i for i, u in enumerate(units) if u.last]
            if not f.expect(lasts == ([len(units) - 1] if units else []), "model.last",
                            f"block {b}, role '{role}': ctx.last is set on units {lasts[:4]} of {len(units)}; only "
                            "the last is the last"):
                return


def _joined(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The k-ranges joined end to end, if each starts where the previous ended; else as they are."""
    ranges = sorted(ranges)
    if not ranges or any(a[1] != b[0] for a, b in zip(ranges, ranges[1:])):
        return ranges
    return [(ranges[0][0], ranges[-1][1])]


def _check_block_iter(f: _Findings, ran: dict, after: list, n: int, table) -> None:
    told = next((s for s in after if isinstance(s, BlockIter)), None)
    if told is None:
        return
    for b, by_role in ran.items():
        env = {"blockIdx.x": b, "pl_num_tiles": n, "pl_split_rows": [list(r) for r in table.rows] if table else []}
        value = evaluate(told.value, env, _FUNCTIONS)
        runs = {role: len(units) for role, units in by_role.items()}
        if not f.expect(set(runs.values()) == {value}, "model.block_iter",
                        f"block {b}: the whole-block phases at the end are told ctx.iter = {value}, the roles ran "
                        f"{runs} iterations"):
            return


def _check_fixup(plan: LinkPlan, f: _Findings, r: _Role, ran: dict, k_tiles: int) -> None:
    """Every split tile: the blocks the fix-up sums, each with its slot, are those that stored a partial
    of it; their k-tiles add up to k_tiles (the count one add completes); the count's index is in range."""
    body = r.unit_body
    count = next((s for s in body if isinstance(s, SplitCount)), None)
    loop = next((i for i, s in enumerate(body) if isinstance(s, ContributorLoop)), None)
    if count is None or loop is None:
        f.expect(False, "model.fixup", f"role '{r.name}' runs stream-K units without the fix-up's count or sum")
        return
    head = [s for s in body[:loop] if isinstance(s, Let)]
    inner = body[loop + 1:]
    stored: dict[int, list[tuple[int, int, int]]] = {}
    for b, by_role in ran.items():
        for u in by_role[r.name]:
            if u.slot >= 0:
                stored.setdefault(u.tile, []).append((b, u.slot, u.k_end - u.k_begin))
    f.expect(count.reset, "model.fixup", "the count that completes a split tile is not set back to 0")
    for tile, parts in sorted(stored.items()):
        f.expect(0 <= tile - count.whole < plan.num_tiles - count.whole and sum(p[2] for p in parts) == count.k_tiles
                 == k_tiles, "model.fixup",
                 f"tile {tile}: its units count {sum(p[2] for p in parts)} k-tiles at index {tile - count.whole}; one "
                 f"completes it at {count.k_tiles} (k_tiles {k_tiles})")
        env = {"pl_tile": tile}
        _lets(head, env)
        cl = body[loop]
        first, last = evaluate(cl.first, env), evaluate(cl.last, env)
        summed = []
        b = first
        while (b <= last) if cl.cmp == "<=" else (b < last):
            env["pl_b"] = b
            _lets([s for s in inner if isinstance(s, Let)], env)
            skip = any(isinstance(s, SkipIf) and evaluate(s.test, env) for s in inner)
            if not skip:
                read = next(s for s in inner if isinstance(s, SlotRead))
                summed.append((b, evaluate(read.slot, env)))
            b += 1
            if len(summed) > plan.grid:
                break
        want = sorted((p[0], p[1]) for p in parts)
        if not f.expect(sorted(summed) == want and len(set(summed)) == len(summed), "model.fixup",
                        f"split tile {tile}: the fix-up sums (block, slot) {summed}, the blocks that stored its "
                        f"partials are {want}"):
            return


def _accesses(plan: LinkPlan, role: str, s) -> list[tuple[int, int, bool, str | None]]:
    """What a statement does to shared memory: (first byte, end, writes, instance of a component call)."""
    smem = plan.smem

    def alloc(ref: Ref):
        return next((a for a in smem if ref in a.users), None)

    out = []
    if isinstance(s, RegStore):
        a = alloc(_buffer(plan, s.dst))
        if a is not None:
            out.append((a.offset, a.offset + a.bytes, True, None))
    elif isinstance(s, SmemCopy):
        for ref, writes in ((s.src, False), (s.dst, True)):
            a = alloc(_buffer(plan, ref))
            if a is not None:
                out.append((a.offset, a.offset + a.bytes, writes, None))
    elif isinstance(s, EntryCall):
        # Which entry touches which buffer is not declared, only the phases a buffer is live in: a call
        # touches each buffer of its instance that is live in its phase (the whole kernel: every phase),
        # reading only where every name the instance has for it is an smem in-port. A ring's buffer is
        # ordered by the components' own mbarriers (protocol mbarrier_ring), not by the glue.
        inst = plan.instance(s.instance)
        ports = {p.buffer: p for p in inst.contract.port if p.space == "smem" and p.buffer}
        here = LiveRange(role, s.instance, s.phase)
        for a in smem:
            mine = [u for u in a.users if u.instance == inst.name]
            if not mine or a.name.startswith(GLUE_PREFIX) or (a.live is not None and here not in a.live) or \
                    any(u.name in ports and ports[u.name].protocol == "mbarrier_ring" for u in mine):
                continue
            reads_only = all(u.name in ports and ports[u.name].direction == "in" for u in mine)
            out.append((a.offset, a.offset + a.bytes, not reads_only, s.instance))
    return out


def _buffer(plan: LinkPlan, port_ref: Ref) -> Ref:
    inst = plan.instance(port_ref.instance)
    return Ref(inst.name, inst.contract.port_by_name(port_ref.name).buffer)


def _check_races(plan: LinkPlan, f: _Findings, role: str, body: list, threads: int, where: str) -> None:
    """Any two statements of the loop that touch overlapping smem, one writing, have a sync of all the
    role's threads between them both ways round the loop (calls of one component order themselves)."""
    events = [(i, _accesses(plan, role, s)) for i, s in enumerate(body)]
    events = [(i, acc) for i, acc in events if acc]
    syncs = [i for i, s in enumerate(body) if isinstance(s, Sync) and s.threads == threads]

    def synced(i: int, j: int) -> bool:  # a sync strictly after i and before j, going round the loop
        return any((i < k < j) if i < j else (k > i or k < j) for k in syncs)

    for x, (i, ax) in enumerate(events):
        for j, ay in events[x + 1:]:
            conflict = next(((p, q) for p in ax for q in ay if p[0] < q[1] and q[0] < p[1] and (p[2] or q[2])
                             and not (p[3] is not None and p[3] == q[3])), None)
            if conflict is None:
                continue
            for a, b in ((i, j), (j, i)):
                f.expect(synced(a, b), "model.barriers",
                         f"role '{role}', {where}: {_name(body[a])} and then {_name(body[b])} touch smem "
                         f"[{max(conflict[0][0], conflict[1][0])}, {min(conflict[0][1], conflict[1][1])}) "
                         f"({'a write' if conflict[0][2] else 'a read'} and {'a write' if conflict[1][2] else 'a read'})"
                         f" with no sync of the role's {threads} threads between them"
                         + (" (round the loop: the next iteration's)" if a > b else ""))


def _name(s) -> str:
    if isinstance(s, EntryCall):
        return f"{s.instance}.{s.phase}"
    if isinstance(s, RegStore):
        return f"the store {s.src} -> {s.dst}"
    if isinstance(s, SmemCopy):
        return f"the copy {s.src} -> {s.dst}"
    return type(s).__name__

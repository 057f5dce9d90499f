"""Tensor memory (sm_100a/sm_103a), allocated for the link like shared memory.

An SM has 128 lanes x 512 columns of tensor memory, and a block takes columns with tcgen05.alloc (a power of
two, 32..512), which waits until that many are free. Two parts of one block that each allocate can starve each
other for good: the first holds its columns while it waits for something the second does after its own
allocation, and the second waits for columns the first never frees. So the link allocates instead: every
instance's [[tmem]] buffers are placed in one column range (first fit, buffers live in disjoint phases of one role
sharing columns, as smem buffers do), the glue takes that range with one tcgen05.alloc when the block starts and
frees it at the end, and each buffer's bindings field is the block's address plus its column. A component whose
own code allocates ([reserve] tmem_columns) keeps its columns beside that range: the link refuses a block whose
allocations, each rounded up to what tcgen05.alloc takes, pass the SM's 512 columns, naming every part. The
in-port of a tmem connection is bound to the producer's buffer (the consumer reads it in place).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..errors import TmemOverflow
from ..refs import GLUE, Ref
from .plan import LiveRange, live_json, refs_json
from .queries import port_of

TMEM_SLOT = Ref(GLUE, "tmem_slot")  # the smem word tcgen05.alloc writes the block's tensor-memory address to
TMEM_SLOT_BYTES = 16
MIN_ALLOC = 32  # tcgen05.alloc takes a power of two of at least 32 columns


def alloc_columns(columns: int) -> int:
    """What tcgen05.alloc takes for ``columns`` (0: none): the next power of two, at least 32."""
    if columns <= 0:
        return 0
    n = MIN_ALLOC
    while n < columns:
        n *= 2
    return n


@dataclass(frozen=True)
class TmemBufferAlloc:
    name: str                            # "instance.buffer": the first of users
    column: int                          # from the block's allocation
    columns: int
    align: int
    live: tuple[LiveRange, ...] | None   # WHOLE_KERNEL (None): always
    users: tuple[Ref, ...]

    def to_json(self) -> dict:
        return {**asdict(self), "live": live_json(self.live), "users": refs_json(self.users)}


@dataclass(frozen=True)
class TmemAllocation:
    """The block's tensor memory: the glue's one allocation and where each buffer lies in it, and the columns
    components allocate themselves."""
    buffers: tuple[TmemBufferAlloc, ...]
    columns: int                            # the glue's tcgen05.alloc (a power of two, 32..512; 0: none)
    own: tuple[tuple[str, int], ...]        # (instance, columns its code allocates, as tcgen05.alloc rounds them)
    limit: int                              # the device's columns per SM

    @property
    def relinquish(self) -> bool:
        """The glue gives up the block's allocation permit after its own allocation, unless a component still
        allocates (PTX: no tcgen05.alloc after tcgen05.relinquish_alloc_permit)."""
        return not self.own

    def column_of(self, ref: Ref) -> int:
        return next(b.column for b in self.buffers if ref in b.users)

    def to_json(self) -> dict:
        return {"columns": self.columns, "limit": self.limit, "buffers": [b.to_json() for b in self.buffers],
                "own": [{"instance": i, "columns": n} for i, n in self.own]}


def allocate_tmem(link, transfers, groups, place, ordered) -> TmemAllocation | None:
    """The link's tensor memory (None: no instance uses any). ``groups`` builds each buffer's _Group (alloc.py),
    ``place`` places them (first fit by lifetime), ``ordered`` orders a lifetime for the plan."""
    used = [i for i in link.instances if i.contract.tmem or _own(i)]
    if not used:
        return None
    limit = link.device.get("tmem_columns", 0)
    unique = groups(link, transfers)
    placed = place(unique)
    end = max((off + g.bytes for g, off in placed), default=0)
    # tcgen05.alloc places a power-of-two range at a multiple of its size (nvcc 13.0 compiles it to a search for an
    # aligned run of free 32-column granules, UTCATOMSWS.FIND_AND_SET.ALIGN; the PTX ISA does not say), so an
    # allocation at least as large as the strictest alignment keeps every buffer's column aligned in the SM's
    # tensor memory, not only within the range
    columns = alloc_columns(max([end] + [g.align for g in unique if end]))
    own = tuple((i.name, alloc_columns(_own(i))) for i in used if _own(i))
    total = columns + sum(n for _, n in own)
    if total > limit:
        parts = [f"{g.name} {g.bytes} columns at {off}" for g, off in sorted(placed, key=lambda p: p[1])]
        if columns:
            parts = [f"the glue's allocation {columns} (holding {', '.join(parts)})"]
        parts += [f"{i} allocates {n} itself ([reserve] tmem_columns)" for i, n in own]
        if limit == 0:
            raise TmemOverflow(f"{link.device['name']} ({link.device['arch']}) has no tensor memory, and the link "
                               f"needs {total} columns: {'; '.join(parts)}", file=str(link.spec.path),
                               field="link.device", hint="link for a device with tensor memory (b200, b300), or use "
                               "components without [[tmem]]")
        raise TmemOverflow(f"tensor memory: the block needs {total} columns, over the {limit} of an SM by "
                           f"{total - limit}: {'; '.join(parts)} (tcgen05.alloc takes powers of two from "
                           f"{MIN_ALLOC})", file=str(link.spec.path), field="facts",
                           component=", ".join(sorted({i.contract.name for i in used})),
                           hint="reduce the tile or accumulator facts that size the [[tmem]] buffers, or give buffers "
                                "used in different phases of one role disjoint `live` lists so they share columns")
    buffers = tuple(TmemBufferAlloc(g.name, off, g.bytes, g.align, ordered(g.live), tuple(g.members))
                    for g, off in sorted(placed, key=lambda p: (p[1], p[0].name)))
    return TmemAllocation(buffers, columns, own, limit)


def tmem_bindings(link, transfers, tmem: TmemAllocation | None) -> dict[str, dict[str, int]]:
    """instance -> {field: column}: each [[tmem]] buffer's column, and each tmem in-port's, the column of the
    producer's buffer it reads (the glue adds the block's address to both)."""
    out: dict[str, dict[str, int]] = {i.name: {} for i in link.instances}
    if tmem is None:
        return out
    for inst in link.instances:
        for b in inst.contract.tmem:
            out[inst.name][b.name] = tmem.column_of(Ref(inst.name, b.name))
    for t in transfers:
        if t.kind == "tmem":
            si, sp = port_of(link, t.src, "connect")
            out[t.dst.instance][t.dst.name] = tmem.column_of(Ref(si.name, sp.buffer))
    return out


def _own(inst) -> int:
    return inst.facts_eval(inst.contract.reserve.tmem_columns, "reserve.tmem_columns")

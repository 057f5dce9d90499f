"""Component contracts: what a component requires, what it guarantees, what it occupies.

A contract is a TOML file next to the component source. The dataclasses below are its schema;
``load_contract`` parses and checks it on its own (names resolve, expressions parse, values in
range). Whether contracts agree with each other and the device is the linker's job (link/).
"""

from __future__ import annotations

import graphlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from . import schema
from .errors import ContractError, ExpressionError, show
from .expr import FUNCTIONS, Expr
from .schema import Bounds, Line, Name, OneOf, doc

DTYPES = {"fp32": ("float", 4), "fp16": ("__half", 2), "bf16": ("__nv_bfloat16", 2), "fp8e4m3": ("__nv_fp8_e4m3", 1),
          "fp8e5m2": ("__nv_fp8_e5m2", 1), "int32": ("int", 4), "int8": ("signed char", 1), "uint8": ("unsigned char", 1)}
MAX_NAMED_BARRIER_ID = 15
# Header libraries a component may name under [component] headers: where they come from.
# The targets a package can hold LTO-IR for (backend/nvcc.py ARCHS: each device profile's arch is one).
ARCHS = ("sm_90a", "sm_100a", "sm_103a", "sm_120a")
HEADER_LIBRARIES = {"cutlass": "CUTLASS/CuTe headers of the nvidia-cutlass wheel (pip install nvidia-cutlass)"}
TMA_SWIZZLES = (0, 32, 64, 128)
SETMAXNREG_RANGE = (24, 256)

# Field types with limits, checked on load (an expression: once the default facts determine it) and
# written into the JSON Schema. Each limit is what the hardware or the generated code takes.
FACT_BOUNDS = Bounds(-2 ** 31, 2 ** 31 - 1, "facts are C ints in the generated code")
FactValue = Annotated[int, FACT_BOUNDS]
Text = Annotated[str, Line(200)]
DType = Annotated[str, OneOf(tuple(DTYPES))]
SetMaxNReg = Annotated[int, Bounds(*SETMAXNREG_RANGE, "setmaxnreg takes 24..256 in steps of 8", 8)]
# Above any GPU's shared memory per block (227 KiB on sm_90); the device's own limit is checked at link.
MAX_SMEM_BYTES = 1 << 20
SmemBytes = Annotated[Expr, Bounds(1, MAX_SMEM_BYTES, "a buffer holds 1 byte to 1 MiB (no GPU has more per block)")]
SmemOffset = Annotated[Expr, Bounds(0, MAX_SMEM_BYTES, "an offset inside the block's shared memory")]
# The glue aligns dynamic shared memory to 1024 bytes, so no larger alignment can be promised.
Alignment = Annotated[Expr, OneOf(tuple(2 ** k for k in range(11)))]
BarrierThreads = Annotated[Expr, Bounds(32, 1024, "bar.sync counts whole warps of one block", 32)]
MbarrierCount = Annotated[Expr, Bounds(1, MAX_SMEM_BYTES // 8, "each mbarrier takes 8 bytes of shared memory")]
Arrivals = Annotated[Expr, Bounds(1, 2 ** 20 - 1, "PTX mbarrier.init takes an expected count of 1..2^20-1")]
TxBytes = Annotated[Expr, Bounds(0, 2 ** 20 - 1, "an mbarrier's tx-count holds at most 2^20-1 bytes")]
MbarrierOffset = Annotated[Expr, Bounds(0, MAX_SMEM_BYTES, "mbarriers are 8-byte objects in shared memory", 8)]
TmaExtent = Annotated[Expr, Bounds(1, 256, "TMA copies 1..256 elements per dimension")]
TmaSwizzle = Annotated[Expr, OneOf(TMA_SWIZZLES)]
TensorDim = Annotated[Expr, Bounds(1, 2 ** 40, "a tensor dimension")]
TileDim = Annotated[Expr, Bounds(1, 2 ** 31 - 1, "a tile dimension is a positive C int")]
RegisterValues = Annotated[Expr, Bounds(1, 255, "a thread has at most 255 registers")]
KTiles = Annotated[Expr, Bounds(1, 2 ** 31 - 1, "k-tiles of a tile are a positive C int")]
# Tensor memory (sm_100a/sm_103a): 128 lanes x 512 columns of 32-bit cells per SM, allocated in columns (PTX ISA,
# "Tensor Memory": tcgen05.alloc takes a power of two from 32 to 512).
TMEM_COLUMNS = 512
TMEM_LANES = 128
TmemColumns = Annotated[Expr, Bounds(1, TMEM_COLUMNS, "an SM has 512 tensor-memory columns")]
TmemReserve = Annotated[Expr, Bounds(0, TMEM_COLUMNS, "an SM has 512 tensor-memory columns")]
TmemAlignment = Annotated[Expr, OneOf(tuple(2 ** k for k in range(10)))]


@dataclass(kw_only=True)
class Identity:
    """[component]: who the component is."""
    name: Name = doc("Component name; a C identifier, unique within a link.")
    version: Annotated[str, Line(64)] = doc("Component version (free text, e.g. semantic version).")
    origin: Text = doc("Library or team of origin, e.g. 'cutlass', 'raw', 'vendor'.", "raw")
    archs: list[Annotated[str, OneOf(ARCHS)]] = doc(
        f"Targets the package holds LTO-IR for ({', '.join(ARCHS)}): a link for a device of another target is "
        "refused. Each one more compiles every variant once more at pack.", ["sm_90a"])
    summary: Text = doc("One line saying what the component does.", "")
    headers: list[Annotated[str, OneOf(tuple(HEADER_LIBRARIES))]] = doc(
        "Header libraries the source includes, looked up on whichever machine compiles it (pack, and the "
        f"monolithic control): {', '.join(HEADER_LIBRARIES)}.", [])


@dataclass(kw_only=True)
class FactRequirement:
    """[facts.requires.NAME]: a fact the component's code is specialized on, with its domain."""
    set: list[FactValue] | None = doc("Allowed values.", None)
    range: list[FactValue] | None = doc("Inclusive [low, high] bounds.", None)
    multiple_of: Annotated[int, Bounds(1, 2 ** 31 - 1, "facts are C ints")] | None = doc(
        "The value must be a multiple of this.", None)
    default: FactValue | None = doc("Value used when nothing else in the link sets the fact; also the value the "
                              "component was packaged with for symbol-only linking.", None)
    compile: bool = doc("Compile-time fact (template parameter, array shape): fixed when the package is "
                        "made; each package variant holds one value.", False)
    bound: bool = doc("The code sees this fact only through the tile grid and through dimensions of TMA operands "
                      "that name it bare and list it under `partial`: a kernel linked for a value serves every "
                      "smaller one, which the operands' shapes give at launch (pipelink.op links one kernel per "
                      "bucket of sizes). The component's word, like the rest of its contract: its code must not "
                      "read the fact's binding. Checked on load: every operand dimension that mentions it is such a "
                      "dimension.", False)
    launch: bool = doc("The code reads this fact only through its binding, as a value at run time (no array, "
                       "buffer, port or operand is sized by it, no guarantee or schedule names it; only "
                       "[[facts.limit]] may): a link that lists it under [link] launch_facts takes it at launch, "
                       "from an int64 the caller passes in device memory, anywhere from the least value the "
                       "contracts allow up to the linked one (the glue traps outside). Checked on load.", False)
    doc: Text = doc("What the fact means.", "")

    def problems(self, value: int) -> list[str]:
        """How ``value`` falls outside this domain; empty when it is inside."""
        out = []
        if self.set is not None and value not in self.set:
            out.append(f"not in the allowed set {self.set}")
        if self.range is not None and not self.range[0] <= value <= self.range[1]:
            out.append(f"outside the range [{self.range[0]}, {self.range[1]}]")
        if self.multiple_of is not None and value % self.multiple_of:
            out.append(f"not a multiple of {self.multiple_of}")
        return out


@dataclass(kw_only=True)
class FactLimit:
    """[[facts.limit]]: bounds on an expression over the component's facts, for what no one fact's domain
    can say: the cache row L a decode step writes lies inside its Lmax rows (`expr = "Lmax - L"`,
    `min = 1`). The link refuses values outside, naming each fact in it and where its value came from."""
    expr: Annotated[Expr, FACT_BOUNDS] = doc("Expression over the component's facts.")
    min: FactValue | None = doc("Its least allowed value.", None)
    max: FactValue | None = doc("Its greatest allowed value.", None)
    doc: Text = doc("What the limit protects (shown when a link is refused).", "")

    def problem(self, value: int) -> str | None:
        """How ``value`` of the expression falls outside the limit; None when it is inside."""
        if self.min is not None and value < self.min:
            return f"{value}, below its least allowed value {self.min} by {self.min - value}"
        if self.max is not None and value > self.max:
            return f"{value}, above its greatest allowed value {self.max} by {value - self.max}"
        return None


@dataclass(kw_only=True)
class Facts:
    """[facts]: required facts (with domains) and guaranteed facts (expressions)."""
    requires: dict[Name, FactRequirement] = doc("Facts the component needs, by name. The link sets two itself: "
                                               "`cluster_ctas`, the link spec's [launch] cluster (blocks per "
                                               "thread-block cluster), and `block_threads`, the threads its roles add "
                                               "up to (code compiled for the block's size).", {})
    guarantees: dict[Name, Annotated[Expr, FACT_BOUNDS]] = doc(
        "Facts the component produces, by name, as expressions over its required facts.", {})
    limit: list[FactLimit] = doc("Bounds on expressions over several facts ([[facts.limit]]).", [])


@dataclass(kw_only=True)
class Role:
    """[roles.NAME]: a group of warps running one part of the component."""
    warps: Annotated[int, Bounds(1, 32, "a block has at most 32 warps")] = doc("Warps the role needs.")
    registers: int | None = doc("Per-thread register budget requested with setmaxnreg (24..256, multiple "
                                "of 8); omit for no setmaxnreg.", None)
    warpgroup_aligned: bool = doc("The role issues WGMMA or setmaxnreg: its warps must form whole "
                                  "warpgroups starting at a warp index divisible by 4.", False)
    internal_setmaxnreg: list[SetMaxNReg] = doc("setmaxnreg values the component's own code issues (a component that "
                                         "manages its warpgroups itself, as CUTLASS kernels do); any other "
                                         "setmaxnreg in its code is a conformance error.", [])


@dataclass(kw_only=True)
class Entry:
    """[[entry]]: one extern "C" __device__ function the glue calls: once per tile by its role's warps, or
    once per block by every thread (scope = "block")."""
    symbol: Name = doc("Symbol name in the LTO-IR.")
    role: str = doc("Role whose warps call it.")
    phase: Name = doc("Phase name; buffers list the phases they are live in.")
    ports: list[str] = doc("Register ports passed as arguments after the bindings, in order.", [])
    scope: Annotated[str, OneOf(("role", "block"))] = doc(
        "'role': the role's warps call it once per tile. 'block': a whole-block phase, called once per block after "
        "every role's tile loop, by every thread of the block (ctx.thread = threadIdx.x), so __syncthreads and CUB "
        "block primitives are legal in it; it takes no ports, and no role of the link may use setmaxnreg.", "role")
    when: Annotated[str, OneOf(("end", "start"))] = doc(
        "For scope = 'block': 'end' (after every role's tile loop) or 'start' (before them, after the glue's "
        "mbarrier setup and before any setmaxnreg, so roles with register budgets are allowed): e.g. a pass that "
        "counts or routes what the tile loops then read. A role entry runs in its tile loop.", "end")


@dataclass(kw_only=True)
class SmemBuffer:
    """[[smem]]: a shared-memory buffer."""
    name: Name = doc("Buffer name; becomes a field of the bindings struct holding its byte offset.")
    bytes: SmemBytes = doc("Size in bytes.")
    align: Alignment = doc("Alignment in bytes (1024 for 128B-swizzled TMA tiles).", Expr.parse(16))
    live: list[str] = doc("Phases the buffer is live in; empty means the whole kernel. Buffers live only "
                          "in disjoint phases of one role may share memory.", [])
    offset: SmemOffset | None = doc("Pinned byte offset (fixed inside an opaque binary); omit to let the linker "
                                    "place it.", None)
    default_offset: SmemOffset = doc("Offset the component was packaged with (used by symbol-only linking).",
                                     Expr.parse(0))


@dataclass(kw_only=True)
class TmemBuffer:
    """[[tmem]]: tensor-memory columns (sm_100a/sm_103a) the component uses, all 128 lanes of them. The glue
    allocates every instance's columns in one tcgen05.alloc per block, frees them at the end, and hands each buffer
    its address (lane 0, first column) in a bindings field; the component never allocates them itself."""
    name: Name = doc("Buffer name; becomes an `unsigned` field of the bindings struct holding its tensor-memory "
                     "address (lane in bits 31..16, column in bits 15..0).")
    columns: TmemColumns = doc("32-bit columns (1..512).")
    align: TmemAlignment = doc("Column alignment (a power of two; e.g. 32 where an MMA's accumulator must start "
                               "at a multiple of 32).", Expr.parse(1))
    live: list[str] = doc("Phases the columns are live in; empty means the whole kernel. Buffers live only in "
                          "disjoint phases of one role may share columns.", [])


@dataclass(kw_only=True)
class NamedBarrier:
    """[[named_barrier]]: a bar.sync/bar.arrive barrier used by the component."""
    name: Name = doc("Barrier name; becomes a field of the bindings struct holding its ID.")
    threads: BarrierThreads = doc("Threads taking part (a multiple of 32).")
    id: int | None = doc("Pinned ID (1..15); omit to let the linker choose.", None)
    default_id: int = doc("ID the component was packaged with (used by symbol-only linking).", 1)


@dataclass(kw_only=True)
class MBarrier:
    """[[mbarrier]]: an array of mbarriers in shared memory, initialized by the glue."""
    name: Name = doc("Name; becomes a field of the bindings struct holding the byte offset of slot 0.")
    count: MbarrierCount = doc("Number of mbarriers in the array.", Expr.parse(1))
    arrivals: Arrivals = doc("Expected arrival count per phase.")
    tx_bytes: TxBytes = doc("Transaction bytes expected per phase (TMA / bulk copies), 0 if none.", Expr.parse(0))
    default_offset: MbarrierOffset = doc("Offset the component was packaged with (used by symbol-only linking).",
                                         Expr.parse(0))


@dataclass(kw_only=True)
class Reserve:
    """[reserve]: resources the component's opaque code uses internally (always pinned)."""
    named_barriers: list[int] = doc("Named barrier IDs used inside the code that no other part may use "
                                    "(CUTLASS reserves 1..7, for example).", [])
    mbarriers_in: list[str] = doc("[[smem]] buffers in which the component places and initializes mbarriers "
                                  "of its own (CUTLASS pipelines keep theirs inside SharedStorage); mbarrier "
                                  "operations inside these buffers are its business.", [])
    tmem_columns: TmemReserve = doc(
        "Tensor-memory columns the component's own code allocates with tcgen05.alloc (the most it holds at once; "
        "0: it allocates none). The link keeps them free beside the glue's allocation, and the glue then leaves "
        "the block's allocation permit to it; any tcgen05.alloc in a component that declares 0 is a conformance "
        "error.", Expr.parse(0))


@dataclass(kw_only=True)
class TmaBox:
    """[operand.tma]: the component moves this operand with the TMA engine (cp.async.bulk.tensor). The
    runtime encodes the tensor map from the caller's array at launch (cuTensorMapEncodeTiled) and the
    kernel receives it as a __grid_constant__ parameter; the bindings field is a pointer to it."""
    box: list[TmaExtent] = doc("Elements copied per TMA instruction in each dimension, row-major like `shape` "
                               "(each 1..256; the innermost box times the element size at most the swizzle span).")
    swizzle: TmaSwizzle = doc(
        f"Shared-memory swizzle span in bytes, one of {', '.join(map(str, TMA_SWIZZLES))} "
        "(128 for WGMMA's 128B-swizzled K-major tiles); an expression over facts where a fact picks the "
        "component's smem layout.", Expr.parse(128))
    partial: list[int] = doc(
        "Dimensions (0 the outermost) whose last box may run past the tensor: TMA fills zeros where it loads and "
        "leaves out what it would store there, and the component's code expects that (a partial last tile). Along "
        "every other dimension the box must divide the tensor.", [])


@dataclass(kw_only=True)
class Operand:
    """[[operand]]: a global-memory tensor the component reads or writes (a kernel parameter)."""
    name: Name = doc("Operand name; becomes a pointer field of the bindings struct.")
    dtype: DType = doc(f"Element type: {', '.join(DTYPES)}.")
    shape: list[TensorDim] = doc("Shape as expressions over facts (row-major, contiguous).")
    access: Annotated[str, OneOf(("read", "write", "readwrite"))] = doc("'read', 'write' or 'readwrite'.", "read")
    tma: TmaBox | None = doc("Set when the component reads or writes it through a TMA tensor map.", None)
    align: Annotated[int, OneOf(tuple(2 ** k for k in range(9)))] | None = doc(
        "Byte alignment the component's accesses need (a power of two up to 256; 16 for 16-byte vector "
        "loads). The runtime refuses a pointer that is not aligned, naming the operand. A TMA operand "
        "needs 16 whatever this says.", None)


@dataclass(kw_only=True)
class Workspace:
    """[[workspace]]: global scratch memory the link owns (counters, offsets, tile tables): no caller
    passes it; the runtime allocates it once and, with `zero`, clears it on the launch's stream
    before every launch (so a CUDA graph replays the clearing too), or with `zero_once` before its
    first launch only."""
    name: Name = doc("Name; becomes a `unsigned char*` field of the bindings struct.")
    bytes: Annotated[Expr, Bounds(1, 2 ** 34, "a workspace holds 1 byte to 16 GiB")] = doc("Size in bytes.")
    zero: bool = doc("Cleared to zero before every launch (counters and flags need it).", True)
    zero_once: bool = doc("Cleared to zero before the runtime's first launch only: the kernel leaves it zero again by "
                          "the end of every launch (a count its last user stores back to 0, pl_grid_barrier's "
                          "counter), which saves the memset before each launch (about a microsecond). Needs "
                          "`zero = false`.", False)
    grid_sync: bool = doc("Blocks wait on each other through it (pl_grid_sync, pl_grid_barrier): the link then "
                          "requires every block resident at once (a persistent grid, at most one block per SM), and "
                          "`zero` (pl_grid_sync) or `zero_once` (pl_grid_barrier).", False)
    count_max: Expr | None = doc(
        "The int32 at its start is a count the component writes (the tile count a link reads with [schedule] "
        "tiles_from), and this expression over facts is the most it can ever be: the link sizes its tile loops "
        "from it and refuses a schedule that bounds the count lower (the tiles past it would never run).", None)


@dataclass(kw_only=True)
class Port:
    """[[port]]: a tensor handed to or taken from another component: inside the block (smem,
    registers), or through global memory (global: an out-port names one of its [[workspace]]s, or a
    plain operand so that two components read one caller array; the in-port's bindings field points
    at it). A global hand-over is ordered by the
    components themselves (a grid barrier, or counters they release and acquire); the link checks
    that both sides agree on dtype and shape and that the workspace holds the tensor."""
    name: Name = doc("Port name.")
    direction: Annotated[str, OneOf(("out", "in"))] = doc("'out' (this component produces it) or 'in'.")
    space: Annotated[str, OneOf(("smem", "registers", "global", "tmem"))] = doc(
        "'smem', 'registers', 'global' (a [[workspace]] or plain operand of the producer; on the in side "
        "an `unsigned char*` bindings field named after the port) or 'tmem' (a [[tmem]] buffer of the producer, "
        "read in place: on the in side an `unsigned` bindings field named after the port holds its address).")
    dtype: DType = doc(f"Element type: {', '.join(DTYPES)}.")
    shape: dict[Name, TileDim] = doc("Named dimensions in order, e.g. { row = 'tile_rows', col = 'tile_cols' }.")
    buffer: str | None = doc("smem ports: the [[smem]] buffer that holds the tensor; global out-ports: the "
                             "[[workspace]] or plain operand that holds it; tmem out-ports: the [[tmem]] buffer.",
                             None)
    offset: Expr | None = doc("smem ports: element offset as an expression over the dimension names.", None)
    values: RegisterValues | None = doc("register ports: values per thread (the array length).", None)
    fragment: dict[Name, Expr] | None = doc("register ports: each dimension's index as an expression over "
                                           "t (thread in role) and v (value index); tmem ports: over lane (0..127) "
                                           "and col (the column from the buffer's address, 0 .. elements / 128 - 1).",
                                           None)
    mbarriers: list[str] = doc("smem ports: the component's mbarriers that synchronize the hand-over; "
                               "the peer must declare the same names with equal counts.", [])
    protocol: Annotated[str, OneOf(("mbarrier_ring", "barrier", "registers"))] = doc(
        "'mbarrier_ring' (producer/consumer ring on the mbarriers), 'barrier' (glue places named barriers "
        "around the transfer) or 'registers'.", "barrier")
    reduce: Annotated[str, OneOf(("none", "sum"))] = doc(
        "Register out-ports of a mainloop with [schedule] k_tiles: 'sum' if the values of k-ranges add up to the "
        "tile's (an fp32 accumulator), so that a link with [schedule] split may cut a tile between blocks and "
        "have the glue add the partial fragments; 'none' otherwise.", "none")


CLUSTER_SHARES = ("tile_col", "tile_row", "none")


@dataclass(kw_only=True)
class ClusterSharesByFact:
    """[schedule.cluster_shares_by]: what the blocks of a cluster must have in common, chosen by one of the
    component's facts (a mainloop that multicasts its B tile along a tile column or its A tile along a row,
    as a link-time fact says)."""
    fact: Name = doc("A required fact of the component; its value v (0, 1, ...) picks `values[v]`.")
    values: list[Annotated[str, OneOf(CLUSTER_SHARES)]] = doc(
        "'tile_col', 'tile_row' or 'none' for each value of the fact, from 0 (see `cluster_shares`).")


@dataclass(kw_only=True)
class Schedule:
    """[schedule]: the tile order the component assumes."""
    order: Annotated[str, OneOf(("row_major", "column_major", "any"))] = doc(
        "'row_major', 'column_major' or 'any'.", "any")
    cluster_shares: Annotated[str, OneOf(CLUSTER_SHARES)] = doc(
        "What the blocks of a cluster ([launch] cluster > 1) must have in common, where the component shares "
        "data between them (a mainloop that multicasts one operand's tile): 'tile_col' (consecutive tile rows "
        "of one column: the link's order must be column_major), 'tile_row' (consecutive columns of one row: "
        "row_major), or 'none'.", "none")
    cluster_shares_by: ClusterSharesByFact | None = doc(
        "Instead of `cluster_shares`: the value of one of the component's facts chooses it.", None)
    k_tiles: KTiles | None = doc(
        "k-tiles in one tile's reduction, as an expression over facts (a GEMM mainloop: 'K / 64'). Set, the "
        "glue tells each call which of them to run (ctx.k_begin .. ctx.k_end) and where its ring stands "
        "(ctx.stage_base); unset, those fields are 0.", None)
    tiles: list[Expr] | None = doc(
        "The tile grid the component's per-tile entries cover, [rows] or [rows, cols] as expressions over its "
        "facts (a GEMM: ['M / tile_m', 'ceil_div(N, tile_n)']): tile (ctx.tile_row, ctx.tile_col) of it is a tile "
        "of its operands. The link runs exactly this grid, and refuses a spec whose [schedule] tiles evaluate "
        "otherwise (fewer tiles leave output unwritten, more run past the operands).", None)

    def shares(self, facts: dict[str, int]) -> str:
        """What the blocks of a cluster must have in common under the component's ``facts``."""
        by = self.cluster_shares_by
        return self.cluster_shares if by is None else by.values[facts[by.fact]]


@dataclass(kw_only=True)
class Contract:
    """A component contract (one TOML file)."""
    component: Identity = doc("Identity of the component.")
    roles: dict[Name, Role] = doc("Roles by name.")
    entry: list[Entry] = doc("Entry points, one per role and phase.")
    facts: Facts = doc("Facts required and guaranteed.", Facts())
    smem: list[SmemBuffer] = doc("Shared-memory buffers.", [])
    tmem: list[TmemBuffer] = doc("Tensor-memory buffers (sm_100a/sm_103a).", [])
    named_barrier: list[NamedBarrier] = doc("Named barriers.", [])
    mbarrier: list[MBarrier] = doc("mbarrier arrays.", [])
    reserve: Reserve = doc("Resources used internally and pinned.", Reserve())
    operand: list[Operand] = doc("Global-memory operands.", [])
    workspace: list[Workspace] = doc("Global scratch memory owned by the link, cleared before each launch.", [])
    port: list[Port] = doc("Ports to other components.", [])
    schedule: Schedule = doc("Tile schedule assumptions.", Schedule())

    # --- derived views -------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.component.name

    def builtin_names(self) -> set[str]:
        """Names every expression may use besides facts: each role's warps and threads."""
        return {f"{r}_{k}" for r in self.roles for k in ("warps", "threads")}

    def fact_names(self) -> set[str]:
        return set(self.facts.requires) | set(self.facts.guarantees)

    def compile_facts(self) -> list[str]:
        return [n for n, r in self.facts.requires.items() if r.compile]

    def role_env(self) -> dict[str, int]:
        return {**{f"{r}_warps": v.warps for r, v in self.roles.items()},
                **{f"{r}_threads": 32 * v.warps for r, v in self.roles.items()}}

    def phases(self) -> dict[str, str]:
        """phase -> role."""
        return {e.phase: e.role for e in self.entry}

    def port_by_name(self, name: str) -> Port | None:
        return next((p for p in self.port if p.name == name), None)


def load_contract(path: str | Path) -> Contract:
    path = Path(path)
    return _build(schema.read_toml(path, ContractError, "contract"), str(path))


def parse_contract_text(text: str, origin: str) -> Contract:
    """Load a contract stored inside a package (``origin`` names it in errors)."""
    return _build(schema.parse_toml(text, origin, ContractError), origin)


def _build(data: dict, file: str) -> Contract:
    identity = data.get("component")
    name = identity.get("name") if isinstance(identity, dict) else None
    if not isinstance(name, str) or schema.identifier_problem(name):
        name = None  # an unusable name is not repeated in every error; the error about it quotes it
    contract = schema.load(Contract, data, file=file, path="", error=ContractError, component=name)
    validate(contract, file)
    return contract


# The glue's kernel declares these around every entry call: an entry of that name could not be called.
_GLUE_LOCALS = ("p", "ctx")


def validate(c: Contract, file: str) -> None:
    """Checks that need only this contract: references between its parts, fact domains, and every
    expression the default facts determine, evaluated and held to its field's limits. Types,
    identifiers and literal values were checked on load, by the schema's constraints."""
    err = _errors(c, file)
    for check in (_check_archs, _check_roles, _check_namespace, _check_fact_domains, _check_entries, _check_references,
                  _check_expression_names, _check_guarantee_cycles, _check_barrier_ids, _check_cluster_shares,
                  _check_schedule_tiles):
        check(c, err)
    env = default_facts(c, file)
    check_values(c, env, file)
    _check_pinned_smem(c, env, err)
    for i, limit in enumerate(c.facts.limit):  # the defaults (what a symbol link uses) keep the contract's limits
        if limit.expr.names() <= env.keys() and (problem := limit.problem(limit.expr.eval(env))):
            raise err(f"facts.limit[{i}]", f"the default facts give {limit.expr.text} = {problem}",
                      "change the facts' defaults or the limit")


def _errors(c: Contract, file: str):
    def err(field: str, msg: str, hint: str | None = None) -> ContractError:
        return ContractError(msg, file=file, component=c.name, field=field, hint=hint)
    return err


def _check_archs(c: Contract, err) -> None:
    archs = c.component.archs
    if not archs or len(set(archs)) != len(archs):
        raise err("component.archs", f"targets {archs}: at least one, each once", "e.g. archs = [\"sm_90a\"]")


def _check_roles(c: Contract, err) -> None:
    if not c.roles:
        raise err("roles", "a component needs at least one role")
    for rname, role in c.roles.items():
        if role.warpgroup_aligned and role.warps % 4:
            raise err(f"roles.{rname}.warps", f"role '{rname}' is warpgroup-aligned but has {role.warps} warps, "
                      "not a multiple of 4", "WGMMA and setmaxnreg work on whole warpgroups of 4 warps")
        if role.registers is not None:
            lo, hi = SETMAXNREG_RANGE
            if not lo <= role.registers <= hi or role.registers % 8:
                raise err(f"roles.{rname}.registers", f"setmaxnreg value {role.registers} must be in [{lo}, {hi}] "
                          "and a multiple of 8")


def _check_namespace(c: Contract, err) -> None:
    """Field names of the generated bindings struct are unique; fact names are free in expressions."""
    fields = [(n, f"facts.requires.{n}") for n in c.facts.requires] + \
             [(n, f"facts.guarantees.{n}") for n in c.facts.guarantees] + \
             [(b.name, f"smem[{i}].name") for i, b in enumerate(c.smem)] + \
             [(b.name, f"named_barrier[{i}].name") for i, b in enumerate(c.named_barrier)] + \
             [(b.name, f"mbarrier[{i}].name") for i, b in enumerate(c.mbarrier)] + \
             [(o.name, f"operand[{i}].name") for i, o in enumerate(c.operand)] + \
             [(w.name, f"workspace[{i}].name") for i, w in enumerate(c.workspace)] + \
             [(b.name, f"tmem[{i}].name") for i, b in enumerate(c.tmem)] + \
             [(p.name, f"port[{i}].name") for i, p in enumerate(c.port)
              if p.space in ("global", "tmem") and p.direction == "in"]
    taken = {**{n: "a role size" for n in c.builtin_names()}, **{n: "an expression function" for n in FUNCTIONS}}
    seen: dict[str, str] = {}
    for name, where in fields:
        if name in seen:
            raise err(where, f"name '{name}' is used twice (also {seen[name]})",
                      "facts, buffers, barriers and operands share one namespace (the bindings struct)")
        if where.startswith("facts.") and name in taken:
            raise err(where, f"fact name '{name}' is {taken[name]} already", "rename the fact")
        seen[name] = where


def _check_bound_fact(c: Contract, name: str, where: str, err) -> None:
    """A fact that may be smaller at launch than linked (``bound``) reaches the code only through TMA
    dimensions that are exactly the fact and may be partial: anything else would be sized or bounded by the
    linked value (a workspace, a port, a plain pointer's extent)."""
    if c.facts.requires[name].compile:
        raise err(f"{where}.bound", f"fact '{name}' is compile-time: a kernel holds one value of it, not a bound",
                  "drop `bound`, or make the fact link-time")
    for i, o in enumerate(c.operand):
        for d, e in enumerate(o.shape):
            if name not in e.names():
                continue
            if e.text.strip() != name or o.tma is None or d not in o.tma.partial:
                raise err(f"operand[{i}].shape", f"operand '{o.name}' dimension {d} ({e.text!r}) mentions bound fact "
                          f"'{name}', but only a TMA dimension that is '{name}' itself and listed under tma.partial can "
                          "be smaller at launch than linked", f"make that dimension '{name}' with tma.partial = [{d}], "
                          f"or drop `bound` from facts.requires.{name}")
    for section, items in (("workspace", c.workspace), ("port", c.port), ("smem", c.smem), ("tmem", c.tmem)):
        for i, item in enumerate(items):
            if any(name in e.names() for e in _exprs_of(item)):
                raise err(f"{section}[{i}]", f"{section} '{item.name}' is sized by bound fact '{name}': it would be "
                          "sized for the linked value, not the one at launch", f"drop `bound` from {where}")


def _check_launch_fact(c: Contract, name: str, where: str, err) -> None:
    """A fact given at launch (``launch``) reaches the code only through its binding: an expression anywhere
    but a [[facts.limit]] would fold the linked value into something the glue or the linker sizes with it."""
    req = c.facts.requires[name]
    if req.compile or req.bound:
        kind = "compile-time" if req.compile else "bound"
        raise err(f"{where}.launch", f"fact '{name}' is {kind}: it cannot also be given at launch",
                  f"drop `launch`, or `{'compile' if req.compile else 'bound'}`, from {where}")
    for path, e, _ in schema.expressions(c):
        if name in e.names() and not re.fullmatch(r"facts\.limit\[\d+\]\.expr", path):
            raise err(path, f"{path} ({e.text!r}) mentions fact '{name}', which is given at launch: the link would "
                      "fold the linked value into it", f"drop `launch` from {where}, or keep '{name}' out of {path}")


def _exprs_of(item) -> list[Expr]:
    """The expressions in a contract entry's fields (one level, lists and dicts included)."""
    out = []
    for value in vars(item).values():
        values = value.values() if isinstance(value, dict) else value if isinstance(value, list) else [value]
        out += [v for v in values if isinstance(v, Expr)]
    return out


def _check_fact_domains(c: Contract, err) -> None:
    for name, req in c.facts.requires.items():
        where = f"facts.requires.{name}"
        if req.set is not None and not req.set:
            raise err(f"{where}.set", "the set of allowed values is empty", "list at least one value, or drop 'set'")
        if req.range is not None and (len(req.range) != 2 or req.range[0] > req.range[1]):
            raise err(f"{where}.range", f"range must be [low, high], got {req.range}")
        if req.compile and req.default is None:
            raise err(f"{where}.default", f"compile-time fact '{name}' needs a default (the value a plain pack uses)")
        if req.bound:
            _check_bound_fact(c, name, where, err)
        if req.launch:
            _check_launch_fact(c, name, where, err)
        problems = req.problems(req.default) if req.default is not None else []
        if problems:
            raise err(f"{where}.default", f"default {req.default} is {' and '.join(problems)}",
                      "choose a default inside the fact's own domain")
    for i, limit in enumerate(c.facts.limit):
        if limit.min is None and limit.max is None:
            raise err(f"facts.limit[{i}]", f"limit on {limit.expr.text!r} has neither `min` nor `max`",
                      "give its least (`min`) or greatest (`max`) allowed value")
        if limit.min is not None and limit.max is not None and limit.min > limit.max:
            raise err(f"facts.limit[{i}].max", f"limit on {limit.expr.text!r} allows nothing: min {limit.min} > "
                      f"max {limit.max}")


def _check_schedule_tiles(c: Contract, err) -> None:
    """[schedule] tiles, where given, has the one or two dimensions a link's tile grid has."""
    if c.schedule.tiles is not None and not 1 <= len(c.schedule.tiles) <= 2:
        raise err("schedule.tiles", f"{len(c.schedule.tiles)} tile-grid dimensions; a tile grid has 1 or 2",
                  "give [rows] or [rows, cols], or leave tiles out")


def _check_cluster_shares(c: Contract, err) -> None:
    """`cluster_shares_by` names a required fact whose every allowed value picks one of its `values`."""
    by = c.schedule.cluster_shares_by
    if by is None:
        return
    where = "schedule.cluster_shares_by"
    if c.schedule.cluster_shares != "none":
        raise err(where, f"both cluster_shares ('{c.schedule.cluster_shares}') and cluster_shares_by are given",
                  "keep one: cluster_shares for a fixed answer, cluster_shares_by where a fact chooses it")
    req = c.facts.requires.get(by.fact)
    if req is None:
        raise err(f"{where}.fact", f"'{by.fact}' is not a required fact of the component",
                  f"required facts: {', '.join(c.facts.requires) or 'none'}")
    allowed = req.set
    if allowed is None and req.range is not None and req.range[1] - req.range[0] < 64:
        allowed = list(range(req.range[0], req.range[1] + 1))
    if allowed is None:
        raise err(f"{where}.fact", f"fact '{by.fact}' has no small set of values to choose by",
                  f"give it `set = [0, ..., {len(by.values) - 1}]`")
    outside = [v for v in allowed if not 0 <= v < len(by.values)]
    if outside:
        raise err(f"{where}.values", f"fact '{by.fact}' may be {outside[0]}, which picks no entry of the "
                  f"{len(by.values)} values", f"list a value for each of {sorted(allowed)}, from 0")


def _check_entries(c: Contract, err) -> None:
    if not c.entry:
        raise err("entry", "a component needs at least one [[entry]]")
    for i, e in enumerate(c.entry):
        if e.role not in c.roles:
            raise err(f"entry[{i}].role", f"unknown role {show(e.role)}", f"roles: {', '.join(c.roles)}")
        if e.symbol in _GLUE_LOCALS:
            raise err(f"entry[{i}].symbol", f"'{e.symbol}' is a name the glue's kernel declares around the call",
                      "rename the entry function")
        for p in e.ports:
            port = c.port_by_name(p)
            if port is None or port.space != "registers":
                raise err(f"entry[{i}].ports", f"{show(p)} is not a register port of this component")
        if e.when != "end" and e.scope != "block":
            raise err(f"entry[{i}].when", f"when = {show(e.when)} is for whole-block phases (scope = \"block\"); a "
                      "role's entry runs in its tile loop", "drop `when`, or make the entry scope = \"block\"")
    if len(c.phases()) != len(c.entry):
        raise err("entry", "two entries share one phase name")


def _check_references(c: Contract, err) -> None:
    """Names one part of the contract uses for another: phases, buffers, mbarriers, ports; and a
    grid barrier's counter starts at zero."""
    for i, w in enumerate(c.workspace):
        if w.zero and w.zero_once:
            raise err(f"workspace[{i}].zero_once", f"workspace '{w.name}' is cleared before every launch (`zero`, "
                      "the default) and before the first only (`zero_once`)", "add `zero = false`, or drop `zero_once`")
        if w.grid_sync and not (w.zero or w.zero_once):
            raise err(f"workspace[{i}].zero", f"workspace '{w.name}' is a grid barrier counter (grid_sync) but is "
                      "never zeroed: the barrier would pass at once or never", "drop `zero = false` (pl_grid_sync), or "
                      "set `zero_once = true` (pl_grid_barrier)")
    phases, buffers, mbarriers = c.phases(), {b.name for b in c.smem}, {m.name for m in c.mbarrier}
    for i, b in enumerate(c.smem):
        for ph in b.live:
            if ph not in phases:
                raise err(f"smem[{i}].live", f"unknown phase {show(ph)}", f"phases: {', '.join(phases)}")
    for i, b in enumerate(c.tmem):
        for ph in b.live:
            if ph not in phases:
                raise err(f"tmem[{i}].live", f"unknown phase {show(ph)}", f"phases: {', '.join(phases)}")
    for name in c.reserve.mbarriers_in:
        if name not in buffers:
            raise err("reserve.mbarriers_in", f"{show(name)} is not one of this component's [[smem]] buffers")
    for i, o in enumerate(c.operand):
        if o.tma is not None and (len(o.tma.box) != len(o.shape) or not 1 <= len(o.shape) <= 5):
            raise err(f"operand[{i}].tma.box", f"box has {len(o.tma.box)} dimension(s) but the operand has "
                      f"{len(o.shape)}", "one box extent per shape dimension (TMA takes 1 to 5)")
        if o.tma is not None:
            for j, dim in enumerate(o.tma.partial):
                if not 0 <= dim < len(o.shape) or dim in o.tma.partial[:j]:
                    raise err(f"operand[{i}].tma.partial[{j}]", f"dimension {dim} is not one of the operand's "
                              f"{len(o.shape)} (0 .. {len(o.shape) - 1}), or is named twice",
                              "name each dimension whose last box may be partial once")
    ports = [p.name for p in c.port]
    for i, p in enumerate(c.port):
        where = f"port[{i}]"
        if ports.index(p.name) != i:
            raise err(f"{where}.name", f"port name '{p.name}' is used twice")
        if not p.shape:
            raise err(f"{where}.shape", f"port '{p.name}' has no dimensions")
        if p.reduce == "sum" and (p.direction, p.space, p.dtype) != ("out", "registers", "fp32"):
            raise err(f"{where}.reduce", f"port '{p.name}' ({p.direction}, {p.space}, {p.dtype}) says reduce = \"sum\", "
                      "which only an fp32 register out-port can: the glue adds its partial fragments in fp32",
                      'drop reduce, or declare it on the accumulator out-port')
        if p.space == "smem":
            if p.buffer not in buffers:
                raise err(f"{where}.buffer", f"smem port '{p.name}' must name one of its [[smem]] buffers")
            if p.offset is None:
                raise err(f"{where}.offset", f"smem port '{p.name}' needs an offset (layout) expression")
            unknown = [m for m in p.mbarriers if m not in mbarriers]
            if unknown:
                raise err(f"{where}.mbarriers", f"unknown mbarrier {show(unknown[0])}")
            if p.protocol not in ("mbarrier_ring", "barrier"):
                raise err(f"{where}.protocol", f"smem ports use 'mbarrier_ring' or 'barrier', not '{p.protocol}'")
        elif p.space == "global":
            _check_global_port(c, p, where, err)
        elif p.space == "tmem":
            _check_tmem_port(c, p, where, err, mbarriers)
        else:
            if p.values is None or p.fragment is None:
                raise err(where, f"register port '{p.name}' needs 'values' and 'fragment'")
            if set(p.fragment) != set(p.shape):
                raise err(f"{where}.fragment", f"fragment dimensions {sorted(p.fragment)} must match shape "
                          f"dimensions {sorted(p.shape)}")
            if not any(p.name in e.ports for e in c.entry):
                raise err(where, f"register port '{p.name}' is not passed to any entry", "list it in an entry's ports")


def _check_tmem_port(c: Contract, p: Port, where: str, err, mbarriers: set[str]) -> None:
    """A tensor-memory port is one of the producer's [[tmem]] buffers, read in place by the consumer: 32-bit
    elements laid over (lane, col) by `fragment`, handed over on mbarriers (an MMA completes asynchronously and
    signals one with tcgen05.commit; the reader frees the columns by arriving on another)."""
    tmem = [b.name for b in c.tmem]
    if p.direction == "out" and p.buffer not in tmem:
        raise err(f"{where}.buffer", f"tmem out-port '{p.name}' must name one of its [[tmem]] buffers",
                  f"it has: {', '.join(tmem) or 'none (declare a [[tmem]] buffer)'}")
    if p.direction == "in" and p.buffer is not None:
        raise err(f"{where}.buffer", f"tmem in-port '{p.name}' names a buffer, but the producer's [[tmem]] buffer "
                  "holds the tensor", "drop `buffer`: the bindings field of the port holds its address")
    if DTYPES[p.dtype][1] != 4:
        raise err(f"{where}.dtype", f"tmem port '{p.name}' holds {p.dtype}, but a tensor-memory port holds one "
                  "32-bit element a cell (fp32 or int32)", "hand 16- and 8-bit tensors over through smem")
    if p.fragment is None or set(p.fragment) != set(p.shape):
        raise err(f"{where}.fragment", f"tmem port '{p.name}' needs `fragment`: each of its dimensions "
                  f"{sorted(p.shape)} as an expression over lane and col", 'e.g. { row = "lane", col = "col" }')
    for key in ("offset", "values"):
        if getattr(p, key) is not None:
            raise err(f"{where}.{key}", f"tmem port '{p.name}' has `{key}`, which is for smem or register ports",
                      f"drop `{key}`: `fragment` lays the tensor over lanes and columns")
    if p.protocol != "mbarrier_ring" or not p.mbarriers:
        raise err(f"{where}.protocol", f"tmem port '{p.name}' needs protocol = \"mbarrier_ring\" and its mbarriers: "
                  "tensor memory is written by asynchronous MMAs, which signal an mbarrier when done",
                  'protocol = "mbarrier_ring", mbarriers = ["<full>", "<empty>"]')
    unknown = [m for m in p.mbarriers if m not in mbarriers]
    if unknown:
        raise err(f"{where}.mbarriers", f"unknown mbarrier {show(unknown[0])}")


def _check_global_port(c: Contract, p: Port, where: str, err) -> None:
    """A global out-port is one of the component's workspaces; an in-port is only a pointer. Neither
    has a layout inside the block or a glue protocol."""
    holders = [w.name for w in c.workspace] + [o.name for o in c.operand if o.tma is None]
    if p.direction == "out" and p.buffer not in holders:
        raise err(f"{where}.buffer", f"global out-port '{p.name}' must name one of its [[workspace]]s or plain "
                  "(non-TMA) operands", f"it has: {', '.join(holders) or 'none (declare a workspace)'}")
    if p.direction == "in" and p.buffer is not None:
        raise err(f"{where}.buffer", f"global in-port '{p.name}' names a buffer, but the producer's workspace "
                  "holds the tensor", "drop `buffer`: the bindings field of the port points at it")
    for key in ("offset", "values", "fragment"):
        if getattr(p, key) is not None:
            raise err(f"{where}.{key}", f"global port '{p.name}' has `{key}`, which is for smem or register ports",
                      f"drop `{key}`: a global tensor is row-major in its workspace")
    if p.mbarriers or p.protocol != "barrier":
        field = "mbarriers" if p.mbarriers else "protocol"
        raise err(f"{where}.{field}", f"global port '{p.name}' has a glue protocol, but the components order a "
                  "global hand-over themselves (a grid barrier, or counters)", f"drop `{field}`")


def _check_expression_names(c: Contract, err) -> None:
    known = c.fact_names() | c.builtin_names()
    scoped: dict[str, set[str]] = {}  # layouts also name the port's dimensions, fragments t and v
    for i, p in enumerate(c.port):
        scoped[f"port[{i}].offset"] = set(p.shape)
        names = {"lane", "col"} if p.space == "tmem" else {"t", "v"}
        scoped.update({f"port[{i}].fragment.{d}": names for d in p.fragment or {}})
    for path, e, _ in schema.expressions(c):
        unknown = e.names() - known - scoped.get(path, set())
        if unknown:
            raise err(path, f"expression {e.text!r} uses unknown name(s) {', '.join(sorted(unknown))}",
                      f"declare them under [facts.requires] or use one of: {', '.join(sorted(known))}")


def _check_guarantee_cycles(c: Contract, err) -> None:
    """A guarantee is computed from the facts it names: one that needs itself, directly or through other
    guarantees, can never be computed."""
    needs = {n: e.names() & c.facts.guarantees.keys() for n, e in c.facts.guarantees.items()}
    try:
        graphlib.TopologicalSorter(needs).prepare()
    except graphlib.CycleError as exc:
        cycle = exc.args[1][:-1]  # [a, b, a]: each node is needed by the next
        first = min(cycle, key=list(needs).index)  # named from the one declared first
        at = cycle.index(first)
        order = [first, *reversed(cycle[at + 1:] + cycle[:at])]  # each needs the next
        through = f" through {', '.join(order[1:])}" if len(order) > 1 else ""
        steps = ", ".join(f"{n} = {c.facts.guarantees[n].text!r}" for n in order)
        raise err(f"facts.guarantees.{first}", f"guarantee '{first}' is computed from itself{through}: {steps}",
                  "compute each guarantee from [facts.requires] facts, or from guarantees that do not need it "
                  "back") from None


def _check_barrier_ids(c: Contract, err) -> None:
    pinned_ids: dict[int, str] = {}
    for i, nb in enumerate(c.named_barrier):
        for key, v in (("id", nb.id), ("default_id", nb.default_id)):
            if v is not None and not 1 <= v <= MAX_NAMED_BARRIER_ID:
                raise err(f"named_barrier[{i}].{key}", f"barrier ID {v} is outside 1..{MAX_NAMED_BARRIER_ID}",
                          "ID 0 is __syncthreads; the hardware has 16 IDs")
        if nb.id is not None and nb.id in pinned_ids:
            raise err(f"named_barrier[{i}].id", f"barriers '{pinned_ids[nb.id]}' and '{nb.name}' are both pinned at "
                      f"ID {nb.id}", "two barriers of one component need two IDs (or declare one barrier)")
        if nb.id is not None:
            pinned_ids[nb.id] = nb.name
    for v in c.reserve.named_barriers:
        if not 1 <= v <= MAX_NAMED_BARRIER_ID:
            raise err("reserve.named_barriers", f"barrier ID {v} is outside 1..{MAX_NAMED_BARRIER_ID}")


def default_facts(c: Contract, file: str) -> dict[str, int]:
    """The facts the component is packaged with: each default, the role sizes, and the guarantees
    those determine (each held to its limits before another guarantee may use it)."""
    env = {**{n: r.default for n, r in c.facts.requires.items() if r.default is not None}, **c.role_env()}
    pending = dict(c.facts.guarantees)
    while ready := {n: e for n, e in pending.items() if e.names() <= env.keys()}:
        for n, e in ready.items():
            env[n] = _value(c, e, env, f"facts.guarantees.{n}", (FACT_BOUNDS,), file)
            del pending[n]
    return env


def check_values(c: Contract, env: dict[str, int], file: str) -> None:
    """Evaluate every expression that ``env`` determines and hold it to its field's limits (on load:
    the default facts; a link may pass the facts it resolved)."""
    for path, e, constraints in schema.expressions(c):
        if e.names() <= env.keys():
            _value(c, e, env, path, constraints, file)


def _value(c: Contract, e: Expr, env: dict[str, int], path: str, constraints: tuple, file: str) -> int:
    err = _errors(c, file)
    facts = f" (with {', '.join(f'{n}={env[n]}' for n in sorted(e.names()))})" if e.names() else ""
    try:
        value = e.eval(env, where=path)
    except ExpressionError as exc:
        raise err(path, exc.message + facts, exc.hint) from None
    for con in constraints:
        problem = con.problem(value)
        if problem:
            raise err(path, f"{e.text!r} = {problem}{facts}" if e.names() else problem, con.hint)
    return value


def _check_pinned_smem(c: Contract, env: dict[str, int], err) -> None:
    """Pinned buffers are fixed inside the component's code: aligned, and apart while both are live."""
    placed: list[tuple[int, int, int, set[str]]] = []
    for i, b in enumerate(c.smem):
        if b.offset is None or not (b.offset.names() | b.bytes.names() | b.align.names()) <= env.keys():
            continue
        off, size, align = (x.eval(env) for x in (b.offset, b.bytes, b.align))
        if off % align:
            raise err(f"smem[{i}].offset", f"pinned offset {off} is not a multiple of the buffer's alignment {align}")
        for j, start, end, live in placed:
            if start < off + size and off < end and (not live or not b.live or live & set(b.live)):
                raise err(f"smem[{i}].offset", f"pinned bytes [{off}, {off + size}) overlap [{start}, {end}) of "
                          f"smem[{j}] ('{c.smem[j].name}'), and both are live at once",
                          "pin them apart, or give them disjoint phases under 'live'")
        placed.append((i, off, off + size, set(b.live)))

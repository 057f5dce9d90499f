"""Stage 5: generate the glue, the kernel that owns everything shared.

The generated CUDA C++ holds the __global__ entry with __launch_bounds__(threads, 1), mbarrier
initialization, role dispatch by warp range, setmaxnreg per role, the persistent tile loop of the
agreed schedule, calls into each component entry with its bindings as literal constants, the
in-block transfers between ports, and after the tile loops the whole-block phases (entries of
scope "block", in every warp). Nothing here is decided: every number comes from the plan.

``generate`` returns a Glue: the statements (glue_ir.py: each decision the audit and the model of the
glue's meaning check is a typed statement), the text they print, and the tables written along with
them (each component call's line, the trace spans, the sanitize sites). Nothing reads the text back.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import bindgen
from ..abi import PARTIALS, REPORT_CLAIM, REPORT_LAYOUT, TILE_COUNTS, ReportKind
from ..contract import DTYPES, Port
from ..refs import Ref
from ..stream_k import ROW_FIELDS, block_row, block_units, stream_blocks, whole_tiles
from .abi import fact_param, layout_abi, split_slot_floats
from .layout import entry_register_cap
from .glue_ir import (At, Assign, Bin, BlockIter, Cast, Cond, ContributorLoop, EntryCall, Expr, Fn, KernelHead, KRange,
                      LaunchFactLoad, Let, LoopEnd, MbarInit, Padding, Par, RegStore, RoleBranch, RoleThreads, SetMaxNReg, SkipIf,
                      SlotRead, SmemCopy, SplitCount, SplitTable, Sync, Text, TileCount, TileCtx, TileLoop, UnitInit,
                      UnitLoop, UnitPick, TmemAddress, TmemAlloc, TmemDealloc, add, c_text, div, lit, mod, mul, render, sub, var)
from .options import LinkOptions
from .tmem import TMEM_SLOT
from .plan import (Allocation, CallSite, Checks, Glue, InstancePlan, LaunchFact, LinkPlan, ReuseFence, SplitFence, SplitMainloop,
                   TraceSlot, Transfer)
from .queries import block_phases

_CONVERT = {("fp32", "bf16"): "__float2bfloat16_rn", ("fp32", "fp16"): "__float2half_rn",
            ("bf16", "fp32"): "__bfloat162float", ("fp16", "fp32"): "__half2float"}


def bind_header_name(inst: InstancePlan) -> str:
    return f"bind_{inst.contract.name}.h"


@dataclass(frozen=True)
class GlueInputs:
    """What the glue is made of: the link's name and entry, the instances with their resolved facts (the
    facts stage), the check stage's result (the transfers, the split mainloop, the tile source), the
    allocation (roles, memory, barriers, bindings, launch geometry), the schedule's tile order and bands,
    the cluster, and the options fixed at the start. Nothing else of the plan is read here."""
    name: str
    entry: str
    instances: tuple[InstancePlan, ...]
    checks: Checks
    allocation: Allocation
    options: LinkOptions
    order: str                  # [schedule] order: the tiles' walk
    group: int                  # [schedule] group: bands of tiles (0: none)
    cluster: int                # [launch] cluster
    launch: tuple[LaunchFact, ...] = ()  # the facts given at launch (the facts stage)

    @classmethod
    def of(cls, plan: LinkPlan) -> GlueInputs:
        """The inputs in an allocated plan: the stages' results it holds."""
        return cls(plan.spec.link.name, plan.entry, tuple(plan.instances), plan.checked, plan.allocation, plan.options,
                   plan.spec.schedule.order, plan.spec.schedule.group, plan.spec.launch.cluster, plan.resolved.launch)

    def instance(self, name: str) -> InstancePlan:
        return next(i for i in self.instances if i.name == name)

    def port(self, ref: Ref) -> tuple[InstancePlan, Port]:
        """The instance and the contract's port a (checked) port reference names."""
        inst = self.instance(ref.instance)
        return inst, inst.contract.port_by_name(ref.name)


def generate(link: GlueInputs) -> Glue:
    """The glue for an allocated link (``GlueInputs.of(plan)``), with the tables written along with it: the
    call sites (for attribution), the trace spans and the sanitize sites."""
    slots = _trace_slots(link)
    iters = _most_units(link) if link.options.trace else 0
    w = _Code()
    _head(link, w, slots)
    abi = layout_abi(link.name, link.instances, link.checks.split, link.allocation, link.options, iters, len(slots),
                     link.launch, link.checks.kept)
    w(abi.declaration())  # the parameter struct (link/abi.py)
    if link.launch:
        _launch_fact_preamble(w)
    if link.options.sanitize:
        _sanitize_preamble(w)
    if link.options.trace:
        _trace_preamble(w, iters)
    split = link.checks.split
    if split is not None:
        _split_preamble(link, split, w)
    _kernel(link, w)
    return Glue(w.text(), tuple(w.sites), slots, iters, tuple(w.sites) if link.options.sanitize else (), tuple(w.stmts))


def _most_units(link: GlueInputs) -> int:
    """The most tile-loop iterations a block runs (the trace's rows): its tiles, or under a split
    schedule its units (a block's k-range may start and end inside a tile)."""
    split = link.checks.split
    if split is None:
        return -(-link.allocation.num_tiles // link.allocation.grid)
    mode = split.mode
    return max(len(block_units(mode, link.allocation.num_tiles, split.k_tiles, link.allocation.grid, b)) for b in range(link.allocation.grid))


class _Code:
    """The glue's statements as they are built, and the component call sites, each with its line
    number (SASS line info ends at these lines: conformance attribution)."""

    def __init__(self) -> None:
        self.stmts: list = []
        self.line = 0                       # lines printed so far (one statement may print several)
        self.sites: list[CallSite] = []
        self.spans = 0                      # trace spans emitted so far

    def __call__(self, text: str) -> None:
        """Lines that carry no decision (comments, declarations, fixed code)."""
        self.put(Text(text))

    def put(self, stmt) -> None:
        self.stmts.append(stmt)
        self.line += stmt.render().count("\n") + 1

    def call(self, stmt: EntryCall, inst: InstancePlan, e) -> int:
        """The statement that calls a component entry; returns its site index (sanitize reports)."""
        self.put(stmt)
        self.sites.append(CallSite(self.line, inst.name, e.phase, e.scope))
        return len(self.sites) - 1

    def text(self) -> str:
        return render(self.stmts)


def _head(link: GlueInputs, w: _Code, slots: tuple[TraceSlot, ...]) -> None:
    w(f"// Generated by pipelink ({link.options.mode} mode) for link '{link.name}'. Do not edit:")
    w("// every number below comes from the link plan (pipelink inspect plan.json).")
    w("#include <pipelink/component.h>")
    if link.options.trace:
        w(f"#define PL_TRACE_SLOTS {len(slots)}")
    w("#include <cuda_bf16.h>\n#include <cuda_fp16.h>")
    if _tmem_columns(link):
        _tmem_preamble(w)
    for name in dict.fromkeys(bind_header_name(i) for i in link.instances):
        w(f'#include "{name}"')
    w("")
    declared = set()
    for inst in link.instances:
        for e in inst.contract.entry:
            if e.symbol in declared:
                continue
            declared.add(e.symbol)
            ports = [inst.contract.port_by_name(p) for p in e.ports]
            args = ["pl_ctx", bindgen.struct_name(inst.contract)]
            args += [f"{DTYPES[p.dtype][0]} (&)[{inst.facts_eval(p.values, 'values')}]" for p in ports]
            w(f'extern "C" __device__ void {e.symbol}({", ".join(args)});')
    w("")


def _tmem_columns(link: GlueInputs) -> int:
    """The glue's tensor-memory allocation (0: none)."""
    return link.allocation.tmem.columns if link.allocation.tmem is not None else 0


def _tmem_preamble(w) -> None:
    w("// Tensor memory (PTX ISA, tcgen05): the glue allocates the block's columns once and frees them at the end.")
    w("static __device__ __forceinline__ void pl_tmem_alloc(unsigned slot, unsigned columns) {")
    w('  asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;" :: "r"(slot), "r"(columns) '
      ': "memory");')
    w("}")
    w("static __device__ __forceinline__ void pl_tmem_relinquish() {")
    w('  asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;" ::: "memory");')
    w("}")
    w("static __device__ __forceinline__ void pl_tmem_dealloc(unsigned address, unsigned columns) {")
    w('  asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;" :: "r"(address), "r"(columns) : "memory");')
    w("}")
    w("static __device__ __forceinline__ void pl_tmem_fence_before() {")
    w('  asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");')
    w("}")
    w("static __device__ __forceinline__ void pl_tmem_fence_after() {")
    w('  asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");')
    w("}\n")


def _sanitize_preamble(w) -> None:
    w("// Sanitize mode: a canary after each buffer, checked after every component call, and mbarrier")
    w("// waits bounded to 2 s in components rebuilt with PL_SANITIZE. Reports go to host-mapped memory,")
    w("// which the harness can still read after the trap.")
    w("extern __shared__ __align__(1024) unsigned char pl_smem[];")
    w("__device__ unsigned* pl_sanitize_report;")
    w('extern "C" __device__ void pl_sanitize_stuck(uint32_t bar, unsigned parity) {')
    w("  unsigned* report = pl_sanitize_report;")
    _report_stores(w, ReportKind.STUCK, {"kind": str(int(ReportKind.STUCK)), "warp": "threadIdx.x / 32",
                                         "offset": "bar - pl_smem_addr(pl_smem)", "parity": "parity",
                                         "block": "blockIdx.x"}, first_line=3)
    w("}")
    w("static __device__ __forceinline__ void pl_sanitize_fail(unsigned* report, unsigned kind, unsigned site,")
    w("                                                    unsigned buffer, int tile, unsigned word, unsigned value) {")
    _report_stores(w, ReportKind.CANARY, {**{n: n for n in REPORT_LAYOUT[ReportKind.CANARY]}, "block": "blockIdx.x"},
                   first_line=4)
    w("}\n")


def _report_stores(w, kind: ReportKind, values: dict[str, str], first_line: int) -> None:
    """The first reporter claims the report, stores each word where REPORT_LAYOUT says, and traps."""
    stores = [f"report[{i}] = {values[name]};" for i, name in enumerate(REPORT_LAYOUT[kind])]
    w(f"  if (atomicCAS(report + {REPORT_CLAIM}, 0u, 1u) == 0u) {{")
    w("    " + " ".join(stores[:first_line]))
    w("    " + " ".join(stores[first_line:]))
    w("    __threadfence_system();")
    w("  }")
    w('  asm volatile("trap;");')


def _launch_fact_preamble(w) -> None:
    w("// A fact given at launch: read once per thread; a value outside what every component allows stops the")
    w("// kernel (a cache row past the buffer would otherwise be written).")
    w("static __device__ __forceinline__ int pl_launch_fact(const long long* at, long long low, long long high) {")
    w("  const long long value = __ldg(at);")
    w("  if (value < low || value > high) __trap();")
    w("  return static_cast<int>(value);")
    w("}\n")


def _trace_preamble(w, iters: int) -> None:
    w("static __device__ __forceinline__ unsigned long long pl_globaltimer() {")
    w("  unsigned long long t;")
    w('  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));')
    w("  return t;")
    w("}")
    w("static __device__ __forceinline__ void pl_trace_store(unsigned long long* trace, int iter, int slot,")
    w("                                                      unsigned long long start) {")
    w(f"  unsigned long long* at = trace + ((blockIdx.x * {iters} + iter) * PL_TRACE_SLOTS + slot) * 2;")
    w("  at[0] = start;")
    w("  at[1] = pl_globaltimer();")
    w("}\n")


def _kernel(link: GlueInputs, w: _Code) -> None:
    """The __global__ entry: setup, one branch per role (warp range), whole-block phases."""
    cluster = link.cluster
    w.put(KernelHead(cluster, link.allocation.block, link.entry, link.name))
    if not link.options.sanitize:  # sanitize mode declares it at file scope (pl_sanitize_stuck needs it)
        w("  extern __shared__ __align__(1024) unsigned char pl_smem[];")
    w("  const int pl_warp = threadIdx.x / 32;")
    for fact in link.launch:
        w.put(LaunchFactLoad(fact.name, fact_param(fact).member, fact.low, fact.high))
    if link.options.sanitize:
        w("  if (threadIdx.x == 0) pl_sanitize_report = p.pl_report;")
    _block_setup(link, w)
    cap = entry_register_cap(link.allocation.block)
    at_start, whole_block = block_phases(link.instances, "start"), block_phases(link.instances, "end")
    if at_start:
        _whole_block_phases(link, at_start, w, start=True)
    source = link.checks.tile_source
    if source is not None:
        # The link showed count <= count_max <= bound: more breaks the writer's contract (the symbol control
        # has no such check, and no trap).
        bound = link.allocation.num_tiles
        w.put(TileCount(source.workspace.c_name, bound if source.bounded else None, bound))
    # every warp is needed at the end (cluster barrier, whole-block phases, the sync before tensor memory is freed)
    stay = cluster > 1 or bool(whole_block) or bool(_tmem_columns(link))
    for n, role in enumerate(link.allocation.roles):
        w.put(RoleBranch(n == 0, role.name, role.warp_start, role.warps))
        if role.registers and role.registers != cap:
            w.put(SetMaxNReg("inc" if role.registers > cap else "dec", role.registers))
        w.put(RoleThreads(role.warp_start))
        padded = role.used_warps != role.warps
        if padded:  # padding warps idle (with ``stay``: but stay for the end of the kernel)
            w.put(Padding(role.used_threads, stay))
        _role_body(link, role.name, w)
        if padded and stay:
            w("    }")
        if role.registers and role.registers != cap and whole_block:
            w.put(SetMaxNReg("dec" if role.registers > cap else "inc", cap,
                             "back to the entry budget: the phases at the end run in every warp"))
        w("  }")
    if whole_block:
        _whole_block_phases(link, whole_block, w)
    if _tmem_columns(link):
        w.put(TmemDealloc(_tmem_columns(link)))
    if cluster > 1:  # no block leaves while a peer may still write its smem or signal its mbarriers
        w("  __syncwarp();  // reconverge (one producer thread ran longer) before the aligned cluster barrier")
        w("  pl_cluster_sync();")
    w("}")


def _block_setup(link: GlueInputs, w) -> None:
    """Thread 0 initializes the mbarriers (and in sanitize mode the canaries); then the block syncs."""
    if link.allocation.mbarriers:
        w("  if (threadIdx.x == 0) {")
        for m in link.allocation.mbarriers:
            w.put(MbarInit(m.count, m.offset, m.arrivals, ", ".join(map(str, m.users))))
        w("    pl_mbar_init_fence();")
        w("  }")
    columns, slot = _tmem_columns(link), _tmem_slot(link)
    if columns:
        w.put(TmemAlloc(columns, slot, link.allocation.tmem.relinquish))
    guarded = [b for b in link.allocation.smem if b.guard is not None]
    if guarded:
        w("  if (threadIdx.x == 0) {  // sanitize: canaries after every buffer")
        for b in guarded:
            w(f"    for (int i = 0; i < {GUARD_WORDS}; ++i) reinterpret_cast<unsigned*>(pl_smem + {b.guard})[i] = "
              f"{CANARY:#x}u + i;  // after {b.name}")
        w("  }")
    if link.cluster > 1:  # the peers' mbarriers are initialized before anyone signals them remotely
        w("  pl_cluster_sync();")
    else:
        w("  __syncthreads();")
    if columns:
        w.put(TmemAddress(slot))


def _tmem_slot(link: GlueInputs) -> int:
    """The smem offset of the word the glue's tcgen05.alloc writes the block's address to (-1: none)."""
    return next((s.offset for s in link.allocation.smem if s.name == str(TMEM_SLOT)), -1)


def _tile_bound(link: GlueInputs) -> Expr:
    """The tile loops' bound: the schedule's tile count, or the count read in the kernel (tiles_from)."""
    return var("pl_num_tiles") if link.checks.tile_source else lit(link.allocation.num_tiles)


TILE = var("pl_tile")


def _tile_coords(link: GlueInputs) -> tuple[Expr, Expr]:
    """A tile's row and column in the grid of list(link.allocation.tiles), in the schedule's order."""
    rows, cols = (list(link.allocation.tiles) + [1])[:2]
    g = link.group
    if link.order == "row_major":
        if g:  # bands of g tile columns, each walked row by row
            return mod(Par(div(TILE, lit(g))), lit(rows)), add(mul(Par(div(TILE, lit(g * rows))), lit(g)),
                                                                mod(TILE, lit(g)))
        return div(TILE, lit(cols)), mod(TILE, lit(cols))
    if g:  # bands of g tile rows, each walked column by column
        return add(mul(Par(div(TILE, lit(g * cols))), lit(g)), mod(TILE, lit(g))), mod(Par(div(TILE, lit(g))),
                                                                                        lit(cols))
    return mod(TILE, lit(rows)), div(TILE, lit(rows))


def _steps(link: GlueInputs, role: str) -> list[tuple[str, object]]:
    """A role's work on each tile, in order, each with the label of its trace span: every component
    call (entries of scope "role"), each followed by the register -> smem stores of its out-ports."""
    steps: list[tuple[str, object]] = []
    for inst in link.instances:
        for e in inst.contract.entry:
            if inst.roles[e.role] != role or e.scope != "role":
                continue
            steps.append((f"{inst.name}.{e.phase}", (inst, e)))
            for pname in e.ports:
                steps += [(f"glue: {t.src} -> {t.dst}", t) for t in link.allocation.transfers
                          if t.src == Ref(inst.name, pname) and t.kind == "reg_to_smem"]
    return steps


# The role a trace slot names for a whole-block phase (every warp runs it, outside the roles).
WHOLE_BLOCK = "(whole block)"


def _trace_slots(link: GlueInputs) -> tuple[TraceSlot, ...]:
    """The spans a trace row holds, in the order the glue emits them: the whole-block phases at the
    start, every step of every role, the whole-block phases at the end (whole-block phases in the
    row's iteration 0: they run once per block)."""
    if not link.options.trace:
        return ()
    def phases(when):
        return [TraceSlot(f"{inst.name}.{e.phase}", WHOLE_BLOCK) for inst, e in block_phases(link.instances, when)]
    steps = [TraceSlot(label, r.name) for r in link.allocation.roles for label, _ in _steps(link, r.name)]
    return tuple(phases("start") + steps + phases("end"))


def _role_body(link: GlueInputs, role: str, w: _Code) -> None:
    threads = link.allocation.role(role).used_threads
    reuse_bar = next((b.id for b in link.allocation.barriers if b.purpose == ReuseFence(role)), None)
    reuse_phases = {(r.instance, r.phase) for s in link.allocation.smem for r in s.live or () if r.role == role} \
        if reuse_bar is not None else set()
    row, col = _tile_coords(link)
    split = link.checks.split
    w("    pl_ctx ctx;")
    w("    ctx.smem = pl_smem;")
    w("    ctx.thread = pl_t;")
    w("    ctx.k_begin = ctx.k_end = ctx.stage_base = 0;  // set before each call of a component with k-tiles")
    w("    int pl_iter = 0;")
    step, tiles = link.allocation.grid, _tile_bound(link)
    if split is not None:  # the data-parallel part first: whole tiles, today's loop up to whole_tiles
        tiles = lit(whole_tiles(split.mode, link.allocation.num_tiles, link.allocation.grid))
        _split_row(w)
    last = Bin(">=", add(TILE, lit(step)), tiles)  # the block's last tile: the next stride passes the bound
    if split is not None:  # ... and no stream-K unit follows
        last = Bin("&&", last, Bin("==", var("pl_units"), lit(0)))
    w.put(TileLoop(var("blockIdx.x"), tiles, step))
    w.put(TileCtx(TILE, row, col, last))
    whole = _UnitSteps(threads, reuse_bar, reuse_phases, split,
                       after_split=f"ctx.iter = pl_iter; ctx.last = pl_tile + {step} >= {c_text(tiles)} && pl_run == 0;")
    first_span = w.spans
    whole.emit(link, role, w)
    w.put(LoopEnd())
    if split is not None:
        w.spans = first_span  # the units run the same steps: the same trace slots, not the next role's
        _split_loop(link, role, split, row, col, w,
                    _UnitSteps(threads, reuse_bar, reuse_phases, split,
                               k_range=(var("pl_k_begin"), var("pl_k_end"), var("pl_stage")),
                               fixup=True, after_split="ctx.iter = pl_done; ctx.last = pl_u + 1 >= pl_head + pl_run;"))


class _UnitSteps:
    """A role's steps on one unit of work (a whole tile, or under a split schedule a k-range of one):
    every component call and transfer, in order. Under a split schedule the calls after the summed
    entry (``split``) run only where the tile is complete: with ``fixup``, after the glue has added
    up the tile's partial sums; ``after_split`` sets ctx.iter and ctx.last for them."""

    def __init__(self, threads, reuse_bar, reuse_phases, split, k_range=None, fixup=False, after_split=""):
        self.threads, self.reuse_bar, self.reuse_phases = threads, reuse_bar, reuse_phases
        self.split, self.k_range, self.fixup, self.after_split = split, k_range, fixup, after_split

    def emit(self, link: GlueInputs, role: str, w: _Code) -> None:
        opened = False
        for _, s in _steps(link, role):
            conditional = self.split is not None and self.split.role == role and not (
                isinstance(s, tuple) and s[0].contract.schedule.k_tiles is not None)
            if conditional and not opened:  # the first step after the summed entry
                opened = True
                w(f"      if ({'pl_complete' if self.fixup else '1'}) {{  // the tile's k-tiles all summed here")
                w(f"      {self.after_split}")
            if isinstance(s, Transfer):
                _timed(link, w, lambda t=s: _reg_store(link, t, self.threads, w))
                continue
            inst, e = s
            bar = self.reuse_bar if (inst.name, e.phase) in self.reuse_phases else None
            _tile_call(link, role, inst, e, self.threads, bar, w, self.k_range)
            if self.fixup and e is self.split.entry and inst.name == self.split.instance.name:
                _split_fixup(link, self.split, w)
        if opened:
            w("      ++pl_done;")
            w("      }")


def _tile_call(link: GlueInputs, role: str, inst: InstancePlan, e, threads: int, reuse_bar: int | None,
               w: _Code, k_range: tuple[Expr, Expr, Expr] | None = None) -> None:
    """One component call in a role's tile loop (``threads``: those running it): its port arrays,
    the transfers into it the glue performs first, a reuse barrier where its memory was another
    phase's, the call. ``k_range``: a split unit's k_begin, k_end and stage_base (None: the tile
    whole)."""
    args = []
    if inst.contract.schedule.k_tiles is not None:
        k_tiles = inst.facts_eval(inst.contract.schedule.k_tiles, "schedule.k_tiles")
        # the whole tile, its k-tiles streamed in block order after the block's earlier tiles'
        w.put(KRange(*(k_range or (lit(0), lit(k_tiles), mul(var("pl_iter"), lit(k_tiles))))))
    for pname in e.ports:
        port, ref = inst.contract.port_by_name(pname), Ref(inst.name, pname)
        if port.direction == "out":
            w(f"      {DTYPES[port.dtype][0]} {ref.c_name}[{inst.facts_eval(port.values, 'values')}];")
            args.append(ref.c_name)
        else:
            src = next((t.src for t in link.allocation.transfers if t.dst == ref), None)
            if src is None:  # a pack-time probe links the component alone: feed it zeros
                w(f"      {DTYPES[port.dtype][0]} {ref.c_name}[{inst.facts_eval(port.values, 'values')}] = {{}};")
                src = ref
            args.append(_array_arg(link, src, inst, port))

    def call() -> None:
        if e is _first_entry(inst, role):  # transfers into this instance that the glue performs before it runs
            _transfers_before(link, role, inst, threads, w)
        if reuse_bar is not None:
            w.put(Sync(reuse_bar, threads, "smem reused across phases"))
        site = w.call(EntryCall(inst.name, e.phase, e.symbol, e.scope, _bind_literal(link, inst), tuple(args), 6),
                      inst, e)
        if link.options.sanitize:
            _check_canaries(link, inst, site, w)

    _timed(link, w, call)


def _array_arg(link: GlueInputs, src: Ref, inst: InstancePlan, port) -> str:
    """The producer's array, passed to the consumer's in-port. Linking by symbols matches names
    only: a consumer built for another array length gets the producer's registers as its own
    type (the C declarations of separately compiled objects are never compared)."""
    name = src.c_name
    if link.options.mode != "symbol" or src == Ref(inst.name, port.name):
        return name
    producer = link.instance(src.instance)
    have = producer.facts_eval(producer.contract.port_by_name(src.name).values, "values")
    want = inst.facts_eval(port.values, "values")
    return name if have == want else f"*reinterpret_cast<{DTYPES[port.dtype][0]} (*)[{want}]>({name})"


def _transfers_before(link: GlueInputs, role: str, inst: InstancePlan, threads: int, w) -> None:
    for t in link.allocation.transfers:
        if t.role != role:
            continue
        if t.dst.instance == inst.name and t.kind == "smem_to_smem":
            _smem_copy(link, t, threads, w)
        elif t.dst.instance == inst.name and t.kind == "alias":
            w.put(Sync(t.barrier, threads, f"{t.src} -> {t.dst}: producer's writes visible"))
        if t.src.instance == inst.name and t.kind == "alias":
            w.put(Sync(t.barrier, threads, f"{t.src} -> {t.dst}: consumer done with the buffer"))


def _whole_block_phases(link: GlueInputs, phases, w: _Code, start: bool = False) -> None:
    """Entries of scope "block": once per block in every thread, so that __syncthreads (CUB block
    primitives) is legal in them; before the roles start (``start``: ctx.iter 0) or after every
    role's tile loop (ctx.iter counts the tiles the block ran). No tile."""
    if not start:
        w("  __syncwarp();  // reconverge (one thread of a role may have run longer) before the aligned barrier")
        w("  __syncthreads();  // every role is done with its tiles; whole-block phases follow, in every warp")
    w("  {")
    w("    const int pl_t = threadIdx.x;")
    if link.options.sanitize:
        w("    const int pl_tile = -1;  // sanitize reports: no tile")
    w("    pl_ctx ctx;")
    w("    ctx.smem = pl_smem;")
    w("    ctx.thread = pl_t;")
    w(f"    ctx.tile = ctx.tile_row = ctx.tile_col = -1; ctx.last = {0 if start else 1};")
    w("    ctx.k_begin = ctx.k_end = ctx.stage_base = 0;")
    if start:
        w("    ctx.iter = 0;")
    else:
        tiles, block, split = _tile_bound(link), var("blockIdx.x"), link.checks.split
        if split is not None:  # the whole tiles, then the stream-K units of the block's row
            tiles = lit(whole_tiles(split.mode, link.allocation.num_tiles, link.allocation.grid))
        # the tiles blockIdx.x, blockIdx.x + grid, ... below the bound
        ran = Par(Cond(Bin("<", block, tiles), add(div(Par(sub(sub(tiles, lit(1)), block)), lit(link.allocation.grid)), lit(1)),
                       lit(0)))
        if split is not None:
            ran = add(ran, Fn("pl_split_units", (At("pl_split_rows", block),)))
        w.put(BlockIter(ran))
    for n, (inst, e) in enumerate(phases):
        if n:
            w("    __syncthreads();  // the previous whole-block phase is done")

        def call(inst=inst, e=e) -> None:
            site = w.call(EntryCall(inst.name, e.phase, e.symbol, e.scope, _bind_literal(link, inst), (), 4), inst, e)
            if link.options.sanitize:
                _check_canaries(link, inst, site, w)

        _timed(link, w, call, iteration="0")
    w("  }")
    if start:
        w("  __syncthreads();  // the whole-block phases are done: the roles start")


CANARY = 0xC0DE0000
GUARD_WORDS = 8


def _check_canaries(link: GlueInputs, inst: InstancePlan, site: int, w) -> None:
    """After a component call, thread 0 of the role checks the canaries after its buffers; a
    report names the call by its site index."""
    mine = [(i, b) for i, b in enumerate(link.allocation.smem)
            if b.guard is not None and any(u.instance == inst.name for u in b.users)]
    if not mine:
        return
    w("      if (pl_t == 0) {  // sanitize: did the component write past its buffers?")
    for i, b in mine:
        w(f"        for (int i = 0; i < {GUARD_WORDS}; ++i) {{")
        w(f"          const unsigned v = reinterpret_cast<volatile unsigned*>(pl_smem + {b.guard})[i];")
        w(f"          if (v != {CANARY:#x}u + i) pl_sanitize_fail(p.pl_report, 1, {site}, {i}, pl_tile, i, v);")
        w("        }")
    w("      }")


def _timed(link: GlueInputs, w: _Code, body, iteration: str = "pl_iter") -> None:
    """Emit ``body``; with tracing, between two %globaltimer reads that thread 0 of the role (of the
    block, in a whole-block phase: ``iteration`` 0) stores as (start, end) of the next trace span
    (slots as _trace_slots lists them). Without tracing nothing is added."""
    if not link.options.trace:
        body()
        return
    slot = w.spans
    w.spans += 1
    w("      { const unsigned long long pl_ts = pl_globaltimer();")
    body()
    w(f"        if (pl_t == 0) pl_trace_store(p.pl_trace, {iteration}, {slot}, pl_ts); }}")


def _first_entry(inst: InstancePlan, role: str):
    return next(e for e in inst.contract.entry if inst.roles[e.role] == role and e.scope == "role")


def _bind_literal(link: GlueInputs, inst: InstancePlan) -> str:
    values = []
    for ctype, name, kind in bindgen.bind_fields(inst.contract):
        if kind == "workspace" and any(k.workspace == Ref(inst.name, name) for k in link.checks.kept):
            values.append(f"(unsigned char*)p.{inst.name}_{name}")  # kept: the caller's typed output
        elif kind in ("operand", "workspace"):
            tma = ctype == "const pl_tensor_map*"
            values.append(f"{'&' if tma else ''}p.{inst.name}_{name}")
        elif kind == "global":
            values.append(_global_source(link, Ref(inst.name, name)))
        elif kind == "fact" and any(f.name == name for f in link.launch):
            values.append(f"pl_fact_{name}")
        elif kind in ("tmem", "tmem_in"):  # the block's address (at run time) plus the column (folded)
            column = link.allocation.bindings[inst.name].get(name)
            values.append("0u" if column is None else f"pl_tmem + {column}u")
        elif ctype == "unsigned":
            values.append(f"{link.allocation.bindings[inst.name][name]}u")
        else:
            values.append(str(link.allocation.bindings[inst.name][name]))
    return f"{bindgen.struct_name(inst.contract)}{{{', '.join(values)}}}"


def _global_source(link: GlueInputs, dst: Ref) -> str:
    """What a global in-port reads: the kernel parameter of the workspace behind the out-port connected
    to it (a component probed alone, with nothing connected, gets a null pointer)."""
    t = next((t for t in link.allocation.transfers if t.kind == "global" and t.dst == dst), None)
    if t is None:
        return "nullptr"
    producer, port = link.port(t.src)
    return f"(unsigned char*)p.{Ref(producer.name, port.buffer).c_name}"  # an operand's pointer is typed, maybe const


def _smem_ptr(link: GlueInputs, ref: Ref) -> tuple[str, object, InstancePlan]:
    inst, port = link.port(ref)
    off = link.allocation.bindings[inst.name][port.buffer]
    return f"reinterpret_cast<{DTYPES[port.dtype][0]}*>(pl_smem + {off})", port, inst


def _convert(src_dtype: str, dst_dtype: str, value: str) -> str:
    return value if src_dtype == dst_dtype else f"{_CONVERT[(src_dtype, dst_dtype)]}({value})"


def _facts_as_literals(inst: InstancePlan) -> dict[str, str]:
    return {k: str(v) for k, v in inst.facts.items()}


def _reg_store(link: GlueInputs, t: Transfer, threads: int, w) -> None:
    si, sp = link.port(t.src)
    dst, dp, di = _smem_ptr(link, t.dst)
    values = si.facts_eval(sp.values, "values")
    frag = {d: f"({e.to_c({**_facts_as_literals(si), 't': 'pl_t', 'v': 'v'})})" for d, e in sp.fragment.items()}
    dims = dict(zip(dp.shape, frag.values()))  # consumer dimension names, by position
    offset = dp.offset.to_c({**_facts_as_literals(di), **dims})
    w(f"      // {t.src} -> {t.dst}: registers -> smem, fragment layout to the consumer's layout")
    w.put(Sync(t.barrier, threads, "consumer is done with the previous tile"))
    w.put(RegStore(t.src, t.dst, DTYPES[dp.dtype][0], dst, values, offset,
                   _convert(sp.dtype, dp.dtype, f"{t.src.c_name}[v]")))
    w.put(Sync(t.barrier, threads, "tile visible to the consumer"))


def _smem_copy(link: GlueInputs, t: Transfer, threads: int, w) -> None:
    src, sp, si = _smem_ptr(link, t.src)
    dst, dp, di = _smem_ptr(link, t.dst)
    sizes = [si.facts_eval(e, "shape") for e in sp.shape.values()]
    total = 1
    for s in sizes:
        total *= s
    idx, stride = {}, 1
    for name, size in reversed(list(zip(sp.shape, sizes))):
        idx[name] = f"((pl_i / {stride}) % {size})"
        stride *= size
    src_off = sp.offset.to_c({**_facts_as_literals(si), **idx})
    dst_dims = dict(zip(dp.shape, [idx[n] for n in sp.shape]))  # consumer dimension names, by position
    dst_off = dp.offset.to_c({**_facts_as_literals(di), **dst_dims})
    w(f"      // {t.src} -> {t.dst}: smem -> smem copy with layout/dtype conversion")
    w.put(Sync(t.barrier, threads, "producer's writes visible, consumer done with the last tile"))
    w.put(SmemCopy(t.src, t.dst, DTYPES[sp.dtype][0], DTYPES[dp.dtype][0], src, dst, total, threads, dst_off,
                   _convert(sp.dtype, dp.dtype, f"pl_src[{src_off}]")))
    w.put(Sync(t.barrier, threads, "copy visible to the consumer"))


# ---- A split schedule (docs/design/stream_k.md): the stream-K units from a table, the fix-up in C ----

def _split_preamble(link: GlueInputs, split: SplitMainloop, w: _Code) -> None:
    """Each block's stream-K units as a __constant__ table of stream_k.block_row (the arithmetic is
    written once, in Python, and checked there), and the two primitives the fix-up needs."""
    mode, grid = split.mode, link.allocation.grid
    w.put(SplitTable(mode, tuple(ROW_FIELDS),
                     tuple(tuple(block_row(mode, link.allocation.num_tiles, split.k_tiles, grid, b)) for b in range(grid))))
    w("static __device__ __forceinline__ int pl_split_units(const int* row) {  // head + run + tail")
    w("  return (row[0] >= 0) + (row[4] - row[3]) + (row[5] >= 0);")
    w("}")
    w("// Adds `n` to a split tile's count (acq_rel, gpu scope: the role's partial stores, ordered before it by the")
    w("// role's barrier, are released; the other contributors' are acquired) and returns the count before.")
    w("static __device__ __forceinline__ int pl_split_count(int* count, int n) {")
    w("  int old;")
    w('  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;" : "=r"(old) : "l"(count), "r"(n) : "memory");')
    w("  return old;")
    w("}")
    w("// Every thread of the role learns whether any passed a true `pred` (barrier.red.or on a named barrier).")
    w("static __device__ __forceinline__ int pl_bar_or(unsigned id, unsigned threads, int pred) {")
    w("  int any;")
    w('  asm volatile("{ .reg .pred p, q;\\n\\tsetp.ne.s32 p, %1, 0;\\n\\tbarrier.cta.red.or.pred q, %2, %3, p;\\n\\t"')
    w('               "selp.s32 %0, 1, 0, q; }" : "=r"(any) : "r"(pred), "r"(id), "r"(threads) : "memory");')
    w("  return any;")
    w("}\n")


def _split_row(w: _Code) -> None:
    def row(i: int) -> At:
        return At("pl_row", lit(i))

    w.put(Let("const int*", (("pl_row", At("pl_split_rows", var("blockIdx.x"))),), 4,
              "this block's stream-K units (after its whole tiles)"))
    w.put(Let("const int", (("pl_head", Bin(">=", row(0), lit(0))), ("pl_run", sub(row(4), row(3))),
                            ("pl_tail", Bin(">=", row(5), lit(0)))), 4))
    w.put(Let("const int", (("pl_units", add(add(var("pl_head"), var("pl_run")), var("pl_tail"))),), 4))
    w("    int pl_done = 0;  // calls of the instances after the summed entry: they run only on complete tiles")


def _split_loop(link: GlueInputs, role: str, split: SplitMainloop, row: str, col: str, w: _Code,
                steps: _UnitSteps) -> None:
    """The stream-K part: the block's units from its row, each a k-range of one tile; ring positions
    go on from the whole tiles (pl_stage)."""
    k_tiles = split.k_tiles
    w.put(Let("int", (("pl_stage", mul(var("pl_iter"), lit(k_tiles))),), 4, "k-tiles streamed by the whole tiles before"))
    w.put(UnitLoop())
    w.put(UnitInit(k_tiles))
    w.put(UnitPick(head=(0, 1, 2, 0), tail=(5, 6, 1), run=3))  # ROW_FIELDS' order
    w.put(TileCtx(TILE, row, col, Bin("==", var("pl_u"), sub(var("pl_units"), lit(1)))))
    w("      int pl_complete = 1;")
    steps.emit(link, role, w)
    w.put(Assign("pl_stage", sub(var("pl_k_end"), var("pl_k_begin")), 6, op="+="))
    w.put(LoopEnd())


def _split_fixup(link: GlueInputs, split: SplitMainloop, w: _Code) -> None:
    """After the summed entry, on a split tile: store this block's partials to its slot, count its
    k-tiles, and where that completes the tile, sum every contributor's slot in block order (the
    contributors by stream_k.contributors' owner formula) into the port's registers."""
    mode, k_tiles = split.mode, split.k_tiles
    dp = whole_tiles(mode, link.allocation.num_tiles, link.allocation.grid)
    iterations = (link.allocation.num_tiles - dp) * k_tiles or 1  # 0: no tile is split, the sum never runs (nor divides by 0)
    blocks = stream_blocks(mode, link.allocation.num_tiles, k_tiles, link.allocation.grid)  # the blocks whose ranges cut the k-tiles
    threads = link.allocation.role(split.role).used_threads
    fence = next(b.id for b in link.allocation.barriers if b.purpose == SplitFence(split.role))
    slot, arrays = split_slot_floats(split, link.allocation), []
    at = 0
    for port in split.ports:
        values = split.instance.facts_eval(port.values, "values")
        arrays.append((Ref(split.instance.name, port.name).c_name, values, at))
        at += values * threads
    w("      if (pl_slot >= 0) {  // a split tile: this block holds k-tiles [pl_k_begin, pl_k_end) of it")
    w(f"        float* pl_parts = reinterpret_cast<float*>(p.{PARTIALS.c_name});  // [block][slot][value][thread]")
    w(f"        float* pl_mine = pl_parts + (blockIdx.x * 2 + pl_slot) * {slot};")
    for name, values, base in arrays:
        w("        #pragma unroll")
        w(f"        for (int v = 0; v < {values}; ++v) pl_mine[{base} + v * {threads} + pl_t] = {name}[v];")
    w.put(Sync(fence, threads, "the role's partials are stored: its count may release them", 8))
    w("        int pl_completes = 0;")
    # Every contributor has counted (its add came before this one's): nobody touches the count again
    # in this launch, so it goes back to 0 for the next one, which then needs no memset before it.
    w.put(SplitCount(TILE_COUNTS.c_name, dp, k_tiles, reset=True))
    w(f"        pl_complete = pl_bar_or({fence}, {threads}, pl_completes);  // and every thread of the role knows")
    w("        if (pl_complete) {  // every contributor's partials, in block order (the same sum whoever completes)")
    first, b = var("pl_first"), var("pl_b")
    w.put(Let("const long long", (("pl_first", mul(Cast("long long", Par(sub(TILE, lit(dp)))), lit(k_tiles))),
                                  ("pl_kl", add(first, lit(k_tiles - 1)))), 10))

    def owner(k: Expr) -> Expr:  # the block whose k-range holds iteration k (stream_k.contributors)
        return Fn("min", (lit(blocks - 1, "LL"), sub(div(Par(add(mul(Par(add(k, lit(1))), lit(blocks)),
                                                                    lit(iterations - 1))), lit(iterations)), lit(1))))

    w.put(Let("const int", (("pl_b0", owner(first)),), 10))
    w.put(Let("const int", (("pl_b1", owner(var("pl_kl"))),), 10))
    for name, values, _ in arrays:
        w("          #pragma unroll")
        w(f"          for (int v = 0; v < {values}; ++v) {name}[v] = 0.0f;")
    w.put(ContributorLoop(var("pl_b0"), "<=", var("pl_b1")))
    w.put(Let("const long long", (("pl_begin", div(mul(Cast("long long", b), lit(iterations)), lit(blocks))),
                                  ("pl_end", div(mul(Cast("long long", Par(add(b, lit(1)))), lit(iterations)),
                                                 lit(blocks)))), 12))
    w.put(SkipIf(Bin("==", var("pl_begin"), var("pl_end")), "more blocks than k-tiles: this one has none"))
    w.put(SlotRead(Cond(Bin(">=", var("pl_begin"), first), lit(0), lit(1)), slot))
    for name, values, base in arrays:
        w("            #pragma unroll")
        w(f"            for (int v = 0; v < {values}; ++v) {name}[v] += pl_from[{base} + v * {threads} + pl_t];")
    w("          }")
    w("        }")
    w("      }")

"""The glue as statements: what the generator (glue.py) builds, what ``render`` prints, and what the
audit and the model of the glue's meaning (glue_model.py) read. Nothing reads the printed text back.

Two kinds of nodes:
- **expressions** (``Var``, ``Lit``, ``Bin``, ``Par``, ``Cond``, ``Fn``, ``At``, ``Cast``) for every
  number the kernel computes that says which tile, which k-range, which contributor or which count:
  ``c_text`` prints one as C, ``evaluate`` computes it as C does (int arithmetic, / and % truncating).
  The printer refuses a tree that C would parse differently from the tree (a lower-precedence child
  without ``Par``), so what the model evaluates is what the compiler compiles.
- **statements**, each printing one or more lines: ``Text`` for lines that carry no decision the model or
  the audit checks (comments, declarations, the fixed preambles), and a typed statement for each one that
  does (a barrier sync, a component call, a tile loop, a transfer, the stream-K table and fix-up).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from ..refs import Ref

# ---- expressions --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Var:
    name: str


@dataclass(frozen=True)
class Lit:
    value: int
    suffix: str = ""            # "LL", "u": printed after the digits


@dataclass(frozen=True)
class Bin:
    op: str                     # one of _PRECEDENCE
    a: "Expr"
    b: "Expr"


@dataclass(frozen=True)
class Par:
    """Parentheses the text shows (and that keep a lower-precedence child whole)."""
    e: "Expr"


@dataclass(frozen=True)
class Cond:
    test: "Expr"
    a: "Expr"
    b: "Expr"


@dataclass(frozen=True)
class Fn:
    """A call of a function the model knows: min, max, or pl_split_units (a table row's unit count)."""
    name: str
    args: tuple["Expr", ...]


@dataclass(frozen=True)
class At:
    """``array[index]``: a row of the stream-K table, or a field of the row ``pl_row``."""
    array: str
    index: "Expr"


@dataclass(frozen=True)
class Cast:
    ctype: str                  # "long long"
    e: "Expr"


Expr = Union[Var, Lit, Bin, Par, Cond, Fn, At, Cast]

_PRECEDENCE = {"*": 6, "/": 6, "%": 6, "+": 5, "-": 5, "<": 4, "<=": 4, ">": 4, ">=": 4, "==": 3, "!=": 3,
               "&&": 2, "||": 1}
_ATOM = 9
_COND = 0


class GlueIRError(ValueError):
    """An expression the printer cannot print as the tree it is (the generator's bug, never the user's)."""


def _prec(e: Expr) -> int:
    if isinstance(e, Bin):
        return _PRECEDENCE[e.op]
    return _COND if isinstance(e, Cond) else _ATOM


def c_text(e: Expr) -> str:
    """The C text of ``e``: exactly the parentheses ``Par`` asks for, and refused where C would read
    the text as another tree."""
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Lit):
        return f"{e.value}{e.suffix}"
    if isinstance(e, Par):
        return f"({c_text(e.e)})"
    if isinstance(e, Fn):
        return f"{e.name}({', '.join(c_text(a) for a in e.args)})"
    if isinstance(e, At):
        return f"{e.array}[{c_text(e.index)}]"
    if isinstance(e, Cast):
        if _prec(e.e) != _ATOM:
            raise GlueIRError(f"a cast of {e.e!r} needs Par")
        return f"({e.ctype}){c_text(e.e)}"
    if isinstance(e, Cond):
        if _prec(e.test) <= _COND or _prec(e.a) <= _COND or _prec(e.b) < _COND:
            raise GlueIRError(f"a nested conditional needs Par: {e!r}")
        return f"{c_text(e.test)} ? {c_text(e.a)} : {c_text(e.b)}"
    p = _PRECEDENCE[e.op]
    if _prec(e.a) < p or _prec(e.b) <= p:  # C's binary operators group left to right
        raise GlueIRError(f"{c_text_loose(e)}: C would group it otherwise; wrap the operand in Par")
    return f"{c_text(e.a)} {e.op} {c_text(e.b)}"


def c_text_loose(e: Expr) -> str:
    """For messages only: the tree with parentheses everywhere."""
    if isinstance(e, Bin):
        return f"({c_text_loose(e.a)} {e.op} {c_text_loose(e.b)})"
    return repr(e)


def _c_div(a: int, b: int) -> int:
    if b == 0:
        raise ZeroDivisionError("division by zero in the glue")
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


_OPS = {"*": lambda a, b: a * b, "/": _c_div, "%": lambda a, b: a - _c_div(a, b) * b,
        "+": lambda a, b: a + b, "-": lambda a, b: a - b, "<": lambda a, b: int(a < b),
        "<=": lambda a, b: int(a <= b), ">": lambda a, b: int(a > b), ">=": lambda a, b: int(a >= b),
        "==": lambda a, b: int(a == b), "!=": lambda a, b: int(a != b)}


def evaluate(e: Expr, env: dict, functions: dict | None = None) -> int:
    """The value C computes for ``e`` (ints without overflow: the audit keeps the glue's numbers in
    range). ``env`` maps names to ints, or to lists for ``At``; ``functions`` adds to min and max."""
    if isinstance(e, Var):
        return env[e.name]
    if isinstance(e, Lit):
        return e.value
    if isinstance(e, (Par, Cast)):
        return evaluate(e.e, env, functions)
    if isinstance(e, Cond):
        return evaluate(e.a if evaluate(e.test, env, functions) else e.b, env, functions)
    if isinstance(e, Fn):
        args = [evaluate(a, env, functions) for a in e.args]
        fn = {"min": min, "max": max, **(functions or {})}[e.name]
        return fn(*args)
    if isinstance(e, At):
        return env[e.array][evaluate(e.index, env, functions)]
    if e.op == "&&":
        return int(bool(evaluate(e.a, env, functions)) and bool(evaluate(e.b, env, functions)))
    if e.op == "||":
        return int(bool(evaluate(e.a, env, functions)) or bool(evaluate(e.b, env, functions)))
    return _OPS[e.op](evaluate(e.a, env, functions), evaluate(e.b, env, functions))


def var(name: str) -> Var:
    return Var(name)


def lit(value: int, suffix: str = "") -> Lit:
    return Lit(int(value), suffix)


def add(a, b):
    return Bin("+", a, b)


def sub(a, b):
    return Bin("-", a, b)


def mul(a, b):
    return Bin("*", a, b)


def div(a, b):
    return Bin("/", a, b)


def mod(a, b):
    return Bin("%", a, b)


# ---- statements ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Text:
    """Lines that carry no decision the audit or the model checks."""
    text: str

    def render(self) -> str:
        return self.text


@dataclass(frozen=True)
class KernelHead:
    cluster: int
    block: int
    entry: str
    link: str

    def render(self) -> str:
        dims = f"__cluster_dims__({self.cluster}, 1, 1) " if self.cluster > 1 else ""
        return (f'extern "C" __global__ void {dims}__launch_bounds__({self.block}, 1)\n'
                f"{self.entry}(const __grid_constant__ pl_params_{self.link} p) {{")


@dataclass(frozen=True)
class LaunchFactLoad:
    """``pl_fact_NAME``, the launch fact's value read from its parameter ``member``, trapping outside [low, high]."""
    name: str
    member: str
    low: int
    high: int

    def render(self) -> str:
        return (f"  const int pl_fact_{self.name} = pl_launch_fact(p.{self.member}, {self.low}LL, {self.high}LL);"
                "  // given at launch")


@dataclass(frozen=True)
class MbarInit:
    """Thread 0 initializes ``count`` mbarriers at ``offset`` (8 bytes each) for ``arrivals`` arrivals."""
    count: int
    offset: int
    arrivals: int
    users: str                  # a comment: who uses them

    def render(self) -> str:
        return (f"    for (int i = 0; i < {self.count}; ++i)  // {self.users}\n"
                f"      pl_mbar_init(pl_smem_addr(pl_smem + {self.offset} + 8 * i), {self.arrivals});")


@dataclass(frozen=True)
class TmemAlloc:
    """Warp 0 takes the block's tensor memory, ``columns`` in one tcgen05.alloc, which writes its address to the
    smem word at ``slot``; then gives up the block's allocation permit, unless a component still allocates
    (``relinquish`` false). Every thread reads the address into ``pl_tmem`` after the block's setup sync."""
    columns: int
    slot: int
    relinquish: bool

    def render(self) -> str:
        give_up = ("\n    pl_tmem_relinquish();  // no other allocation in this block: the next block's may go on"
                   if self.relinquish else "  // a component allocates too: the permit stays with the block")
        return (f"  if (pl_warp == 0) {{  // tensor memory: one allocation for every instance's [[tmem]] buffers\n"
                f"    pl_tmem_alloc(pl_smem_addr(pl_smem + {self.slot}), {self.columns});{give_up}\n"
                f"  }}\n  pl_tmem_fence_before();")


@dataclass(frozen=True)
class TmemAddress:
    """After the setup sync: every thread reads the block's tensor-memory address from ``slot``."""
    slot: int

    def render(self) -> str:
        return (f"  pl_tmem_fence_after();\n"
                f"  const unsigned pl_tmem = *reinterpret_cast<volatile unsigned*>(pl_smem + {self.slot});")


@dataclass(frozen=True)
class TmemDealloc:
    """At the end, once every warp is done with it: warp 0 frees the block's ``columns``."""
    columns: int

    def render(self) -> str:
        return ("  pl_tmem_fence_before();\n"
                "  __syncthreads();  // every instance is done with its tensor memory\n"
                "  if (pl_warp == 0) {\n"
                "    pl_tmem_fence_after();\n"
                f"    pl_tmem_dealloc(pl_tmem, {self.columns});\n"
                "  }")


@dataclass(frozen=True)
class TileCount:
    """The tile count read in the kernel (tiles_from): ``name``, trapping above ``trap`` (None: the
    symbol control, no trap), the tile loops bounded by ``bound``."""
    name: str
    trap: int | None
    bound: int

    def render(self) -> str:
        lines = [f"  const int pl_tile_count = pl_ld_acquire_int(p.{self.name});  // written before the tile "
                 "loops (by other blocks too: acquire)"]
        if self.trap is not None:
            lines.append(f"  if (pl_tile_count > {self.trap}) __trap();  // stop rather than leave tiles unrun")
        lines.append(f"  const int pl_num_tiles = min(pl_tile_count, {self.bound});")
        return "\n".join(lines)


@dataclass(frozen=True)
class RoleBranch:
    """``if (pl_warp < end)``: the warps below ``end`` (and at or above the previous branch's) run ``role``."""
    first: bool
    role: str
    warp_start: int
    warps: int

    def render(self) -> str:
        end = self.warp_start + self.warps
        return (f"  {'if' if self.first else 'else if'} (pl_warp < {end}) {{  // role '{self.role}': warps "
                f"{self.warp_start}..{end - 1}")


@dataclass(frozen=True)
class SetMaxNReg:
    kind: str                   # "inc" | "dec"
    registers: int
    comment: str = ""

    def render(self) -> str:
        return f"    pl_setmaxnreg_{self.kind}<{self.registers}>();" + (f"  // {self.comment}" if self.comment else "")


@dataclass(frozen=True)
class RoleThreads:
    """``pl_t``: the thread's index in its role (the role's first thread is 32 * ``warp_start``)."""
    warp_start: int

    def render(self) -> str:
        return f"    const int pl_t = threadIdx.x - {32 * self.warp_start};"


@dataclass(frozen=True)
class Padding:
    """Threads from ``used_threads`` on idle: they return, or (``stay``) skip the role's body."""
    used_threads: int
    stay: bool

    def render(self) -> str:
        if self.stay:
            return f"    if (pl_t < {self.used_threads}) {{"
        return f"    if (pl_t >= {self.used_threads}) return;  // padding warps idle"


@dataclass(frozen=True)
class TileLoop:
    """``for (pl_tile = start; pl_tile < bound; pl_tile += step, ++pl_iter)``: the block's whole tiles."""
    start: Expr
    bound: Expr
    step: int

    def render(self) -> str:
        return (f"    for (int pl_tile = {c_text(self.start)}; pl_tile < {c_text(self.bound)}; "
                f"pl_tile += {self.step}, ++pl_iter) {{")


@dataclass(frozen=True)
class UnitLoop:
    """``for (pl_u = 0; pl_u < pl_units; ...)``: the block's stream-K units, from its table row."""

    def render(self) -> str:
        return "    for (int pl_u = 0; pl_u < pl_units; ++pl_u, ++pl_iter) {"


@dataclass(frozen=True)
class UnitInit:
    """A unit's defaults before UnitPick: the whole tile's k-range [0, k_tiles), slot -1 (not split)."""
    k_tiles: int

    def render(self) -> str:
        return f"      int pl_tile, pl_k_begin = 0, pl_k_end = {self.k_tiles}, pl_slot = -1;  // slot -1: a whole tile"


@dataclass(frozen=True)
class LoopEnd:
    """The end of a TileLoop or UnitLoop."""

    def render(self) -> str:
        return "    }"


@dataclass(frozen=True)
class TileCtx:
    """What a component call learns of the unit it runs: ctx.tile, its row and column, ctx.last."""
    tile: Expr
    row: Expr
    col: Expr
    last: Expr

    def render(self) -> str:
        return (f"      ctx.tile = {c_text(self.tile)}; ctx.tile_row = {c_text(self.row)}; ctx.tile_col = "
                f"{c_text(self.col)}; ctx.iter = pl_iter; ctx.last = {c_text(self.last)};")


@dataclass(frozen=True)
class KRange:
    """ctx.k_begin, ctx.k_end, ctx.stage_base before a call of a component with k-tiles."""
    begin: Expr
    end: Expr
    stage_base: Expr

    def render(self) -> str:
        return (f"      ctx.k_begin = {c_text(self.begin)}; ctx.k_end = {c_text(self.end)}; "
                f"ctx.stage_base = {c_text(self.stage_base)};")


@dataclass(frozen=True)
class Assign:
    """``target = value;`` (``op`` "+=" adds), at ``indent`` spaces."""
    target: str
    value: Expr
    indent: int
    comment: str = ""
    op: str = "="
    ctype: str = ""             # a declaration: "const int", "int", ...

    def render(self) -> str:
        head = f"{self.ctype} " if self.ctype else ""
        tail = f"  // {self.comment}" if self.comment else ""
        return f"{' ' * self.indent}{head}{self.target} {self.op} {c_text(self.value)};{tail}"


@dataclass(frozen=True)
class Let:
    """One declaration of several names: ``ctype a = x, b = y;`` (later names may use earlier ones)."""
    ctype: str
    names: tuple[tuple[str, Expr], ...]
    indent: int
    comment: str = ""

    def render(self) -> str:
        decl = ", ".join(f"{n} = {c_text(e)}" for n, e in self.names)
        return f"{' ' * self.indent}{self.ctype} {decl};" + (f"  // {self.comment}" if self.comment else "")


@dataclass(frozen=True)
class Sync:
    """``pl_bar_sync(barrier, threads)``: the role's threads wait for each other."""
    barrier: int
    threads: int
    comment: str
    indent: int = 6

    def render(self) -> str:
        return f"{' ' * self.indent}pl_bar_sync({self.barrier}, {self.threads});  // {self.comment}"


@dataclass(frozen=True)
class EntryCall:
    """A call of a component entry (``args``: its C arguments, the bindings literal among them)."""
    instance: str
    phase: str                  # the entry's phase
    symbol: str
    scope: str                  # "role" | "block"
    binding: str                # the bindings struct literal
    args: tuple[str, ...]       # the arguments after ctx and the bindings (port arrays)
    indent: int

    def render(self) -> str:
        args = ", ".join(("ctx", self.binding, *self.args))
        return f"{' ' * self.indent}{self.symbol}({args});  // @site {self.instance}"


@dataclass(frozen=True)
class RegStore:
    """A register -> smem transfer's stores (the syncs around it are Sync statements): each thread
    stores its ``values`` fragment values of ``src`` to ``dst``'s buffer."""
    src: Ref
    dst: Ref
    dst_type: str
    dst_ptr: str
    values: int
    offset: str                 # the consumer's offset expression, as C (the link checked its layout)
    value: str

    def render(self) -> str:
        return (f"      {{\n        {self.dst_type}* pl_dst = {self.dst_ptr};\n        #pragma unroll\n"
                f"        for (int v = 0; v < {self.values}; ++v) pl_dst[{self.offset}] = {self.value};\n      }}")


@dataclass(frozen=True)
class SmemCopy:
    """An smem -> smem transfer's copy loop (the syncs around it are Sync statements)."""
    src: Ref
    dst: Ref
    src_type: str
    dst_type: str
    src_ptr: str
    dst_ptr: str
    total: int
    threads: int
    dst_offset: str
    value: str

    def render(self) -> str:
        return (f"      {{\n        const {self.src_type}* pl_src = {self.src_ptr};\n"
                f"        {self.dst_type}* pl_dst = {self.dst_ptr};\n"
                f"        for (int pl_i = pl_t; pl_i < {self.total}; pl_i += {self.threads}) "
                f"pl_dst[{self.dst_offset}] = {self.value};\n      }}")


@dataclass(frozen=True)
class SplitTable:
    """Each block's stream-K units (stream_k.block_row per block), as a __constant__ table."""
    mode: str
    fields: tuple[str, ...]
    rows: tuple[tuple[int, ...], ...]

    def render(self) -> str:
        lines = [f"// split = {self.mode}: each block's stream-K units, as stream_k.block_row gives them: "
                 f"{{{', '.join(self.fields)}}} (-1: none)",
                 f"__constant__ int pl_split_rows[{len(self.rows)}][{len(self.fields)}] = {{"]
        lines += [f"  {{{', '.join(map(str, row))}}}," for row in self.rows]
        return "\n".join(lines + ["};"])


@dataclass(frozen=True)
class UnitPick:
    """Which unit ``pl_u`` is: the head (row fields ``head``: tile, k_begin, k_end; slot 0), the tail
    (``tail``: tile, k_end; slot 1), else the run's tile (field ``run`` + pl_u - pl_head)."""
    head: tuple[int, int, int, int]
    tail: tuple[int, int, int]
    run: int

    def render(self) -> str:
        h, t = self.head, self.tail
        return (f"      if (pl_head && pl_u == 0) {{ pl_tile = pl_row[{h[0]}]; pl_k_begin = pl_row[{h[1]}]; "
                f"pl_k_end = pl_row[{h[2]}]; pl_slot = {h[3]}; }}\n"
                f"      else if (pl_tail && pl_u == pl_units - 1) {{ pl_tile = pl_row[{t[0]}]; pl_k_end = "
                f"pl_row[{t[1]}]; pl_slot = {t[2]}; }}\n"
                f"      else pl_tile = pl_row[{self.run}] + pl_u - pl_head;")


@dataclass(frozen=True)
class SplitCount:
    """Thread 0 adds the unit's k-tiles to the tile's count (index pl_tile - ``whole``); the add that
    reaches ``k_tiles`` completes the tile, and with ``reset`` sets the count back to 0."""
    counts: str
    whole: int
    k_tiles: int
    reset: bool

    def render(self) -> str:
        lines = ["        if (pl_t == 0) {", "          const int pl_n = pl_k_end - pl_k_begin;",
                 f"          int* pl_count = reinterpret_cast<int*>(p.{self.counts}) + pl_tile - {self.whole};",
                 f"          pl_completes = pl_split_count(pl_count, pl_n) + pl_n == {self.k_tiles};"]
        if self.reset:
            lines.append("          if (pl_completes) *pl_count = 0;")
        return "\n".join(lines + ["        }"])


@dataclass(frozen=True)
class ContributorLoop:
    """``for (pl_b = first; pl_b cmp last; ++pl_b)``: the blocks whose partials the fix-up sums."""
    first: Expr
    cmp: str                    # "<=": last is the last block summed
    last: Expr

    def render(self) -> str:
        return f"          for (int pl_b = {c_text(self.first)}; pl_b {self.cmp} {c_text(self.last)}; ++pl_b) {{"


@dataclass(frozen=True)
class SkipIf:
    """``if (test) continue;`` in the contributor loop."""
    test: Expr
    comment: str

    def render(self) -> str:
        return f"            if ({c_text(self.test)}) continue;  // {self.comment}"


@dataclass(frozen=True)
class SlotRead:
    """``pl_from``: where contributor pl_b's partials are: its block's slot ``slot`` (0 or 1, an
    expression), ``slot_floats`` floats each."""
    slot: Expr
    slot_floats: int

    def render(self) -> str:
        return (f"            const float* pl_from = pl_parts + (pl_b * 2 + ({c_text(self.slot)})) * "
                f"{self.slot_floats};")


@dataclass(frozen=True)
class BlockIter:
    """ctx.iter of the whole-block phases at the end: the iterations the block's roles ran."""
    value: Expr

    def render(self) -> str:
        return f"    ctx.iter = {c_text(self.value)};"


Stmt = Union[Text, KernelHead, MbarInit, TileCount, RoleBranch, SetMaxNReg, RoleThreads, Padding, TileLoop,
             UnitLoop, UnitInit, LoopEnd, TileCtx, KRange, Assign, Let, Sync, EntryCall, RegStore, SmemCopy, SplitTable,
             UnitPick, SplitCount, ContributorLoop, SkipIf, SlotRead, BlockIter]


def render(stmts) -> str:
    """The glue's text: every statement's lines, in order."""
    return "\n".join(s.render() for s in stmts) + "\n"

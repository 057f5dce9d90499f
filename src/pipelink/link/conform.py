"""Stage 7: does each component's code obey its contract? (Checked on the linked cubin.)

Contracts are checked against each other before linking; this checks the code. Every SASS
instruction carries its inlining chain (-lineinfo survives LTO), which ends at the glue line that
called the component, so each instruction is attributed to the instance it came from, even when
two instances share one package. Then, per instance, against what its contract declares and what
the linker allocated:

  named barriers      every BAR uses an ID allocated or reserved for this instance, with the
                      declared thread count; barrier 0 (__syncthreads) is refused in a block with
                      several roles (the other roles never reach it), except in a whole-block
                      phase ([[entry]] scope = "block"), which every thread of the block runs
  registers           setmaxnreg only with values the contract declares; local memory (spills)
  transaction bytes   arrive.expect_tx announces the tx_bytes declared for that mbarrier
  shared memory       a load or store at a static offset lies, all of its bytes, inside one of
                      this instance's buffers (and so inside the block's allocation); so does
                      the shared-memory side of a TMA box copy (its box: the smallest of the
                      instance's tma operands) or a bulk copy (its size), aligned as the copy
                      engine needs, and the mbarrier a copy completes on is one of the
                      instance's; mbarrier operations only on this instance's mbarrier slots,
                      and no mbarrier.init (the glue initializes every mbarrier). Out-of-bounds
                      accesses with run-time offsets are the sanitizer's job.
  tensor memory       no tcgen05.alloc, dealloc or relinquish_alloc_permit unless the contract declares
                      the columns the component allocates itself ([reserve] tmem_columns)
  calls               nothing left un-inlined

Findings are errors or warnings naming the instance, the component, the instruction, its source
line, the contract field, and what to change. The symbol-linking control runs the same check and
only reports: it shows what linking by symbols lets through.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path

from ..backend.inspect import CubinInfo, is_guardrail_call, opcode
from ..contract import DTYPES
from ..findings import ConformanceError, Finding
from .alloc import MBARRIER_REGION
from .plan import CallSite, Check, InstancePlan, LinkPlan

_BAR = re.compile(r"^BAR\.(\w+)(?:\.\w+)*\s+([^,\s]+)(?:,\s*([^,\s]+))?")  # BAR.RED.POPC id, threads, P0
_SMEM_OPS = ("LDS", "STS", "LDSM", "STSM", "ATOMS", "REDS", "LDGSTS")  # LDGSTS: cp.async, its smem destination
# The copy engine's instructions. A box copy through a tensor map: UTMALDG[.MULTICAST] [dst], [map] (dst's register
# block: the smem destination, then the mbarrier, then the coordinates), UTMASTG / UTMAREDG [src], [map]. A bulk
# copy: UBLKCP.<to>.<from> [dst], [src], size and UBLKRED.G.S [dst], [src], size (S: shared, G: global; the size
# in 16-byte units; a copy into shared memory completes on the mbarrier in the register after dst's).
_BOX_OPS = ("UTMALDG", "UTMASTG", "UTMAREDG")
_BULK_OPS = ("UBLKCP", "UBLKRED")
_BOX_ALIGN, _BULK_ALIGN = 128, 16   # the PTX ISA's alignment of the shared-memory address
# Tensor-memory allocation (sm_100a, seen in nvcc 13.0's SASS): tcgen05.alloc is a UTCATOMSWS.FIND_AND_SET loop,
# tcgen05.dealloc a UTCATOMSWS.AND, tcgen05.relinquish_alloc_permit a UVIRTCOUNT.DEALLOC.SMPOOL.
_TMEM_ALLOC_OPS = ("UTCATOMSWS", "UVIRTCOUNT")


def _sites(plan: LinkPlan, info: CubinInfo) -> list[CallSite | None]:
    """The component call in the glue each instruction was inlined from (None: glue code)."""
    glue = plan.backend.glue_path
    sites = []
    for chain in info.locations:
        site = None
        for path, line in chain:
            if path == glue:
                site = plan.glue.site_at(line) or site
        sites.append(site)
    return sites


def attribute(plan: LinkPlan, info: CubinInfo) -> list[str | None]:
    """Instance name (or None for glue code) for every instruction."""
    return [None if site is None else site.instance for site in _sites(plan, info)]


def check(plan: LinkPlan, info: CubinInfo) -> list[Finding]:
    several_roles = len(plan.roles) > 1
    windows = _Windows(info.labels, info.instructions)
    findings: list[Finding] = []
    for n, (insn, chain, site) in enumerate(zip(info.instructions, info.locations, _sites(plan, info))):
        windows.enter(n)
        body = insn.split(" ", 1)[1] if insn.startswith("@") else insn
        if site is None:
            windows.step(insn)
            continue
        inst = plan.instance(site.instance)
        where = _where(chain, plan)
        op = opcode(insn)

        def add(severity: str, field: str, message: str, hint: str) -> None:
            findings.append(Finding(severity, inst.name, inst.contract.name, insn, where, field, message, hint))

        bar = _BAR.match(body)
        if bar:
            _check_barrier(plan, inst, bar.groups(), several_roles and site.scope != "block", add)
        elif op.startswith("USETMAXREG"):
            _check_setmaxnreg(plan, inst, body, add)
        elif op.startswith(("SYNCS", "ARRIVES")):  # ARRIVES.LDGSTSBAR: cp.async.mbarrier.arrive
            at = _smem_offset(windows.address(insn), info.static_smem)
            _check_mbarrier_access(plan, inst, at, op == "SYNCS.EXCH.64", add)
            if op == "SYNCS.ARRIVE.TRANS64":  # arrive.expect_tx: the transaction bytes it announces
                guard = insn.split(" ", 1)[0] if insn.startswith("@") else ""
                _check_expect_tx(plan, inst, at, windows.value(body.rsplit(",", 1)[-1], guard), add)
        elif op.split(".")[0] in _SMEM_OPS:
            at = _smem_offset(windows.address(insn), info.static_smem)
            _check_smem_access(plan, inst, op, at, _access_bytes(op), op.startswith("LD") and op[:6] != "LDGSTS", add)
        elif op.split(".")[0] in _BOX_OPS + _BULK_OPS:
            _check_copy(plan, inst, insn, windows, info.static_smem, add)
        elif op.split(".")[0] in _TMEM_ALLOC_OPS:
            _check_tmem_alloc(inst, op, add)
        elif op.split(".")[0] in ("LDL", "STL"):
            add("warning", f"roles.{_role_of(inst, plan)}.registers", "uses local memory (register spills)",
                "raise the role's register budget or reduce live values in the component")
        elif op.startswith("CALL.REL") and not is_guardrail_call(insn):
            add("error", "entry", "a call remains: the component was not inlined",
                "make the entry a plain extern \"C\" __device__ function (not noinline, no recursion); if it is one, "
                "LTO's inliner found it too large: it weighs every variant the entry's fact branches reach before "
                "the facts fold, so instantiate fewer (a contract limit can rule a combination out)")
        windows.step(insn)
    return _dedupe(findings)


def _where(chain, plan: LinkPlan) -> str:
    """The component's own line the instruction comes from (the outermost frame below the glue's
    call), and the innermost frame where that is elsewhere: a pipelink helper, a library header."""
    glue = plan.backend.glue_path
    frames = [f"{Path(p).name}:{n}" for p, n in chain if p != glue]
    if not frames:
        return "glue"
    return frames[-1] + (f" (in {frames[0]})" if frames[0] != frames[-1] else "")


def _role_of(inst: InstancePlan, plan: LinkPlan) -> str:
    return next(iter(inst.contract.roles))


def _check_barrier(plan, inst, groups, others_elsewhere: bool, add) -> None:
    """``others_elsewhere``: the block has warps that do not run this code (another role)."""
    _kind, bid, threads = groups
    if not bid.startswith("0x"):
        add("warning", "named_barrier", f"barrier ID comes from a register ({bid}); it cannot be checked",
            "pass each barrier's binding (b.<name>) straight to its call; for a choice at run time "
            "branch, one call per barrier (`if (wg) pl_bar_sync(b.wg1, n); else pl_bar_sync(b.wg0, n);`), "
            "not `pl_bar_sync(wg ? b.wg1 : b.wg0, n)`: each bar.sync then takes its ID as an immediate")
        return
    bid_n = int(bid, 16)
    if bid_n == 0:
        if others_elsewhere:
            add("error", "named_barrier", "uses barrier 0 (__syncthreads) in a warp-specialized block: the other "
                "roles never arrive, so it deadlocks or pairs with the wrong arrivals",
                "declare a [[named_barrier]] with the role's thread count and sync on it, or, for library code that "
                "needs the whole block (CUB block primitives), put it in an entry of scope = \"block\"")
        return
    mine = {b.id: b.threads for b in plan.barriers if b.purpose.owner == inst.name}
    if bid_n not in mine:
        declared = ", ".join(f"{b.purpose.barrier}={b.id}" for b in plan.barriers
                             if b.purpose.owner == inst.name) or "none"
        add("error", "named_barrier", f"uses named barrier {bid_n}, which is neither allocated to nor reserved by "
            f"this instance (its barriers: {declared})",
            "declare the barrier under [[named_barrier]] and use its binding (b.<name>), or list a hard-coded ID "
            "under [reserve] named_barriers")
        return
    want = mine[bid_n]
    if want is not None and threads is not None and threads.startswith("0x") and int(threads, 16) != want:
        name = next(b.purpose.barrier for b in plan.barriers if b.id == bid_n and b.purpose.owner == inst.name)
        add("error", f"named_barrier.{name}.threads", f"syncs {int(threads, 16)} threads on barrier {bid_n}, but the "
            f"contract declares {want}", "make the thread count in the code and in the contract agree")


def _check_tmem_alloc(inst, op: str, add) -> None:
    """A component's own tensor-memory allocation is legal only where its contract declares the columns
    ([reserve] tmem_columns): the link counts them beside the glue's and leaves the block's permit to it."""
    if inst.facts_eval(inst.contract.reserve.tmem_columns, "reserve.tmem_columns"):
        return
    what = "gives up the allocation permit" if op.startswith("UVIRTCOUNT") else "allocates or frees tensor memory"
    add("error", "reserve.tmem_columns", f"{what} itself (tcgen05.alloc / dealloc / relinquish_alloc_permit), but "
        "its contract declares no columns of its own: the glue's allocation and its own may starve each other, or "
        "it may allocate after the glue gave the permit up",
        "take the columns as a [[tmem]] buffer (the glue allocates it and binds its address), or declare the most it "
        "allocates at once under [reserve] tmem_columns")


def _check_setmaxnreg(plan, inst, body, add) -> None:
    m = re.search(r"(0x[0-9a-f]+)\s*$", body)
    value = int(m.group(1), 16) if m else None
    allowed = set()
    for r in inst.contract.roles.values():
        allowed.update(r.internal_setmaxnreg)
    if value not in allowed:
        budget = ", ".join(f"{n}={r.registers}" for n, r in inst.contract.roles.items())
        add("error", "roles.internal_setmaxnreg", f"sets its register budget to {value} with setmaxnreg; the "
            f"contract declares no such value (role budgets: {budget}; the glue issues those)",
            "drop setmaxnreg from the component (the glue sets the role's `registers`), or list the value under "
            "the role's internal_setmaxnreg if the component manages its own warpgroups")


def _check_mbarrier_access(plan, inst, at: _Offset | None, is_init: bool, add) -> None:
    """An mbarrier operation's address (``at``, None: not known) against the instance's mbarrier slots
    and the buffers where it keeps mbarriers of its own (reserve.mbarriers_in, where it may also init).
    With a run-time part the known offset is a lower bound: the operation is certainly outside only
    when that bound lies past everything it may touch."""
    own = [(s.offset, s.offset + s.bytes) for s in plan.smem
           if any(u.instance == inst.name and u.name in inst.contract.reserve.mbarriers_in for u in s.users)]
    slots = [(a.offset, a.offset + 8 * a.count, a.name) for a in plan.mbarriers
             if any(u.instance == inst.name for u in a.users)]
    allowed = own if is_init else own + [(lo, hi) for lo, hi, _ in slots]
    if at is None:
        if is_init and not own:  # no buffer of its own: wherever it is, an init is the glue's
            allowed = []
        else:
            return  # an address not followed: it may be one of its own
    elif any(lo <= at.offset < hi for lo, hi in allowed) or \
            (at.runtime and any(at.offset < hi for _, hi in allowed)):
        return
    where = "" if at is None else f" at smem offset {at.offset}" + (" (plus a run-time index)" if at.runtime else "")
    if is_init:
        add("error", "mbarrier", f"initializes an mbarrier{where} (mbarrier.init): the glue initializes every "
            "mbarrier with the contract's arrival count, a second init resets its phase",
            "remove the init from the component and declare the mbarrier under [[mbarrier]], or, for mbarriers "
            "kept inside its own buffer, name that buffer under [reserve] mbarriers_in")
        return
    have = ", ".join([f"{n} [{lo}, {hi})" for lo, hi, n in slots] + [f"own buffer [{lo}, {hi})" for lo, hi in own])
    add("error", "mbarrier", f"operates on an mbarrier{where}, outside this instance's mbarrier slots "
        f"({have or 'none'})", "declare the mbarrier under [[mbarrier]] (count covers every slot used) and address "
        "it through its binding, or name the buffer holding it under [reserve] mbarriers_in")


def _check_expect_tx(plan, inst, at: _Offset | None, value, add) -> None:
    """The byte count an arrive.expect_tx announces (``value``: what its register holds, when a constant
    was followed into it) against the tx_bytes the contract declares for the mbarrier array at ``at``
    (any of its slots; with a run-time slot index, the array its known part lies in)."""
    if at is None or not isinstance(value, int):
        return
    off = at.offset
    array = next((m for m in plan.mbarriers if m.offset <= off < m.offset + 8 * m.count
                  and any(u.instance == inst.name for u in m.users)), None)
    if array is None or value == array.tx_bytes:
        return
    name = next(u.name for u in array.users if u.instance == inst.name)
    slot = "a run-time slot" if at.runtime else f"slot {(off - array.offset) // 8}"
    severity = "error" if value > array.tx_bytes else "warning"
    add(severity, f"mbarrier.{name}.tx_bytes", f"announces {value} transaction bytes on {slot} of mbarrier "
        f"{array.name}, but "
        f"the contract declares {array.tx_bytes} per phase" + (" (more bytes than will ever arrive: the phase "
        "never completes)" if value > array.tx_bytes else " (fewer: fine only if the rest is announced elsewhere)"),
        "make tx_bytes in the contract equal to the bytes the copies deliver per phase")


# --- static shared-memory accesses ------------------------------------------------------------
#
# A SASS shared-memory address is [registers + displacement]. The compiler builds the dynamic
# smem base (pl_smem) as a window address: MOV Rk, <constant>; S2R Rc, SR_CgaCtaId; LEA Rd, Rc,
# Rk, 0x18 (the CTA's rank goes to bits 24 and up), where pl_smem's constant is the kernel's
# static smem size (the reserved KB and any __shared__ arrays lie below it). _Windows follows
# such values through moves and additions in program order, so an access whose registers hold
# "window constant K (+ a run-time part)" has a known constant part: K + displacement, an offset
# from pl_smem once the base is subtracted. A buffer's offset is a folded binding, so it usually
# lands in the constant part, but the compiler may also move it into the run-time part.

_WIN_REG = re.compile(r"^(U?R\d+)(?:\.reuse)?$")
_IMM_TOKEN = re.compile(r"^-?0x[0-9a-f]+$")
_PRED = re.compile(r"^!?(U?P\d)$")
_PRED_OUT = re.compile(r"^U?P(?:\d|T)$")
_REGS = re.compile(r"\bU?R\d+\b")
_JUMPS = ("BRA", "BRX", "JMP", "JMX", "EXIT", "RET")
_TARGET = re.compile(r"`\((\.L_x_\d+)\)")
_ADDITIVE = ("IADD3", "UIADD3", "VIADD", "IADD", "UIADD", "IMAD.IADD", "IMAD", "UIMAD", "LEA", "ULEA")
_CGA = "cga"             # the value of SR_CgaCtaId


def _imm(tok: str) -> int:
    """A SASS immediate; 32-bit operands print negative values in two's complement."""
    value = int(tok, 16)
    return value - (1 << 32) if value >= 1 << 31 else value


@dataclass(frozen=True)
class _Window:
    constant: int        # the window address's constant part
    runtime: bool        # plus a part known only at run time


@dataclass(frozen=True)
class _Offset:
    offset: int          # from pl_smem (the dynamic allocation's base)
    runtime: bool        # a lower bound: plus a part known only at run time


def _smem_offset(window: _Window | None, dynamic_base: int) -> _Offset | None:
    """A window address as an offset into the block's dynamic allocation (None: not known, or below
    it: a static __shared__ array)."""
    if window is None or window.constant < dynamic_base:
        return None
    return _Offset(window.constant - dynamic_base, window.runtime)


class _Windows:
    """Which registers hold a shared-memory window address (or a constant), from program order.
    A value set under a predicate (@P0) is used only by instructions under the same predicate,
    until that predicate is written again; anything not followed is unknown, and the check
    stays quiet on unknown bases.

    Forward branches are followed: at a label, what the registers hold is what every way in
    agrees on (the fall-through and each branch seen so far to it). Code after an unconditional
    jump or EXIT is reached only by its branches: nvcc puts the divergent path of a __syncwarp
    there (BRA.DIV to a block past EXIT), and that block's registers are those of the BRA.DIV,
    not of whatever precedes it in program order. A backward branch (a loop) is not followed;
    `stepped` covers what a loop changes."""

    def __init__(self, labels: dict[str, int] | None = None, instructions: list[str] = ()) -> None:
        self.values: dict[str, tuple[object, str]] = {}   # register -> (value, predicate it was set under)
        # Registers that depend on an update in place (a loop's induction variable): program order
        # sees the update once, a loop runs it any number of times, and an unrolled copy of the loop
        # may be guarded by a trip count it never reaches. Addresses built on them are not judged.
        self.stepped: set[str] = set()
        self.elected: set[str] = set()   # predicates ELECT wrote, true in one lane of the warp
        self.labels = labels or {}
        self.at = -1                  # the instruction being looked at
        self.falls_through = True     # does the previous instruction continue into this one?
        self.incoming: dict[int, list[tuple[dict, set]]] = {}  # instruction -> states of the branches to it
        # A loop's head (the target of a later backward branch) is reached again with what the loop body
        # wrote: the registers written between the head and the branch hold no value known there.
        self.loop_writes: dict[int, set[str]] = {}
        for j, insn in enumerate(instructions):
            op, args = _operands(insn)[1:]
            target = _TARGET.search(insn) if op.split(".")[0] in _JUMPS else None
            head = self.labels.get(target.group(1)) if target else None
            if head is not None and head <= j:
                written = self.loop_writes.setdefault(head, set())
                for k in range(head, j + 1):
                    written |= _dests(*_operands(instructions[k])[1:])

    def enter(self, n: int) -> None:
        """Instruction ``n`` comes next: join the states of the ways into it."""
        self.at = n
        ways = self.incoming.pop(n, [])
        if self.falls_through:
            ways.append((self.values, self.stepped))
        if not ways:  # reached only by backward branches: nothing is known
            self.values, self.stepped, self.elected = {}, set(), set()
        elif len(ways) > 1 or not self.falls_through:
            first, *others = ways
            self.values = {r: v for r, v in first[0].items() if all(o[0].get(r) == v for o in others)}
            self.stepped = set().union(*(w[1] for w in ways))
            self.elected = set()
        if n in self.loop_writes:
            self.values = {r: v for r, v in self.values.items() if r not in self.loop_writes[n]}
        self.falls_through = True

    def value(self, tok: str, guard: str):
        tok = tok.strip()
        if tok in ("RZ", "URZ"):
            return 0
        if _IMM_TOKEN.match(tok):
            return _imm(tok)
        m = _WIN_REG.match(tok)
        value, set_under = self.values.get(m.group(1), (None, "")) if m else (None, "")
        return value if set_under in ("", guard) else None

    def step(self, insn: str) -> None:
        guard, op, args = _operands(insn)
        if op.split(".")[0] in _JUMPS:
            target = _TARGET.search(insn)
            to = self.labels.get(target.group(1)) if target else None
            if to is not None and to > self.at:
                self.incoming.setdefault(to, []).append((dict(self.values), set(self.stepped)))
            # BRA L, EXIT, RET: nothing after it runs next; a guard (@P0) or a condition operand
            # (BRA.DIV UR4, L; BRA P2, L) leaves the fall-through
            self.falls_through = bool(guard) or len(args) > 1 or op.startswith("BRA.DIV")
            return
        for a in args[:2]:  # a predicate written here invalidates what was set under it
            p = _PRED.match(a)
            if p:
                self.values = {r: v for r, v in self.values.items() if p.group(1) not in v[1]}
                self.elected.discard(p.group(1))
        if op.startswith("ELECT") and args and _PRED.match(args[0]):
            self.elected.add(args[0])
        lane_loop = op.startswith("R2UR") and len(args) == 3 and _PRED_OUT.match(args[0])
        if guard and (guard.lstrip("@") in self.elected or lane_loop) and _dest_is_uniform(op, args):
            # A uniform register written under the predicate ELECT gave one lane, or by the R2UR of ptxas's loop
            # over the lanes' values (@P R2UR P0, UR, R: P0 marks the lanes whose value it took; the copy and a
            # BRA.U.ANY back follow): the copy gets one lane's value. Every lane's has the same known part, so
            # the value holds for the unguarded instruction that uses it.
            guard = ""
        lead = _dest_at(op, args)
        dest = _WIN_REG.match(args[lead]) if len(args) > lead else None
        if dest is None:
            return
        srcs = args[lead + 1:]
        value = self._evaluate(op, srcs, guard)
        reg = dest.group(1)
        sources = {r for a in srcs for r in _REGS.findall(a)}
        # A constant added to the register in place: a loop's induction step (a pointer bump).
        induction = op in _ADDITIVE and reg in sources and all(
            isinstance(self.value(a.lstrip("-"), guard), int) for a in srcs if reg not in _REGS.findall(a))
        for r in _dests(op, args):
            self.values.pop(r, None)
            self.stepped.discard(r)
        if induction or sources & self.stepped:
            self.stepped.add(reg)
        if value is not None:
            self.values[reg] = (value, guard)

    def _evaluate(self, op: str, srcs: list[str], guard: str):
        def v(tok):
            return self.value(tok, guard)
        base = op.split(".")[0]
        if base in ("MOV", "UMOV", "R2UR") and srcs:
            return v(srcs[0])
        if op in ("IMAD.MOV.U32", "IMAD.MOV", "IMAD.U32") and len(srcs) == 3 and srcs[:2] == ["RZ", "RZ"]:
            return v(srcs[2])
        if base == "HFMA2" and len(srcs) == 4 and srcs[:2] == ["-RZ", "RZ"]:
            # ptxas builds some 32-bit constants as two halves: -0 * 0 + (hi, lo), e.g. 0x1010 as
            # HFMA2.MMA R11, -RZ, RZ, 0, 0.00049591064453125
            return _halves(srcs[2], srcs[3])
        if base in ("S2R", "S2UR") and srcs == ["SR_CgaCtaId"]:
            return _CGA
        if op in ("LEA", "ULEA") and len(srcs) == 3:
            low, addend, shift = v(srcs[0]), v(srcs[1]), v(srcs[2])
            if low == _CGA and shift == 0x18 and isinstance(addend, int):
                return _Window(addend, False)
            if isinstance(addend, _Window) and isinstance(shift, int) and low != _CGA:
                known = isinstance(low, int)
                return _Window(addend.constant + (low << shift if known else 0), addend.runtime or not known)
            return None
        if op in ("IADD3", "UIADD3", "VIADD", "IADD", "UIADD", "IMAD.IADD"):
            terms = [srcs[0], srcs[2]] if op == "IMAD.IADD" and len(srcs) == 3 and srcs[1] == "0x1" else srcs
            return self._sum(terms, guard)
        if op in ("IMAD", "UIMAD") and len(srcs) == 3:
            a, b = v(srcs[0]), v(srcs[1])
            if isinstance(a, _Window) or isinstance(b, _Window):
                return None
            product = a * b if isinstance(a, int) and isinstance(b, int) else None
            return self._sum([srcs[2]], guard, product)
        return None

    def _sum(self, terms: list[str], guard: str, extra: int | None = 0):
        """A sum of operands (``extra``: one more term, None if known only at run time)."""
        total, window, runtime = extra or 0, None, extra is None
        for t in terms:
            negated = t.startswith("-")
            value = self.value(t.lstrip("-"), guard)
            if isinstance(value, _Window):
                if negated or window is not None:
                    return None
                window = value
            elif isinstance(value, int):
                total += -value if negated else value
            elif negated:  # a subtracted run-time value: the constant is no lower bound any more
                return None
            else:
                runtime = True
        if window is None:
            return None if runtime else total
        return _Window(window.constant + total, window.runtime or runtime)

    def address(self, insn: str, bracket: int = 0) -> _Window | None:
        """The window address of a shared-memory operand (the instruction's ``bracket``-th [...]),
        displacement included (None: unknown)."""
        guard = insn.split(" ", 1)[0] if insn.startswith("@") else ""
        found = re.findall(r"\[([^\]]*)\]", insn)
        if len(found) <= bracket or set(_REGS.findall(found[bracket])) & self.stepped:
            return None
        window = self._sum(found[bracket].split("+"), guard)
        return window if isinstance(window, _Window) else None

    def register_after(self, operand: str, guard: str) -> _Window | None:
        """The window address in the register after a register block's first ([UR20]: UR21), where a copy
        keeps the mbarrier it completes on (None: unknown, or not a plain register)."""
        m = re.fullmatch(r"\[(U?R)(\d+)\]", operand.strip())
        reg = m and f"{m.group(1)}{int(m.group(2)) + 1}"
        if not reg or reg in self.stepped:
            return None
        value = self.value(reg, guard)
        return value if isinstance(value, _Window) else None


def _dest_is_uniform(op: str, args: list[str]) -> bool:
    """Does the instruction write a uniform register (URn) first?"""
    lead = _dest_at(op, args)
    return len(args) > lead and args[lead].startswith("UR")


def _operands(insn: str) -> tuple[str, str, list[str]]:
    """(guard, opcode, operands) of a SASS instruction."""
    guard, body = insn.split(" ", 1) if insn.startswith("@") else ("", insn)
    op, _, rest = body.partition(" ")
    return guard, op, [a.strip() for a in rest.split(",")] if rest else []


def _dest_at(op: str, args: list[str]) -> int:
    """Where the register an instruction writes is: the first operand, or the one after a predicate
    written first (R2UR P0, UR5, R6; LOP3.LUT P0, R8, ...). A compare (ISETP P0, PT, R7, ...) writes
    none (its registers are sources)."""
    return 1 if args and _PRED_OUT.match(args[0]) and "SETP" not in op and not op.startswith("PLOP3") else 0


def _dests(op: str, args: list[str]) -> set[str]:
    """The registers an instruction writes."""
    lead = _dest_at(op, args)
    dest = _WIN_REG.match(args[lead]) if len(args) > lead and op.split(".")[0] not in _JUMPS else None
    if dest is None:
        return set()
    reg = dest.group(1)
    prefix = "UR" if reg.startswith("U") else "R"
    first = int(reg[len(prefix):])
    return {f"{prefix}{n}" for n in range(first, first + _written(op))}


def _halves(hi: str, lo: str) -> int | None:
    """The 32-bit value whose upper and lower 16 bits are the fp16 numbers ``hi`` and ``lo``."""
    try:
        bits = [struct.unpack("<H", struct.pack("<e", float(h)))[0] for h in (hi, lo)]
    except (ValueError, OverflowError):  # INF, NAN, or not a number: not followed
        return None
    return bits[0] << 16 | bits[1]


def _written(op: str) -> int:
    """Registers an instruction writes from its first operand on."""
    if ".128" in op or ".M88.4" in op:
        return 4
    if ".64" in op or ".WIDE" in op or ".M88.2" in op:
        return 2
    return 1


def _access_bytes(op: str) -> int:
    if op.startswith(("LDSM", "STSM")):
        return 16  # each thread addresses one 16-byte row of an 8x8 matrix
    for suffix, n in ((".128", 16), (".64", 8), (".U16", 2), (".S16", 2), (".U8", 1), (".S8", 1)):
        if suffix in op:
            return n
    return 4


def _check_smem_access(plan, inst, op, at: _Offset | None, nbytes: int, reads: bool, add,
                       copy: str = "") -> None:
    """A shared-memory access whose address is fully known (no run-time part) must lie, with all
    of its bytes, inside one of the instance's buffers. With a run-time part (an index, or a
    buffer offset the compiler moved into a register) the known part is only a lower bound: the
    access is certainly out of bounds when even that bound ends past the instance's last buffer,
    which includes everything past the block's allocation. A known part below pl_smem is a
    static __shared__ array or a register set above its buffer: not checked. Overruns that depend
    on run-time values are the sanitizer's job. ``copy``: what a copy-engine instruction moves (its
    box, its size), for the messages."""
    if at is None:
        return
    offset = at.offset
    end = offset + nbytes
    own = sorted((s for s in plan.smem if any(u.instance == inst.name for u in s.users)), key=lambda s: s.offset)
    if at.runtime:
        if not own or end <= max(s.offset + s.bytes for s in own):
            return
    elif any(s.offset <= offset and end <= s.offset + s.bytes for s in own):
        return
    what = f"{'reads' if reads else 'writes'} {end - offset} bytes{copy} at smem offset {offset}" + \
        (" (plus a run-time index)" if at.runtime else "")
    home = next((s for s in reversed(own) if s.offset <= offset), None)
    if home is None:
        add("error", "smem", f"{what}, outside every buffer this instance declares: into "
            f"{_occupant(plan, offset, end)}", "declare the buffer under [[smem]] with its full size and address it "
            "through b.<name>")
        return
    name = next(u.name for u in home.users if u.instance == inst.name)
    hi = home.offset + home.bytes
    add("error", f"smem.{name}", f"{what}, ending {end - hi} bytes past its buffer '{name}' [{home.offset}, {hi}): "
        f"into {_occupant(plan, max(offset, hi), end)}",
        f"keep the index inside '{name}'" + (", or copy a smaller box or size" if copy else "") +
        ", or declare its full size under [[smem]] bytes")


def _check_copy(plan, inst, insn: str, windows: "_Windows", dynamic_base: int, add) -> None:
    """A TMA box copy or a bulk copy: its shared-memory side lies inside one of the instance's buffers with all
    the bytes it moves, at the alignment the copy engine needs, and a copy into shared memory completes on one of
    the instance's mbarriers. A box's bytes are those of the smallest box the instance's tma operands declare
    (the map an instruction names is a parameter address the check does not follow): exact where they share
    one box size, a lower bound otherwise. A bulk copy's size is its register's value where a constant was
    followed into it, else 16 bytes (the least a bulk copy moves)."""
    guard, op, args = _operands(insn)
    parts = op.split(".")
    if parts[0] in _BOX_OPS:
        box = _smallest_box(inst)
        if box is None:  # no tma operand: a map the contract does not declare (nothing to size it by)
            return
        nbytes, align, copy = box, _BOX_ALIGN, " (a TMA box)"
        sides = [(0, parts[0] != "UTMALDG")]                 # (bracket, reads shared memory)
        completes = parts[0] == "UTMALDG"
    else:
        size = windows.value(args[-1], guard) if len(args) >= 3 else None
        nbytes = 16 * size if isinstance(size, int) and size > 0 else 16
        align, copy = _BULK_ALIGN, " (a bulk copy)"
        to, source = (parts[1:3] + ["", ""])[:2]
        sides = [(0, False)] * (to == "S") + [(1, True)] * (source == "S")
        completes = parts[0] == "UBLKCP" and to == "S"
    for bracket, reads in sides:
        at = _smem_offset(windows.address(insn, bracket), dynamic_base)
        _check_smem_access(plan, inst, op, at, nbytes, reads, add, copy)
        if at is not None and not at.runtime and at.offset % align:
            home = _home(plan, inst, at.offset)
            add("error", f"smem.{home}" if home else "smem", f"{'reads' if reads else 'writes'} {nbytes} bytes{copy} "
                f"at smem offset {at.offset}, which is not {align}-byte aligned ({at.offset % align} past a "
                "multiple): the copy engine needs that alignment", f"place the copy's shared-memory side on a "
                f"{align}-byte boundary: declare " + (f"'{home}'" if home else "the buffer") + f" with align = {align} "
                f"or more and step inside it by multiples of {align}")
    if completes:
        block = windows.register_after(args[0] if args else "", guard)
        _check_mbarrier_access(plan, inst, block and _smem_offset(block, dynamic_base), False, add)


def _home(plan, inst, offset: int) -> str | None:
    """The name of the instance's buffer that holds smem ``offset`` (None: none does)."""
    return next((u.name for b in plan.smem if b.offset <= offset < b.offset + b.bytes
                 for u in b.users if u.instance == inst.name), None)


def _smallest_box(inst) -> int | None:
    """The bytes of the smallest TMA box among the instance's operands (None: it has none)."""
    boxes = []
    for i, o in enumerate(inst.contract.operand):
        if o.tma is not None:
            n = DTYPES[o.dtype][1]
            for e in o.tma.box:
                n *= inst.facts_eval(e, f"operand[{i}].tma.box")
            boxes.append(n)
    return min(boxes, default=None)


def _occupant(plan, lo: int, hi: int) -> str:
    """What the block keeps in smem [lo, hi)."""
    found = [f"mbarrier {m.name}" for m in plan.mbarriers if m.offset < hi and lo < m.offset + 8 * m.count]
    found += [f"buffer {s.name}" for s in plan.smem
              if s.offset < hi and lo < s.offset + s.bytes and s.name != MBARRIER_REGION]
    if hi > plan.smem_bytes:
        found.append(f"memory beyond the block's {plan.smem_bytes} allocated bytes")
    return ", ".join(found) or "padding between buffers"


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen, out = set(), []
    for f in findings:
        key = (f.instance, f.location, f.field, f.message, opcode(f.instruction))  # one finding per line and kind
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def verdict(plan: LinkPlan, findings: list[Finding], strict: bool) -> tuple[Check, list[str]]:
    """The conformance check and the warnings the findings give. Errors fail a strict link, naming
    the package of the first; in symbol mode they are only reported, as what linking by symbols
    lets through."""
    errors = [f for f in findings if f.severity == "error"]
    warnings = [f for f in findings if f.severity == "warning"]
    symbol = plan.options.mode == "symbol"
    said = [("unchecked by symbol linking: " if symbol else "") + f.format()
            for f in (findings if symbol else warnings)]
    detail = f"{len(errors)} error(s), {len(warnings)} warning(s)" if findings else \
        "every barrier, setmaxnreg, smem offset and mbarrier slot used by a component is declared"
    if symbol and findings:  # the control links anyway: that is what it shows
        detail = f"symbol linking lets through {detail} (listed under warnings)"
    if errors and strict and not symbol:
        first = errors[0]
        raise ConformanceError(
            f"{len(errors)} violation(s) of a component's contract by its code:\n  "
            + "\n  ".join(f.format() for f in errors), file=plan.instance(first.instance).file,
            component=first.component, field=first.field,
            hint="each finding's `fix:` says what to change; then repack the component (link with strict=False "
                 "to only report them)")
    return Check("conformance", not errors or symbol, detail), said

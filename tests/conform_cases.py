"""Conformance violations generated across positions (issue 56): every rule of link/conform.py broken
in every position a component's code can break it, each beside a legal twin that must stay quiet.

A case is one statement of a component's entry, an inline-asm instruction (volatile: the compiler
neither drops nor merges it), and the cases follow each other in straight-line code: the code is
checked, never run. Many cases go into one source, so one nvcc compile and one link check them
all; findings name the source line they come from, and each case has a line of its own. (Under
branches, ptxas if-converts neighbouring cases into one block and gives both one line.) The rules and their positions:

  smem           a load, store, ldmatrix, stmatrix or cp.async of every width the SASS has (1, 2, 4, 8,
                 16 bytes; LDSM/STSM x1, x2, x4 address 16-byte rows; LDGSTS 4, 8, 16) at the first,
                 middle and last buffer: the last aligned place that fits (legal) and the first that
                 does not (a wide access starts inside and ends past; a narrow one starts at the end).
                 Each buffer is 4 bytes past a multiple of 16, so a 8- or 16-byte access at that multiple
                 starts inside and runs past.
  smem-runtime   the same at the last buffer with a run-time index added: the known part is a lower
                 bound, so an access is certainly out when that bound ends past the instance's last
                 buffer. (Past the first or middle buffer with a run-time index lands in the instance's
                 own next buffer: the static check cannot tell it from a legal index, the sanitizer can.)
  mbarrier       arrive, try_wait, cp.async arrive and init on every slot of a 4-slot array (legal but
                 init), on the slot before and the slot after it, and on a data buffer (illegal).
  expect_tx      arrive.expect_tx on every slot announcing tx_bytes (legal), 16 more (an error: a hang)
                 and 16 fewer (a warning).
  mbarriers_in   a component keeping mbarriers in its own buffer: init, arrive and try_wait at its first,
                 middle and last 8 bytes (legal), on its data buffer's first, middle and last (illegal),
                 and init on a glue-initialized slot (illegal).
  named_barrier  bar.sync, bar.arrive and bar.red.popc on each of its three pinned IDs with the declared
                 thread count (legal), on every other ID 4..15 (illegal) and with 32 threads fewer or more
                 (illegal).
  setmaxnreg     setmaxnreg.inc and .dec to the declared value (legal) and to others (illegal).
  copy           every copy-engine form: TMA box load (unicast, multicast), store and reduce; bulk copy
                 global to shared, shared to global, shared to shared (either side) and bulk reduce; at the
                 first, middle and last buffer, the last 128-byte step that holds the box (or size) and the
                 next (it starts inside and ends past); the same with a run-time index at the last buffer;
                 bulk sizes of 16, 48, 256 and 1024 bytes; a shared-memory side off the copy engine's alignment
                 (128 bytes for a box, 16 for a bulk copy); a copy completing on the slot past the ring or on a
                 data buffer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pipelink


TX_BYTES = 4096
SLOTS = 4
BARRIER_IDS = (1, 2, 3)
REGISTERS = 232

CONTRACT = """
[component]
name = "{name}"
version = "1"

[facts.requires]
N = {{ range = [128, 1073741824] }}

[roles.w]
warps = 4
registers = {registers}
warpgroup_aligned = true
internal_setmaxnreg = [{registers}]

[[entry]]
symbol = "{name}_run"
role = "w"
phase = "run"

{smem}
[[named_barrier]]
name = "b1"
threads = 128
id = 1

[[named_barrier]]
name = "b2"
threads = 128
id = 2

[[named_barrier]]
name = "b3"
threads = 128
id = 3

[[mbarrier]]
name = "ring"
count = {slots}
arrivals = 1
tx_bytes = {tx}

[[operand]]
name = "out"
dtype = "fp32"
shape = ["N"]
access = "write"

[[operand]]
name = "in"
dtype = "fp32"
shape = ["1024"]

[[operand]]
name = "t"
dtype = "fp32"
shape = ["N", "64"]
tma = {{ box = [{box_rows}, {box_cols}], swizzle = 0 }}

[[operand]]
name = "t2"
dtype = "fp32"
shape = ["N", "64"]
tma = {{ box = [{box_rows2}, {box_cols}], swizzle = 0 }}
{reserve}
"""

# Component "g" holds three data buffers, each 4 bytes past a multiple of 16, so that a 8- or 16-byte access at
# the last multiple starts inside and ends past; the allocator places larger buffers first, so they lie in this
# order ("last" highest: a run-time index past it is certainly out). Component "h" keeps mbarriers of its own in
# buffer "own".
BUFFERS = {"g": (("first", 1540), ("mid", 1284), ("last", 1028)),
           "h": (("own", 64), ("data", 1024))}
ALIGN = {"g": 128, "h": 16}     # g's buffers start where a TMA box may (128-byte aligned)
BOX = (4, 16)                   # operand t's TMA box: 4 x 16 fp32, 256 bytes
BOX_BYTES = BOX[0] * BOX[1] * 4
# Operand t2's box is twice as large and no case copies it: the check sizes a box copy by the smallest box the
# instance declares (it does not follow which map an instruction names), so t2 only makes sure it is the smallest.
BOX2_ROWS = 2 * BOX[0]


@dataclass(frozen=True)
class Case:
    rule: str
    position: str       # where it is, in words
    code: str           # one C++ statement (b: the bindings, ctx: the context, sink: a value the entry stores)
    op: str             # the SASS opcode the finding's instruction has (a prefix)
    field: str | None   # the contract field the finding names; None: a legal twin, no finding
    words: str = ""     # words the finding's message holds; {at}: the anchor's offset + rel, once linked
    severity: str = "error"
    component: str = "g"
    anchor: str = ""    # the buffer or mbarrier array the case's address is relative to
    rel: int = 0

    @property
    def legal(self) -> bool:
        return self.field is None

    @property
    def name(self) -> str:
        return f"{self.rule}: {self.position}" + (" (legal)" if self.legal else "")


# --- shared-memory accesses -----------------------------------------------------------------------------

# access -> (bytes, the SASS opcode it becomes, the statement given the 32-bit shared address A)
_ACCESSES = {
    "ld.u8": (1, "LDS.U8", "{{ unsigned v; asm volatile(\"ld.volatile.shared.u8 %0, [%1];\" : \"=r\"(v) : \"r\"({A})); sink += v; }}"),
    "st.u8": (1, "STS.U8", "asm volatile(\"st.volatile.shared.u8 [%0], %1;\" :: \"r\"({A}), \"r\"(1u) : \"memory\");"),
    "ld.u16": (2, "LDS.U16", "{{ unsigned short v; asm volatile(\"ld.volatile.shared.u16 %0, [%1];\" : \"=h\"(v) : \"r\"({A})); "
                             "sink += v; }}"),
    "st.u16": (2, "STS.U16", "asm volatile(\"st.volatile.shared.u16 [%0], %1;\" :: \"r\"({A}), \"h\"((unsigned short)1) : "
                             "\"memory\");"),
    "ld.b32": (4, "LDS", "{{ unsigned v; asm volatile(\"ld.volatile.shared.b32 %0, [%1];\" : \"=r\"(v) : \"r\"({A})); sink += v; }}"),
    "st.b32": (4, "STS", "asm volatile(\"st.volatile.shared.b32 [%0], %1;\" :: \"r\"({A}), \"r\"(1u) : \"memory\");"),
    "ld.v2": (8, "LDS.64", "{{ unsigned x, y; asm volatile(\"ld.volatile.shared.v2.b32 {{%0, %1}}, [%2];\" : \"=r\"(x), \"=r\"(y) : "
                           "\"r\"({A})); sink += x + y; }}"),
    "st.v2": (8, "STS.64", "asm volatile(\"st.volatile.shared.v2.b32 [%0], {{%1, %1}};\" :: \"r\"({A}), \"r\"(1u) : \"memory\");"),
    "ld.v4": (16, "LDS.128", "{{ unsigned x, y, z, w; asm volatile(\"ld.volatile.shared.v4.b32 {{%0, %1, %2, %3}}, [%4];\" : "
                             "\"=r\"(x), \"=r\"(y), \"=r\"(z), \"=r\"(w) : \"r\"({A})); sink += x + y + z + w; }}"),
    "st.v4": (16, "STS.128", "asm volatile(\"st.volatile.shared.v4.b32 [%0], {{%1, %1, %1, %1}};\" :: \"r\"({A}), \"r\"(1u) : "
                             "\"memory\");"),
    "ldsm.x1": (16, "LDSM.16.M88 ", "{{ unsigned x; asm volatile(\"ldmatrix.sync.aligned.m8n8.x1.shared.b16 {{%0}}, [%1];\" "
                                    ": \"=r\"(x) : \"r\"({A})); sink += x; }}"),
    "ldsm.x2": (16, "LDSM.16.M88.2", "{{ unsigned x, y; asm volatile(\"ldmatrix.sync.aligned.m8n8.x2.shared.b16 {{%0, %1}}, "
                                     "[%2];\" : \"=r\"(x), \"=r\"(y) : \"r\"({A})); sink += x + y; }}"),
    "ldsm.x4": (16, "LDSM.16.M88.4", "{{ unsigned x, y, z, w; asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.shared.b16 "
                                     "{{%0, %1, %2, %3}}, [%4];\" : \"=r\"(x), \"=r\"(y), \"=r\"(z), \"=r\"(w) : "
                                     "\"r\"({A})); sink += x + y + z + w; }}"),
    "stsm.x1": (16, "STSM.16.M88 ", "asm volatile(\"stmatrix.sync.aligned.m8n8.x1.shared.b16 [%0], {{%1}};\" :: "
                                    "\"r\"({A}), \"r\"(1u) : \"memory\");"),
    "stsm.x2": (16, "STSM.16.M88.2", "asm volatile(\"stmatrix.sync.aligned.m8n8.x2.shared.b16 [%0], {{%1, %1}};\" :: "
                                     "\"r\"({A}), \"r\"(1u) : \"memory\");"),
    "stsm.x4": (16, "STSM.16.M88.4", "asm volatile(\"stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {{%1, %1, %1, %1}};\" :: "
                                     "\"r\"({A}), \"r\"(1u) : \"memory\");"),
    "cp.async.4": (4, "LDGSTS.E ", "asm volatile(\"cp.async.ca.shared.global [%0], [%1], 4;\" :: \"r\"({A}), "
                                   "\"l\"(b.in) : \"memory\");"),
    "cp.async.8": (8, "LDGSTS.E.64", "asm volatile(\"cp.async.ca.shared.global [%0], [%1], 8;\" :: \"r\"({A}), "
                                     "\"l\"(b.in) : \"memory\");"),
    "cp.async.16": (16, "LDGSTS.E.BYPASS.128", "asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16;\" :: "
                                               "\"r\"({A}), \"l\"(b.in) : \"memory\");"),
}


def _align_down(x: int, a: int) -> int:
    return x // a * a


def _smem_cases() -> list[Case]:
    cases = []
    for buf, size in BUFFERS["g"]:
        for access, (width, op, template) in _ACCESSES.items():
            inside = _align_down(size - width, width)      # the last aligned place that fits
            past = inside + width                          # the first that does not
            verb = "writes" if op.startswith(("ST", "LDGSTS")) else "reads"
            for runtime in (False, True):
                if runtime and buf != "last":
                    continue  # a run-time overrun of the first or middle buffer lands in its own next buffer
                index = " + 16u * (ctx.thread >> 7)" if runtime else ""   # 0 at run time, unknown to the compiler
                for at, legal in ((inside, True), (past, False)):
                    code = template.format(A=f"pl_smem_addr(ctx.smem + b.{buf}) + {at}u{index}")
                    words = f"{verb} {width} bytes at smem offset {{at}}" + \
                        (" (plus a run-time index)" if runtime else "") + \
                        f", ending {at + width - size} bytes past its buffer '{buf}'"
                    cases.append(Case("smem-runtime" if runtime else "smem",
                                      f"{access} ({width} bytes) at {buf} + {at}, "
                                      f"{'run-time' if runtime else 'immediate'} index", code, op,
                                      None if legal else f"smem.{buf}", words, anchor=buf, rel=at))
    return cases


# --- mbarriers ------------------------------------------------------------------------------------------

# operation -> (the SASS opcode, the statement given the mbarrier's 32-bit shared address A)
_MBAR_OPS = {
    "arrive": ("SYNCS.ARRIVE.TRANS64.A1T0", "pl_mbar_arrive({A});"),
    "try_wait": ("SYNCS.PHASECHK", "sink += pl_mbar_try_wait({A}, 0);"),
    "cp.async.arrive": ("ARRIVES.LDGSTSBAR", "asm volatile(\"cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\" :: "
                                             "\"r\"({A}) : \"memory\");"),
    "init": ("SYNCS.EXCH.64", "pl_mbar_init({A}, 1);"),
}
_OUTSIDE = "operates on an mbarrier at smem offset {at}, outside this instance's mbarrier slots"
_OUTSIDE_RUNTIME = ("operates on an mbarrier at smem offset {at} (plus a run-time index), outside this instance's "
                    "mbarrier slots")
_INIT = "initializes an mbarrier at smem offset {at}"


def _mbarrier_cases() -> list[Case]:
    cases = []
    for op_name, (op, template) in _MBAR_OPS.items():
        for slot in (-1, *range(SLOTS), SLOTS):
            code = template.format(A=f"pl_mbar(ctx, b.ring, {slot})")
            where = f"{op_name} on ring slot {slot}" + (" (past the array)" if slot in (-1, SLOTS) else "")
            bad = op_name == "init" or slot in (-1, SLOTS)
            cases.append(Case("mbarrier", where, code, op, "mbarrier" if bad else None,
                              _INIT if op_name == "init" else _OUTSIDE, anchor="ring", rel=8 * slot))
        if op_name not in ("init", "cp.async.arrive"):
            # A slot index known at run time only (a ring's stage): its known part is a lower bound. (A
            # cp.async arrive takes a uniform address: ptxas loops over the threads' values with R2UR under a
            # predicate, which the check does not follow, so it stays quiet there.)
            for slot in (0, SLOTS):
                cases.append(Case("mbarrier", f"{op_name} on ring slot {slot} + a run-time index",
                                  template.format(A=f"pl_mbar(ctx, b.ring, {slot} + (ctx.thread >> 7))"), op,
                                  "mbarrier" if slot == SLOTS else None, _OUTSIDE_RUNTIME, anchor="ring",
                                  rel=8 * slot))
            cases.append(Case("mbarrier", f"{op_name} on a data buffer (first + 8)",
                              template.format(A="pl_smem_addr(ctx.smem + b.first + 8)"), op, "mbarrier", _OUTSIDE,
                              anchor="first", rel=8))
    for slot in range(SLOTS):
        bar = f"pl_mbar(ctx, b.ring, {slot})"
        for n, field, severity in ((TX_BYTES, None, "error"), (TX_BYTES + 16, "mbarrier.ring.tx_bytes", "error"),
                                   (TX_BYTES - 16, "mbarrier.ring.tx_bytes", "warning")):
            cases.append(Case("expect_tx", f"arrive.expect_tx of {n} bytes on ring slot {slot}",
                              f"pl_mbar_arrive_expect_tx({bar}, {n}u);", "SYNCS.ARRIVE.TRANS64", field,
                              f"announces {n} transaction bytes on slot {slot} of mbarrier", severity,
                              anchor="ring", rel=8 * slot))
    for n, field in ((TX_BYTES, None), (TX_BYTES + 16, "mbarrier.ring.tx_bytes")):
        cases.append(Case("expect_tx", f"arrive.expect_tx of {n} bytes on a run-time ring slot",
                          f"pl_mbar_arrive_expect_tx(pl_mbar(ctx, b.ring, ctx.thread >> 7), {n}u);",
                          "SYNCS.ARRIVE.TRANS64", field, f"announces {n} transaction bytes on a run-time slot of "
                          "mbarrier", anchor="ring"))
    return cases


def _mbarriers_in_cases() -> list[Case]:
    cases = []
    for op_name in ("init", "arrive", "try_wait"):
        op, template = _MBAR_OPS[op_name]
        for at in (0, 24, 56):  # the first, a middle and the last 8 bytes of "own" (64 bytes)
            cases.append(Case("mbarriers_in", f"{op_name} in its own buffer at own + {at}",
                              template.format(A=f"pl_smem_addr(ctx.smem + b.own + {at})"), op, None, component="h",
                              anchor="own", rel=at))
        for at in (0, 512, 1016):  # the data buffer's first, middle and last 8 bytes
            cases.append(Case("mbarriers_in", f"{op_name} on its data buffer at data + {at}",
                              template.format(A=f"pl_smem_addr(ctx.smem + b.data + {at})"), op, "mbarrier",
                              _INIT if op_name == "init" else _OUTSIDE, component="h", anchor="data", rel=at))
    for slot in range(SLOTS):
        for op_name in ("init", "arrive"):
            op, template = _MBAR_OPS[op_name]
            cases.append(Case("mbarriers_in", f"{op_name} on glue-initialized ring slot {slot}",
                              template.format(A=f"pl_mbar(ctx, b.ring, {slot})"), op,
                              "mbarrier" if op_name == "init" else None, _INIT, component="h", anchor="ring",
                              rel=8 * slot))
    return cases


# --- named barriers and setmaxnreg ---------------------------------------------------------------------

_BAR_OPS = {
    "bar.sync": ("BAR.SYNC", "asm volatile(\"bar.sync {id}, {n};\" ::: \"memory\");"),
    "bar.arrive": ("BAR.ARV", "asm volatile(\"bar.arrive {id}, {n};\" ::: \"memory\");"),
    "bar.red.popc": ("BAR.RED.POPC", "{{ unsigned v; asm volatile(\"{{ .reg .pred p; setp.ne.u32 p, %1, 0; "
                                     "bar.red.popc.u32 %0, {id}, {n}, p; }}\" : \"=r\"(v) : \"r\"(ctx.thread) : "
                                     "\"memory\"); sink += v; }}"),
}


def _barrier_cases() -> list[Case]:
    cases = []
    for op_name, (op, template) in _BAR_OPS.items():
        for bid in range(1, 16):
            code = template.format(id=bid, n=128)
            if bid in BARRIER_IDS:
                cases.append(Case("named_barrier", f"{op_name} on its barrier {bid}", code, op, None))
                for n in (96, 160):
                    cases.append(Case("named_barrier", f"{op_name} on its barrier {bid} with {n} threads",
                                      template.format(id=bid, n=n), op, f"named_barrier.b{bid}.threads",
                                      f"syncs {n} threads on barrier {bid}"))
            else:
                cases.append(Case("named_barrier", f"{op_name} on barrier {bid}, not its own", code, op,
                                  "named_barrier", f"uses named barrier {bid},"))
    for op_name, op in (("inc", "USETMAXREG.TRY_ALLOC"), ("dec", "USETMAXREG.DEALLOC")):
        for n in (24, REGISTERS - 8, REGISTERS, REGISTERS + 8, 256):
            cases.append(Case("setmaxnreg", f"setmaxnreg.{op_name} {n}", f"pl_setmaxnreg_{op_name}<{n}>();", op,
                              None if n == REGISTERS else "roles.internal_setmaxnreg", f"to {n} with setmaxnreg"))
    return cases


# --- the copy engine: TMA boxes and bulk copies ------------------------------------------------------------

# copy -> (the SASS opcode, reads shared memory, the statement given its shared address A, mbarrier M, bytes N)
_COPIES = {
    "tma load": ("UTMALDG.2D ", False, "pl_tma_load_2d({A}, b.t, 0, 0, {M});"),
    "tma multicast load": ("UTMALDG.2D.MULTICAST", False, "pl_tma_load_2d_multicast({A}, b.t, 0, 0, {M}, 3);"),
    "tma store": ("UTMASTG.2D", True, "pl_tma_store_2d(b.t, {A}, 0, 0);"),
    "tma reduce": ("UTMAREDG.2D", True, "asm volatile(\"cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile."
                                        "bulk_group [%0, {{%1, %2}}], [%3];\" :: \"l\"(b.t), \"r\"(0), \"r\"(0), "
                                        "\"r\"({A}) : \"memory\");"),
    "bulk global to shared": ("UBLKCP.S.G", False, "pl_bulk_g2s({A}, b.in, {N}u, {M});"),
    "bulk shared to global": ("UBLKCP.G.S", True, "asm volatile(\"cp.async.bulk.global.shared::cta.bulk_group [%0], "
                                                  "[%1], {N};\" :: \"l\"(b.out), \"r\"({A}) : \"memory\");"),
    "bulk shared to shared, destination": (
        "UBLKCP.S.S", False, "asm volatile(\"cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes "
                             "[%0], [%1], {N}, [%2];\" :: \"r\"({A}), \"r\"(pl_smem_addr(ctx.smem + b.first)), "
                             "\"r\"({M}) : \"memory\");"),
    "bulk shared to shared, source": (
        "UBLKCP.S.S", True, "asm volatile(\"cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes "
                            "[%0], [%1], {N}, [%2];\" :: \"r\"(pl_smem_addr(ctx.smem + b.first)), \"r\"({A}), "
                            "\"r\"({M}) : \"memory\");"),
    "bulk reduce": ("UBLKRED.G.S", True, "asm volatile(\"cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 "
                                         "[%0], [%1], {N};\" :: \"l\"(b.out), \"r\"({A}) : \"memory\");"),
}


def _copy_case(copy: str, position: str, buf: str, at: int, legal: bool, nbytes: int = BOX_BYTES, runtime=False,
               slot: int = 0, words: str = "") -> Case:
    op, reads, template = _COPIES[copy]
    index = " + 128u * (ctx.thread >> 7)" if runtime else ""
    code = template.format(A=f"pl_smem_addr(ctx.smem + b.{buf} + {at}u){index}", M=f"pl_mbar(ctx, b.ring, {slot})",
                           N=nbytes)
    kind = "a TMA box" if copy.startswith("tma") else "a bulk copy"
    size = dict(BUFFERS["g"])[buf]
    words = words or f"{'reads' if reads else 'writes'} {nbytes} bytes ({kind}) at smem offset {{at}}" + \
        (" (plus a run-time index)" if runtime else "") + f", ending {at + nbytes - size} bytes past its buffer '{buf}'"
    return Case("copy", f"{copy} {position}", code, op, None if legal else f"smem.{buf}", words, anchor=buf, rel=at)


def _copy_cases() -> list[Case]:
    cases = []
    for n, copy in enumerate(_COPIES):
        for buf, size in BUFFERS["g"]:
            inside = _align_down(size - BOX_BYTES, 128)   # the last 128-byte step that holds the box
            for at, legal in ((inside, True), (inside + 128, False)):
                cases.append(_copy_case(copy, f"at {buf} + {at}", buf, at, legal, slot=n % SLOTS))
        for at, legal in ((768, True), (896, False)):    # the last buffer, plus a run-time index
            cases.append(_copy_case(copy, f"at last + {at} + a run-time index", "last", at, legal, runtime=True,
                                    slot=n % SLOTS))
        align = 128 if copy.startswith("tma") else 16
        off = 16 if align == 128 else 8
        cases.append(_copy_case(copy, f"at first + {off}, off the {align}-byte alignment", "first", off, False,
                                words=f"at smem offset {{at}}, which is not {align}-byte aligned"))
    for nbytes in (16, 48, 256, 1024):                   # bulk sizes, at the last buffer (1028 bytes)
        inside = _align_down(1028 - nbytes, 16)
        for at, legal in ((inside, True), (inside + 16, False)):
            cases.append(_copy_case("bulk global to shared", f"of {nbytes} bytes at last + {at}", "last", at, legal,
                                    nbytes=nbytes, slot=nbytes % SLOTS))
    for copy in ("tma load", "bulk global to shared", "bulk shared to shared, destination"):
        op, _, template = _COPIES[copy]
        for where, mbar, anchor, rel in (("the slot past the ring", f"pl_mbar(ctx, b.ring, {SLOTS})", "ring", 8 * SLOTS),
                                         ("a data buffer", "pl_smem_addr(ctx.smem + b.mid + 8)", "mid", 8)):
            code = template.format(A="pl_smem_addr(ctx.smem + b.first)", M=mbar, N=BOX_BYTES)
            cases.append(Case("copy", f"{copy} completing on {where}", code, op, "mbarrier", _OUTSIDE,
                              anchor=anchor, rel=rel))
    return cases


def all_cases() -> list[Case]:
    return _smem_cases() + _mbarrier_cases() + _mbarriers_in_cases() + _barrier_cases() + _copy_cases()


def groups() -> list[tuple[str, list[Case]]]:
    """The cases as they are linked: one link a group. setmaxnreg goes alone: a setmaxnreg.dec to 24 caps the
    registers of the code around it, and spills (a finding of their own) would follow."""
    cases = all_cases()
    return [("g", [c for c in cases if c.component == "g" and c.rule not in ("setmaxnreg", "copy")]),
            ("g", [c for c in cases if c.rule == "setmaxnreg"]),
            ("g", [c for c in cases if c.rule == "copy"]),
            ("h", [c for c in cases if c.component == "h"])]


def counts() -> dict[str, tuple[int, int]]:
    """rule -> (violations, legal twins)."""
    out: dict[str, tuple[int, int]] = {}
    for c in all_cases():
        bad, good = out.get(c.rule, (0, 0))
        out[c.rule] = (bad + (not c.legal), good + c.legal)
    return out


# --- building and checking ------------------------------------------------------------------------------

def contract(component: str) -> str:
    smem = "".join(f'[[smem]]\nname = "{n}"\nbytes = {b}\nalign = {ALIGN[component]}\n\n' for n, b in BUFFERS[component])
    reserve = '\n[reserve]\nmbarriers_in = ["own"]\n' if component == "h" else ""
    return CONTRACT.format(name=component, registers=REGISTERS, smem=smem, slots=SLOTS, tx=TX_BYTES, reserve=reserve,
                           box_rows=BOX[0], box_cols=BOX[1], box_rows2=BOX2_ROWS)


def source(component: str, cases: list[Case]) -> str:
    lines = ["// Generated by tests/conform_cases.py: one case a line (checked, never run).",
             f"extern \"C\" __device__ void {component}_run(pl_ctx ctx, pl_bind_{component} b) {{",
             "  unsigned sink = 0;"]
    lines += [f"  {c.code}  // {c.name}" for c in cases]
    lines += ["  b.out[ctx.tile * 128 + ctx.thread] = float(sink);", "}"]
    return "\n".join(lines) + "\n"


def link(tmp_path: Path, component: str, cases: list[Case]):
    """Pack the cases as component ``component`` (no pack-time check) and link it alone (not strict)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    src = tmp_path / f"{component}_cases.cu"
    src.write_text(source(component, cases))
    (tmp_path / f"{component}.toml").write_text(contract(component))
    pipelink.pack(src, tmp_path / f"{component}.toml", tmp_path / f"{component}.plc", check=False)
    spec = tmp_path / "link.toml"
    spec.write_text(f'[link]\nname = "generated"\n\n[facts]\nN = 128\n\n'
                    f'[[instance]]\nname = "{component}"\npackage = "{component}.plc"\n\n'
                    '[schedule]\ntiles = ["N / 128"]\n')
    return pipelink.link(spec, strict=False)


def misjudged(kernel, component: str, cases: list[Case]) -> list[str]:
    """Each case the check judged wrongly: a violation without its finding (its contract field, its
    words with the offset the allocation gave, an instruction of its kind), and every finding no
    violation accounts for (a legal twin reported, or anything else)."""
    plan = kernel.plan
    base = {u.name: s.offset for s in plan.smem for u in s.users if u.instance == component}
    base.update({u.name: m.offset for m in plan.mbarriers for u in m.users if u.instance == component})
    findings = [f for f in plan.postlink.conformance if f.instance == component]
    order = [u.name for s in sorted(plan.smem, key=lambda s: s.offset) for u in s.users if u.instance == component]
    wrong = [] if component != "g" or order == ["first", "mid", "last"] else \
        [f"the buffers lie in the order {order}, not first, mid, last: the run-time cases assume 'last' is highest"]
    explained = set()
    for c in cases:
        if c.legal:
            continue
        words = c.words.format(at=base[c.anchor] + c.rel) if c.anchor else c.words
        hits = [n for n, f in enumerate(findings) if f.field == c.field and f.severity == c.severity
                and words in f.message and _op(f.instruction).startswith(c.op.strip())
                and (_op(f.instruction) + " ").startswith(c.op)]
        if not hits:
            wrong.append(f"{c.name}: not found ({words!r} by {c.op.strip()})")
        explained.update(hits)
    wrong += [f"no violation accounts for: {f.format()}" for n, f in enumerate(findings) if n not in explained]
    return wrong


def _op(insn: str) -> str:
    return insn.split()[1] if insn.startswith("@") else insn.split()[0]


__all__ = ["Case", "all_cases", "groups", "counts", "contract", "source", "link", "misjudged"]

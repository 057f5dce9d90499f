"""Stage 7: does each component's code obey its contract? (Checked on the linked cubin.)

Contracts are checked against each other before linking; this checks the code. Every SASS
instruction carries its inlining chain (-lineinfo survives LTO), which ends at the glue line that
called the component, so each instruction is attributed to the instance it came from, even when
two instances share one package. Then, per instance, against what its contract declares and what
the linker allocated:

  named barriers      every BAR uses an ID allocated or reserved for this instance, with the
                      declared thread count; barrier 0 (__syncthreads) is refused in a block with
                      several roles (the other roles never reach it)
  registers           setmaxnreg only with values the contract declares; local memory (spills)
  transaction bytes   arrive.expect_tx announces the tx_bytes declared for that mbarrier
  shared memory       static offsets inside the block's allocation; mbarrier operations only on
                      this instance's mbarrier slots, and no mbarrier.init (the glue initializes
                      every mbarrier). Out-of-bounds accesses with run-time offsets are the
                      sanitizer's job.
  calls               nothing left un-inlined

Findings are errors or warnings naming the instance, the component, the instruction, its source
line, the contract field, and what to change.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path

from ..backend.inspect import CubinInfo, opcode
from ..backend.toolchain import INCLUDE_DIR
from ..errors import PipelinkError
from .plan import Check, InstancePlan, LinkPlan

_BAR = re.compile(r"^BAR\.(\w+)(?:\.\w+)*\s+([^,\s]+)(?:,\s*(\S+))?")
_SMEM_OPS = ("LDS", "STS", "LDSM", "STSM", "ATOMS", "REDS")
_ADDR_IMM = re.compile(r"\[[^\]]*?(-?0x[0-9a-f]+)\]")


class ConformanceError(PipelinkError):
    """A component's code does something its contract does not declare."""


@dataclass
class Finding:
    severity: str        # "error" or "warning"
    instance: str
    component: str
    instruction: str
    location: str        # innermost source location, "file:line"
    field: str           # the contract field concerned
    message: str
    hint: str

    def format(self) -> str:
        return (f"{self.severity}: {self.instance} ({self.component}) {self.location}: {self.instruction}: "
                f"{self.message} [contract: {self.field}]\n    fix: {self.hint}")


def attribute(plan: LinkPlan, info: CubinInfo) -> list[str | None]:
    """Instance name (or None for glue code) for every instruction."""
    glue = plan.backend.get("glue_path", "")
    owners = []
    for chain in info.locations:
        owner = None
        for path, line in chain:
            if path == glue and line in plan.glue_sites:
                owner = plan.glue_sites[line]
        owners.append(owner)
    return owners


def check(plan: LinkPlan, info: CubinInfo) -> list[Finding]:
    if plan.mode == "symbol":  # symbol linking checks nothing, by definition of the control
        return []
    owners = attribute(plan, info)
    several_roles = len(plan.roles) > 1
    findings: list[Finding] = []
    for n, (insn, chain, owner) in enumerate(zip(info.instructions, info.locations, owners)):
        if owner is None:
            continue
        inst = plan.instance(owner)
        where = _where(chain, plan)
        body = insn.split(" ", 1)[1] if insn.startswith("@") else insn
        op = opcode(insn)

        def add(severity: str, field: str, message: str, hint: str) -> None:
            findings.append(Finding(severity, inst.name, inst.contract.name, insn, where, field, message, hint))

        bar = _BAR.match(body)
        if bar:
            _check_barrier(plan, inst, bar.groups(), several_roles, add)
        elif op.startswith("USETMAXREG"):
            _check_setmaxnreg(plan, inst, body, add)
        elif op.startswith("SYNCS"):
            _check_mbarrier_access(plan, inst, body, op == "SYNCS.EXCH.64", add)
            if op == "SYNCS.ARRIVE.TRANS64":  # arrive.expect_tx: the transaction bytes it announces
                _check_expect_tx(plan, inst, body, info.instructions[max(0, n - 64):n], add)
        elif op.split(".")[0] in _SMEM_OPS:
            _check_smem_access(plan, inst, body, add)
        elif op.split(".")[0] in ("LDL", "STL"):
            add("warning", f"roles.{_role_of(inst, plan)}.registers", "uses local memory (register spills)",
                "raise the role's register budget or reduce live values in the component")
        elif op.startswith("CALL.REL"):
            add("error", "entry", "a call remains: the component was not inlined",
                "make the entry a plain extern \"C\" __device__ function (not noinline, no recursion)")
    return _dedupe(findings)


def _where(chain, plan: LinkPlan) -> str:
    """The component's own source line (a pipelink helper it called is named after it)."""
    glue = plan.backend.get("glue_path", "")
    header = str(INCLUDE_DIR)
    own = [(p, n) for p, n in chain if p != glue and not p.startswith(header)]
    helper = [(p, n) for p, n in chain if p.startswith(header)]
    if not own:
        return f"{Path(helper[0][0]).name}:{helper[0][1]}" if helper else "glue"
    text = f"{Path(own[0][0]).name}:{own[0][1]}"
    if helper and chain.index(helper[0]) < chain.index(own[0]):
        text += f" (in {Path(helper[0][0]).name}:{helper[0][1]})"
    return text


def _role_of(inst: InstancePlan, plan: LinkPlan) -> str:
    return next(iter(inst.contract.roles))


def _check_barrier(plan, inst, groups, several_roles, add) -> None:
    _kind, bid, threads = groups
    if not bid.startswith("0x"):
        add("warning", "named_barrier", f"barrier ID comes from a register ({bid}); it cannot be checked",
            "pass barrier IDs through the bindings (b.<name>) so that LTO folds them")
        return
    bid_n = int(bid, 16)
    if bid_n == 0:
        if several_roles:
            add("error", "named_barrier", "uses barrier 0 (__syncthreads) in a warp-specialized block: the other "
                "roles never arrive, so it deadlocks or pairs with the wrong arrivals",
                "declare a [[named_barrier]] with the role's thread count and sync on it instead")
        return
    mine = {b.id: b.threads for b in plan.barriers if b.name.startswith(f"{inst.name}.")}
    if bid_n not in mine:
        declared = ", ".join(f"{b.name.split('.', 1)[1]}={b.id}" for b in plan.barriers
                             if b.name.startswith(f"{inst.name}.")) or "none"
        add("error", "named_barrier", f"uses named barrier {bid_n}, which is neither allocated to nor reserved by "
            f"this instance (its barriers: {declared})",
            "declare the barrier under [[named_barrier]] and use its binding (b.<name>), or list a hard-coded ID "
            "under [reserve] named_barriers")
        return
    want = mine[bid_n]
    if want is not None and threads is not None and threads.startswith("0x") and int(threads, 16) != want:
        name = next(b.name.split(".", 1)[1] for b in plan.barriers if b.id == bid_n and b.name.startswith(f"{inst.name}."))
        add("error", f"named_barrier.{name}.threads", f"syncs {int(threads, 16)} threads on barrier {bid_n}, but the "
            f"contract declares {want}", "make the thread count in the code and in the contract agree")


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


def _check_mbarrier_access(plan, inst, body, is_init: bool, add) -> None:
    m = _ADDR_IMM.search(body)
    off = int(m.group(1), 16) if m else None
    own = [(s.offset, s.offset + s.bytes) for s in plan.smem
           if any(u in (f"{inst.name}.{b}" for b in inst.contract.reserve.mbarriers_in) for u in s.users)]
    if own and (off is None or any(lo <= off < hi for lo, hi in own)):
        return  # inside a buffer where the component keeps mbarriers of its own (reserve.mbarriers_in)
    if is_init:
        add("error", "mbarrier", "initializes an mbarrier (mbarrier.init): the glue initializes every mbarrier "
            "with the contract's arrival count, a second init resets its phase",
            "remove the init from the component and declare the mbarrier under [[mbarrier]], or, for mbarriers "
            "kept inside its own buffer, name that buffer under [reserve] mbarriers_in")
        return
    if off is None:
        return
    slots = [(a.offset, a.offset + 8 * a.count, a.name) for a in plan.mbarriers
             if any(u.startswith(f"{inst.name}.") for u in a.users)]
    if not any(lo <= off < hi for lo, hi, _ in slots):
        have = ", ".join(f"{n} [{lo}, {hi})" for lo, hi, n in slots) or "none"
        add("error", "mbarrier", f"operates on an mbarrier at smem offset {off}, outside this instance's mbarrier "
            f"slots ({have})", "declare the mbarrier under [[mbarrier]] (count covers every slot used) and address "
            "it through its binding, or name the buffer holding it under [reserve] mbarriers_in")


_SET_IMM = re.compile(r"^(?:@!?U?P\w+\s+)?(?:MOV|IMAD\.MOV\.U32)\s+(R\d+),\s*(?:RZ,\s*RZ,\s*)?(0x[0-9a-f]+)\s*$")


def _check_expect_tx(plan, inst, body, before: list[str], add) -> None:
    """The byte count an arrive.expect_tx announces, when a MOV of an immediate set its register
    shortly before, against the tx_bytes the contract declares for that mbarrier."""
    reg = body.rsplit(",", 1)[-1].strip()
    addr = _ADDR_IMM.search(body)
    if not reg.startswith("R") or addr is None:
        return
    value = None
    for prev in reversed(before):
        m = _SET_IMM.match(prev)
        if m and m.group(1) == reg:
            value = int(m.group(2), 16)
            break
        if re.search(rf"\b{reg}\b", prev.split(",")[0]):  # written by something else: unknown
            return
    if value is None:
        return
    off = int(addr.group(1), 16)
    array = next((m for m in plan.mbarriers if m.offset <= off < m.offset + 8 * m.count
                  and any(u.startswith(f"{inst.name}.") for u in m.users)), None)
    if array is None or value == array.tx_bytes:
        return
    name = array.name.split(".", 1)[1]
    severity = "error" if value > array.tx_bytes else "warning"
    add(severity, f"mbarrier.{name}.tx_bytes", f"announces {value} transaction bytes on mbarrier {array.name}, but "
        f"the contract declares {array.tx_bytes} per phase" + (" (more bytes than will ever arrive: the phase "
        "never completes)" if value > array.tx_bytes else " (fewer: fine only if the rest is announced elsewhere)"),
        "make tx_bytes in the contract equal to the bytes the copies deliver per phase")


def _check_smem_access(plan, inst, body, add) -> None:
    # SASS addresses are base register + displacement, and the compiler may move constants between
    # the two (strength reduction rebases a register below a buffer and raises the displacement).
    # A displacement is flagged only when even a base rebased by the instance's largest buffer
    # could not bring it back inside the block's allocation. Run-time offsets, and smaller static
    # overruns, are the sanitizer's job.
    m = _ADDR_IMM.search(body)
    if not m:
        return
    off = int(m.group(1), 16)
    largest = max((s.bytes for s in plan.smem if any(u.startswith(f"{inst.name}.") for u in s.users)), default=0)
    if off >= plan.smem_bytes + largest:
        add("error", "smem", f"accesses shared memory at static offset {off}, beyond the block's {plan.smem_bytes} "
            "allocated bytes", "declare the buffer under [[smem]] with its full size and address it through b.<name>")


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen, out = set(), []
    for f in findings:
        key = (f.instance, f.location, f.field, f.message)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def record(plan: LinkPlan, findings: list[Finding], strict: bool) -> None:
    plan.backend["conformance"] = [asdict(f) for f in findings]
    errors = [f for f in findings if f.severity == "error"]
    warnings = [f for f in findings if f.severity == "warning"]
    plan.warnings += [f.format() for f in warnings]
    detail = f"{len(errors)} error(s), {len(warnings)} warning(s)" if findings else \
        "every barrier, setmaxnreg, smem offset and mbarrier slot used by a component is declared"
    plan.checks.append(Check("conformance", not errors, detail))
    if errors and strict:
        first = errors[0]
        raise ConformanceError(
            f"{len(errors)} component code violation(s) of its contract:\n  " + "\n  ".join(f.format() for f in errors),
            component=first.component, field=first.field, hint=first.hint)

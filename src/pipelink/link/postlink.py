"""Stage 7: the checks of the linked cubin. Did LTO inline every component and fold every binding
(post-link checks), and does each component's code obey its contract (conformance, link/conform.py)?

Reads the plan and the backend's result (plan.backend: the parsed SASS, how line info names the
glue); returns its own result, PostLink. A strict link whose code breaks a contract stops here
with a ConformanceError.
"""

from __future__ import annotations


from dataclasses import asdict, dataclass, replace

from ..backend.inspect import CubinInfo, is_guardrail_call, opcode
from ..findings import Finding
from . import conform
from .plan import Check, LinkPlan


@dataclass(frozen=True)
class PostLink:
    """What the post-link stage found. plan.json writes ``folded``, ``findings`` and ``conformance``
    into its "backend" object (where they were before the stages had results of their own)."""
    folded: dict[str, bool]                 # "barrier NAME = ID" / "smem NAME @ OFFSET" -> seen as an immediate
    findings: tuple[str, ...]               # why the cubin is not what the plan says (not inlined, spills, ...)
    checks: tuple[Check, ...]               # "post-link", then "conformance"
    warnings: tuple[str, ...] = ()          # legal but worth a look (an unused buffer, a call to assert)
    conformance: tuple[Finding, ...] = ()    # the conformance check's findings

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def to_json(self) -> dict:
        return {"folded": self.folded, "findings": list(self.findings),
                "conformance": [asdict(f) for f in self.conformance]}


def check_linked(plan: LinkPlan, *, strict: bool) -> PostLink:
    """The stage: post-link checks, then conformance (errors raise ConformanceError when ``strict``)."""
    sass = plan.backend.sass
    checked = post_link_checks(plan, sass)
    findings = conform.check(plan, sass)
    check, warnings = conform.verdict(plan, findings, strict)
    return replace(checked, conformance=tuple(findings), checks=(*checked.checks, check),
                   warnings=(*checked.warnings, *warnings))


def post_link_checks(plan: LinkPlan, info: CubinInfo) -> PostLink:
    """Did LTO inline every component and fold every binding? (No conformance: check_linked adds it.)"""
    folded, findings, warnings = _folded(plan, info)
    register_ids = [b for b in info.barriers if not b[1].startswith("0x")]
    if register_ids:
        findings.append(f"{len(register_ids)} barrier instruction(s) take the ID from a register: a binding was "
                        "not folded (an ID chosen at run time, `wg ? b.wg1 : b.wg0`: branch instead, one call "
                        "per barrier)")
    # CALL.REL targets code in the cubin: a component that LTO did not inline. CALL.ABS goes to a
    # system routine (assert -> __assertfail, printf -> vprintf): slow, but not a linking failure.
    relative = [c for c in info.calls if opcode(c).startswith("CALL.REL") and not is_guardrail_call(c)]
    absolute = [c for c in info.calls if not opcode(c).startswith("CALL.REL")]
    if relative:
        findings.append(f"{len(relative)} call(s) remain: a component was not inlined ({relative[0]})")
    if absolute:
        warnings.append(f"{len(absolute)} call(s) to system routines remain ({absolute[0]}): device-side "
                        "assert or printf; define NDEBUG / drop printf for a release build")
    if info.spill_insns or info.local:
        findings.append(f"local memory in use ({info.local} bytes, {info.spill_insns} LDL/STL): register spills")
    limit = plan.device["smem_optin_bytes"]
    static = max(0, info.static_smem - plan.device["smem_reserved_bytes"])  # the reserved KB is not ours
    if static + plan.smem_bytes > limit:
        findings.append(f"static ({static}) + dynamic ({plan.smem_bytes}) smem exceed {limit} bytes by "
                        f"{static + plan.smem_bytes - limit}")
    check = Check("post-link", not findings, "; ".join(findings) or
                  f"inlined, {sum(folded.values())}/{len(folded)} bindings seen as immediates, "
                  f"{info.registers} registers, no spills")
    return PostLink(folded, tuple(findings), (check,), tuple(warnings))


def _folded(plan: LinkPlan, info: CubinInfo) -> tuple[dict[str, bool], list[str], list[str]]:
    """Which allocated barrier IDs and smem offsets the SASS shows as immediates: (folded, findings,
    warnings). A barrier not seen is a finding; a buffer never addressed only a warning."""
    findings: list[str] = []
    warnings: list[str] = []
    imms = info.immediates()
    bar_ids = {b[1] for b in info.barriers}
    folded = {}
    for b in plan.barriers:
        if b.threads is None:
            continue  # reserved IDs live inside opaque code; nothing of ours to look for
        hit = hex(b.id) in bar_ids
        folded[f"barrier {b.name} = {b.id}"] = hit
        if not hit:
            findings.append(f"named barrier {b.name} (ID {b.id}) does not appear as an immediate BAR operand")
    for s in plan.smem:
        if s.offset == 0:
            folded[f"smem {s.name} @ 0"] = True  # offset 0 leaves nothing to see
            continue
        hit = any(s.offset <= x < s.offset + s.bytes for x in imms)
        folded[f"smem {s.name} @ {s.offset}"] = hit
        if not hit:  # declared but unused is legal (CUB's shuffle-based WarpReduce never touches its TempStorage)
            warnings.append(f"smem buffer {s.name} at offset {s.offset} is never addressed by an immediate "
                            f"in [{s.offset}, {s.offset + s.bytes}): unused, or its offset is not folded")
    return folded, findings, warnings

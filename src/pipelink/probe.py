"""Pack-time conformance: link a freshly made package alone and check its code against its contract.

The probe spec has one instance of the package, one tile per block and, for each required fact,
its default or the smallest value its domain allows; unconnected in-ports are fed zeros. The
linked cubin then goes through the same conformance check as any link (link/conform.py), so a
component that breaks its own contract is refused when it is packaged, before anyone links it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from .backend.cache import Cache
from .contract import FactRequirement
from .errors import PipelinkError
from .expr import Expr
from .spec import Instance, LinkSection, LinkSpec, ScheduleSection


def smallest_value(req: FactRequirement) -> int:
    if req.default is not None:
        return req.default
    if req.set:
        return min(req.set)
    low = req.range[0] if req.range else 1
    step = req.multiple_of or 1
    return max(step, -(-low // step) * step)


def probe(package) -> dict:
    """{"checked": bool, "findings": [...], "reason": str} for a package (saved or not)."""
    from .linked import build_plan, plan_link
    c = package.contract
    facts = {n: smallest_value(r) for n, r in c.facts.requires.items() if not r.compile}
    facts.update(package.variants[0].facts)
    with tempfile.TemporaryDirectory(prefix="pipelink-probe-") as tmp:
        path = package.save(Path(tmp) / f"{c.name}.plc") if package.path is None else package.path
        spec = LinkSpec(link=LinkSection(name=f"probe_{c.name}"),
                        instance=[Instance(name=c.name, package=str(Path(path).resolve()))],
                        schedule=ScheduleSection(tiles=[Expr.parse(1)]), facts=facts)
        spec.path = Path(tmp) / "probe.toml"
        try:
            plan = plan_link(spec, probe=True)
        except PipelinkError as exc:
            return {"checked": False, "findings": [], "reason": f"probe link not possible: {exc.message}"}
        plan.strict_conformance = False
        try:
            kernel = build_plan(plan, cache=Cache())
        except PipelinkError as exc:
            return {"checked": False, "findings": [], "reason": f"probe link failed: {exc.message}"}
    return {"checked": True, "findings": kernel.plan.backend.get("conformance", []), "reason": ""}

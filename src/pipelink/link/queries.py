"""Queries on the link that several link stages ask, below all of them (tests/repo/test_architecture.py):
a stage reads them here instead of from another stage's module. They take the plan or a stage's inputs
(plan.LinkParts: the spec, the device and the instances).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from ..contract import Entry, Port
from ..errors import SpecError
from ..refs import Ref

if TYPE_CHECKING:
    from .plan import InstancePlan, LinkParts


def port_of(link: LinkParts, ref: Ref, field: str) -> tuple[InstancePlan, Port]:
    inst = link.instance(ref.instance)
    port = inst.contract.port_by_name(ref.name)
    if port is None:
        names = ", ".join(p.name for p in inst.contract.port) or "none"
        raise SpecError(f"component '{inst.contract.name}' (instance '{inst.name}') has no port '{ref.name}'",
                        file=str(link.spec.path), field=field, hint=f"its ports: {names}")
    return inst, port


def block_phases(instances: Iterable[InstancePlan], when: str) -> list[tuple[InstancePlan, Entry]]:
    """The entries of scope "block" that run at ``when`` ("start": before the tile loops, "end": after
    them), in instance order."""
    return [(i, e) for i in instances for e in i.contract.entry if e.scope == "block" and e.when == when]

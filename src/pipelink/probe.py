"""Pack-time conformance: link a freshly made package alone and check its code against its contract.

The probe spec has one instance of the package, one tile per block and facts that satisfy the
contract's own expressions: each fact's default, else the smallest value its domain allows that
every exact division by known facts divides (``K`` in ``K / tile_cols``, a TMA-copied operand's
dimension by its box), then a free fact raised until the contract's [[facts.limit]]s hold (Lmax - L >= 1).
Unconnected in-ports are fed zeros. The linked cubin then goes through the
same conformance check as any link (link/conform.py), so a component that breaks its own
contract is refused when it is packaged, before anyone links it. A probe that cannot be linked
at all is refused too: with those facts, nothing but the package itself stands in its way.
"""

from __future__ import annotations

import ast
import dataclasses
import math
import tempfile
from pathlib import Path

from .backend.cache import Cache
from .contract import Contract, FactRequirement
from .errors import PipelinkError
from .expr import Expr
from .link.pipeline import build_plan, plan_link
from .spec import Instance, LinkSection, LinkSpec, ScheduleSection, device_for


def smallest_value(req: FactRequirement, factor: int = 1) -> int | None:
    """The smallest value ``req``'s domain allows that is a multiple of ``factor`` (None if none)."""
    step = math.lcm(req.multiple_of or 1, factor)
    if req.set:
        return min((v for v in req.set if v % step == 0), default=None)
    low, high = req.range if req.range else (1, None)
    value = max(step, -(-low // step) * step)
    return value if high is None or value <= high else None


def probe_facts(contract: Contract, compile_facts: dict[str, int]) -> dict[str, int]:
    """The probe's facts (see the module's doc): the variant's, the defaults, then the free facts."""
    reqs = contract.facts.requires
    known = {**{n: r.default for n, r in reqs.items() if r.default is not None and not r.compile}, **compile_facts}
    free = [n for n in reqs if n not in known]
    divisors: dict[str, list[int]] = {n: [] for n in free}
    for numerator, denominator in _exact_divisions(contract):
        if numerator in divisors:
            try:
                divisors[numerator].append(abs(denominator.eval({**known, **contract.role_env()})) or 1)
            except PipelinkError:
                pass  # the divisor depends on another free fact: not known in advance
    facts = dict(known)
    for n in free:
        req = reqs[n]
        # No allowed value every divisor divides: the smallest allowed one; none at all: the lowest
        # bound (either way the probe link then says what fails).
        choices = (smallest_value(req, math.lcm(*divisors[n])), smallest_value(req),
                   min(req.set) if req.set else req.range[0] if req.range else 1)
        facts[n] = next(v for v in choices if v is not None)
    return _within_limits(contract, facts, free)


def _within_limits(contract: Contract, facts: dict[str, int], free: list[str], steps: int = 64) -> dict[str, int]:
    """``facts`` with free facts raised, a few allowed steps at a time, until the contract's [[facts.limit]]s
    hold (Lmax - L >= 1: Lmax from 1 to 2); as they were if no such raise is found (the probe link then says
    which limit fails)."""
    env = {**facts, **contract.role_env()}

    def holds(values: dict[str, int]) -> bool:
        try:
            return all(limit.problem(limit.expr.eval(values)) is None for limit in contract.facts.limit
                       if limit.expr.names() <= values.keys())
        except PipelinkError:
            return False
    if holds(env):
        return facts
    for limit in contract.facts.limit:
        for n in sorted(limit.expr.names() & set(free)):
            req, value = contract.facts.requires[n], facts[n]
            for _ in range(steps):
                if req.set:
                    larger = [v for v in req.set if v > value]
                    if not larger:
                        break
                    value = min(larger)
                else:
                    value += req.multiple_of or 1
                if req.problems(value):
                    break
                if holds({**env, n: value}):
                    return {**facts, n: value}
    return facts


def _exact_divisions(contract: Contract):
    """(fact name, divisor) pairs the contract needs to divide exactly: every ``NAME / EXPR`` in its
    expressions, and every dimension of a TMA-copied operand by its box."""
    for e in _expressions(contract):
        for node in ast.walk(e.tree):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.left, ast.Name):
                yield node.left.id, Expr(ast.unparse(node.right), node.right)
    for op in contract.operand:
        if op.tma is not None:
            for dim, box in zip(op.shape, op.tma.box):
                if isinstance(dim.tree, ast.Name):
                    yield dim.tree.id, box


def _expressions(value):
    if isinstance(value, Expr):
        yield value
    elif dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            yield from _expressions(getattr(value, f.name))
    elif isinstance(value, dict):
        for v in value.values():
            yield from _expressions(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _expressions(v)


def probe(package, *, file: str) -> dict:
    """{"checked": True, "findings": [...], "reason": ""} for a package (saved or not). A probe that
    cannot be linked raises the error that stopped it, naming ``file`` (the contract)."""
    c = package.contract
    facts = probe_facts(c, package.variants[0].facts)
    with tempfile.TemporaryDirectory(prefix="pipelink-probe-") as tmp:
        path = package.save(Path(tmp) / f"{c.name}.plc") if package.path is None else package.path
        spec = LinkSpec(link=LinkSection(name=f"probe_{c.name}", device=device_for(c.component.archs)),
                        instance=[Instance(name=c.name, package=str(Path(path).resolve()))],
                        schedule=ScheduleSection(tiles=[Expr.parse(1)]), facts=facts)
        spec.path = Path(tmp) / "probe.toml"
        try:
            kernel = build_plan(plan_link(spec, probe=True), cache=Cache(), strict=False)
        except PipelinkError as exc:
            # The same kind of error, said of the package being made (the probe's spec is ours).
            shown = ", ".join(f"{k}={v}" for k, v in sorted(facts.items()))
            raise type(exc)(f"the pack-time probe cannot link {c.name} alone: {exc.message} (probe facts: {shown})",
                            file=file, component=c.name, field=exc.field, log=exc.log,
                            hint=(exc.hint + "; " if exc.hint else "") + "give the contract's facts defaults (or "
                                 "domains) for which its expressions hold, or pack with check=False / --no-check to "
                                 "package it unchecked") from None
    findings = [dataclasses.asdict(f) for f in kernel.plan.postlink.conformance]
    return {"checked": True, "findings": findings, "reason": ""}

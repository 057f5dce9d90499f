"""Stages 1-2: load the packages, then resolve every fact.

Facts are named values. Equal names unify across the whole link. For an instance's required
fact the sources are, in order: the instance's own [[instance]].facts, other instances'
guarantees, the spec's [facts], the requirement's default. A guarantee that disagrees with a
user value or another guarantee is a conflict naming both sides. Guarantees may depend on facts
that other guarantees provide, so resolution iterates to a fixpoint; defaults are applied only
once nothing else can supply a value.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..contract import check_values
from ..errors import FactConflict, MissingFact, SpecError, VariantMissing
from ..package import check_fact_domain, load_package
from ..spec import DEVICES, LinkSpec
from .plan import InstancePlan, LinkPlan


def load(spec: LinkSpec, mode: str) -> LinkPlan:
    plan = LinkPlan(spec=spec, mode=mode, entry=spec.link.entry or f"pl_{spec.link.name}",
                    device={"name": spec.link.device, **DEVICES[spec.link.device]})
    packages = {}
    for i, inst in enumerate(spec.instance):
        path = spec.package_path(inst)
        if path not in packages:
            packages[path] = load_package(path)
        pkg = packages[path]
        for crole in inst.roles:
            if crole not in pkg.contract.roles:
                raise SpecError(f"instance '{inst.name}' maps role '{crole}', which component '{pkg.name}' does "
                                "not have", file=str(spec.path), field=f"instance[{i}].roles",
                                hint=f"roles of {pkg.name}: {', '.join(pkg.contract.roles)}")
        roles = {r: inst.roles.get(r, r) for r in pkg.contract.roles}
        plan.instances.append(InstancePlan(inst.name, pkg, roles, dict(inst.facts)))
    return plan


# Facts a component may require that the link's launch geometry decides (not the user's [facts]).
LAUNCH_FACTS = {"cluster_ctas": lambda spec: spec.launch.cluster}


def _guarantee_file(inst: InstancePlan) -> str:
    return f"{inst.contract.name} ({inst.file})"


def resolve(plan: LinkPlan) -> LinkPlan:
    if plan.mode == "symbol":
        _resolve_packaged(plan)
        return plan
    for inst in plan.instances:
        inst.facts = dict(inst.contract.role_env())
        inst.fact_sources = {n: "role size" for n in inst.facts}
    while _step(plan, use_defaults=False):
        pass
    while _step(plan, use_defaults=True):
        pass
    for inst in plan.instances:
        _check_resolved(plan, inst)
        _select_variant(inst)
    _link_facts(plan)
    return plan


def _resolve_packaged(plan: LinkPlan) -> None:
    """Symbol linking knows no contracts: each component keeps the facts it was packaged with.
    Facts a package does not fix (problem sizes) come from the spec, as a hand-written glue would."""
    for inst in plan.instances:
        variant = inst.package.variants[0]
        packaged = {**{n: r.default for n, r in inst.contract.facts.requires.items() if r.default is not None},
                    **variant.facts}
        given = {n: v for n, v in {**plan.spec.facts, **inst.user_facts}.items()
                 if n in inst.contract.facts.requires and n not in packaged}
        inst.facts = {**given, **packaged, **inst.contract.role_env()}
        inst.fact_sources = {n: "link spec" if n in given else "packaged" for n in inst.facts}
        _eval_guarantees(inst)
        missing = set(inst.contract.facts.requires) - set(inst.facts)
        if missing:
            raise MissingFact(f"symbol linking: instance '{inst.name}' has no value for {', '.join(sorted(missing))}",
                              file=inst.file, component=inst.contract.name, field="facts.requires",
                              hint=f"set them under [facts] in {plan.spec.path}")
    plan.facts = dict(plan.spec.facts)


@dataclass(frozen=True)
class _Offer:
    """A value for a required fact, and where it comes from."""
    value: int
    source: str                 # where, as the instance's fact_sources records it
    guaranteed: bool = False    # another component's guarantee

    def __str__(self) -> str:
        return f"{self.source}{' guarantees' if self.guaranteed else ''} {self.value}"


def _guarantees(plan: LinkPlan) -> dict[str, list[tuple[int, InstancePlan]]]:
    """fact -> [(value, instance)] for every guarantee evaluated so far."""
    out: dict[str, list[tuple[int, InstancePlan]]] = {}
    for inst in plan.instances:
        for name in inst.contract.facts.guarantees:
            if name in inst.facts:
                out.setdefault(name, []).append((inst.facts[name], inst))
    return out


def _step(plan: LinkPlan, use_defaults: bool) -> bool:
    """One pass over every required fact: take the first offer, refuse any that disagrees."""
    changed = False
    pool = _guarantees(plan)
    for inst in plan.instances:
        for name, req in inst.contract.facts.requires.items():
            offers = _offers(plan, inst, name, req, pool, use_defaults)
            if not offers:
                continue
            first = offers[0]
            for other in offers[1:]:
                if other.value != first.value:
                    raise FactConflict(
                        f"{inst.name} ({inst.contract.name}) requires fact '{name}': {first}, but {other}",
                        file=inst.file, component=inst.contract.name, field=f"facts.requires.{name}",
                        hint="make both sides agree: change the spec value, or repackage the component with "
                             "the matching value")
            if inst.facts.get(name) != first.value:
                inst.facts[name] = first.value
                inst.fact_sources[name] = first.source
                changed = True
        changed |= _eval_guarantees(inst)
    return changed


def _offers(plan: LinkPlan, inst: InstancePlan, name: str, req, pool, use_defaults: bool) -> list[_Offer]:
    """Every value offered for one required fact, in order of precedence. An instance's own value
    overrides the spec's [facts]; guarantees are never overridden: a disagreement with them is a
    conflict. Defaults only once nothing else gives a value."""
    spec_file = str(plan.spec.path)
    offers = []
    if name in LAUNCH_FACTS:  # set by the link's [launch] section, for every instance alike
        offers.append(_Offer(LAUNCH_FACTS[name](plan.spec), f"the link spec ({spec_file}) [launch]"))
    if name in inst.user_facts:
        offers.append(_Offer(inst.user_facts[name], f"the link spec ({spec_file}) [[instance]] '{inst.name}'"))
    for value, other in pool.get(name, []):
        if other is not inst:
            offers.append(_Offer(value, f"{other.name}: {_guarantee_file(other)}", guaranteed=True))
    if name in plan.spec.facts and name not in inst.user_facts:
        offers.append(_Offer(plan.spec.facts[name], f"the link spec ({spec_file}) [facts]"))
    if not offers and use_defaults and req.default is not None and not req.compile:
        offers.append(_Offer(req.default, "the contract's default"))
    if not offers and use_defaults and req.compile:
        variant_values = {v.facts[name] for v in inst.package.variants}
        value = next(iter(variant_values)) if len(variant_values) == 1 else req.default
        offers.append(_Offer(value, "the packaged variant"))
    return offers


def _check_resolved(plan: LinkPlan, inst: InstancePlan) -> None:
    """Every required fact has a value in its domain, every guarantee evaluates, and every expression
    passes the load-time checks again with the facts this link resolved (at load only the defaults
    were known)."""
    for name, req in inst.contract.facts.requires.items():
        if name not in inst.facts:
            raise MissingFact(f"instance '{inst.name}' requires fact '{name}', but nothing in the link gives it "
                              "a value", file=inst.file, component=inst.contract.name,
                              field=f"facts.requires.{name}",
                              hint=f"set {name} = <value> under [facts] in {plan.spec.path}"
                                   + (f" ({req.doc})" if req.doc else ""))
        source = inst.fact_sources.get(name, "")
        check_fact_domain(inst.contract, name, inst.facts[name], file=inst.file, source=source)
    for name, g in inst.contract.facts.guarantees.items():
        if name not in inst.facts:
            inst.facts_eval(g, f"facts.guarantees.{name}")  # raises, naming the missing fact
    check_values(inst.contract, inst.facts, inst.file)


def _link_facts(plan: LinkPlan) -> None:
    """Link-wide facts: the spec's, plus every guarantee (consistent by construction when consumed)."""
    plan.facts = dict(plan.spec.facts)
    for name, offers in _guarantees(plan).items():
        values = {v for v, _ in offers}
        if len(values) == 1:
            plan.facts.setdefault(name, values.pop())
    for inst in plan.instances:
        for name in inst.contract.facts.requires:
            plan.facts.setdefault(name, inst.facts[name])
    used = set().union(*(set(i.contract.facts.requires) | set(i.contract.facts.guarantees) for i in plan.instances))
    used |= set().union(*(e.names() for e in plan.spec.schedule.tiles))
    for name in plan.spec.facts:
        if name not in used:
            plan.warnings.append(f"fact '{name}' set in the link spec is used by no component or schedule")


def _eval_guarantees(inst: InstancePlan) -> bool:
    changed = False
    for name, expr in inst.contract.facts.guarantees.items():
        if name in inst.facts or not expr.names() <= set(inst.facts):
            continue
        inst.facts[name] = inst.facts_eval(expr, f"facts.guarantees.{name}")
        inst.fact_sources[name] = "guaranteed by this component"
        changed = True
    return changed


def _select_variant(inst: InstancePlan) -> None:
    wanted = {n: inst.facts[n] for n in inst.contract.compile_facts()}
    for i, v in enumerate(inst.package.variants):
        if all(wanted.get(k) == x for k, x in v.facts.items()):
            inst.variant = i
            return
    have = "; ".join(", ".join(f"{k}={x}" for k, x in v.facts.items()) for v in inst.package.variants)
    need = ",".join(f"{k}={x}" for k, x in wanted.items())
    raise VariantMissing(f"instance '{inst.name}' needs compile-time facts {need}, but the package holds only "
                         f"variants [{have}]", file=inst.file, component=inst.contract.name,
                         field="facts.requires",
                         hint=f"repack with `pipelink pack ... --variant {need}` (several --variant flags keep "
                              "several variants in one package)")

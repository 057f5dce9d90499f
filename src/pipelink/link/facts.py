"""Stages 1-2: load the packages (returns Loaded), then resolve every fact (FactsInputs -> Resolved: each
instance again, with its facts).

Facts are named values. Equal names unify across the whole link. For an instance's required
fact the values offered are, in order: the [launch] section's, the instance's own
[[instance]].facts, other instances' guarantees, the spec's [facts]; they must all agree, and a
disagreement is a conflict naming both sides. A fact nothing offers is solved across every
instance that requires it (solve.py): the value all their domains, packaged variants, guarantees
and port connections accept, with defaults deciding only between several such values.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from ..contract import check_values
from ..errors import ContractError, ExpressionError, MissingFact, PinMismatch, SpecError, VariantMissing
from ..package import Package, load_package
from ..schema import did_you_mean
from ..spec import DEVICES, LinkSpec
from .layout import BLOCK_THREADS, warp_layout
from .plan import InstancePlan, LaunchFact, LinkParts, Loaded, Resolved
from .queries import port_of
from .solve import Equality, FactSource, Party, Problem, solve


# How a `source =` instance becomes a package: packer.pack_source_instance, set when pipelink.packer is
# imported (pipelink's __init__ does). Packing runs the pack-time probe, which links the component alone, so
# the packer lies above the link; the link reaches it through this one entry instead of an import.
SOURCE_PACKER: Callable[[LinkSpec, int, Callable[[str], None] | None], Package] | None = None


def load(spec: LinkSpec, progress: Callable[[str], None] | None = None) -> Loaded:
    """``spec``'s instances, each with its package (loaded, or packed from its source: ``progress`` hears how
    that goes), its entry's name and the device's limits."""
    instances, packages = [], {}
    for i, inst in enumerate(spec.instance):
        if inst.source is not None:
            if SOURCE_PACKER is None:
                raise SpecError(f"instance '{inst.name}' names a source, and nothing here can pack it",
                                file=str(spec.path), field=f"instance[{i}].source",
                                hint="import pipelink (its packer packs sources), or name a package")
            pkg = SOURCE_PACKER(spec, i, progress)
        else:
            path = spec.package_path(inst)
            if path not in packages:
                packages[path] = load_package(path)
            pkg = packages[path]
            check_pin(spec, i, pkg)
        for crole in inst.roles:
            if crole not in pkg.contract.roles:
                raise SpecError(f"instance '{inst.name}' maps role '{crole}', which component '{pkg.name}' does "
                                "not have", file=str(spec.path), field=f"instance[{i}].roles",
                                hint=f"roles of {pkg.name}: {', '.join(pkg.contract.roles)}")
        roles = {r: inst.roles.get(r, r) for r in pkg.contract.roles}
        instances.append(InstancePlan(inst.name, pkg, roles, dict(inst.facts)))
    device = {"name": spec.link.device, **DEVICES[spec.link.device]}
    return Loaded(spec, spec.link.entry or f"pl_{spec.link.name}", device, tuple(instances))


@dataclass(frozen=True)
class FactsInputs(LinkParts):
    """What the facts stage reads: the spec, the device (the block's layout, for block_threads), the loaded
    instances, and the link mode (symbol linking takes each component as packaged)."""
    spec: LinkSpec
    device: dict
    instances: tuple[InstancePlan, ...]
    mode: str


def check_pin(spec: LinkSpec, i: int, pkg: Package) -> None:
    """An instance that pins its package (sha256, `pipelink lock`) links those very bytes: a vendor's
    update or a swapped file (any other bytes) is refused until the user re-locks."""
    inst = spec.instance[i]
    if inst.sha256 is not None and pkg.file_sha256 != inst.sha256:
        raise PinMismatch(f"instance '{inst.name}': package {pkg.path} has SHA-256 {pkg.file_sha256}, but the spec "
                          f"pins {inst.sha256}", file=str(spec.path), component=pkg.name,
                          field=f"instance[{i}].sha256",
                          hint=f"the package changed since the spec was locked: if the update is trusted, re-lock "
                               f"with `pipelink lock {spec.path}`; if not, restore the locked package")


# Facts a component may require that the link itself decides, not the user's [facts]: the [launch]
# cluster, and the block's threads (its roles' warps, layout.py; a whole-block phase compiled with
# CUB's BLOCK_DIM_X needs it). Offered to every instance that requires them, like a pinned value, so
# the solver picks the package variant built for them.
LAUNCH_FACTS = ("cluster_ctas", BLOCK_THREADS)


def launch_facts(link: FactsInputs) -> dict[str, tuple[int, FactSource]]:
    """The value and source of each launch fact some instance requires (the block's layout is worked out
    only when one needs it)."""
    spec_file = str(link.spec.path)
    required = {n for inst in link.instances for n in inst.contract.facts.requires if n in LAUNCH_FACTS}
    out = {}
    if "cluster_ctas" in required:
        out["cluster_ctas"] = (link.spec.launch.cluster, FactSource("launch", f"the link spec ({spec_file}) [launch]"))
    if BLOCK_THREADS in required:
        layout = warp_layout(link)
        roles = " + ".join(f"{r.name} {r.threads}" for r in layout.roles)
        out[BLOCK_THREADS] = (layout.block, FactSource("launch", f"the block's threads ({roles})"))
    return out


def resolve(link: FactsInputs) -> Resolved:
    """Every instance's facts, solved across the link (solve.py), then checked whole: domains,
    guarantees evaluable, every contract expression valid with these values, a package variant."""
    if link.mode == "symbol":
        return _resolve_packaged(link)
    solution = solve(_problem(link))
    instances = []
    for inst in link.instances:
        values, sources = dict(solution.values[inst.name]), solution.sources[inst.name]
        _check_resolved(link, inst, values)
        instances.append(_with_facts(inst, values, sources, _select_variant(inst, values)))
    link_facts, warnings = _link_facts(link, instances)
    return Resolved(tuple(instances), link_facts, solution.choices, warnings, given_at_launch(link, instances))


# How far below its linked value a launch fact's range is searched: a decode position over a 64 Ki-row cache.
MAX_LAUNCH_SPAN = 1 << 16


def given_at_launch(link: FactsInputs, instances: list[InstancePlan]) -> tuple[LaunchFact, ...]:
    """The facts [link] launch_facts names, each with the values the kernel serves: from the linked value down
    to the least one every taker's domain and [[facts.limit]]s allow (the other facts at their linked values),
    at most MAX_LAUNCH_SPAN values. A fact no component requires, or one some taker does not declare `launch`
    (its code may fold the value), or pinned to different values for different instances, is refused."""
    spec_file, out = str(link.spec.path), []
    for i, name in enumerate(link.spec.link.launch_facts):
        field = f"link.launch_facts[{i}]"
        takers = [inst for inst in instances if name in inst.contract.facts.requires]
        refused = [f"{inst.name} ({inst.contract.name}, {inst.file})" for inst in takers
                   if not inst.contract.facts.requires[name].launch]
        why = ("it is listed twice" if name in link.spec.link.launch_facts[:i] else
               "the link decides it" if name in LAUNCH_FACTS else
               "no component requires it" if not takers else
               f"{', '.join(refused)} require{'s' if len(refused) == 1 else ''} it without declaring it `launch` "
               "(the code may fold the linked value)" if refused else None)
        if why:
            raise SpecError(f"fact '{name}' cannot be given at launch: {why}", file=spec_file, field=field,
                            hint="list only facts every taker declares `launch` (facts.requires.NAME.launch = true)")
        values = {inst.name: inst.facts[name] for inst in takers}
        if len(set(values.values())) > 1:
            raise SpecError(f"fact '{name}' cannot be given at launch: the instances hold different values "
                            f"({', '.join(f'{n} = {v}' for n, v in values.items())}), and the kernel reads one",
                            file=spec_file, field=field, hint=f"give every instance the same {name}")
        high = low = next(iter(values.values()))
        while high - low + 1 < MAX_LAUNCH_SPAN and all(_allows(inst, name, low - 1) for inst in takers):
            low -= 1
        out.append(LaunchFact(name, low, high, tuple(values)))
    return tuple(out)


def _allows(inst: InstancePlan, name: str, value: int) -> bool:
    """Whether ``inst``'s domain of ``name`` and its limits that name it hold at ``value`` (its other facts as linked)."""
    if inst.contract.facts.requires[name].problems(value):
        return False
    env = {**inst.facts, name: value}
    for limit in inst.contract.facts.limit:
        if name in limit.expr.names():
            try:
                if limit.problem(limit.expr.eval(env)) is not None:
                    return False
            except ExpressionError:
                return False
    return True


def _with_facts(inst: InstancePlan, values: dict, sources: dict, variant: int) -> InstancePlan:
    """The instance with its resolved facts, where each came from, and the package variant it links."""
    return replace(inst, facts=dict(values), fact_sources=dict(sources), variant=variant)


def _problem(link: FactsInputs) -> Problem:
    spec_file = str(link.spec.path)
    launch = launch_facts(link)
    parties = []
    for inst in link.instances:
        c = inst.contract
        pins = {}
        for name in c.facts.requires:
            offers = []
            if name in launch:  # decided by the link, for every instance alike
                offers.append(launch[name])
            if name in inst.user_facts:
                offers.append((inst.user_facts[name],
                               FactSource("instance", f"the link spec ({spec_file}) [[instance]] '{inst.name}'")))
            if offers:
                pins[name] = tuple(offers)
        parties.append(Party(inst.name, c.name, inst.file, c.facts.requires, c.facts.guarantees,
                             tuple(v.facts for v in inst.package.variants), c.role_env(), pins,
                             tuple(c.facts.limit)))
    return Problem(tuple(parties), dict(link.spec.facts), spec_file, tuple(_port_equalities(link)),
                   frozenset(link.spec.command_line_facts))


def _port_equalities(link: FactsInputs) -> list[Equality]:
    """What a connection needs equal on both sides, as expressions in each side's facts: the
    shape, the values per thread of a register hand-over, a ring's mbarrier counts. (The check
    stage then compares the whole layouts, with the values chosen here.)"""
    out = []
    for i, (src, dst) in enumerate(link.connections):
        where = f"connect[{i}]"
        (si, sp), (di, dp) = port_of(link, src, f"{where}.from"), port_of(link, dst, f"{where}.to")
        pair = f"{src} -> {dst}"
        if len(sp.shape) == len(dp.shape):
            for (dim, a), b in zip(sp.shape.items(), dp.shape.values()):
                out.append(Equality((si.name, a), (di.name, b), f"{pair}: shape.{dim}", where))
        if sp.space == dp.space == "registers":
            out.append(Equality((si.name, sp.values), (di.name, dp.values), f"{pair}: values per thread", where))
        for name in set(sp.mbarriers) & set(dp.mbarriers):
            ms = next(m for m in si.contract.mbarrier if m.name == name)
            md = next(m for m in di.contract.mbarrier if m.name == name)
            for key in ("count", "arrivals", "tx_bytes"):
                out.append(Equality((si.name, getattr(ms, key)), (di.name, getattr(md, key)),
                                    f"{pair}: mbarrier '{name}' {key}", where))
    return out


def _resolve_packaged(link: FactsInputs) -> Resolved:
    """Symbol linking knows no contracts. Each component runs as it was packaged: the variant built
    for the spec's values where the package has one (a team picks the object file of its
    configuration), else its first; its other facts at the values of the design it came from (the
    contract's defaults), and only facts without one (problem sizes) from the spec, as a
    hand-written glue passes them. Nothing is checked across components."""
    instances = []
    decided = {n: v for n, (v, _) in launch_facts(link).items()}
    for inst in link.instances:
        c = inst.contract
        launch = {n: v for n, v in decided.items() if n in c.facts.requires}
        given = {**link.spec.facts, **inst.user_facts}
        defaults = {n: r.default for n, r in c.facts.requires.items() if r.default is not None}
        variant = _packaged_variant(inst, {**defaults, **given})
        compiled = inst.package.variants[variant].facts
        runtime = {n: launch.get(n, defaults.get(n, given.get(n))) for n in c.facts.requires if n not in compiled}
        values = {**{n: v for n, v in runtime.items() if v is not None}, **compiled, **c.role_env()}
        sources = {n: FactSource("packaged", "packaged" if (n in compiled or n in defaults) and n not in launch
                                 else "link spec") for n in values}
        sources.update({n: FactSource("role size", "role size") for n in c.role_env()})
        pending = dict(c.facts.guarantees)
        while True:  # in the order they can be computed: one may name a guarantee declared below it (no cycles: load)
            ready = [name for name, expr in pending.items() if expr.names() <= values.keys()]
            if not ready:
                break
            for name in ready:
                values[name] = _eval(inst, values, pending.pop(name), f"facts.guarantees.{name}")
                sources[name] = FactSource("own guarantee", "guaranteed by this component")
        missing = set(c.facts.requires) - set(values)
        if missing:
            raise MissingFact(f"symbol linking: instance '{inst.name}' has no value for {', '.join(sorted(missing))}",
                              file=inst.file, component=c.name, field="facts.requires",
                              hint=f"set them under [facts] in {link.spec.path}")
        instances.append(_with_facts(inst, values, sources, variant))
    # The schedule's names a hand-written launch takes from the components' own headers.
    link_facts = dict(link.spec.facts)
    for inst in instances:
        for name, value in inst.facts.items():
            link_facts.setdefault(name, value)
    return Resolved(tuple(instances), link_facts, launch=given_at_launch(link, instances))


def _packaged_variant(inst: InstancePlan, wanted: dict[str, int]) -> int:
    """The first variant whose compile facts match ``wanted`` (the spec's values over the defaults),
    else the first variant."""
    for i, v in enumerate(inst.package.variants):
        if all(wanted.get(k, x) == x for k, x in v.facts.items()):
            return i
    return 0


def _eval(inst: InstancePlan, values: dict, e, where: str) -> int:
    try:
        return e.eval(values, where=where)
    except ExpressionError as exc:
        raise ContractError(exc.message, file=inst.file, component=inst.contract.name, field=where,
                            hint=exc.hint) from None


def _check_resolved(link: FactsInputs, inst: InstancePlan, values: dict) -> None:
    """Every required fact has a value (the solver kept each inside its domain), every guarantee
    evaluates, and every expression passes the load-time checks again with the facts this link
    resolved (at load only the defaults were known)."""
    for name, req in inst.contract.facts.requires.items():
        if name not in values:
            raise MissingFact(f"instance '{inst.name}' requires fact '{name}', but nothing in the link gives it "
                              "a value", file=inst.file, component=inst.contract.name,
                              field=f"facts.requires.{name}",
                              hint=f"set {name} = <value> under [facts] in {link.spec.path}"
                                   + (f" ({req.doc})" if req.doc else ""))
    for name, g in inst.contract.facts.guarantees.items():
        if name not in values:
            _eval(inst, values, g, f"facts.guarantees.{name}")  # raises, naming the missing fact
    check_values(inst.contract, values, inst.file)


def _link_facts(link: FactsInputs, instances: list[InstancePlan]) -> tuple[dict[str, int], tuple[str, ...]]:
    """Link-wide facts: the spec's, every guarantee (consistent by construction when consumed),
    every required fact; and a warning for each spec fact nothing uses."""
    facts = dict(link.spec.facts)
    for inst in instances:
        for name in inst.contract.facts.guarantees:
            facts.setdefault(name, inst.facts[name])
    for inst in instances:
        for name in inst.contract.facts.requires:
            facts.setdefault(name, inst.facts[name])
    used = set().union(*(set(i.contract.facts.requires) | set(i.contract.facts.guarantees) for i in link.instances))
    used |= set().union(*(e.names() for e in link.spec.schedule.tiles))
    for name in link.spec.command_line_facts:  # typed by hand just now: a typo, not a fact kept for later
        if name not in used:
            guess = did_you_mean(name, used)
            raise SpecError(f"--fact {name}: no component or schedule of the link uses a fact '{name}'" +
                            (f" (did you mean '{guess}'?)" if guess else ""), file=str(link.spec.path),
                            field="--fact", hint=f"facts the link uses: {', '.join(sorted(used)) or 'none'}")
    warnings = tuple(f"fact '{name}' set in the link spec is used by no component or schedule" +
                     (f" (did you mean '{guess}'?)" if (guess := did_you_mean(name, used)) else "")
                     for name in link.spec.facts if name not in used)
    return facts, warnings


def _select_variant(inst: InstancePlan, values: dict) -> int:
    wanted = {n: values[n] for n in inst.contract.compile_facts()}
    for i, v in enumerate(inst.package.variants):
        if all(wanted.get(k) == x for k, x in v.facts.items()):
            return i
    have = "; ".join(", ".join(f"{k}={x}" for k, x in v.facts.items()) for v in inst.package.variants)
    need = ",".join(f"{k}={x}" for k, x in wanted.items())
    raise VariantMissing(f"instance '{inst.name}' needs compile-time facts {need}, but the package holds only "
                         f"variants [{have}]", file=inst.file, component=inst.contract.name,
                         field="facts.requires",
                         hint=f"repack with `pipelink pack ... --variant {need}` (several --variant flags keep "
                              "several variants in one package)")

"""Fact resolution as a small constraint problem (stage 2's core; facts.py builds the problem).

A fact name that several instances require is one unknown of the link, unless an instance pins
its own value ([[instance]].facts) or something fixes it for everyone: the spec's [facts], the
[launch] section, or another component's guarantee. Each unknown is chosen from what every
instance requiring it accepts:
  - its domain (set, range, multiple_of) in each contract,
  - the compile-time variants each package actually carries (a variant is a tuple of values, so
    two compile facts of one package are chosen together),
  - the guarantees of other components (a guarantee computed from an unknown must land in the
    domain of whoever requires it), and
  - the equalities implied by connected ports (shape, values per thread, a ring's mbarrier
    counts), which tie facts of both sides together even under different names.
Unknowns that share a constraint are solved together by enumerating their candidates (the
domains are small: sets, short ranges, a few variants); unknowns with nothing in common are
solved apart, so the work stays the product of a group's candidates, not of the whole link's.

One solution is taken. Where several remain, defaults that agree decide (for each unknown in
turn); otherwise the link is ambiguous and the error lists the candidates and each component's
default. Every value carries a FactSource saying where it came from and, for a value the linker
chose, which components' contracts forced it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable, Mapping

from ..errors import (AmbiguousFact, ExpressionError, FactConflict, FactDomainError, MissingFact, PipelinkError,
                      PortMismatch, VariantMissing)
from ..expr import Expr

# A range with at most this many admissible values is enumerated; a longer one (a problem size)
# offers only its components' defaults.
RANGE_ENUMERATION_LIMIT = 4096
# Combinations one group of tied unknowns may have; past it the spec must fix some of them.
COMBINATION_LIMIT = 1 << 16

HOW_CHOSEN = ("domain", "tied", "default")  # FactSource kinds of a value the linker chose


@dataclass(frozen=True)
class FactSource:
    """Where one instance's value of one fact came from. ``kind``: role size, launch, instance,
    spec, guarantee (another component's), own guarantee, packaged (symbol linking), or how the
    linker chose it (HOW_CHOSEN). ``text`` says it for a reader; ``forced_by`` names the
    components whose contracts narrowed a chosen value to this one."""
    kind: str
    text: str
    forced_by: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Party:
    """One instance as the solver sees it."""
    name: str
    component: str
    file: str
    requires: Mapping[str, object]              # fact -> contract.FactRequirement
    guarantees: Mapping[str, Expr]
    variants: tuple[Mapping[str, int], ...]     # the compile facts of each packaged variant
    builtins: Mapping[str, int] = field(default_factory=dict)   # role sizes: <role>_warps, <role>_threads
    pins: Mapping[str, tuple[tuple[int, FactSource], ...]] = field(default_factory=dict)  # [launch], [[instance]]
    limits: tuple = ()                          # contract.FactLimit: bounds on expressions over several facts

    @property
    def label(self) -> str:
        return f"{self.name} ({self.component})"

    def pinned_by_instance(self, name: str) -> bool:
        return any(src.kind == "instance" for _, src in self.pins.get(name, ()))


@dataclass(frozen=True)
class Equality:
    """Two expressions, each in one party's facts, that a port connection needs equal."""
    left: tuple[str, Expr]      # (party name, expression)
    right: tuple[str, Expr]
    what: str                   # "mainloop.acc -> epilogue.acc: shape.col"
    field: str                  # the spec field that made it ("connect[0]")


@dataclass(frozen=True)
class Problem:
    parties: tuple[Party, ...]
    spec_facts: Mapping[str, int]
    spec_file: str
    equalities: tuple[Equality, ...] = ()
    command_line: frozenset[str] = frozenset()   # spec facts set by --fact, not by the file


@dataclass(frozen=True)
class Choice:
    """A fact nothing fixed, and the value the linker chose for it."""
    name: str
    value: int
    how: str                                # HOW_CHOSEN
    candidates: tuple[int, ...]             # the values every requirer's domain and variants accept
    solutions: tuple[int, ...]              # those that also satisfy the tying constraints
    forced_by: tuple[str, ...]
    preferences: Mapping[str, int]          # requirer label -> its contract's default
    detail: str

    def to_json(self) -> dict:
        return {"fact": self.name, "value": self.value, "how": self.how, "candidates": list(self.candidates),
                "solutions": list(self.solutions), "forced_by": list(self.forced_by),
                "preferences": dict(self.preferences), "detail": self.detail}


@dataclass(frozen=True)
class Solution:
    values: Mapping[str, Mapping[str, int]]          # party -> fact -> value (role sizes, requires, guarantees)
    sources: Mapping[str, Mapping[str, FactSource]]
    choices: tuple[Choice, ...]


@dataclass(frozen=True)
class _Constraint:
    deps: frozenset[str]                 # the unknowns it depends on
    test: Callable[[dict, dict], PipelinkError | None]
    port: bool = False                   # a port equality: with no unknown in it, the check stage's to report


def solve(problem: Problem) -> Solution:
    return _Solver(problem).run()


class _Solver:
    def __init__(self, problem: Problem):
        self.p = problem
        self.parties = {q.name: q for q in problem.parties}
        self.guarantors: dict[str, list[Party]] = {}
        for q in problem.parties:
            for name in q.guarantees:
                self.guarantors.setdefault(name, []).append(q)
        self.unknowns = sorted({n for q in problem.parties for n in q.requires if self._is_unknown(q, n)})
        self.requirers = {n: [q for q in problem.parties if n in q.requires and n not in q.pins]
                          for n in self.unknowns}
        self.constraints = self._constraints()

    # --- the values an assignment of the unknowns gives every party ---------------------------

    def _is_unknown(self, q: Party, name: str) -> bool:
        return (name not in q.pins and name not in q.builtins and name not in self.p.spec_facts
                and not any(g is not q for g in self.guarantors.get(name, [])))

    def _offers(self, q: Party, name: str, values: dict) -> list[tuple[int, FactSource]]:
        """Every value offered for ``q``'s required fact, in order of precedence: [launch], the
        instance's own, other components' guarantees, the spec's [facts]. They must all agree."""
        offers = list(q.pins.get(name, ()))
        for g in self.guarantors.get(name, []):
            if g is not q and name in values[g.name]:
                offers.append((values[g.name][name], FactSource("guarantee", f"{g.name}: {g.component} ({g.file})",
                                                                (g.component,))))
        if name in self.p.spec_facts and not q.pinned_by_instance(name):
            where = (f"the command line (--fact {name}=...)" if name in self.p.command_line
                     else f"the link spec ({self.p.spec_file}) [facts]")
            offers.append((self.p.spec_facts[name], FactSource("spec", where)))
        return offers

    def values(self, assignment: Mapping[str, int], chosen: Mapping[str, FactSource] | None = None):
        """party -> fact -> value, and where each came from, for an assignment of (some) unknowns.
        Guarantees feed requirements until nothing changes; what cannot be computed is left out."""
        values = {q.name: dict(q.builtins) for q in self.p.parties}
        sources = {q.name: {n: FactSource("role size", "role size") for n in q.builtins} for q in self.p.parties}
        changed = True
        while changed:
            changed = False
            for q in self.p.parties:
                mine, where = values[q.name], sources[q.name]
                for name in q.requires:
                    if name in mine:
                        continue
                    offers = self._offers(q, name, values)
                    if not offers and name in assignment and name in self.requirers:
                        offers = [(assignment[name], (chosen or {}).get(name, FactSource("tried", "the value tried")))]
                    if offers:
                        mine[name], where[name] = offers[0]
                        changed = True
                for name, expr in q.guarantees.items():
                    if name not in mine and expr.names() <= mine.keys():
                        try:
                            mine[name] = expr.eval(mine)
                        except ExpressionError:
                            continue  # facts.py evaluates it again and names the field
                        where[name] = FactSource("own guarantee", "guaranteed by this component")
                        changed = True
        return values, sources

    # --- constraints -------------------------------------------------------------------------

    def deps(self, q: Party, name: str, seen: frozenset = frozenset()) -> frozenset[str]:
        """The unknowns ``q``'s value of ``name`` depends on."""
        if (q.name, name) in seen or name in q.builtins or name in q.pins:
            return frozenset()
        seen = seen | {(q.name, name)}
        if name in q.guarantees:
            return frozenset().union(*(self.deps(q, m, seen) for m in q.guarantees[name].names()))
        others = [g for g in self.guarantors.get(name, []) if g is not q]
        if others:
            return frozenset().union(*(self.deps(g, m, seen) for g in others for m in g.guarantees[name].names()))
        return frozenset([name]) if name in self.requirers else frozenset()

    def _expr_deps(self, q: Party, e: Expr) -> frozenset[str]:
        return frozenset().union(*(self.deps(q, n) for n in e.names()))

    def _constraints(self) -> list[_Constraint]:
        out = []
        for q in self.p.parties:
            for name in q.requires:
                out.append(_Constraint(self.deps(q, name) | self._offer_deps(q, name), self._agree(q, name)))
                out.append(_Constraint(self.deps(q, name), self._domain(q, name)))
            for i, limit in enumerate(q.limits):
                out.append(_Constraint(self._expr_deps(q, limit.expr), self._limit(q, i)))
            compile_facts = [n for n, r in q.requires.items() if r.compile]
            if compile_facts:
                out.append(_Constraint(frozenset().union(*(self.deps(q, n) for n in compile_facts)),
                                       self._variant(q, compile_facts)))
        for eq in self.p.equalities:
            (a, ea), (b, eb) = eq.left, eq.right
            out.append(_Constraint(self._expr_deps(self.parties[a], ea) | self._expr_deps(self.parties[b], eb),
                                   self._equal(eq), port=True))
        return out

    def _offer_deps(self, q: Party, name: str) -> frozenset[str]:
        return frozenset().union(*(self.deps(g, m) for g in self.guarantors.get(name, []) if g is not q
                                   for m in g.guarantees[name].names()))

    def _agree(self, q: Party, name: str):
        def test(values, sources):
            offers = self._offers(q, name, values)
            for value, src in offers[1:]:
                if value != offers[0][0]:
                    return FactConflict(f"{q.label} requires fact '{name}': {_said(*offers[0])}, but {_said(value, src)}",
                                        file=q.file, component=q.component, field=f"facts.requires.{name}",
                                        hint="make both sides agree: change the spec value, or repackage the "
                                             "component with the matching value")
            return None
        return test

    def _domain(self, q: Party, name: str):
        def test(values, sources):
            if name not in values[q.name]:
                return None  # nothing gave it a value: facts.py says so, naming the field
            value = values[q.name][name]
            problems = q.requires[name].problems(value)
            if problems:
                req = q.requires[name]
                return FactDomainError(f"{name}={value} (from {sources[q.name][name]}) is {' and '.join(problems)}",
                                       file=q.file, component=q.component, field=f"facts.requires.{name}",
                                       hint=f"choose a value the component supports{' — ' + req.doc if req.doc else ''}")
            return None
        return test

    def _limit(self, q: Party, i: int):
        limit = q.limits[i]

        def test(values, sources):
            mine = values[q.name]
            if not limit.expr.names() <= mine.keys():
                return None  # a fact without a value: facts.py says so, naming the field
            try:
                problem = limit.problem(limit.expr.eval(mine))
            except ExpressionError:
                return None  # facts.py evaluates every expression again and names the field
            if problem is None:
                return None
            given = "; ".join(f"{n} = {mine[n]} (from {sources[q.name][n]})" for n in sorted(limit.expr.names()))
            return FactDomainError(f"{given}: {limit.expr.text} = {problem}", file=q.file, component=q.component,
                                   field=f"facts.limit[{i}]",
                                   hint=f"choose values the component supports{' — ' + limit.doc if limit.doc else ''}")
        return test

    def _variant(self, q: Party, names: list[str]):
        def test(values, sources):
            mine = values[q.name]
            if not all(n in mine for n in names):
                return None
            wanted = {n: mine[n] for n in names}
            if any(all(wanted.get(k) == x for k, x in v.items()) for v in q.variants):
                return None
            have = "; ".join(", ".join(f"{k}={x}" for k, x in v.items()) for v in q.variants)
            need = ",".join(f"{k}={x}" for k, x in wanted.items())
            return VariantMissing(f"instance '{q.name}' needs compile-time facts {need}, but the package holds only "
                                  f"variants [{have}]", file=q.file, component=q.component, field="facts.requires",
                                  hint=f"repack with `pipelink pack ... --variant {need}` (several --variant flags "
                                       "keep several variants in one package)")
        return test

    def _equal(self, eq: Equality):
        (a, ea), (b, eb) = eq.left, eq.right
        pa, pb = self.parties[a], self.parties[b]

        def test(values, sources):
            if not (ea.names() <= values[a].keys() and eb.names() <= values[b].keys()):
                return None  # the check stage evaluates it and names what is missing
            try:
                va, vb = ea.eval(values[a]), eb.eval(values[b])
            except ExpressionError:
                return None
            if va == vb:
                return None
            return PortMismatch(f"{eq.what}: {va} ({ea.text} in {pa.label}) differs from {vb} ({eb.text} in "
                                f"{pb.label})", file=self.p.spec_file, component=f"{pa.component} -> {pb.component}",
                                field=eq.field, hint="the tile facts of the two components must agree")
        return test

    # --- solving -----------------------------------------------------------------------------

    def run(self) -> Solution:
        values, sources = self.values({})
        for c in self.constraints:  # what no unknown can change: its typed error, at once
            if not c.deps and not c.port:
                err = c.test(values, sources)
                if err:
                    raise err
        candidates = {n: self._candidates(n) for n in self.unknowns}
        assignment: dict[str, int] = {}
        chosen: dict[str, FactSource] = {}
        choices = []
        for group in self._groups():
            for choice in self._solve_group(group, candidates):
                assignment[choice.name] = choice.value
                chosen[choice.name] = FactSource(choice.how, _choice_text(choice), choice.forced_by)
                choices.append(choice)
        values, sources = self.values(assignment, chosen)
        return Solution(values, sources, tuple(sorted(choices, key=lambda c: c.name)))

    def _accepted(self, q: Party, name: str) -> list[int] | None:
        """The values ``q`` accepts for ``name``, or None for a range too long to list."""
        req = q.requires[name]
        if req.compile and q.variants:
            values = {v[name] for v in q.variants if name in v}
        elif req.set is not None:
            values = set(req.set)
        elif req.range is not None and _range_count(req) <= RANGE_ENUMERATION_LIMIT:
            step = req.multiple_of or 1
            low = -(-req.range[0] // step) * step
            values = set(range(low, req.range[1] + 1, step))
        else:
            return None
        return sorted(v for v in values if not req.problems(v))

    def _candidates(self, name: str) -> list[int]:
        who = self.requirers[name]
        accepted = {q.label: self._accepted(q, name) for q in who}
        listed = [set(a) for a in accepted.values() if a is not None]
        if listed:
            cands = set.intersection(*listed)
        else:
            cands = {q.requires[name].default for q in who if q.requires[name].default is not None}
        cands = sorted(v for v in cands if all(not q.requires[name].problems(v) for q in who))
        if cands:
            return cands
        first = who[0]
        if not listed and not cands:
            req = first.requires[name]
            raise MissingFact(f"instance '{first.name}' requires fact '{name}', but nothing in the link gives it a "
                              "value", file=first.file, component=first.component, field=f"facts.requires.{name}",
                              hint=f"set {name} = <value> under [facts] in {self.p.spec_file}"
                                   + (f" ({req.doc})" if req.doc else ""))
        said = "; ".join(f"{label} accepts {_listed(a)}" for label, a in accepted.items())
        raise FactConflict(f"no value of fact '{name}' is accepted by every component that requires it: {said}",
                           file=first.file, component=" and ".join(q.component for q in who),
                           field=f"facts.requires.{name}",
                           hint="repackage one of them with a value the others accept (`pipelink pack --variant` "
                                "adds compile-time values), or link other components")

    def _groups(self) -> list[list[str]]:
        """Unknowns tied by a constraint, solved together (union-find over the constraints)."""
        parent = {n: n for n in self.unknowns}

        def root(n):
            while parent[n] != n:
                parent[n] = parent[parent[n]]
                n = parent[n]
            return n
        for c in self.constraints:
            names = sorted(c.deps)
            for other in names[1:]:
                parent[root(other)] = root(names[0])
        groups: dict[str, list[str]] = {}
        for n in self.unknowns:
            groups.setdefault(root(n), []).append(n)
        return list(groups.values())

    def _solve_group(self, group: list[str], candidates: dict[str, list[int]]) -> list[Choice]:
        count = 1
        for n in group:
            count *= len(candidates[n])
        if count > COMBINATION_LIMIT:
            sizes = ", ".join(f"{n} ({len(candidates[n])} values)" for n in group)
            first = self.requirers[group[0]][0]
            raise AmbiguousFact(f"facts {sizes} are tied together and have {count} combinations, over the limit of "
                                f"{COMBINATION_LIMIT} by {count - COMBINATION_LIMIT}", file=first.file,
                                component=first.component, field=f"facts.requires.{group[0]}",
                                hint=f"fix some of them under [facts] in {self.p.spec_file}")
        relevant = [c for c in self.constraints if c.deps and c.deps <= set(group)]
        solutions, rejected = [], []
        for combo in itertools.product(*(candidates[n] for n in group)):
            tried = dict(zip(group, combo))
            values, sources = self.values(tried)
            err = next((e for e in (c.test(values, sources) for c in relevant) if e), None)
            if err:
                rejected.append((tried, err))
            else:
                solutions.append(tried)
        if not solutions:
            raise self._no_solution(group, rejected)
        every = list(solutions)
        for n in group:  # defaults that agree decide, one unknown at a time
            if len({s[n] for s in solutions}) > 1:
                prefs = set(self._preferences(n).values())
                if len(prefs) == 1 and any(s[n] in prefs for s in solutions):
                    solutions = [s for s in solutions if s[n] in prefs]
        if len(solutions) > 1:
            raise self._ambiguous(group, solutions)
        return [self._choice(n, solutions[0][n], candidates[n], every, rejected) for n in group]

    def _preferences(self, name: str) -> dict[str, int]:
        return {q.label: q.requires[name].default for q in self.requirers[name]
                if q.requires[name].default is not None}

    def _choice(self, name, value, candidates, every, rejected) -> Choice:
        solutions = sorted({s[name] for s in every})
        prefs = self._preferences(name)
        if len(candidates) == 1:
            accepted = {q.label: self._accepted(q, name) for q in self.requirers[name]}
            union = set().union(*(set(a) for a in accepted.values() if a is not None))
            forced = tuple(q.component for q in self.requirers[name]
                           if accepted[q.label] is not None and not union <= set(accepted[q.label]))
            how = "domain"
            detail = "; ".join(f"{label} accepts {_listed(a)}" for label, a in accepted.items())
            if not forced:  # one requirer, one value: its package decided
                forced = tuple(q.component for q in self.requirers[name])
        elif len(solutions) == 1:
            how = "tied"
            reasons = [e for tried, e in rejected if tried[name] != value]
            forced = tuple(dict.fromkeys(part for e in reasons for part in (e.component or "").split(" -> ") if part))
            detail = reasons[0].message if reasons else ""
        else:
            how, forced = "default", tuple(label for label, v in prefs.items() if v == value)
            detail = f"values {solutions} all satisfy every contract; the defaults agree on {value}"
        return Choice(name, value, how, tuple(candidates), tuple(solutions), forced, prefs, detail)

    def _no_solution(self, group: list[str], rejected: list) -> PipelinkError:
        shown = rejected[:6]
        lines = "; ".join(f"with {_assigned(t)}: {e.message}" for t, e in shown)
        more = f" (and {len(rejected) - len(shown)} more)" if len(rejected) > len(shown) else ""
        first = rejected[0][1]
        components = sorted({q.component for n in group for q in self.requirers[n]})
        return FactConflict(f"no value of {_names(group)} satisfies every component ({', '.join(components)}): "
                            f"{lines}{more}", file=first.file, component=first.component, field=first.field,
                            hint="repackage a component so that one value satisfies every contract, or link other "
                                 "components")

    def _ambiguous(self, group: list[str], solutions: list[dict]) -> PipelinkError:
        open_ = [n for n in group if len({s[n] for s in solutions}) > 1]
        parts = []
        for n in open_:
            prefs = self._preferences(n)
            said = ", ".join(f"{label} prefers {v}" for label, v in prefs.items()) or "no component has a default"
            parts.append(f"'{n}' could be {' or '.join(str(v) for v in sorted({s[n] for s in solutions}))} "
                         f"({said})")
        lines = "\n".join(f"{n} = {sorted({s[n] for s in solutions})[0]}" for n in open_)
        return AmbiguousFact("several values satisfy every component and their defaults disagree: " + "; ".join(parts),
                             file=self.p.spec_file, component=" and ".join(
                                 dict.fromkeys(q.component for n in open_ for q in self.requirers[n])),
                             field=f"facts.{open_[0]}",
                             hint=f"choose under [facts] in {self.p.spec_file}, e.g.\n{lines}")


def _range_count(req) -> int:
    return (req.range[1] - req.range[0]) // (req.multiple_of or 1) + 1


def _listed(values: list[int] | None) -> str:
    return "any value of its range" if values is None else str(values)


def _names(group: list[str]) -> str:
    return ", ".join(f"'{n}'" for n in group)


def _assigned(tried: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in tried.items())


def _said(value: int, src: FactSource) -> str:
    return f"{src}{' guarantees' if src.kind == 'guarantee' else ''} {value}"


def _choice_text(c: Choice) -> str:
    if c.how == "default":
        return "the contract's default"
    if c.how == "domain":
        return f"solved: the only value every component accepts, forced by {', '.join(c.forced_by)} ({c.detail})"
    return f"solved: tied by {', '.join(c.forced_by)} ({c.detail})"

"""What `pipelink tune` searches: facts with lists or ranges of values, over one spec or several, at one or
more shapes (values of the facts that vary at a call).

    --fact tile_n=128,256 --fact stages=3..6     ->  2 x 4 = 8 configurations a spec
    --set schedule.split=tiles,stream_k          ->  x 2: the [schedule] and [launch] fields of spec.TUNABLE
    --shape M=128 --shape M=1024                 ->  tuned at M = 128 and M = 1024 (each M's bucket)

Every fact value is checked as a [facts] entry of a spec is (an identifier, an integer within a fact's bounds),
every setting's as the spec's own field when the spec is loaded with it (tune checks each before linking); a
range runs from its first to its last value inclusive; the space is bounded (MAX_CONFIGS) so that a typo
(stages=3..60000) is a typed error, not a week of linking.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SpecError
from ..schema import did_you_mean, identifier_problem
from ..spec import TUNABLE, fact_option

MAX_CONFIGS = 4096      # configurations a search may hold (specs x the product of the facts' and settings' values)
FACT_FLAG, SHAPE_FLAG, SET_FLAG = "--fact", "--shape", "--set"


@dataclass(frozen=True)
class Config:
    """One point of the space: a spec, the facts that replace its [facts] entries and the [schedule] / [launch]
    fields that replace its own ("schedule.split" -> "stream_k")."""
    spec: Path
    facts: tuple[tuple[str, int], ...]
    settings: tuple[tuple[str, int | str], ...] = ()

    @property
    def label(self) -> str:
        return ",".join(f"{k}={v}" for k, v in (*self.facts, *self.settings)) or "the spec's facts"


@dataclass(frozen=True)
class Space:
    facts: dict[str, tuple[int, ...]]   # fact -> its values, in the order given
    specs: tuple[Path, ...]             # the spec first, then alternatives (another component set)
    settings: dict[str, tuple] = field(default_factory=dict)  # "schedule.split" -> its values

    def configs(self) -> list[Config]:
        names, keys = list(self.facts), list(self.settings)
        return [Config(spec, tuple(zip(names, values)), tuple(zip(keys, chosen)))
                for spec in self.specs for values in itertools.product(*(self.facts[n] for n in names))
                for chosen in itertools.product(*(self.settings[k] for k in keys))]


def parse_setting(text: str) -> tuple[str, tuple]:
    """``SECTION.FIELD=V1,V2,...`` for a field of spec.TUNABLE: names for a named field (order, split), values
    and ranges for a number (group, cluster, grid)."""
    key, sep, values = (part.strip() for part in str(text).partition("="))
    section, _, name = key.partition(".")
    known = [f"{s}.{f}" for s, fields in TUNABLE.items() for f in fields]
    if not sep or not values:
        raise SpecError(f"{text!r} is not SECTION.FIELD=VALUES", field=SET_FLAG,
                        hint="e.g. --set schedule.split=tiles,stream_k or --set launch.cluster=1,2")
    if name not in TUNABLE.get(section, {}):
        guess = did_you_mean(key, known)
        raise SpecError(f"{key!r} is not a field a tune search may set" + (f" (did you mean '{guess}'?)" if guess
                                                                             else ""), field=SET_FLAG,
                        hint=f"one of {', '.join(known)}")
    if TUNABLE[section][name] is int:
        try:
            return key, parse_fact(f"{name}={values}", SET_FLAG)[1]
        except SpecError as exc:  # fact_option's words name --fact and the bare field
            raise SpecError(f"{key}: {exc.message}", field=SET_FLAG, hint=f"e.g. {key}=1,2 or {key}=0..16") from None
    words = tuple(dict.fromkeys(w.strip() for w in values.split(",")))
    for w in words:
        problem = identifier_problem(w) if len(w) <= 64 else "longer than 64 characters"
        if problem:
            raise SpecError(f"{key}: {w[:64]!r}: {problem}", field=SET_FLAG, hint=f"e.g. {key}=tiles,stream_k")
    return key, words


def parse_fact(text: str, flag: str = FACT_FLAG) -> tuple[str, tuple[int, ...]]:
    """``NAME=V1,V2,...`` where each item is a value or a range ``LO..HI`` (both included)."""
    name, sep, values = (part.strip() for part in str(text).partition("="))
    if not sep or not values:
        raise SpecError(f"{text!r} is not NAME=VALUES", field=flag,
                        hint="e.g. --fact tile_n=128,256 or --fact stages=3..6 (repeat the option per fact)")
    out: list[int] = []
    for item in values.split(","):
        lo_text, dots, hi_text = item.strip().partition("..")
        lo = fact_option(f"{name}={lo_text}")[1] if lo_text else None
        hi = fact_option(f"{name}={hi_text}")[1] if dots and hi_text else lo
        if lo is None or hi is None:
            raise SpecError(f"{name}: {item.strip()!r} is not a value or a range LO..HI", field=flag,
                            hint=f"e.g. {name}=3..6 or {name}=128,256")
        if hi < lo:
            raise SpecError(f"{name}: the range {lo}..{hi} is empty (its end is below its start)", field=flag,
                            hint=f"write it as {hi}..{lo}")
        if hi - lo + 1 + len(out) > MAX_CONFIGS:
            raise SpecError(f"{name}: {hi - lo + 1 + len(out)} values, over the limit of {MAX_CONFIGS} by "
                            f"{hi - lo + 1 + len(out) - MAX_CONFIGS}", field=flag,
                            hint="list the values worth trying (tile widths, stage counts), not every integer")
        out += [v for v in range(lo, hi + 1) if v not in out]
    return name, tuple(out)


def parse_shape(text: str) -> dict[str, int]:
    """``NAME=VALUE[,NAME=VALUE...]``: one shape, each varying fact's size."""
    shape: dict[str, int] = {}
    for item in str(text).split(","):
        try:
            name, value = fact_option(item)
        except SpecError as exc:
            raise SpecError(f"shape {text!r}: {exc.message}", field=SHAPE_FLAG,
                            hint="e.g. --shape M=128 (repeat the option per shape)") from None
        if value < 1 or name in shape:
            raise SpecError(f"shape {text!r}: " + (f"{name} = {value}: a size is at least 1" if value < 1 else
                            f"{name} is given twice"), field=SHAPE_FLAG, hint="e.g. --shape M=128")
        shape[name] = value
    return shape


def make_space(spec: str | Path, facts: dict | list | None = None, specs=(), settings: dict | list | None = None
               ) -> Space:
    """The space from the options: ``facts`` as {name: [values]} (Python) or ["name=values", ...] (the
    command line), ``specs`` the alternatives to the spec, ``settings`` as {"schedule.split": [values]} or
    ["schedule.split=tiles,stream_k", ...]."""
    parsed = _parsed(facts, parse_fact, FACT_FLAG, "fact")
    chosen = _parsed(settings, parse_setting, SET_FLAG, "setting")
    space = Space(parsed, tuple(dict.fromkeys(Path(s) for s in (spec, *specs))), chosen)
    n = len(space.specs) * _product(len(v) for v in (*parsed.values(), *chosen.values()))
    if n > MAX_CONFIGS:
        raise SpecError(f"the space holds {n} configurations, over the limit of {MAX_CONFIGS} by {n - MAX_CONFIGS}",
                        field=FACT_FLAG, hint="fewer values per fact, or tune the facts in two searches")
    return space


def _parsed(given, parse, flag: str, what: str) -> dict[str, tuple]:
    out: dict[str, tuple] = {}
    items = given.items() if isinstance(given, dict) else ((None, t) for t in given or ())
    for name, values in items:
        if name is None:
            key, vals = parse(values)
        else:
            text = values if isinstance(values, str) else ",".join(str(v) for v in (
                [values] if isinstance(values, (int, str)) else values))
            key, vals = parse(f"{name}={text}")
        if key in out:
            raise SpecError(f"{what} {key} is given twice", field=flag, hint="give all its values in one option")
        out[key] = vals
    return out


def _product(ns) -> int:
    out = 1
    for n in ns:
        out *= n
    return out

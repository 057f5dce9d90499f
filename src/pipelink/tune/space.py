"""What `pipelink tune` searches: facts with lists or ranges of values, over one spec or several, at one or
more shapes (values of the facts that vary at a call).

    --fact tile_n=128,256 --fact stages=3..6     ->  2 x 4 = 8 configurations a spec
    --shape M=128 --shape M=1024                 ->  tuned at M = 128 and M = 1024 (each M's bucket)

Every value is checked as a [facts] entry of a spec is (an identifier, an integer within a fact's bounds); a
range runs from its first to its last value inclusive; the space is bounded (MAX_CONFIGS) so that a typo
(stages=3..60000) is a typed error, not a week of linking.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

from ..errors import SpecError
from ..spec import fact_option

MAX_CONFIGS = 4096      # configurations a search may hold (specs x the product of the facts' values)
FACT_FLAG, SHAPE_FLAG = "--fact", "--shape"


@dataclass(frozen=True)
class Config:
    """One point of the space: a spec and the facts that replace its [facts] entries."""
    spec: Path
    facts: tuple[tuple[str, int], ...]

    @property
    def label(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.facts) or "the spec's facts"


@dataclass(frozen=True)
class Space:
    facts: dict[str, tuple[int, ...]]   # fact -> its values, in the order given
    specs: tuple[Path, ...]             # the spec first, then alternatives (another component set)

    def configs(self) -> list[Config]:
        names = list(self.facts)
        return [Config(spec, tuple(zip(names, values)))
                for spec in self.specs for values in itertools.product(*(self.facts[n] for n in names))]


def parse_fact(text: str) -> tuple[str, tuple[int, ...]]:
    """``NAME=V1,V2,...`` where each item is a value or a range ``LO..HI`` (both included)."""
    name, sep, values = (part.strip() for part in str(text).partition("="))
    if not sep or not values:
        raise SpecError(f"{text!r} is not NAME=VALUES", field=FACT_FLAG,
                        hint="e.g. --fact tile_n=128,256 or --fact stages=3..6 (repeat the option per fact)")
    out: list[int] = []
    for item in values.split(","):
        lo_text, dots, hi_text = item.strip().partition("..")
        lo = fact_option(f"{name}={lo_text}")[1] if lo_text else None
        hi = fact_option(f"{name}={hi_text}")[1] if dots and hi_text else lo
        if lo is None or hi is None:
            raise SpecError(f"{name}: {item.strip()!r} is not a value or a range LO..HI", field=FACT_FLAG,
                            hint=f"e.g. {name}=3..6 or {name}=128,256")
        if hi < lo:
            raise SpecError(f"{name}: the range {lo}..{hi} is empty (its end is below its start)", field=FACT_FLAG,
                            hint=f"write it as {hi}..{lo}")
        if hi - lo + 1 + len(out) > MAX_CONFIGS:
            raise SpecError(f"{name}: {hi - lo + 1 + len(out)} values, over the limit of {MAX_CONFIGS} by "
                            f"{hi - lo + 1 + len(out) - MAX_CONFIGS}", field=FACT_FLAG,
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


def make_space(spec: str | Path, facts: dict | list | None = None, specs=()) -> Space:
    """The space from the options: ``facts`` as {name: [values]} (Python) or ["name=values", ...] (the
    command line), ``specs`` the alternatives to the spec."""
    parsed: dict[str, tuple[int, ...]] = {}
    items = facts.items() if isinstance(facts, dict) else ((None, t) for t in facts or ())
    for name, values in items:
        if name is None:
            key, vals = parse_fact(values)
        else:
            text = values if isinstance(values, str) else ",".join(str(v) for v in (
                [values] if isinstance(values, int) else values))
            key, vals = parse_fact(f"{name}={text}")
        if key in parsed:
            raise SpecError(f"fact {key} is given twice", field=FACT_FLAG, hint="give all its values in one option")
        parsed[key] = vals
    space = Space(parsed, tuple(dict.fromkeys(Path(s) for s in (spec, *specs))))
    n = len(space.specs) * _product(len(v) for v in parsed.values())
    if n > MAX_CONFIGS:
        raise SpecError(f"the space holds {n} configurations, over the limit of {MAX_CONFIGS} by {n - MAX_CONFIGS}",
                        field=FACT_FLAG, hint="fewer values per fact, or tune the facts in two searches")
    return space


def _product(ns) -> int:
    out = 1
    for n in ns:
        out *= n
    return out

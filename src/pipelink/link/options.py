"""LinkOptions: how to link, as one frozen object validated once (cuda.core's LinkerOptions in spirit).

``pipelink.link(spec, mode="monolithic")`` is ``pipelink.link(spec, LinkOptions(mode="monolithic"))``:
the keyword arguments are the options' fields.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Callable, TypeVar

from ..errors import SpecError
from .plan import MODES

if TYPE_CHECKING:
    from ..backend.cache import Cache

T = TypeVar("T")


@dataclass(frozen=True)
class LinkOptions:
    mode: str = "pipelink"
    """pipelink (contract linking), monolithic (the control: every source in one unit, same backend)
    or symbol (the control: components at their packaged positions, linked by symbols only)."""
    trace: bool = False
    """The glue records %globaltimer at component boundaries (a kernel parameter more); without it
    the glue has no tracing code at all."""
    sanitize: bool = False
    """Each buffer gets a canary after it, checked after every component call, and components with
    source are rebuilt with bounded mbarrier waits; a host-mapped report parameter says who overran
    what. Ignored in symbol mode (its buffers sit where the packages put them)."""
    strict: bool = True
    """A component whose code breaks its contract fails the link (ConformanceError); otherwise the
    findings are only reported."""
    cache: Cache | None = None
    """The build cache; None: the default one ($PIPELINK_CACHE_DIR, else the XDG cache folder)."""
    progress: Callable[[str], None] | None = None
    """Called with one line per tool run (nvcc, nvJitLink)."""
    probe: bool = False
    """A pack-time probe (probe.py) linking one component alone: its in-ports stay unconnected."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise SpecError(f"unknown link mode '{self.mode}'", hint=f"one of {', '.join(MODES)}")
        for name in ("trace", "sanitize", "strict", "probe"):
            if not isinstance(getattr(self, name), bool):
                raise SpecError(f"link option {name}={getattr(self, name)!r} is not True or False", field=name)
        if self.progress is not None and not callable(self.progress):
            raise SpecError(f"link option progress={self.progress!r} is not callable", field="progress",
                            hint="pass a function taking one line of text, or None")


def for_stages(options: LinkOptions) -> LinkOptions:
    """The options the link stages read, fixed before the first one runs (the plan carries them): in
    symbol mode sanitize is off, since every buffer sits where its package put it, with no canary room."""
    return replace(options, sanitize=False) if options.mode == "symbol" and options.sanitize else options


def with_overrides(cls: type[T], options: T | None, overrides: dict) -> T:
    """``options`` of dataclass ``cls`` (None: all defaults) with a call's keyword arguments on top,
    validated (once: ``options`` as it is when there are none)."""
    names = [f.name for f in fields(cls)]
    unknown = sorted(set(overrides) - set(names))
    if unknown:
        raise TypeError(f"unknown option(s) {', '.join(unknown)}; {cls.__name__} has {', '.join(names)}")
    if options is None:
        return cls(**overrides)
    return replace(options, **overrides) if overrides else options

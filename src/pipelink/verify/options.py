"""VerifyOptions: what `pipelink verify` runs, as one frozen object validated once.

``pipelink.verify(spec, seeds=5)`` is ``pipelink.verify(spec, VerifyOptions(seeds=5))``: the keyword
arguments are the options' fields. None means "the spec's [verify] value" where a spec has one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import PipelinkError, SpecError
from ..link.plan import MODES

SANITIZER_TOOLS = ("memcheck", "racecheck", "synccheck")  # compute-sanitizer tools verify runs as rungs


@dataclass(frozen=True)
class VerifyOptions:
    mode: str = "pipelink"
    """The link mode: pipelink, monolithic or symbol (LinkOptions.mode)."""
    reference: object = None
    """The slow reference: 'file.py:function', 'module:function' or a module-level function;
    None: the spec's [verify] reference."""
    seeds: int | None = None
    """How many fresh random inputs the correctness rung checks; None: the spec's [verify] seeds."""
    bench: bool = True
    """Run the bench and roofline rungs (never in sanitize mode)."""
    trace: bool = False
    """Also link a traced build and run the trace rung (time per component)."""
    profile: bool = False
    """Run one launch under Nsight Compute (the profile rung)."""
    sanitize: bool = False
    """Link in sanitize mode (smem canaries checked after every component call) and do not bench."""
    sanitizers: tuple[str, ...] = ()
    """compute-sanitizer tools to run as rungs, of SANITIZER_TOOLS."""
    timeout: float | None = None
    """Seconds the GPU child may take per run before it counts as hung; None: the spec's [verify] timeout."""
    reps: int = 20
    """Timed launches in the bench rung."""
    graph: bool = True
    """Also time the kernel replayed from a CUDA graph."""
    dumps: bool = True
    """Write the dumps (PTX by a second nvJitLink pass, SASS, resource usage, smem map); `pipelink tune`, which
    verifies every configuration it searches, leaves them out."""
    out_dir: str | Path | None = None
    """Where verify.json, the kernel and the dumps go; None: verify-<name>-<mode>."""
    console: object = None
    """A rich Console for the table; None: a new one on stdout."""
    rungs: tuple = ()
    """Checks of your own (pipelink.rung(name, check)), run after the built-in rungs and the spec's
    [[verify.rung]] ones."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise SpecError(f"unknown link mode '{self.mode}'", hint=f"one of {', '.join(MODES)}")
        for name in ("bench", "trace", "profile", "sanitize", "graph", "dumps"):
            if not isinstance(getattr(self, name), bool):
                raise PipelinkError(f"verify option {name}={getattr(self, name)!r} is not True or False", field=name)
        object.__setattr__(self, "sanitizers", tuple(self.sanitizers))
        from .rungs import RungRef
        object.__setattr__(self, "rungs", tuple(self.rungs))
        for r in self.rungs:
            if not isinstance(r, RungRef):
                raise PipelinkError(f"verify option rungs: {r!r} is not a rung", field="rungs",
                                    hint="make each with pipelink.rung(name, 'file.py:function')")
        unknown = [t for t in self.sanitizers if t not in SANITIZER_TOOLS]
        if unknown:
            raise PipelinkError(f"unknown compute-sanitizer tool(s) {', '.join(unknown)}", field="sanitizers",
                                hint=f"choose from {', '.join(SANITIZER_TOOLS)}")
        for name in ("seeds", "reps"):
            value = getattr(self, name)
            if value is not None and (type(value) is not int or value < 1):
                raise PipelinkError(f"verify option {name}={value!r} is not a whole number >= 1", field=name)
        t = self.timeout
        if t is not None and (type(t) not in (int, float) or t <= 0):
            raise PipelinkError(f"verify option timeout={t!r} is not a positive number of seconds", field="timeout")

    @property
    def benchmarks(self) -> bool:
        """Whether the bench and roofline rungs run: asked for, and not a sanitize build."""
        return self.bench and not self.sanitize

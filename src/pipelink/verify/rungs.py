"""Rungs of the user's own: a named check that runs in the verify child after the built-in GPU
rungs, on the same loaded kernel. A rung is a function of one argument, a RungContext (the kernel
and its operands, the reference, the facts, a folder for files). Returning a dict of figures (or
None) makes the rung ok; raising makes it FAILED with the exception as its detail; a CUDA error
makes it a crash, as for the built-in rungs, which have the same form. A failed rung does not stop
the rungs after it.

    # checks.py
    def output_is_symmetric(ctx):
        ins, outs = ctx.inputs(0), ctx.outputs()
        ctx.launch({**ins, **outs})
        y = outs["epilogue.y"].float()
        assert torch.allclose(y, y.T), "y is not symmetric"
        return {"max_asymmetry": float((y - y.T).abs().max())}

    pipelink.verify("link.toml", rungs=[pipelink.rung("symmetric", "checks.py:output_is_symmetric")])
    # or, in the spec:  [[verify.rung]]  name = "symmetric"  check = "checks.py:output_is_symmetric"
    # or:  pipelink verify link.toml --rung symmetric=checks.py:output_is_symmetric
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path

from ..errors import PipelinkError
from ..verify_terms import name_problem
from .callables import load_callable


@dataclass(frozen=True)
class RungRef:
    """A user rung as the child loads it: its name in the results and its check, 'file.py:function'
    (an absolute path once verify resolves it) or 'module:function'."""
    name: str
    check: str


def rung(name: str, check) -> RungRef:
    """A rung of your own for ``pipelink.verify(..., rungs=[...])``: ``check`` is 'file.py:function',
    'module:function' or a function defined at module level (the child imports it from its file)."""
    problem = name_problem(name)
    if problem:
        raise PipelinkError(f"rung name {name!r}: {problem}", field="rungs",
                            hint="a name of letters, digits and _ that no built-in rung has")
    if isinstance(check, str):
        where, _, fn = check.rpartition(":")
        if not where or not fn or not all(part.isidentifier() for part in fn.split(".")):
            raise PipelinkError(f"rung '{name}': {check!r} is not 'file.py:function' or 'module:function'",
                                field="rungs")
        return RungRef(name, check)
    qual = getattr(check, "__qualname__", None)
    if not callable(check) or qual is None or "<" in qual:
        raise PipelinkError(f"rung '{name}': {check!r} is not importable by the verify child", field="rungs",
                            hint="define the check at module level (no lambda or nested function), "
                                 "or name it as 'file.py:function'")
    return RungRef(name, f"{Path(inspect.getsourcefile(check)).resolve()}:{qual}")


def resolve_rungs(declared: list, spec_file: str | None = None) -> list[RungRef]:
    """``declared``: (rung, folder its file is relative to, field) in order. Each check file found
    and made absolute for the child; two rungs of one name refused. PipelinkError otherwise."""
    out: list[RungRef] = []
    for r, base, field in declared:
        if r.name in {u.name for u in out}:
            raise PipelinkError(f"two rungs are named '{r.name}'", file=spec_file, field=field,
                                hint="give each check its own name")
        file, _, fn = r.check.rpartition(":")
        if file.endswith(".py"):
            path = Path(file) if Path(file).is_absolute() else base / file
            if not path.is_file():
                raise PipelinkError(f"rung '{r.name}': check file {path} not found", file=spec_file, field=field)
            out.append(RungRef(r.name, f"{path.resolve()}:{fn}"))
        else:
            out.append(RungRef(r.name, r.check))
    return out


@dataclass
class RungContext:
    """What a rung gets in the verify child."""
    kernel: object        # the loaded kernel (verify.child.Kernel): params(), launch(tensors), manifest
    facts: dict           # the link's facts, by name
    out_dir: Path         # the verify run's folder, for files a rung writes
    job: dict             # the child's instructions (built-in rungs read their settings here)

    @property
    def reference(self):
        """The spec's reference, f(inputs, facts) -> {operand: tensor}, or None (imported when asked
        for, so that a broken reference fails the rung that uses it)."""
        if self.job.get("python"):
            return self.kernel.reference
        if not self.job.get("reference"):
            return None
        return load_callable(self.job["reference"])

    def baselines(self) -> list:
        """(label, f(inputs, facts)) for each baseline the bench rung times beside the kernel."""
        if self.job.get("python"):
            return self.kernel.baselines()
        return [(ref.rpartition(":")[2], load_callable(ref)) for ref in self.job["baselines"]]

    def inputs(self, seed: int) -> dict:
        """Fresh inputs (torch tensors on the GPU, keyed 'instance.operand') from the spec's distributions."""
        return self.kernel.inputs(seed)

    def outputs(self) -> dict:
        """The outputs, poisoned with NaN: whatever the kernel does not write stays NaN."""
        return self.kernel.outputs()

    def launch(self, tensors: dict) -> None:
        """One launch on ``tensors`` (inputs and outputs by name); asynchronous, as a CUDA launch is."""
        self.kernel.launch(tensors)

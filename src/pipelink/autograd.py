"""A linked kernel and its linked backward as one differentiable torch function (issue 51).

    layer = pipelink.linked_function(
        pipelink.op("fwd.toml"), pipelink.op("bwd.toml"),
        inputs=("x", "w1", "w2"), outputs=("y",), saved=("h", "a"),
        backward_takes=("dy", "h", "a", "x", "w1", "w2"), grads=("x", "w1", "w2"))
    y = layer(x, w1, w2)            # autograd records it; y.sum().backward() runs the backward kernel

The forward operator takes ``inputs`` and returns ``outputs`` followed by ``saved`` (the activations its backward
reads, which the forward link writes as extra outputs). The backward operator takes the tensors ``backward_takes``
names, in that order: ``d<output>`` for an output's gradient, a saved activation, or an input; it returns the
gradients of ``grads`` (inputs), in that order. An input left out of ``grads`` gets none (an index, say). Any callables
of tensors work in place of pipelink operators: the wrapper only routes tensors between them, through
torch.autograd.Function, so a training loop, an optimizer and torch.compile (which traces both operators as
torch.ops.pipelink.* calls) see an ordinary differentiable function.
"""

from __future__ import annotations

from typing import Callable, Sequence

from .errors import OperatorError
from .schema import identifier_problem


def linked_function(forward: Callable, backward: Callable, *, inputs: Sequence[str], outputs: Sequence[str],
                    saved: Sequence[str] = (), backward_takes: Sequence[str], grads: Sequence[str],
                    name: str = "linked_function") -> Callable:
    """The differentiable function of a forward operator and its backward (module docstring)."""
    inputs, outputs, saved = tuple(inputs), tuple(outputs), tuple(saved)
    backward_takes, grads = tuple(backward_takes), tuple(grads)
    _check_names(name, inputs, outputs, saved, backward_takes, grads)
    import torch

    keep_inputs = tuple(i for i in inputs if i in backward_takes)  # what ctx must hold besides the activations
    n_out = len(outputs)

    class Function(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            got = forward(*args)
            got = tuple(got) if isinstance(got, (tuple, list)) else (got,)
            if len(got) != n_out + len(saved):
                raise OperatorError(f"{name}: the forward operator returned {len(got)} tensors; {n_out} outputs "
                                 f"({', '.join(outputs)}) and {len(saved)} saved ({', '.join(saved) or 'none'}) "
                                 "were declared", hint="declare `outputs` and `saved` in the order the forward link "
                                                       "writes them")
            given = dict(zip(inputs, args))
            ctx.save_for_backward(*[given[i] for i in keep_inputs], *got[n_out:])
            return got[0] if n_out == 1 else got[:n_out]

        @staticmethod
        def backward(ctx, *grad_outputs):
            held = dict(zip(keep_inputs + saved, ctx.saved_tensors))
            # the kernels read row-major tensors: a gradient may arrive as a broadcast or transposed view
            held.update({f"d{o}": g.contiguous() for o, g in zip(outputs, grad_outputs)})
            got = backward(*[held[k] for k in backward_takes])
            got = tuple(got) if isinstance(got, (tuple, list)) else (got,)
            if len(got) != len(grads):
                raise OperatorError(f"{name}: the backward operator returned {len(got)} tensors for the {len(grads)} "
                                 f"gradients declared ({', '.join(grads)})",
                                 hint="declare `grads` in the order the backward link writes them")
            by_input = dict(zip(grads, got))
            return tuple(by_input.get(i) for i in inputs)

    Function.__name__ = Function.__qualname__ = name

    def call(*args):
        if len(args) != len(inputs):
            raise OperatorError(f"{name} takes {len(inputs)} tensors ({', '.join(inputs)}), got {len(args)}")
        return Function.apply(*args)

    call.__name__ = name
    call.function = Function
    return call


def _check_names(name, inputs, outputs, saved, backward_takes, grads) -> None:
    """Every name an identifier, each once; what the backward takes exists; gradients only of inputs."""
    if not inputs or not outputs:
        raise OperatorError(f"{name}: give at least one input and one output", hint="inputs=(...), outputs=(...)")
    named = [("inputs", n) for n in inputs] + [("outputs", n) for n in outputs] + [("saved", n) for n in saved]
    seen: dict[str, str] = {}
    for where, n in [*named, ("name", name)]:
        problem = identifier_problem(n) if isinstance(n, str) else "is not a string"
        if problem:
            raise OperatorError(f"{name}: {where}: {problem}", hint="use C-style identifiers")
        if where != "name" and n in seen:
            raise OperatorError(f"{name}: {n!r} is named twice ({seen[n]} and {where})",
                             hint="inputs, outputs and saved activations share one namespace")
        seen.setdefault(n, where)
    known = set(inputs) | set(saved) | {f"d{o}" for o in outputs}
    unknown = [k for k in backward_takes if k not in known]
    if unknown:
        raise OperatorError(f"{name}: the backward takes {unknown[0]!r}, which is no input, saved activation or output "
                         "gradient", hint=f"one of: {', '.join(sorted(known))}")
    stray = [g for g in grads if g not in inputs]
    if stray or len(set(grads)) != len(grads):
        raise OperatorError(f"{name}: grads {list(grads)} must name inputs, each once",
                         hint=f"inputs: {', '.join(inputs)}")

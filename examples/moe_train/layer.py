"""The MoE layer for training, made of the two linked kernels (issue 51): ``moe_layer(folder, model, tokens)``
returns a differentiable function f(x, wr, w1, w2) -> y whose forward is the training forward link and whose
backward is the backward link (pipelink.linked_function), for one shape (the links fold it)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pipelink

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("moe_train_shapes", HERE / "shapes.py")
shapes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(shapes)

# What the training forward keeps (its write operands before y, in manifest order), by the names the backward reads.
SAVED = {"router.ids": "ids", "router.weights": "weights", "permute.row_token": "row_token",
         "permute.token_row": "token_row", "epilogue.hidden": "a", "epilogue.out_rows": "o", "epilogue.pre": "h"}
# The backward link's read operands by the names linked_function routes, and its outputs by the gradient's input.
BACKWARD_TAKES = {"combine.dy": "dy", "combine.o": "o", "combine.weights": "weights", "combine.token_row": "token_row",
                  "combine.row_token": "row_token", "combine.ids": "ids", "gemm.w1": "w1", "gemm.w2": "w2",
                  "gemm.a": "a", "gemm.x": "x", "epilogue.h": "h", "gather.wr": "wr"}
GRADS = {"epilogue.dw1": "w1", "epilogue.dw2": "w2", "gather.dx": "x", "gather.dwr": "wr"}


def link(folder: Path, model, tokens: int, packages: Path | None = None, mode: str = "pipelink"):
    """(forward kernel, backward kernel) for ``model`` at ``tokens``, linked in ``mode``."""
    packages = packages or shapes.pack(folder, sources=mode == "monolithic")
    fwd, bwd = shapes.write_specs(folder / f"{mode}", packages, model, tokens)
    return pipelink.link(fwd, mode=mode), pipelink.link(bwd, mode=mode)


def _names(kernel, access):
    return [p["name"] for p in kernel.manifest["params"] if "workspace" not in p and
            (p["access"] == "read") == (access == "read")]


def moe_layer(forward_kernel, backward_kernel, name: str):
    """The differentiable layer of the two kernels: f(x, wr, w1, w2) -> y (x [T, H], wr [E, H], w1 [E 2I, H],
    w2 [E H, I], bf16); torch.ops.pipelink.<name>_fwd and _bwd underneath."""
    fwd = pipelink.torch_op(forward_kernel, name=f"{name}_fwd")
    bwd = pipelink.torch_op(backward_kernel, name=f"{name}_bwd")
    fwd_out = _names(forward_kernel, "write")
    bwd_in, bwd_out = _names(backward_kernel, "read"), _names(backward_kernel, "write")
    assert _names(forward_kernel, "read") == ["router.x", "router.wr", "gemm.w1", "gemm.w2"], forward_kernel.manifest
    assert set(fwd_out) == {*SAVED, "combine.y"} and set(bwd_in) == set(BACKWARD_TAKES) and set(bwd_out) == set(GRADS)
    saved = tuple(SAVED.values())

    def forward(x, wr, w1, w2):
        got = dict(zip(fwd_out, fwd(x, wr, w1, w2)))
        return (got["combine.y"], *[got[k] for k in SAVED])

    def backward(*held):
        got = bwd(*[dict(zip(BACKWARD_TAKES.values(), held))[BACKWARD_TAKES[n]] for n in bwd_in])
        by = dict(zip(bwd_out, got))
        return tuple(by[k] for k in GRADS)

    return pipelink.linked_function(forward, backward, inputs=("x", "wr", "w1", "w2"), outputs=("y",), saved=saved,
                                    backward_takes=tuple(BACKWARD_TAKES.values()), grads=tuple(GRADS.values()),
                                    name=name)

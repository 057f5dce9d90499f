"""A linked kernel as a torch operator (torch.library), callable from eager code, CUDA graphs and
torch.compile'd functions. Outputs are allocated by the operator; inputs are checked against the
manifest.

    op = pipelink.torch_op(kernel)              # or torch_op("out/tile_fold.manifest.json")
    y = op(x)                                    # torch.ops.pipelink.tile_fold(x)
"""

from __future__ import annotations

import json
from pathlib import Path

from .abi import KernelABI, Param
from .errors import DeviceError
from .runtime import Runtime, torch_dtype

_REGISTERED: dict[str, object] = {}


def torch_op(kernel, name: str | None = None):
    """The linked kernel as the torch operator ``torch.ops.pipelink.<name>``, returned.

    ``kernel`` is a LinkedKernel (``pipelink.link(...)``) or the path of a ``*.manifest.json``
    written by ``kernel.save`` / ``pipelink link -o`` (its ``.cubin`` is read from beside it).
    ``name`` defaults to the manifest's kernel name (the spec's ``[link] name``). Operators are
    registered once per process: a second call with the same name returns the first operator.

    Arguments: the kernel's **read** operands only, one tensor each, positionally in manifest
    order (``manifest["params"]`` in ``<name>.manifest.json``, outputs left out). The operator's
    schema names them ``instance_operand`` (the manifest's ``instance.operand`` with the dot made
    ``_``). Each must be a contiguous CUDA tensor of its manifest entry's shape and dtype (checked
    at every call, a DeviceError otherwise).

    Returns: the **write** operands, which the operator allocates (``torch.empty`` with the
    manifest's shape and dtype, on the first argument's device) and the kernel fills: one tensor
    if the kernel writes one operand, else a tuple in manifest order. Shapes are fixed at link time
    (facts), so one operator serves one problem size.

        op = pipelink.torch_op(kernel)     # the demo: reads load.x, writes store.y
        y = op(x)                          # same as torch.ops.pipelink.tile_fold(x)

    The launch goes on torch's current stream, so the operator works in eager code, inside CUDA
    graphs and in ``torch.compile``'d functions (a fake implementation gives the output shapes).
    The kernel is loaded on CUDA device 0 when the operator is made. Refused with a DeviceError: a
    traced or sanitize-mode kernel (its extra buffer is not an operand) and a kernel with a
    ``readwrite`` operand.
    """
    import torch

    if isinstance(kernel, (str, Path)):
        manifest_path = Path(kernel)
        manifest = json.loads(manifest_path.read_text())
        cubin = manifest_path.with_name(manifest_path.name.replace(".manifest.json", ".cubin")).read_bytes()
    else:
        manifest, cubin = kernel.manifest, kernel.cubin
    abi = KernelABI.from_manifest(manifest)
    if abi.trace is not None or abi.report is not None:
        raise DeviceError("a traced or sanitize-mode kernel cannot be a torch op (its extra buffer is not an operand)",
                          hint="link without trace and sanitize")
    name = name or manifest["kernel"]
    if name in _REGISTERED:
        return _REGISTERED[name]
    runtime = Runtime(cubin, manifest)
    params = runtime.params  # the workspaces are the runtime's own
    inputs = [p for p in params if p.access == "read"]
    outputs = [p for p in params if p.access != "read"]
    if any(p.access == "readwrite" for p in params):
        raise DeviceError(f"kernel {name} has readwrite operands; the torch op supports read and write only")

    def arg(p: Param) -> str:
        return p.name.replace(".", "_")

    returns = "Tensor" if len(outputs) == 1 else f"({', '.join('Tensor' for _ in outputs)})"
    schema = f"({', '.join(f'Tensor {arg(p)}' for p in inputs)}) -> {returns}"
    lib = torch.library.Library("pipelink", "FRAGMENT")
    lib.define(name + schema)

    def allocate(device) -> list:
        return [torch.empty(p.shape, dtype=torch_dtype(p.dtype), device=device) for p in outputs]

    def impl(*tensors):
        outs = allocate(tensors[0].device)
        by_name = {p.name: t for p, t in zip(inputs, tensors)}
        by_name.update({p.name: t for p, t in zip(outputs, outs)})
        runtime.launch_arrays([by_name[p.name] for p in params])
        return outs[0] if len(outs) == 1 else tuple(outs)

    def fake(*tensors):
        outs = allocate(tensors[0].device)
        return outs[0] if len(outs) == 1 else tuple(outs)

    lib.impl(name, impl, "CUDA")
    torch.library.register_fake(f"pipelink::{name}", fake, lib=lib)
    op = getattr(torch.ops.pipelink, name)
    op._pipelink_library = lib  # keep the registration alive with the op
    _REGISTERED[name] = op
    return op

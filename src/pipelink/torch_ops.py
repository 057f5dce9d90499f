"""A linked kernel as a torch operator (torch.library), callable from eager code, CUDA graphs and
torch.compile'd functions. Outputs are allocated by the operator; inputs are checked against the
manifest.

    op = pipelink.torch_op(kernel)              # or torch_op("out/tile_fold.manifest.json")
    y = op(x)                                    # torch.ops.pipelink.tile_fold(x)
"""

from __future__ import annotations

import json
from pathlib import Path

from .errors import DeviceError
from .runtime import Runtime, torch_dtype

_REGISTERED: dict[str, object] = {}


def torch_op(kernel, name: str | None = None):
    import torch

    if isinstance(kernel, (str, Path)):
        manifest_path = Path(kernel)
        manifest = json.loads(manifest_path.read_text())
        cubin = manifest_path.with_name(manifest_path.name.replace(".manifest.json", ".cubin")).read_bytes()
    else:
        manifest, cubin = kernel.manifest, kernel.cubin
    if manifest.get("trace") or manifest.get("sanitize"):
        raise DeviceError("a traced or sanitize-mode kernel cannot be a torch op (its extra buffer is not an operand)",
                          hint="link without trace and sanitize")
    name = name or manifest["kernel"]
    if name in _REGISTERED:
        return _REGISTERED[name]
    runtime = Runtime(cubin, manifest)
    params = manifest["params"]
    inputs = [p for p in params if p["access"] == "read"]
    outputs = [p for p in params if p["access"] != "read"]
    if any(p["access"] == "readwrite" for p in params):
        raise DeviceError(f"kernel {name} has readwrite operands; the torch op supports read and write only")

    def arg(p: dict) -> str:
        return p["name"].replace(".", "_")

    returns = "Tensor" if len(outputs) == 1 else f"({', '.join('Tensor' for _ in outputs)})"
    schema = f"({', '.join(f'Tensor {arg(p)}' for p in inputs)}) -> {returns}"
    lib = torch.library.Library("pipelink", "FRAGMENT")
    lib.define(name + schema)

    def allocate(device) -> list:
        return [torch.empty(p["shape"], dtype=torch_dtype(p["dtype"]), device=device) for p in outputs]

    def impl(*tensors):
        outs = allocate(tensors[0].device)
        by_name = {p["name"]: t for p, t in zip(inputs, tensors)}
        by_name.update({p["name"]: t for p, t in zip(outputs, outs)})
        runtime.launch_arrays([by_name[p["name"]] for p in params])
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

"""What a DSL compiled, written out for a kernel file (`pipelink verify KERNEL.py`, the dumps rung):
each compiled kernel's IR stages and PTX as the DSL keeps them, its cubin, the SASS (nvdisasm) and
its resource usage (cuobjdump: registers, spills, static shared memory), for the module's
Triton kernels. A DSL whose artifacts are not found here leaves the rung with nothing to say, which
it says."""

from __future__ import annotations

from pathlib import Path

from ..backend.inspect import inspect_cubin
from ..fsutil import write_atomic

TRITON_STAGES = ("ttir", "ttgir", "llir", "ptx")


def triton_kernels(namespace: dict) -> list:
    """The compiled kernels of every Triton JIT function in ``namespace`` (a module's globals):
    Triton keeps them per device in the function's cache, filled by its first launch."""
    found = []
    for value in namespace.values():
        caches = getattr(value, "device_caches", None)
        if caches is None or not hasattr(value, "run"):
            continue
        for entry in list(caches.values()):
            kernel_cache = entry[0] if isinstance(entry, tuple) else entry
            if isinstance(kernel_cache, dict):
                found += [k for k in kernel_cache.values() if hasattr(k, "asm")]
    return found


def write_compiled(kernels: list, folder: Path) -> dict:
    """Each compiled kernel's stages, cubin and SASS under ``folder``; its resources as figures."""
    folder.mkdir(parents=True, exist_ok=True)
    figures: dict = {"kernels": []}
    names: set[str] = set()
    for k in kernels:
        name = str(getattr(k, "name", None) or k.metadata.name)
        stem = name if name not in names else f"{name}_{len(names)}"
        names.add(stem)
        files = []
        for stage in TRITON_STAGES:
            text = k.asm.get(stage)
            if text:
                files.append(write_atomic(folder / f"{stem}.{stage}", text).name)
        cubin = k.asm.get("cubin")
        record = {"name": name, "files": files}
        if cubin:
            files.append(write_atomic(folder / f"{stem}.cubin", cubin).name)
            info, sass = inspect_cubin(cubin, name)
            files.append(write_atomic(folder / f"{stem}.sass", sass).name)
            record.update({"registers": info.registers, "spill_instructions": info.spill_insns,
                           "local_bytes": info.local, "static_smem_bytes": info.static_smem,
                           "instructions": len(info.instructions)})
        shared = getattr(getattr(k, "metadata", None), "shared", None)
        if shared is not None:
            record["shared_bytes"] = int(shared)
        figures["kernels"].append(record)
    return figures

"""What a DSL compiled, written out for a kernel file (`pipelink verify KERNEL.py`, the dumps rung):
each compiled kernel's IR stages and PTX as the DSL keeps them, its cubin, the SASS (nvdisasm) and
its resource usage (cuobjdump: registers, spills, static shared memory). Found among the module's
globals: Triton's JIT functions (their per-device caches, filled by the first launch), CuTe DSL's
compiled functions (compiled with --keep-ptx --keep-cubin, or they keep no artifacts) and
TileLang's JIT kernels (its CUDA source and PTX; the cubin from that PTX by nvJitLink), at the top
level or as values of a dict; and on a machine without a GPU, what the file's compile_only()
returned (pipelink.verify.pykernel). A DSL whose artifacts are not found here leaves the rung
with nothing to say, which it says."""

from __future__ import annotations

from pathlib import Path

from ..backend.inspect import inspect_cubin
from ..fsutil import write_atomic

STAGES = ("ttir", "ttgir", "llir", "mlir", "cu", "ptx")  # Triton's, CuTe DSL's, TileLang's source


def triton_kernels(namespace: dict) -> list:
    """The compiled kernels of every Triton JIT function in ``namespace`` (a module's globals):
    Triton keeps them per device in the function's cache, filled by its first launch. Kernels
    ``triton.compile`` returned (a kernel file's compile_only, on a machine without a GPU) are
    taken as they are, at the top level or one level into a dict."""
    found = [v for v in _values(namespace) if _is_triton_compiled(v)]
    for value in namespace.values():
        caches = getattr(value, "device_caches", None)
        if caches is None or not hasattr(value, "run"):
            continue
        for entry in list(caches.values()):
            kernel_cache = entry[0] if isinstance(entry, tuple) else entry
            if isinstance(kernel_cache, dict):
                found += [k for k in kernel_cache.values() if hasattr(k, "asm")]
    return found


def cute_kernels(namespace: dict) -> list:
    """CuTe DSL compiled functions among ``namespace``'s values (and one level into dicts) that kept
    their artifacts: a record per function, with the stages Triton's have."""
    found = []
    for value in _values(namespace):
        art = getattr(value, "artifacts", None)
        cubin = getattr(art, "CUBIN", None)
        if not isinstance(cubin, (bytes, bytearray)):
            continue
        names = list(getattr(value, "kernel_info", None) or {})
        found.append(_Compiled(names[0] if names else getattr(value, "function_name", "kernel"),
                               {"ptx": getattr(art, "PTX", None), "mlir": getattr(art, "MLIR", None),
                                "cubin": bytes(cubin)}))
    return found


def tilelang_kernels(namespace: dict, folder: Path) -> list:
    """TileLang JIT kernels among ``namespace``'s values (and one level into dicts): the CUDA source
    it generated, its PTX (exported into ``folder``) and a cubin compiled from that PTX."""
    import re

    from ..backend.nvjitlink import ptx_to_cubin
    found = []
    for value in _values(namespace):
        if not (hasattr(value, "get_kernel_source") and hasattr(value, "export_ptx")):
            continue
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"tilelang_{len(found)}.ptx.tmp"
        value.export_ptx(str(path))
        ptx = path.read_text()
        path.unlink()
        entry = re.search(r"\.entry\s+([A-Za-z_][A-Za-z0-9_$]*)", ptx)
        name = entry.group(1) if entry else f"tilelang_{len(found)}"
        found.append(_Compiled(name, {"cu": value.get_kernel_source(), "ptx": ptx, "cubin": ptx_to_cubin(ptx, name)}))
    return found


def _is_triton_compiled(value) -> bool:
    asm = getattr(value, "asm", None)
    return isinstance(asm, dict) and "ptx" in asm and hasattr(value, "metadata") and not isinstance(value, _Compiled)


def _values(namespace: dict) -> list:
    return list(namespace.values()) + [v for d in namespace.values() if isinstance(d, dict) for v in d.values()]


class _Compiled:
    """A DSL's compiled kernel as write_compiled reads it: a name and {stage: text or bytes}."""

    def __init__(self, name: str, asm: dict):
        self.name, self.asm = name, asm


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
        for stage in STAGES:
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

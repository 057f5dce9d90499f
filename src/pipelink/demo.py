"""`pipelink demo`: pack the bundled components, link them, report; on a GPU also run and check.

The demo kernel (examples/demo/link.toml) computes Y[m, j] = bf16(sum_c X[m, c * 64 + j]) from
three separately compiled components: a TMA ring producer, a two-warpgroup consumer, and a
CUTLASS-style epilogue that pins named barriers 1..7. It is linked twice: by pipelink, and as
the monolithic control (all sources in one unit, same backend path), and the two SASS listings
are compared.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from .backend.inspect import inspect_cubin, normalized_sass
from .errors import PipelinkError
from .fsutil import write_atomic
from .linked import link
from .package import pack

COMPONENTS = ("ring_producer", "ring_reduce", "tile_store")
GPU_TIMEOUT_S = 120


def repo_root() -> Path:
    """The checkout holding components/ and examples/ (pipelink is installed editable from it)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "components" / "raw").is_dir() and (parent / "examples" / "demo").is_dir():
            return parent
    raise PipelinkError("cannot find the bundled components/ and examples/ folders",
                        hint="run the demo from a checkout installed with `pip install -e .`")


def run_demo(out_dir: str | Path, *, gpu: bool | None = None, console=None) -> dict:
    from rich.console import Console
    con = console or Console()
    out = Path(out_dir)
    root = repo_root()
    summary: dict = {"out_dir": str(out)}
    (out / "packages").mkdir(parents=True, exist_ok=True)
    con.rule("[bold]1. pack[/] (nvcc -> LTO-IR, one package per component)")
    for name in COMPONENTS:
        t0 = time.perf_counter()
        pkg = pack(root / "components/raw" / f"{name}.cu", root / "components/raw" / f"{name}.toml",
                   out / "packages" / f"{name}.plc")
        con.print(f"  {name:14s} -> {pkg.path}  ({len(pkg.variants[0].ltoir)} B LTO-IR, "
                  f"{time.perf_counter() - t0:.2f} s)")
    spec = out / "link.toml"
    shutil.copyfile(root / "examples/demo/link.toml", spec)

    con.rule("[bold]2. link[/] (resolve facts, check, allocate, glue, nvJitLink -lto)")
    kernels = {}
    for mode in ("pipelink", "monolithic"):
        t0 = time.perf_counter()
        kernels[mode] = link(spec, mode=mode, progress=lambda m: con.print(f"  [dim]{m}[/]"))
        files = kernels[mode].save(out / mode)
        summary[f"{mode}_link_s"] = round(time.perf_counter() - t0, 3)
        summary[f"{mode}_files"] = {k: str(v) for k, v in files.items()}
        con.print(f"  {mode}: {kernels[mode].plan.backend['cubin_bytes']} B cubin in {summary[f'{mode}_link_s']} s "
                  f"-> {out / mode}")

    con.rule("[bold]3. report[/]")
    kernels["pipelink"].report(console=con)
    a = inspect_cubin(kernels["pipelink"].cubin, kernels["pipelink"].plan.entry)[0]
    b = inspect_cubin(kernels["monolithic"].cubin, kernels["monolithic"].plan.entry)[0]
    same = normalized_sass(a.instructions) == normalized_sass(b.instructions)
    summary["sass_identical_to_monolithic"] = same
    con.print(f"linked vs monolithic control: SASS {'identical' if same else 'DIFFERENT'} modulo symbol addresses "
              f"({len(a.instructions)} vs {len(b.instructions)} instructions, opcode histograms "
              f"{'equal' if a.opcode_histogram == b.opcode_histogram else 'differ'})")
    con.print(f"outputs: {', '.join(str(p) for p in sorted((out / 'pipelink').iterdir()))}")

    if gpu is not False:
        from .runtime import gpu_available
        ok, device = gpu_available()
        if ok:
            con.rule(f"[bold]4. verify + bench on {device}[/] (child process, {GPU_TIMEOUT_S} s watchdog)")
            summary["gpu"] = check_on_gpu(out, ("pipelink", "monolithic"), console=con)
        else:
            con.print(f"[dim]no GPU run: {device}[/]")
            summary["gpu"] = {"skipped": device}
    write_atomic(out / "demo.json", json.dumps(summary, indent=2))
    return summary


def check_on_gpu(out: Path, modes, console=None) -> dict:
    """Run the GPU check in a child process, so a hung kernel cannot freeze this one."""
    cmd = [sys.executable, "-m", "pipelink.demo", str(out), *modes]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=GPU_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        result = {"status": "hang", "detail": f"no answer within {GPU_TIMEOUT_S} s"}
    else:
        try:
            result = json.loads(proc.stdout.strip().splitlines()[-1])
        except (json.JSONDecodeError, IndexError):
            result = {"status": "crash", "detail": (proc.stderr or proc.stdout)[-2000:]}
    if console:
        for mode, r in result.items():
            console.print(f"  {mode}: {r}")
    return result


def tile_fold_reference(x: np.ndarray, tile_cols: int) -> np.ndarray:
    m, k = x.shape
    return x.astype(np.float64).reshape(m, k // tile_cols, tile_cols).sum(axis=1)


def _gpu_child(out: Path, modes: list[str]) -> dict:
    from .runtime import BF16_NAN, Runtime, bf16_to_float32
    results = {}
    rng = np.random.default_rng(2026)
    for mode in modes:
        manifest = json.loads((out / mode / "tile_fold.manifest.json").read_text())
        cubin = (out / mode / "tile_fold.cubin").read_bytes()
        rt = Runtime(cubin, manifest)
        (m, k), (_, n) = manifest["params"][0]["shape"], manifest["params"][1]["shape"]
        errors, unwritten = [], 0
        for seed in range(3):  # fresh inputs each time: the kernel must compute the function, not a case
            x = rng.standard_normal((m, k), dtype=np.float32)
            dx = rt.to_device(x)
            dy = rt.to_device(np.full((m, n), BF16_NAN, dtype=np.uint16))  # poison: unwritten stays NaN
            rt.launch([dx.ptr, dy.ptr])
            rt.synchronize()
            y = bf16_to_float32(rt.to_host(dy, np.uint16, (m, n)))
            ref = tile_fold_reference(x, n)
            unwritten += int(np.isnan(y).sum())
            errors.append(float(np.linalg.norm(np.nan_to_num(y) - ref) / np.linalg.norm(ref)))
            times = rt.time_ms([dx.ptr, dy.ptr], repeats=20) if seed == 0 else None
            if times:
                median = float(np.median(times))
                moved = x.nbytes + m * n * 2
            rt.free(dx)
            rt.free(dy)
        ok = unwritten == 0 and max(errors) < 1e-2
        results[mode] = {"status": "ok" if ok else "FAILED", "rel_l2_error": max(errors), "unwritten": unwritten,
                         "median_ms": round(median, 4), "GB_per_s": round(moved / median / 1e6, 1)}
    return results


if __name__ == "__main__":
    print(json.dumps(_gpu_child(Path(sys.argv[1]), sys.argv[2:])))

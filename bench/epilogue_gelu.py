"""The guide's example epilogue (examples/bias_gelu: GELU(X W^T + bias) on the bundled CuTe
mainloop) against cuBLASLt's own fused bias + GELU epilogue and the unfused torch path.

    python bench/epilogue_gelu.py [--out DIR] [--reps N]

For each shape: verify (child process, NaN-poisoned output, fp32 reference) first; then the
link-time table of examples/bias_gelu/shapes.py (each candidate checked, then all timed together
after a warm-up, the fastest kept); then, on the same inputs, interleaved with an L2 flush before
every launch: the chosen linked kernel, its monolithic
control (writing the same output buffer), `torch._addmm_activation(bias, X, W^T, use_gelu=True)`
(cuBLASLt, GELU in its epilogue) and F.linear + a torch.compile'd GELU. Each is checked against the
reference before it is timed. Writes results/epilogue_gelu-<gpu|cpu>-<stamp>.json with
`shapes.<name>.ratios` (`speedup_vs_cublaslt_fused`, `speedup_vs_linear_compiled_gelu`,
`linked_over_monolithic_paired`).
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

from harness import (check_run, example, log, paired_ratio, quiet_console, time_interleaved, verify_record,
                     warm_up, write_result)

import pipelink
from pipelink.runtime import Runtime

shapes = example("bias_gelu/shapes.py")
reference = example("bias_gelu/reference.py")


def _launcher(spec: Path, mode: str, inputs: dict, y):
    """The linked kernel of ``spec`` (in ``mode``) as a callable writing ``y``, and the kernel."""
    kernel = pipelink.link(spec, mode=mode)
    runtime = Runtime(kernel.cubin, kernel.manifest)
    args = [{**inputs, "epilogue.y": y}[p.name] for p in runtime.params]
    return (lambda: runtime.launch_arrays(args)), kernel



def run_shape(name: str, shape: tuple, work: Path, packages: Path, reps: int) -> dict:
    import torch
    m, k, n = shape
    record = {"shape": {"M": m, "K": k, "N": n}, "flops": 2 * m * n * k, "candidates": []}
    first = shapes.write_spec(work / name / "verify", packages, shape, shapes.CANDIDATES[name][0])
    log(f"{name}: verify {shapes.CANDIDATES[name][0]}")
    v = pipelink.verify(first, out_dir=work / name / "verify" / "run", bench=False, seeds=2, timeout=120,
                        console=quiet_console())
    record["verify"] = {"config": shapes.CANDIDATES[name][0], **verify_record(v)}
    log(f"  verify: {'passed' if v.passed else 'FAILED ' + str(record['verify']['rungs'])}")
    if not v.passed:
        return record

    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, k, generator=gen, device="cuda").to(torch.bfloat16)
    w = (torch.randn(n, k, generator=gen, device="cuda") / math.sqrt(k)).to(torch.bfloat16)
    bias = torch.randn(n, generator=gen, device="cuda").to(torch.bfloat16)
    inputs = {"mainloop.a": x, "mainloop.b": w, "epilogue.bias": bias}
    ref = reference.bias_gelu(inputs, {})["epilogue.y"]
    y = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")

    # The table: every candidate checked against the reference, then all timed together, hot.
    passing = {}
    for config in shapes.CANDIDATES[name]:
        label = "tile_n {}, {} stages, group {}, cluster {}, store_split {}".format(*config)
        spec = shapes.write_spec(work / name / "_".join(map(str, config)), packages, shape, config)
        fn, _ = _launcher(spec, "pipelink", inputs, y)
        cand = {"config": list(config), "check": check_run(fn, y, ref)}
        if cand["check"]["passed"]:
            passing[label] = (fn, cand, spec)
        else:
            log(f"  {label}: not timed: {cand['check']['why']}")
        record["candidates"].append(cand)
    if not passing:
        record["error"] = "no candidate passed the reference check"
        return record
    warm_up(next(iter(passing.values()))[0], seconds=1.0)
    times = time_interleaved({label: fn for label, (fn, _, _) in passing.items()}, max(reps // 3, 30))
    for label, (_, cand, _) in passing.items():
        cand["time"] = times[label]
        log(f"  {label}: {times[label]['median_ms']:.4f} ms")
    label = min(passing, key=lambda lb: times[lb]["median_ms"])
    _, chosen, spec = passing[label]
    record["chosen"] = chosen["config"]

    fns, kernels = {}, {}
    for mode in ("pipelink", "monolithic"):  # both write y: they differ only in their code
        fns[mode], kernels[mode] = _launcher(spec, mode, inputs, y)
    fns["cublaslt_fused"] = lambda: reference.cublaslt_bias_gelu(inputs, {})["epilogue.y"]
    fns["linear_compiled_gelu"] = lambda: reference.linear_then_compiled_gelu(inputs, {})["epilogue.y"]
    record["checks"] = {label: check_run(fn, y if label in kernels else None, ref) for label, fn in fns.items()}
    from pipelink.backend.inspect import inspect_cubin, normalized_sass
    sass = {mode: normalized_sass(inspect_cubin(kn.cubin, kn.plan.entry)[0].instructions) for mode, kn in kernels.items()}
    record["sass_identical"] = sass["pipelink"] == sass["monolithic"]
    if not all(c["passed"] for c in record["checks"].values()):
        log(f"  not timed: a check failed {record['checks']}")
        return record
    warm_up(fns["pipelink"], seconds=1.0)
    times = time_interleaved(fns, reps)
    record["times"] = times
    med = {label: t["median_ms"] for label, t in times.items()}
    record["tflops"] = {label: record["flops"] / t / 1e9 for label, t in med.items()}
    record["ratios"] = {"speedup_vs_cublaslt_fused": med["cublaslt_fused"] / med["pipelink"],
                        "speedup_vs_linear_compiled_gelu": med["linear_compiled_gelu"] / med["pipelink"],
                        "linked_over_monolithic": med["pipelink"] / med["monolithic"],
                        "linked_over_monolithic_paired": paired_ratio(times["pipelink"], times["monolithic"])}
    log(f"  chosen {label}: " + ", ".join(f"{lb} {t:.4f} ms" for lb, t in med.items()))
    log("  " + ", ".join(f"{key} {value:.4f}" for key, value in record["ratios"].items()))
    return record


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="results folder (default bench/results)")
    ap.add_argument("--reps", type=int, default=300, help="interleaved launches of each")
    ap.add_argument("--shapes", nargs="*", default=list(shapes.SHAPES), choices=list(shapes.SHAPES))
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pipelink-gelu-"))
    log("packing gemm_mainloop and bias_gelu_store (tile_n 256 and 128, store_split 2 and 1)")
    packages = shapes.pack(work)
    result = {"example": "examples/bias_gelu", "reps": args.reps, "shapes": {}}
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    for name in args.shapes:
        result["shapes"][name] = run_shape(name, shapes.SHAPES[name], work, packages, args.reps)
        path = write_result("epilogue_gelu", result, args.out, stamp=stamp)  # a cut-off run keeps its data
    log(f"wrote {path}")


if __name__ == "__main__":
    main()

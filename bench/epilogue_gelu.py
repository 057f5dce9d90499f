"""The guide's example epilogue (examples/bias_gelu: GELU(X W^T + bias) on the bundled CuTe
mainloop) against cuBLASLt's own fused bias + GELU epilogue and the unfused torch path.

    python bench/epilogue_gelu.py [--out DIR] [--reps N]

For each shape: verify (child process, NaN-poisoned output, fp32 reference) first; then, on the
same inputs, interleaved with an L2 flush before every launch: the linked kernel, its monolithic
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

from harness import (ROOT, check, example, log, paired_ratio, quiet_console, time_interleaved, verify_record,
                     warm_up, write_result)

import pipelink
from pipelink.runtime import Runtime

EXAMPLE = ROOT / "examples" / "bias_gelu"
shapes = example("bias_gelu/shapes.py")
reference = example("bias_gelu/reference.py")


def run_shape(name: str, shape: tuple, work: Path, packages: Path, reps: int) -> dict:
    import torch
    m, k, n = shape[:3]
    spec = shapes.write_spec(work / name, packages, shape)
    record = {"shape": {"M": m, "K": k, "N": n}, "flops": 2 * m * n * k}
    log(f"{name}: verify")
    v = pipelink.verify(spec, out_dir=work / name / "verify", bench=False, seeds=2, timeout=120,
                        console=quiet_console())
    record["verify"] = verify_record(v)
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
    fns, kernels = {}, {}
    for mode in ("pipelink", "monolithic"):  # both write y: they differ only in their code
        kernel = kernels[mode] = pipelink.link(spec, mode=mode)
        runtime = Runtime(kernel.cubin, kernel.manifest)
        args = [{**inputs, "epilogue.y": y}[p["name"]] for p in kernel.manifest["params"]]
        fns[mode] = (lambda r=runtime, a=args: r.launch_arrays(a))
    fns["cublaslt_fused"] = lambda: reference.cublaslt_bias_gelu(inputs, {})["epilogue.y"]
    fns["linear_compiled_gelu"] = lambda: reference.linear_then_compiled_gelu(inputs, {})["epilogue.y"]
    record["checks"] = {}
    for label, fn in fns.items():  # everything checked against the reference before it is timed
        y.fill_(float("nan"))
        out = fn()
        torch.cuda.synchronize()
        record["checks"][label] = check(y if label in kernels else out, ref)
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
    log("  " + ", ".join(f"{label} {t:.4f} ms" for label, t in med.items()))
    log("  " + ", ".join(f"{key} {value:.4f}" for key, value in record["ratios"].items()))
    return record


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="results folder (default bench/results)")
    ap.add_argument("--reps", type=int, default=300, help="interleaved launches of each")
    ap.add_argument("--shapes", nargs="*", default=list(shapes.SHAPES), choices=list(shapes.SHAPES))
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pipelink-gelu-"))
    log("packing gemm_mainloop and bias_gelu_store (tile_n 256 and 128)")
    packages = shapes.pack(work)
    result = {"example": "examples/bias_gelu", "reps": args.reps, "shapes": {}}
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    for name in args.shapes:
        result["shapes"][name] = run_shape(name, shapes.SHAPES[name], work, packages, args.reps)
        path = write_result("epilogue_gelu", result, args.out, stamp=stamp)  # a cut-off run keeps its data
    log(f"wrote {path}")


if __name__ == "__main__":
    main()

"""Issue 4: the fused Qwen3-32B gate/up + SwiGLU kernel against cuBLAS, on the H200, in one process.

For each shape: the tile configurations of the table are linked (pipelink mode), each checked
against the fp32 reference (poisoned output, bf16 tolerance) before it is timed; the fastest is
the shape's choice. Then, interleaved round by round on the same inputs: pipelink-linked, the
monolithic control (every source in one nvcc unit), cuBLAS (torch.matmul) + torch.compile'd
SiLU*mul, cuBLAS alone, and for gate/up shapes the linked GEMM alone (identity epilogue). Each
chosen configuration also goes through `pipelink.verify` (child process, poison check, seeds).
The bf16 matmul peak is measured in the same run (cuBLAS, 8192^3). JSON + plot under --out.

    PYTHONPATH=src python3 bench/qwen_mlp.py [--out DIR] [--shapes qwen_gate_up_4096,...] [--reps 40] [--profile SHAPE,...] [--stock-cutlass]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pipelink
from pipelink.runtime import Runtime
from pipelink.verify import metrics, timing

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, GpuSampler, write_result  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "qwen_mlp"
COMPONENTS = [(ROOT / "components/cutlass/gemm_mainloop.cu", ROOT / "components/cutlass/gemm_mainloop.toml",
               [{"tile_n": 128}, {"tile_n": 256}]),
              (ROOT / "components/raw/swiglu_store.cu", ROOT / "components/raw/swiglu_store.toml",
               [{"tile_n": n, "gated": g} for n in (128, 256) for g in (0, 1)])]

# Shapes: (M, K, N, gated). N counts gate and up rows together (2 x intermediate size).
SHAPES = {
    "qwen_gate_up_128": (128, 5120, 51200, 1),
    "qwen_gate_up_1024": (1024, 5120, 51200, 1),
    "qwen_gate_up_4096": (4096, 5120, 51200, 1),
    "qwen_gate_up_8192": (8192, 5120, 51200, 1),
    "qwen_down_4096": (4096, 25600, 5120, 0),
    "llama1b_gate_up_4096": (4096, 2048, 16384, 1),
}
# The link-time table: candidate (tile_n, stages, order, group, cluster) per shape, tried in order;
# the fastest that passes the reference check is used. Smem: stages x (128 + tile_n) x 128 +
# staging. group: bands of that many tile rows (schedule.group), so the A band in flight stays in
# L2. cluster 2: pairs of blocks share each B tile by TMA multicast (half the B traffic from L2).
CANDIDATES = {
    "qwen_gate_up_128": [(256, 4, "column_major", 0, 1), (128, 6, "column_major", 0, 1)],
    "qwen_gate_up_1024": [(256, 4, "column_major", 0, 1), (256, 4, "column_major", 0, 2)],
    "qwen_gate_up_4096": [(256, 4, "column_major", 16, 1), (256, 4, "column_major", 16, 2),
                          (256, 4, "column_major", 0, 2)],
    "qwen_gate_up_8192": [(256, 4, "column_major", 16, 1), (256, 4, "column_major", 16, 2),
                          (256, 4, "column_major", 32, 2)],
    "qwen_down_4096": [(256, 3, "column_major", 8, 1), (256, 3, "column_major", 8, 2)],
    "llama1b_gate_up_4096": [(256, 4, "column_major", 0, 1), (256, 4, "column_major", 16, 2)],
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def pack_all(folder: Path) -> Path:
    packages = folder / "packages"
    for source, contract, variants in COMPONENTS:
        pipelink.pack(source, contract, packages / f"{source.stem}.plc", variants=variants)
    return packages


def write_spec(folder: Path, packages: Path, shape: tuple, tile_n: int, stages: int, order: str, group: int,
               cluster: int) -> Path:
    """The example spec with this shape's facts and schedule order."""
    m, k, n, gated = shape
    folder.mkdir(parents=True, exist_ok=True)
    text = (EXAMPLE / "link.toml").read_text()
    facts = f"[facts]\nM = {m}\nK = {k}\nN = {n}\ntile_n = {tile_n}\nstages = {stages}\ngated = {gated}\n"
    text = re.sub(r"\[facts\]\n(.*?\n)\n", facts + "\n", text, count=1, flags=re.S)
    text = re.sub(r'order = "\w+"', f'order = "{order}"\ngroup = {group}', text, count=1)
    text = text.replace('"normal * 0.014"', f'"normal * {1 / math.sqrt(k):.5f}"')
    text = text.replace('package = "packages/', f'package = "{packages}/')
    text = text.replace("[verify]", f"[launch]\ncluster = {cluster}\n\n[verify]")
    (folder / "link.toml").write_text(text)
    shutil.copyfile(EXAMPLE / "reference.py", folder / "reference.py")
    return folder / "link.toml"


def gemm_alone_config(config: tuple) -> tuple:
    """A gate/up candidate as the GEMM alone (identity epilogue): its staging tile is twice as large,
    so 256-wide tiles keep at most 3 stages."""
    tile_n, stages, order, group, cluster = config
    return tile_n, min(stages, 3 if tile_n == 256 else 6), order, group, cluster


def candidate_dir(tile_n: int, stages: int, order: str, group: int, cluster: int) -> str:
    return f"n{tile_n}_s{stages}_{order}_g{group}_c{cluster}"


def verify_record(v) -> dict:
    """What the JSON keeps of a pipelink.verify result."""
    correctness = v.rung("correctness")
    return {"passed": v.passed, "rungs": {r.name: [r.status, r.detail[:600]] for r in v.rungs},
            "correctness": correctness.figures if correctness else None}


def _verified_in_child(spec: Path, config: tuple, out: Path, record: dict) -> bool:
    """A new kernel shape (clusters) first runs in verify's watched child: a hang stays there."""
    v = pipelink.verify(spec, out_dir=out, bench=False, seeds=1, timeout=60, console=_quiet())
    record.setdefault("verify_candidates", []).append(
        {"config": list(config), **verify_record(v)})
    return v.passed


class Case:
    """One shape's inputs, reference and timed callables."""

    def __init__(self, shape: tuple, reference_module):
        import torch
        m, k, n, gated = shape
        self.shape, self.gated = shape, gated
        self.cols = n // 2 if gated else n  # output columns: gate and up halves make one
        gen = torch.Generator(device="cuda").manual_seed(0)
        self.x = torch.randn(m, k, generator=gen, device="cuda").to(torch.bfloat16)
        self.w = (torch.randn(n, k, generator=gen, device="cuda") / math.sqrt(k)).to(torch.bfloat16)
        self.inputs = {"mainloop.a": self.x, "mainloop.b": self.w}
        self.facts = {"M": m, "K": k, "N": n, "gated": gated}
        self.ref = reference_module.swiglu(self.inputs, self.facts)["epilogue.y"]
        self.flops = 2 * m * n * k

    def output(self, cols: int):
        import torch
        return torch.full((self.shape[0], cols), float("nan"), dtype=torch.bfloat16, device="cuda")

    def check(self, y, ref=None) -> dict:
        """verify's poison and bf16 criteria (metrics.judge), computed on the GPU in float64."""
        import torch
        out, r = y.double(), (self.ref if ref is None else ref).double()
        unwritten = int(torch.isnan(out).sum())
        o = torch.nan_to_num(out, nan=0.0, posinf=0.0, neginf=0.0)
        diff = o - r
        m = {"elements": out.numel(), "unwritten": unwritten, "rel_l2": float(diff.norm() / r.norm()),
             "cosine": float((o * r).sum() / (o.norm() * r.norm())), "max_abs_err": float(diff.abs().max())}
        tol, cos_floor = metrics.TOLERANCES["bf16"]
        why = [f"{unwritten} elements never written"] if unwritten else []
        why += [f"relative L2 error {m['rel_l2']:.3g} > {tol}"] if not m["rel_l2"] <= tol else []
        why += [f"cosine {m['cosine']:.6f} < {cos_floor}"] if not m["cosine"] >= cos_floor else []
        return {"passed": not why, "why": why, **m}


def linked_launch(spec: Path, mode: str, case: Case, cols: int, y=None):
    """A launcher of the linked kernel writing `y` (a fresh NaN-poisoned output if None)."""
    kernel = pipelink.link(spec, mode=mode)
    runtime = Runtime(kernel.cubin, kernel.manifest)
    y = case.output(cols) if y is None else y
    args = [case.x, case.w, y]
    return (lambda i=0: runtime.launch_arrays(args)), y, kernel


def warm_up(fn, seconds: float) -> None:
    """Back-to-back launches for about `seconds`: brings the GPU to its sustained-load clock."""
    import torch
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()


def paired_ratio(a: dict, b: dict) -> float:
    """Median of launch-by-launch ratios a_i / b_i of two interleaved series: neighbours in time
    share the clock, so drift cancels in each pair."""
    import numpy as np
    return float(np.median(np.asarray(a["times_ms"]) / np.asarray(b["times_ms"])))


def time_interleaved(fns: dict, reps: int, flush_bytes: int) -> dict:
    """Launch by launch in turn, the order reversed every other round (A B C D D C B A ...), each
    timed alone with CUDA events after an L2 flush: the H200's clock sags under sustained load, and
    interleaving makes that drift fall on every callable alike; the reversal cancels what a
    position in the round does (which callable ran just before)."""
    import torch
    flush = torch.empty(flush_bytes, dtype=torch.uint8, device="cuda")
    events = {name: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                     for _ in range(reps)] for name in fns}
    for fn in fns.values():
        fn()
    torch.cuda.synchronize()
    for i in range(reps):
        for name, fn in (fns.items() if i % 2 == 0 else reversed(fns.items())):
            flush.fill_(i & 0xFF)
            start, end = events[name][i]
            start.record()
            fn()
            end.record()
    torch.cuda.synchronize()
    return {name: timing.summarize([s.elapsed_time(e) for s, e in ev]) for name, ev in events.items()}


def matmul_peak(reps: int = 20) -> dict:
    import torch
    a = torch.randn(8192, 8192, device="cuda").to(torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda").to(torch.bfloat16)
    t = timing.summarize(timing.time_launches(lambda i: a @ b, reps=reps, warmup=5))
    return {"what": "cuBLAS bf16 8192x8192x8192 (torch.matmul)", "tflops": 2 * 8192 ** 3 / t["median_ms"] / 1e9, **t}


def stock_cutlass(out: Path) -> list[dict]:
    """bench/cutlass_ref: a stock CUTLASS 128x256x64 cooperative GEMM, built here with nvcc."""
    script = ROOT / "bench" / "cutlass_ref" / "run.sh"
    if not script.exists():
        return [{"skipped": "bench/cutlass_ref/run.sh missing"}]
    try:
        from pipelink.backend.toolchain import cutlass_include
        proc = subprocess.run(["bash", str(script), str(cutlass_include()), str(out)], capture_output=True,
                              text=True, timeout=900)
    except Exception as exc:  # no headers, no nvcc, timeout: recorded, not fatal
        return [{"skipped": f"{type(exc).__name__}: {exc}"}]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0:
        rows.append({"error": proc.stderr[-2000:], "exit": proc.returncode})
    return rows


def load_reference():
    """examples/qwen_mlp/reference.py as a module (the fp32 reference and the cuBLAS baselines)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("qwen_reference", EXAMPLE / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_config(text: str) -> tuple:
    """'256,4,column_major,16,1' -> (tile_n, stages, order, group, cluster)."""
    return tuple(int(x) if x.isdigit() else x for x in text.split(","))


def run_shape(name: str, shape: tuple, work: Path, packages: Path, args, ref_mod) -> dict:
    import torch
    m, k, n, gated = shape
    log(f"{name}: M={m} K={k} N={n} gated={gated}: inputs and fp32 reference")
    case = Case(shape, ref_mod)
    cols = case.cols
    flush = 256 << 20
    record = {"shape": {"M": m, "K": k, "N": n, "gated": gated}, "flops": case.flops, "candidates": []}

    # First through the verify loop (child process with a timeout): a hang or crash of a new
    # kernel is reported there instead of stopping this process.
    first = write_spec(work / name / "verify", packages, shape, *CANDIDATES[name][0])
    log(f"  verify {CANDIDATES[name][0]}")
    v = pipelink.verify(first, out_dir=work / name / "verify" / "run", bench=False, seeds=args.seeds,
                        timeout=120, console=_quiet())
    record["verify"] = {"config": CANDIDATES[name][0], **verify_record(v)}
    log(f"  verify: {'passed' if v.passed else 'FAILED ' + str(record['verify']['rungs'])}")
    if not v.passed:
        return record

    # Search the table: every candidate checked against the reference before it is timed. The
    # candidates are then timed together, interleaved, after a warm-up: the H200's clock under
    # sustained load (what the comparison below sees) is not its clock when cold, and a choice
    # made cold can be the wrong one hot.
    passing = {}
    for tile_n, stages, order, group, cluster in CANDIDATES[name]:
        label = f"tile 128x{tile_n}x64, {stages} stages, {order}, group {group}, cluster {cluster}"
        spec = write_spec(work / name / candidate_dir(tile_n, stages, order, group, cluster), packages, shape,
                          tile_n, stages, order, group, cluster)
        cand = {"tile_n": tile_n, "stages": stages, "order": order, "group": group, "cluster": cluster}
        config = (tile_n, stages, order, group, cluster)
        if cluster > 1 and not _verified_in_child(spec, config, work / name / f"verify_{spec.parent.name}", record):
            log(f"  {label}: failed verify in the child process, not run here")
            record["candidates"].append({**cand, "error": "verify failed (see verify_candidates)"})
            continue
        try:
            launch, y, _ = linked_launch(spec, "pipelink", case, cols)
            launch()
            torch.cuda.synchronize()
            cand["check"] = case.check(y)
            if cand["check"]["passed"]:
                passing[label] = (launch, cand, spec)
        except Exception as exc:
            cand["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        if label not in passing:
            log(f"  {label}: not timed: {cand.get('error') or cand['check']['why']}")
        record["candidates"].append(cand)
    best = None
    if passing:
        warm_up(next(iter(passing.values()))[0], seconds=1.0)
        times = time_interleaved({label: fn for label, (fn, _, _) in passing.items()}, args.search_reps, flush)
        for label, (_, cand, spec) in passing.items():
            cand["time"] = times[label]
            t = times[label]["median_ms"]
            log(f"  {label}: {t:.4f} ms ({case.flops / t / 1e9:.0f} TFLOP/s)")
            if best is None or t < best[0]:
                best = (t, cand, spec)
    if best is None:
        record["error"] = "no candidate passed the reference check"
        return record
    _, chosen, spec = best
    record["chosen"] = chosen
    record["chosen_spec"] = spec.read_text()

    if (chosen["tile_n"], chosen["stages"], chosen["order"], chosen["group"], chosen["cluster"]) not in \
            [tuple(record["verify"]["config"]), *[tuple(c["config"]) for c in record.get("verify_candidates", [])
                                                  if c["passed"]]]:
        log(f"  verify the chosen {spec.parent.name}")
        v = pipelink.verify(spec, out_dir=work / name / "verify_chosen", bench=False, seeds=args.seeds,
                            timeout=120, console=_quiet())
        record["verify_chosen"] = verify_record(v)

    # Everything on the same inputs, interleaved.
    fns = {}
    # The control writes the linked kernel's output buffer: the two then differ only in their code
    # (at M = 128, separate buffers alone moved the ratio by +-0.4 %, qwen_pair.py).
    fns["pipelink"], y_linked, kernel = linked_launch(spec, "pipelink", case, cols)
    fns["monolithic"], _, mono = linked_launch(spec, "monolithic", case, cols, y=y_linked)
    record["sass_identical"] = _sass(kernel) == _sass(mono)
    fns["cublas+compiled_swiglu"] = lambda i=0: ref_mod.cublas_then_compiled_swiglu(case.inputs, case.facts)
    fns["cublas"] = lambda i=0: ref_mod.cublas_alone(case.inputs, case.facts)
    if gated:
        config = tuple(chosen[key] for key in ("tile_n", "stages", "order", "group", "cluster"))
        gemm_spec = write_spec(work / name / "gemm_alone", packages, (m, k, n, 0), *gemm_alone_config(config))
        fns["pipelink_gemm_alone"], y_gemm, _ = linked_launch(gemm_spec, "pipelink", case, n)
    for fn in fns.values():
        fn()  # compile (torch.compile) and warm everything before timing
    torch.cuda.synchronize()
    record["checks"] = {}
    for mode in ("pipelink", "monolithic"):  # each on the shared buffer, poisoned again first
        y_linked.fill_(float("nan"))
        fns[mode]()
        torch.cuda.synchronize()
        record["checks"][mode] = case.check(y_linked)
    if gated:
        record["checks"]["pipelink_gemm_alone"] = case.check(y_gemm, ref=case.inputs["mainloop.a"].float()
                                                             @ case.inputs["mainloop.b"].float().t())
    # Enough launches for ~1 s of each callable: short kernels need many to resolve 0.1 %.
    reps = max(args.reps, min(1000, int(1000 / chosen["time"]["median_ms"])))
    record["reps"] = reps
    log(f"  timing {', '.join(fns)}: {reps} launches each, interleaved")
    with GpuSampler() as gpu:  # the clock and power the comparison ran at
        times = time_interleaved(fns, reps, flush)
    record["times"], record["gpu_during_timing"] = times, gpu.summary()
    med = {k_: v_["median_ms"] for k_, v_ in times.items()}
    record["tflops"] = {k_: case.flops / v_ / 1e9 for k_, v_ in med.items()}
    record["ratios"] = {
        "linked_over_monolithic": med["pipelink"] / med["monolithic"],
        "linked_over_monolithic_paired": paired_ratio(times["pipelink"], times["monolithic"]),
        "speedup_vs_cublas_compiled_swiglu": med["cublas+compiled_swiglu"] / med["pipelink"],
        "speedup_vs_cublas_alone": med["cublas"] / med["pipelink"],
    }
    if gated:
        record["ratios"]["gemm_alone_speedup_vs_cublas"] = med["cublas"] / med["pipelink_gemm_alone"]
    log("  " + ", ".join(f"{k_} {v_:.4f} ms" for k_, v_ in med.items()))
    log("  " + ", ".join(f"{k_} {v_:.4f}" for k_, v_ in record["ratios"].items()))
    return record


def _sass(kernel) -> list[str]:
    from pipelink.backend.inspect import inspect_cubin, normalized_sass
    return normalized_sass(inspect_cubin(kernel.cubin, kernel.plan.entry)[0].instructions)


def _quiet():
    from rich.console import Console
    return Console(file=open("/dev/null", "w"), width=140)


def plot(result: dict, path: Path) -> Path | None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    shapes = [s for s, r in result["shapes"].items() if "tflops" in r]
    kinds = ["pipelink", "monolithic", "cublas+compiled_swiglu", "cublas", "pipelink_gemm_alone"]
    fig, ax = plt.subplots(figsize=(11, 4.5))
    width = 0.16
    for j, kind in enumerate(kinds):
        vals = [result["shapes"][s]["tflops"].get(kind, 0) for s in shapes]
        ax.bar([i + (j - 2) * width for i in range(len(shapes))], vals, width, label=kind)
    peak = result["peak"]["tflops"]
    ax.axhline(peak, color="k", ls="--", lw=1, label=f"cuBLAS 8192^3 ({peak:.0f} TFLOP/s, this run)")
    ax.set_xticks(range(len(shapes)), shapes, rotation=15, fontsize=8)
    ax.set_ylabel("TFLOP/s (GEMM FLOPs / median time)")
    ax.set_title(f"Fused gate/up + SwiGLU on {result['machine']['gpu']} ({result['git_revision'][:10]})")
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--reps", type=int, default=40, help="timed launches of each callable, interleaved")
    ap.add_argument("--search-reps", type=int, default=30, help="timed launches per table candidate")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--stock-cutlass", action="store_true", help="also build and run bench/cutlass_ref")
    ap.add_argument("--profile", default="", help="shapes whose chosen kernel is profiled with Nsight Compute")
    args = ap.parse_args()
    ref_mod = load_reference()

    work = Path(tempfile.mkdtemp(prefix="pl-qwen-"))
    log("packing gemm_mainloop (CuTe) and swiglu_store variants")
    packages = pack_all(work)
    log("bf16 matmul peak (cuBLAS 8192^3)")
    peak = matmul_peak()
    log(f"  {peak['tflops']:.0f} TFLOP/s")
    shapes = {}
    payload = {"peak": peak, "shapes": shapes, "reps": args.reps,
               "timing": "CUDA events per launch, L2 flushed (256 MiB write) before each, the callables "
                         "interleaved launch by launch; medians"}
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    for name in args.shapes.split(","):
        try:
            shapes[name] = run_shape(name, SHAPES[name], work, packages, args, ref_mod)
        except Exception as exc:
            import traceback
            shapes[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
            log(f"{name}: {shapes[name]['error']}")
        for r in shapes[name].get("tflops", {}):
            shapes[name].setdefault("pct_of_peak", {})[r] = 100 * shapes[name]["tflops"][r] / peak["tflops"]
        if name in args.profile.split(",") and "chosen_spec" in shapes[name]:
            chosen = shapes[name]["chosen"]
            spec = work / name / candidate_dir(*(chosen[k] for k in ("tile_n", "stages", "order", "group", "cluster"))) \
                / "link.toml"
            log(f"  ncu on {spec.parent.name}")
            v = pipelink.verify(spec, out_dir=work / name / "profile", bench=False, seeds=1, profile=True,
                                timeout=120, console=_quiet())
            prof = v.rung("profile")
            shapes[name]["profile"] = {"status": prof.status, "detail": prof.detail[:600], "figures": prof.figures}
            if prof.status == "ok" and args.out:
                shutil.copyfile(prof.figures["report"], args.out / f"qwen_mlp-{name}.ncu-rep")
        write_result("qwen_mlp", payload, args.out, stamp=stamp)  # after every shape: a cut-off run keeps its data
    if args.stock_cutlass:
        log("stock CUTLASS 128x256x64 cooperative (bench/cutlass_ref)")
        payload["stock_cutlass"] = stock_cutlass(work)
        for row in payload["stock_cutlass"]:
            log(f"  {row}")
    path = write_result("qwen_mlp", payload, args.out, stamp=stamp)
    record = json.loads(path.read_text())
    png = plot(record, path.with_suffix(".png"))
    log(f"wrote {path}" + (f" and {png}" if png else ""))
    summary = {s: {"chosen": r.get("chosen"), "ratios": r.get("ratios"), "verify": r.get("verify", {}).get("passed")}
               for s, r in shapes.items()}
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()

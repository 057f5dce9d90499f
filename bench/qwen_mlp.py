"""Issue 4: the fused Qwen3-32B gate/up + SwiGLU kernel against cuBLAS, on the H200, in one process.

For each shape: the tile configurations of the table are linked (pipelink mode), each checked
against the fp32 reference (poisoned output, bf16 tolerance) before it is timed; the fastest is
the shape's choice. Then, interleaved round by round on the same inputs: pipelink-linked, the
monolithic control (every source in one nvcc unit), cuBLAS (torch.matmul) + torch.compile'd
SiLU*mul, cuBLAS alone, and for gate/up shapes the linked GEMM alone (identity epilogue). Each
chosen configuration also goes through `pipelink.verify` (child process, poison check, seeds).
The bf16 matmul peak is measured in the same run (cuBLAS, 8192^3). JSON + plot under --out.

    PYTHONPATH=src python3 bench/qwen_mlp.py [--out DIR] [--shapes qwen_gate_up_4096,...] [--reps 40] [--profile SHAPE,...] [--stock-cutlass]
        [--resume RESULT]  # add the shapes RESULT has not timed (a run cut by a device call's limit)
        [--candidates "144,6,row_major,0,2;..."]  # an experiment: only these configurations, not the tables
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pipelink
from pipelink.runtime import Runtime
from pipelink.verify import timing

from harness import (RESULTS, ROOT, TIMING, GpuSampler, check, example, log, paired_ratio, quiet_console, resumed,
                     time_interleaved, verify_record, warm_up, write_result)

shapes = example("qwen_mlp/shapes.py")  # the shapes, the link-time table and the spec writer
SHAPES, CANDIDATES = shapes.SHAPES, shapes.CANDIDATES


def _verified_in_children(specs: dict[tuple, Path], folder: Path, record: dict, table: str) -> dict[tuple, bool]:
    """New kernel shapes (clusters, splits, 64-row tiles, a partial last tile column) first run in verify's watched
    child, where a hang stays. The children run 4 at a time: each is mostly its own start (Python, torch, CUDA), and
    what they check is correctness, which sharing the GPU does not change."""
    def one(config: tuple, spec: Path):
        return pipelink.verify(spec, out_dir=folder / f"verify_{spec.parent.name}", bench=False, seeds=1, timeout=60,
                               console=quiet_console())
    with ThreadPoolExecutor(4) as pool:
        results = dict(zip(specs, pool.map(one, specs, specs.values())))
    for config, v in results.items():  # in table order
        record.setdefault("verify_candidates", []).append({"config": list(config), "table": table, **verify_record(v)})
    return {config: v.passed for config, v in results.items()}


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


def linked_launch(spec: Path, mode: str, case: Case, cols: int, y=None):
    """A launcher of the linked kernel writing `y` (a fresh NaN-poisoned output if None)."""
    kernel = pipelink.link(spec, mode=mode)
    runtime = Runtime(kernel.cubin, kernel.manifest)
    y = case.output(cols) if y is None else y
    args = [case.x, case.w, y]
    return (lambda: runtime.launch_arrays(args)), y, kernel


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


def parse_config(text: str) -> tuple:
    """'256,4,column_major,16,1[,hybrid[,64]]' -> (tile_n, stages, order, group, cluster[, split[, tile_m]])."""
    return tuple(int(x) if x.isdigit() else x for x in text.split(","))


def chosen_config(chosen: dict) -> tuple:
    split = chosen.get("split", "tiles")  # tables written before split or tile_m was a choice have none
    tile_m = chosen.get("tile_m", 128)
    return tuple(chosen[key] for key in ("tile_n", "stages", "order", "group", "cluster")) + \
        ((split, tile_m) if tile_m != 128 else (split,) if split != "tiles" else ())


def _new_code(shape: tuple, config: tuple) -> bool:
    """A multicast cluster, a split schedule, a 64-row tile or a partial last tile column: verified in a child first."""
    tile_n, _, _, _, cluster, split, tile_m = shapes.unpack(config)
    return cluster > 1 or split != "tiles" or shape[2] % tile_n != 0 or tile_m != 128


def search_table(case: Case, shape: tuple, name: str, folder: Path, packages: Path, args, ref, cols: int,
                 record: dict, key: str) -> tuple[dict, Path] | None:
    """The table's candidates for ``name`` linked at ``shape``, each checked against ``ref`` before it
    is timed, then timed together, interleaved, after a warm-up (the H200's clock under sustained load,
    which the comparison sees, is not its clock when cold, and a choice made cold can be wrong hot).
    Each candidate goes into ``record[key]``; returns the fastest (its record, with the reason it was
    chosen, and its spec) or None when none passed."""
    import torch
    passing = {}
    record[key] = []
    table = [c for c in args.candidates or CANDIDATES[name] if shapes.epilogue_takes(shape[3], c)]
    specs = {config: shapes.write_spec(folder / shapes.candidate_dir(config), packages, shape, config)
             for config in table}
    new_code = {config: spec for config, spec in specs.items() if _new_code(shape, config)}
    verified = _verified_in_children(new_code, folder, record, key)
    for config in table:
        tile_n, stages, order, group, cluster, split, tile_m = shapes.unpack(config)
        label = f"tile {tile_m}x{tile_n}x64, {stages} stages, {order}, group {group}, cluster {cluster}, split {split}"
        spec = specs[config]
        cand = {"tile_m": tile_m, "tile_n": tile_n, "stages": stages, "order": order, "group": group,
                "cluster": cluster, "split": split}
        if not verified.get(config, True):
            log(f"  {label}: failed verify in the child process, not run here")
            record[key].append({**cand, "error": "verify failed (see verify_candidates)"})
            continue
        try:
            launch, y, kernel = linked_launch(spec, "pipelink", case, cols)
            if cluster > 1:  # a persistent grid of more clusters than fit at once runs the rest after the first
                cand["resident_clusters"] = Runtime(kernel.cubin, kernel.manifest).resident_clusters()
                cand["grid_clusters"] = kernel.manifest["grid"][0] // cluster
            launch()
            torch.cuda.synchronize()
            cand["check"] = check(y, ref)
            if cand["check"]["passed"]:
                passing[label] = (launch, cand, spec)
        except Exception as exc:
            cand["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        if label not in passing:
            log(f"  {label}: not timed: {cand.get('error') or cand['check']['why']}")
        record[key].append(cand)
    if not passing:
        return None
    warm_up(next(iter(passing.values()))[0], seconds=1.0)
    times = time_interleaved({label: fn for label, (fn, _, _) in passing.items()}, args.search_reps)
    for label, (_, cand, _) in passing.items():
        cand["time"] = times[label]
        t = times[label]["median_ms"]
        log(f"  {label}: {t:.4f} ms ({case.flops / t / 1e9:.0f} TFLOP/s)")
    ranked = sorted(passing, key=lambda label: times[label]["median_ms"])
    chosen, spec = passing[ranked[0]][1:]
    fastest = times[ranked[0]]["median_ms"]
    chosen["reason"] = (f"the fastest of {len(passing)} of {len(table)} candidates that passed the reference "
                        f"check, {args.search_reps} launches each, interleaved: {fastest:.4f} ms" +
                        "".join(f"; {label} {times[label]['median_ms'] / fastest:.3f}x" for label in ranked[1:]))
    return chosen, spec


def run_shape(name: str, shape: tuple, work: Path, packages: Path, args, ref_mod) -> dict:
    import torch
    m, k, n, gated = shape
    log(f"{name}: M={m} K={k} N={n} gated={gated}: inputs and fp32 reference")
    case = Case(shape, ref_mod)
    cols = case.cols
    record = {"shape": {"M": m, "K": k, "N": n, "gated": gated}, "flops": case.flops}

    # First through the verify loop (child process with a timeout): a hang or crash of a new
    # kernel is reported there instead of stopping this process.
    first = shapes.write_spec(work / name / "verify", packages, shape, CANDIDATES[name][0])
    log(f"  verify {CANDIDATES[name][0]}")
    v = pipelink.verify(first, out_dir=work / name / "verify" / "run", bench=False, seeds=args.seeds,
                        timeout=120, console=quiet_console())
    record["verify"] = {"config": CANDIDATES[name][0], **verify_record(v)}
    log(f"  verify: {'passed' if v.passed else 'FAILED ' + str(record['verify']['rungs'])}")
    if not v.passed:
        return record

    best = search_table(case, shape, name, work / name, packages, args, case.ref, cols, record, "candidates")
    if best is None:
        record["error"] = "no candidate passed the reference check"
        return record
    chosen, spec = best
    record["chosen"] = chosen
    record["chosen_spec"] = spec.read_text()

    config = chosen_config(chosen)
    if config not in [tuple(record["verify"]["config"]),
                      *[tuple(c["config"]) for c in record.get("verify_candidates", [])
                        if c["passed"] and c["table"] == "candidates"]]:
        log(f"  verify the chosen {spec.parent.name}")
        v = pipelink.verify(spec, out_dir=work / name / "verify_chosen", bench=False, seeds=args.seeds,
                            timeout=120, console=quiet_console())
        record["verify_chosen"] = verify_record(v)

    # Everything on the same inputs, interleaved.
    fns = {}
    # The control writes the linked kernel's output buffer: the two then differ only in their code
    # (at M = 128, separate buffers alone moved the ratio by +-0.4 %, experiments/qwen_pair.py).
    fns["pipelink"], y_linked, kernel = linked_launch(spec, "pipelink", case, cols)
    fns["monolithic"], _, mono = linked_launch(spec, "monolithic", case, cols, y=y_linked)
    record["sass_identical"] = _sass(kernel) == _sass(mono)
    fns["cublas+compiled_swiglu"] = lambda: ref_mod.cublas_then_compiled_swiglu(case.inputs, case.facts)
    fns["cublas"] = lambda: ref_mod.cublas_alone(case.inputs, case.facts)
    if gated:  # the GEMM part alone (identity epilogue), with the table's configuration that is fastest for it
        product = case.x.float() @ case.w.float().t()
        log("  the GEMM alone: its table")
        alone = search_table(case, (m, k, n, 0), name, work / name / "gemm_alone", packages, args, product, n, record,
                             "gemm_alone_candidates")
        if alone is None:
            record["error"] = "no candidate of the GEMM alone passed the reference check"
            return record
        record["gemm_alone_chosen"], gemm_spec = alone
        fns["pipelink_gemm_alone"], y_gemm, _ = linked_launch(gemm_spec, "pipelink", case, n)
    for fn in fns.values():
        fn()  # compile (torch.compile) and warm everything before timing
    torch.cuda.synchronize()
    record["checks"] = {}
    for mode in ("pipelink", "monolithic"):  # each on the shared buffer, poisoned again first
        y_linked.fill_(float("nan"))
        fns[mode]()
        torch.cuda.synchronize()
        record["checks"][mode] = check(y_linked, case.ref)
    if gated:
        record["checks"]["pipelink_gemm_alone"] = check(y_gemm, product)
    # Enough launches for ~1 s of each callable: short kernels need many to resolve 0.1 %.
    reps = max(args.reps, min(1000, int(1000 / chosen["time"]["median_ms"])))
    record["reps"] = reps
    log(f"  timing {', '.join(fns)}: {reps} launches each, interleaved")
    with GpuSampler() as gpu:  # the clock and power the comparison ran at
        times = time_interleaved(fns, reps)
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
    ap.add_argument("--candidates", type=lambda text: [parse_config(c) for c in text.split(";")], default=None,
                    help="time only these configurations ('144,6,row_major,0,2;...'), not the shapes' tables: an "
                         "experiment, recorded in the JSON as candidates_restricted")
    ap.add_argument("--resume", type=Path, help="continue this result of the same revision (a run cut by a device "
                    "call's limit): its timed shapes are kept, the rest run and are added")
    args = ap.parse_args()
    previous = resumed(args.resume, "qwen_mlp") if args.resume else None  # refused before any packing
    ref_mod = example("qwen_mlp/reference.py")

    work = Path(tempfile.mkdtemp(prefix="pl-qwen-"))
    log("packing gemm_mainloop (CuTe) and swiglu_store variants")
    packages = shapes.pack(work)
    log("bf16 matmul peak (cuBLAS 8192^3)")
    peak = matmul_peak()
    log(f"  {peak['tflops']:.0f} TFLOP/s")
    payload = {"peak": peak, "shapes": {}, "reps": args.reps, "timing": TIMING}
    if args.candidates:
        payload["candidates_restricted"] = [list(c) for c in args.candidates]
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    if previous:  # the first call's peak stays the table's; each call's is kept beside it
        payload, stamp = previous, args.resume.stem.rsplit("-", 1)[-1]
        args.out = args.resume.parent if args.out == RESULTS else args.out
    payload.setdefault("calls", []).append({"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "peak": peak})
    results = payload["shapes"]
    for name in [n for n in args.shapes.split(",") if "ratios" not in results.get(n, {})]:
        try:
            results[name] = run_shape(name, SHAPES[name], work, packages, args, ref_mod)
        except Exception as exc:
            import traceback
            results[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
            log(f"{name}: {results[name]['error']}")
        for r in results[name].get("tflops", {}):
            results[name].setdefault("pct_of_peak", {})[r] = 100 * results[name]["tflops"][r] / peak["tflops"]
        if name in args.profile.split(",") and "chosen_spec" in results[name]:
            spec = work / name / shapes.candidate_dir(chosen_config(results[name]["chosen"])) / "link.toml"
            log(f"  ncu on {spec.parent.name}")
            v = pipelink.verify(spec, out_dir=work / name / "profile", bench=False, seeds=1, profile=True,
                                timeout=120, console=quiet_console())
            prof = v.rung("profile")
            results[name]["profile"] = {"status": prof.status, "detail": prof.detail[:600], "figures": prof.figures}
            if prof.status == "ok" and args.out:
                shutil.copyfile(prof.figures["report"], args.out / f"qwen_mlp-{name}.ncu-rep")
        write_result("qwen_mlp", payload, args.out, stamp=stamp)  # after every shape: a cut-off run keeps its data
    if args.stock_cutlass and "stock_cutlass" not in payload:
        log("stock CUTLASS 128x256x64 cooperative (bench/cutlass_ref)")
        payload["stock_cutlass"] = stock_cutlass(work)
        for row in payload["stock_cutlass"]:
            log(f"  {row}")
    path = write_result("qwen_mlp", payload, args.out, stamp=stamp)
    record = json.loads(path.read_text())
    png = plot(record, path.with_suffix(".png"))
    log(f"wrote {path}" + (f" and {png}" if png else ""))
    summary = {s: {"chosen": r.get("chosen"), "ratios": r.get("ratios"), "verify": r.get("verify", {}).get("passed")}
               for s, r in results.items()}
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()

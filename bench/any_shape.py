"""Issue 49: the Qwen3-32B gate/up + SwiGLU operator (pipelink.op, M varying) over M = 1 .. 8192, against
cuBLAS + torch.compile'd SiLU*mul, in one process. Untuned: every bucket takes the spec's configuration
(--tile-n, --stages, 128-row tiles; --small-tile-m 64 gives M <= 64 a second operator with 64-row tiles).

Per M: the operator's output against the fp32 reference (verify's criteria: finite, within bf16 tolerance),
then both callables interleaved launch by launch (bench/harness.time_interleaved, L2 flushed). Also: the
first call of a new bucket (its link, warm package and build caches in this process), and the host cost of a
call (eager, eager into `out=`, and through the torch dispatcher) against Runtime.launch_arrays and a bare cuLaunchKernel of the
same cubin with a prebuilt argument blob (ctypes on libcuda; the cuda.bindings call), torch.empty of the output
apart (median over rounds of 100 calls at M = 128, each round's wall time divided by 100: 100 kernels of ~0.2 ms queue
well ahead of the GPU, so the host never waits for it).

    PYTHONPATH=src:bench python3 bench/any_shape.py [--out DIR] [--ms 1,2,...] [--reps 30]
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import json
import math
import statistics
import time
from pathlib import Path

import pipelink
from pipelink.verify import timing

from harness import RESULTS, check, example, log, time_interleaved, warm_up, write_result

shapes = example("qwen_mlp/shapes.py")


@functools.lru_cache(maxsize=None)
def _reference():
    """examples/qwen_mlp/reference.py, loaded when first needed (it imports torch; the plot does not)."""
    return example("qwen_mlp/reference.py")

MS = (1, 2, 4, 8, 16, 32, 64, 100, 128, 200, 256, 512, 1000, 1024, 2048, 4096, 8192)
K, N = 5120, 51200


def packages(folder: Path, tile_ms: tuple[int, ...], tile_n: int) -> Path:
    """The two components with only the variants this run links."""
    out = folder / "packages"
    for source, contract, _ in shapes.COMPONENTS:
        variants = [{"tile_m": m, "tile_n": tile_n} | ({"gated": 1} if "swiglu" in source.name else {})
                    for m in tile_ms]
        pipelink.pack(source, contract, out / f"{source.stem}.plc", variants=variants)
    return out


def host_us(fn, rounds: int = 100, calls: int = 100) -> list[float]:
    """Per-call host time of ``fn`` (us): rounds of ``calls`` calls, each round's wall time over ``calls``."""
    import torch
    out = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t0) / calls * 1e6)
    torch.cuda.synchronize()
    return out


def bare_launchers(runtime, arrays) -> dict:
    """cuLaunchKernel of the runtime's cubin with the argument block built once (what a hand-written host does),
    on torch's current stream: through the cuda.bindings call (what pipelink's runtime calls) and through ctypes
    on libcuda."""
    import torch
    from cuda.bindings import driver
    args = runtime.arguments([a.data_ptr() for a in arrays])
    address, dims, function = args.address, runtime._dims, runtime.function
    stream = torch._C._cuda_getCurrentRawStream
    libcuda = ctypes.CDLL("libcuda.so.1").cuLaunchKernel
    libcuda.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    libcuda.restype = ctypes.c_int
    handle = int(function)
    launchers = {"bare_cuLaunchKernel": lambda: int(driver.cuLaunchKernel(function, *dims, stream(0), address, 0)[0]),
                 "bare_cuLaunchKernel_ctypes": lambda: libcuda(handle, *dims, stream(0), address, None)}
    for name, launch in launchers.items():
        launch.args = args  # kept alive with the launcher: the driver reads it at each launch
        status = launch()
        torch.cuda.synchronize()
        assert status == 0, f"{name} failed: {status}"
    return launchers


def packages_for(folder: Path, tile_ms, tile_ns) -> Path:
    """The two components with every (tile_m, tile_n) variant a search may link (gated epilogue)."""
    out = folder / "packages"
    for source, contract, _ in shapes.COMPONENTS:
        variants = [{"tile_m": m, "tile_n": n} | ({"gated": 1} if "swiglu" in source.name else {})
                    for m in tile_ms for n in tile_ns if m == 128 or n in shapes.SMALL_M_WIDTHS]  # the epilogue's limit
        pipelink.pack(source, contract, out / f"{source.stem}.plc", variants=variants)
    return out


def parse_space(text: str) -> dict:
    """"tile_m=64,128;tile_n=128,256;schedule.split=tiles,stream_k" -> {"tile_m": "64,128", ...} (pipelink.tune
    parses the values; a dotted name is a --set)."""
    return dict(item.split("=", 1) for item in text.split(";") if item)


def tuned_ops(args, work: Path):
    """pipelink.tune at each of --tune-ms (its bucket), one tune call per M so that the cache keeps every bucket
    tuned before --tune-budget seconds ran out (the rest are served by the nearest tuned bucket's, said once);
    then one operator reading the cache. --tune searches: the example spec's own [tune] searches (the search
    whose shapes are nearest each M), the example's packages; else the one space --tune gives."""
    from pipelink.tune import tune, parse_fact
    if args.tune == "searches":
        facts = settings = None
        pk = shapes.pack(work)
    else:
        space = parse_space(args.tune)
        facts = {k: v for k, v in space.items() if "." not in k}
        settings = {k: v for k, v in space.items() if "." in k}  # schedule.split=tiles,stream_k: a --set
        values = {k: parse_fact(f"{k}={v}")[1] for k, v in facts.items()}
        pk = packages_for(work, values.get("tile_m", (128,)), values.get("tile_n", (args.tile_n,)))
    spec = shapes.write_spec(work / "spec_tuned", pk, (256, K, N, 1),
                             (args.tile_n, args.stages, "column_major", 0, 1, "tiles", 128))
    t0 = time.perf_counter()
    results, skipped = [], []
    for m in (int(v) for v in args.tune_ms.split(",")):  # small M first: its 64-row tiles set the bucket grid
        if time.perf_counter() - t0 > args.tune_budget:
            skipped.append(m)
            continue
        r = tune(spec, [{"M": m}], facts, (), settings, reps=args.reps, timeout=120, progress=True)
        results.append(r)
        for b in r.buckets:
            w = b.winner
            log(f"  {b.bucket} in {r.seconds:.0f} s: " + (f"{w.config.label} {w.median_ms:.4f} ms" if w else "no winner")
                + "; " + ", ".join(f"{o.config.label}: {o.status}" + (f" {o.median_ms:.4f}" if o.median_ms else "")
                                   for o in b.outcomes))
    log(f"tuned {len(results)} bucket(s) in {time.perf_counter() - t0:.0f} s"
        + (f"; not tuned (--tune-budget {args.tune_budget:g} s spent): M = {skipped}" if skipped else ""))
    op = pipelink.op(spec, vary=("M",), name="qwen_gate_up_any_tuned")
    return spec, op, results, skipped


def launcher(runtime, x, w):
    """A launch of ``runtime``'s kernel on x [M, K] and w, into a new y [M, N / 2], its tensor maps encoded at
    M (the kernel may be linked for a larger bucket)."""
    import torch
    m = x.shape[0]
    y = torch.empty(m, N // 2, device="cuda", dtype=torch.bfloat16)
    given = {"mainloop.a": x, "mainloop.b": w, "epilogue.y": y}
    arrays = [given[p.name] for p in runtime.params]
    at = {"mainloop.a": [m, K], "epilogue.y": [m, N // 2]}
    return lambda: runtime.launch_arrays(arrays, shapes=at)


def exhaustive(op, bucket_result, m: int, w, reps: int) -> dict:
    """Every configuration of the bucket that verified, re-timed interleaved at M = ``m`` in this process (fresh
    launches, the tuner's choice among them): the tuned choice's median over the best median."""
    import torch

    from pipelink.runtime import Runtime
    from pipelink.spec import load_spec
    x = torch.randn(m, K, device="cuda").to(torch.bfloat16)
    fns, labels = {}, {}
    for n, o in enumerate(o for o in bucket_result.outcomes if o.status == "timed"):
        kernel = pipelink.link(load_spec(o.config.spec, facts={**dict(o.config.facts), **bucket_result.bucket},
                                         settings=dict(o.config.settings)))
        runtime = Runtime(kernel.cubin, kernel.manifest)
        fns[f"c{n}"] = launcher(runtime, x, w)
        labels[f"c{n}"] = o.config.label
    for fn in fns.values():
        warm_up(fn, 0.2)
    times = time_interleaved(fns, reps)
    med = {labels[k]: v["median_ms"] for k, v in times.items()}
    chosen = bucket_result.winner.config.label
    return {"M": m, "bucket": bucket_result.bucket, "medians_ms": med, "tuned": chosen,
            "tuned_vs_exhaustive_best": med[chosen] / min(med.values()), "best": min(med, key=med.get)}


def one_cubin_vs_buckets(op, w, ms, reps: int) -> list[dict]:
    """The other design, where it competes: the kernel linked for the largest bucket (M = 8192) serving a
    smaller M (its tiles past M load zeros and store nothing) against that M's own bucket kernel, interleaved."""
    import torch
    largest = op.linked_sizes({"M": 8192})
    op.kernel_for(M=8192)
    rows = []
    for m in ms:
        x = torch.randn(m, K, device="cuda").to(torch.bfloat16)
        fns = {}
        for name, key in (("bucket", op.linked_sizes({"M": m})), ("largest", largest)):
            op.kernel_for(M=key[0])
            fns[name] = launcher(op.kernels[key][1], x, w)
        for fn in fns.values():
            warm_up(fn, 0.2)
        times = time_interleaved(fns, reps)
        med = {k: v["median_ms"] for k, v in times.items()}
        rows.append({"M": m, "bucket_ms": med["bucket"], "largest_bucket_ms": med["largest"],
                     "largest_over_bucket": med["largest"] / med["bucket"]})
        log(f"one cubin for every M at M = {m}: {rows[-1]['largest_over_bucket']:.3f}x the bucket kernel's time")
    return rows


def decode_loop(op, w, steps: int = 1000, seed: int = 0) -> dict:
    """M drawn from 1..256 every step: (a) a CUDA graph per bucket, captured at the bucket's size (a step copies
    its rows into the graph's input and reads its rows back), (b) torch.compile(dynamic=True) around the
    operator. No link after the warm-up (op.prepare); every 100th step verified against the reference."""
    import random

    import torch
    rng = random.Random(seed)
    ms = [rng.randint(1, 256) for _ in range(steps)]
    op.prepare(M=sorted({op.linked_sizes({"M": m})[0] for m in ms}))
    linked = len(op.kernels)
    graphs = {}
    for b in sorted({op.linked_sizes({"M": m})[0] for m in ms}):
        x = torch.zeros(b, K, device="cuda", dtype=torch.bfloat16)
        op(x, w)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y = op(x, w)
        graphs[b] = (g, x, y)
    compiled = torch.compile(lambda a, b: op(a, b), dynamic=True)
    for m in (3, 200):  # compiled for dynamic M before the loop
        compiled(torch.randn(m, K, device="cuda").to(torch.bfloat16), w)
    checked, worst = 0, 0.0
    out = {}
    for name in ("graph", "compile"):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i, m in enumerate(ms):
            x = torch.randn(m, K, device="cuda").to(torch.bfloat16)
            if name == "graph":
                g, gx, gy = graphs[op.linked_sizes({"M": m})[0]]
                gx[:m].copy_(x)
                g.replay()
                y = gy[:m]
            else:
                y = compiled(x, w)
            if i % 100 == 0:
                want = _reference().swiglu({"mainloop.a": x, "mainloop.b": w}, {"gated": 1})["epilogue.y"].float()
                err = (torch.linalg.vector_norm(y.float() - want) / torch.linalg.vector_norm(want)).item()
                worst, checked = max(worst, err), checked + 1
        torch.cuda.synchronize()
        out[name] = {"steps": steps, "seconds": time.perf_counter() - t0}  # with input generation and checks
    return {**out, "relinks_after_warm_up": len(op.kernels) - linked, "verified_steps": checked,
            "worst_rel_l2": worst, "passed": worst < 5e-3 and len(op.kernels) == linked}


def plot(result: dict, path: Path) -> Path | None:
    """The M sweep: both callables' median time against M (log-log), and the speed-up against M with 1.0 and the
    1.05 goal marked; each point labelled with its configuration's tile where the operator was tuned."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rows = [r for r in result["shapes"] if r.get("median_ms")]
    if not rows:
        return None
    ms = [r["M"] for r in rows]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    top.plot(ms, [r["median_ms"] for r in rows], "o-", label="pipelink.op (fused gate/up + SwiGLU)")
    top.plot(ms, [r["baseline_median_ms"] for r in rows], "s--", label="cuBLAS + torch.compile'd SiLU*mul")
    top.set_xscale("log", base=2)
    top.set_yscale("log")
    top.set_ylabel("median time (ms)")
    top.legend(fontsize=8)
    ratios = [r["speedup_vs_cublas_compiled_swiglu"] for r in rows]
    bottom.plot(ms, ratios, "o-")
    bottom.axhline(1.0, color="k", lw=1)
    bottom.axhline(1.05, color="g", ls="--", lw=1, label="goal from M = 64: 1.05x")
    for r, y in zip(rows, ratios):
        c = r.get("config") or {}
        if isinstance(c, dict) and "tile_m" in c:
            bottom.annotate(f"{c.get('tile_m')}x{c.get('tile_n', '')}", (r["M"], y), fontsize=6,
                            textcoords="offset points", xytext=(0, 5), ha="center")
    bottom.set_xlabel("M (tokens)")
    bottom.set_ylabel("speed-up (baseline / pipelink)")
    bottom.legend(fontsize=8)
    tuned = "tuned" if result.get("tune") else "untuned"
    top.set_title(f"Qwen3-32B gate/up + SwiGLU, K = {result['K']}, N = {result['N']}, {tuned}, on "
                  f"{result['machine']['gpu']} ({result['git_revision'][:10]})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def main() -> None:
    import torch
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--ms", default=",".join(map(str, MS)))
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--tile-n", type=int, default=256)
    ap.add_argument("--stages", type=int, default=4)
    ap.add_argument("--small-tile-m", type=int, default=0, help="64: M <= 64 on 64-row tiles (untuned)")
    ap.add_argument("--tune", default="", help='a space, e.g. "tile_m=64,128;tile_n=128,208,256;stages=4,5": '
                                                "pipelink tune at --tune-ms, the operator served from its cache")
    ap.add_argument("--tune-ms", default="64,128,256,512,1024,2048,4096,8192")
    ap.add_argument("--tune-budget", type=float, default=1e9, help="seconds: no new bucket's search after this")
    ap.add_argument("--exhaustive-ms", default="128,1024,4096")
    ap.add_argument("--decode", action="store_true", help="also the decode loop (M drawn from 1..256)")
    args = ap.parse_args()
    ms = [int(m) for m in args.ms.split(",")]
    work = Path("/tmp/any_shape")
    torch.manual_seed(0)
    w = (torch.randn(N, K, device="cuda") / math.sqrt(K)).to(torch.bfloat16)
    record = {"K": K, "N": N, "shapes": []}
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())

    def save(stage: str) -> None:  # after each stage: a call cut off at its limit keeps what it measured
        record["complete"] = stage == "done"
        log(f"wrote {write_result('any_shape', record, args.out, stamp)} ({stage})")
    if args.tune:
        spec, tuned, results, skipped = tuned_ops(args, work)
        record |= {"space": args.tune if args.tune == "searches" else parse_space(args.tune),
                   "tune": [r.to_json() for r in results], "tune_seconds": sum(r.seconds for r in results),
                   "not_tuned_ms": skipped}
        buckets = [b for r in results for b in r.buckets]
        if results and results[-1].cache:  # the cache the operator reads, kept with the run's record
            import shutil
            Path(args.out).mkdir(parents=True, exist_ok=True)
            shutil.copy(results[-1].cache, Path(args.out) / f"tune-cache-{stamp}.json")
        save("tuned")

        def op_for(m):
            return tuned
    else:
        t0 = time.perf_counter()
        tile_ms = (128, 64) if args.small_tile_m else (128,)
        pk = packages(work, tile_ms, args.tile_n)
        log(f"packed {len(tile_ms)} variant(s) of each component in {time.perf_counter() - t0:.0f} s")
        ops = {}
        for tile_m in tile_ms:
            spec = shapes.write_spec(work / f"spec{tile_m}", pk, (tile_m * 2, K, N, 1),
                                     (args.tile_n, args.stages if tile_m == 128 else args.stages + 1, "column_major",
                                      0, 1, "tiles", tile_m))
            ops[tile_m] = pipelink.op(spec, vary=("M",), name=f"qwen_gate_up_any_{tile_m}", tuned=False)
        record["config"] = {"tile_n": args.tile_n, "stages": args.stages, "order": "column_major",
                            "tile_m": "64 for M <= 64" if args.small_tile_m else 128}

        def op_for(m):
            return ops[64 if args.small_tile_m and m <= 64 else 128]
    for m in ms:
        op = op_for(m)
        x = torch.randn(m, K, device="cuda").to(torch.bfloat16)
        inputs = {"mainloop.a": x, "mainloop.b": w}
        had = len(op.kernels)
        t0 = time.perf_counter()
        y = op(x, w)
        torch.cuda.synchronize()
        first_s = time.perf_counter() - t0
        verdict = check(y, _reference().swiglu(inputs, {"gated": 1})["epilogue.y"])
        key = op.linked_sizes({"M": m})
        config = op.config_for(key) if op.tuned is not None else (None, {}, "untuned", {})
        row = {"M": m, "bucket": list(key), "linked_now": len(op.kernels) > had, "first_call_s": first_s,
               "config": {**(config[1] or record.get("config")), **config[3]}, "config_source": config[2],
               "verify_passed": verdict["passed"], "verify": verdict}
        if verdict["passed"]:
            fns = {"pipelink": lambda: op(x, w), "cublas_compiled_swiglu":
                   lambda: _reference().cublas_then_compiled_swiglu(inputs, {"gated": 1})}
            for fn in fns.values():
                warm_up(fn, 0.3)
            times = time_interleaved(fns, args.reps)  # name -> timing.summarize: median_ms, p10, p90, times_ms
            med = {k: v["median_ms"] for k, v in times.items()}
            row |= {"timings": times, "median_ms": med["pipelink"], "baseline_median_ms": med["cublas_compiled_swiglu"],
                    "speedup_vs_cublas_compiled_swiglu": timing.speedup(med["cublas_compiled_swiglu"],
                                                                        med["pipelink"])}
        log(f"M = {m}: bucket {row['bucket']}, {row['config']} ({row['config_source']}), verify {verdict['passed']}, "
            f"speed-up {row.get('speedup_vs_cublas_compiled_swiglu', float('nan')):.3f}")
        record["shapes"].append(row)
    save("swept")
    host_cost(record, op_for(128), w)  # before the longer stages: a call cut off at its limit keeps it
    save("host cost")
    if args.tune:
        checks = []
        for m in (int(v) for v in args.exhaustive_ms.split(",") if v):
            b = next((b for b in buckets if b.bucket == {"M": tuned.linked_sizes({"M": m})[0]}), None)
            if b is not None and b.winner is not None:
                checks.append(exhaustive(tuned, b, m, w, args.reps))
                log(f"exhaustive at M = {m}: tuned {checks[-1]['tuned']} is "
                    f"{checks[-1]['tuned_vs_exhaustive_best']:.4f} of the best ({checks[-1]['best']})")
        record["exhaustive"] = checks
        for row in record["shapes"]:
            found = next((c for c in checks if c["M"] == row["M"]), None)
            row["tuned_vs_exhaustive_best"] = found["tuned_vs_exhaustive_best"] if found else None
        save("exhaustive")
        record["one_cubin_vs_buckets"] = one_cubin_vs_buckets(tuned, w, (1, 128, 1024), args.reps)
        if args.decode:
            record["decode"] = decode_loop(tuned, w)
            log(f"decode loop: {record['decode']}")
    record["first_call_s"] = {str(r["M"]): r["first_call_s"] for r in record["shapes"] if r["linked_now"]}
    if args.tune:
        record["first_call_new_process"] = first_call_new_process(spec, (1, 256, 4096), work)
        save("first calls")
    save("done")


_FIRST_CALL = """
import json, sys, time
t0 = time.perf_counter()
import torch, pipelink
spec, m, k, n, root = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] or None
x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
w = torch.randn(n, k, device="cuda").to(torch.bfloat16)
torch.cuda.synchronize()
t1 = time.perf_counter()
op = pipelink.op(spec, vary=("M",), tune_root=root)
t2 = time.perf_counter()
y = op(x, w)
torch.cuda.synchronize()
t3 = time.perf_counter()
key = op.linked_sizes({"M": m})
print(json.dumps({"start_s": t1 - t0, "op_s": t2 - t1, "first_call_s": t3 - t2, "bucket": list(key),
                  "config": op.config_for(key)[1], "source": op.config_for(key)[2]}))
"""


def first_call_new_process(spec: Path, ms, work: Path) -> dict:
    """The cost of a new shape in a new process, the package and build caches warm: (a) the tune cache empty (a
    folder with none: the op serves the spec's own facts, said once), (b) the tune cache this run wrote (no
    search: the winner's link). Each: the interpreter's start with torch and the inputs, making the operator (it
    links the spec's own configuration for its signature) and the first call at M (the bucket's link, the launch)."""
    import os
    import subprocess
    import sys
    out = {}
    empty = work / "empty-tune-root"
    empty.mkdir(parents=True, exist_ok=True)
    for label, root in (("empty_tune_cache", str(empty)), ("warm_tune_cache", "")):
        for m in ms:
            p = subprocess.run([sys.executable, "-c", _FIRST_CALL, str(spec), str(m), str(K), str(N), root],
                               capture_output=True, text=True, timeout=300, env=os.environ.copy())
            row = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else {
                "error": p.stderr[-500:]}
            out.setdefault(label, {})[str(m)] = row
            log(f"first call in a new process, {label}, M = {m}: {row}")
    return out


def profile_calls(fn, record: dict, rounds: int = 100, calls: int = 100) -> None:
    """Where a call's host time goes: cProfile over rounds of ``calls`` calls, the GPU caught up between rounds
    (10 000 calls in a row fill the launch queue, and cuLaunchKernel's wait for room swamps the rest); the top
    functions by their own time (the profiler's overhead inflates each: read the shares, not the microseconds)."""
    import cProfile
    import io
    import pstats
    import torch
    profiler = cProfile.Profile()
    for _ in range(rounds):
        torch.cuda.synchronize()
        profiler.enable()
        for _ in range(calls):
            fn()
        profiler.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(20)
    record["host_profile"] = text.getvalue()[-6000:]
    log("host profile of the operator's call (cProfile, tottime):\n" + record["host_profile"])


def host_cost(record: dict, op, w) -> None:
    """The host cost of a call at M = 128 (a kernel of ~0.2 ms: 100 calls queue well ahead of the GPU)."""
    import torch
    x = torch.randn(128, K, device="cuda").to(torch.bfloat16)
    y = op(x, w)
    runtime = op.kernels[op.linked_sizes({"M": 128})][1]
    ordered = {"mainloop.a": x, "mainloop.b": w, "epilogue.y": y}
    arrays = [ordered[p.name] for p in runtime.params]
    plan = op._plans[(x.shape, w.shape)]
    prepared = runtime.arguments([a.data_ptr() for a in arrays], plan.shapes)  # on tensors held here
    stream = torch._C._cuda_getCurrentRawStream
    calls = {"op": lambda: op(x, w), "op_out": lambda: op(x, w, out=y), "op_through_dispatcher": lambda: op.op(x, w),
             "plan_run": lambda: plan.run((x, w)), "plan_run_out": lambda: plan.run((x, w), (y,)),
             "launch_prepared": lambda: runtime.launch_prepared(prepared, stream(0)),
             "launch_arrays": lambda: runtime.launch_arrays(arrays),
             "torch_empty_output": lambda: torch.empty(128, N // 2, dtype=torch.bfloat16, device="cuda"),
             **bare_launchers(runtime, arrays)}
    try:
        host = {}
        for name, fn in calls.items():  # a first pass unrecorded: the first callable timed read ~3 us high
            host_us(fn, rounds=20)
        for name, fn in calls.items():
            host[name] = host_us(fn)
            log(f"host per call, {name}: {statistics.median(host[name]):.1f} us")
        med = {name: statistics.median(v) for name, v in host.items()}
        profile_calls(lambda: op(x, w), record)
        record |= {"host_us": host, "host_median_us": med,
                   "dispatch_overhead_us": med["op"] - med["bare_cuLaunchKernel"],
                   "dispatch_overhead_out_us": med["op_out"] - med["bare_cuLaunchKernel"]}
    except Exception as exc:  # keep the shapes' record; say what failed
        record["host_error"] = f"{type(exc).__name__}: {exc}"[:500]
        log(f"host timing failed: {record['host_error']}")


if __name__ == "__main__":
    main()

"""The MoE layer (examples/moe: five components linked into one persistent kernel) against its
monolithic control and the torch implementations of the same layer.

    python bench/moe.py [--out DIR] [--reps N] [--shapes NAME ...]

For each shape (Qwen3-30B-A3B-like and Mixtral-like, 4096 and 16384 tokens; routing from
real-looking hidden states, examples/moe/shapes.py; `*_skew`: a quarter of the experts get no
token): verify (child process, NaN-poisoned output, fp32 reference of the whole layer) first; then,
on the same inputs, interleaved with an L2 flush before every launch: the linked kernel, its
monolithic control (one translation unit of every component's source, the permute's included),
torch's sorted tokens + two `torch._grouped_mm` under torch.compile, and the eager loop over
experts. Each is checked against the reference before it is timed. Writes
results/moe-<gpu|cpu>-<stamp>.json with `shapes.<name>.verify.passed` and `shapes.<name>.ratios`
(`linked_over_monolithic_paired`, `speedup_vs_torch_grouped_mm`, `speedup_vs_torch_eager`).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from harness import (check_run, example, load_result, log, paired_ratio, paired_ratio_ci, quiet_console,
                     time_interleaved, verify_record, warm_up, write_result)

import pipelink
from pipelink.runtime import Runtime

shapes = example("moe/shapes.py")

# name -> (model, tokens, skew)
SHAPES = {f"{model}_{tokens}": (model, tokens, 0.0) for model in shapes.MODELS for tokens in shapes.TOKENS}
SHAPES["qwen3_30b_a3b_4096_skew"] = ("qwen3_30b_a3b", 4096, shapes.SKEW)
# The linked-vs-monolithic pairs: as many as fit in PAIR_SECONDS (at most PAIR_MAX); each launch
# also pays about FLUSH_MS outside its window (the L2 flush and the queued spin).
PAIR_SECONDS, PAIR_MAX, FLUSH_MS = 30.0, 4000, 0.2


def _launcher(spec: Path, mode: str, args: list, workspaces_of: Runtime | None = None):
    """A launcher of ``spec`` linked in ``mode``, its kernel and runtime; on ``workspaces_of``'s workspaces
    where given (the control on the linked kernel's: the grid-synchronised counters at one address,
    so the pair compares code; bench/NOTES.md, fifth session)."""
    kernel = pipelink.link(spec, mode=mode)
    runtime = Runtime(kernel.cubin, kernel.manifest)
    if workspaces_of is not None:
        runtime.share_workspaces(workspaces_of)
    return (lambda: runtime.launch_arrays(args)), kernel, runtime



def run_shape(name: str, work: Path, packages: Path, open_packages: Path, reps: int, band: int | None) -> dict:
    import torch
    reference = example("moe/reference.py")  # torch: loaded where the GPU work starts (--plot needs none)
    model, tokens, skew = SHAPES[name]
    hidden, inter, experts, k = shapes.MODELS[model]
    band = shapes.default_band(model) if band is None else band
    record = {"model": model, "tokens": tokens, "skew": skew,
              "shape": {"H": hidden, "I": inter, "E": experts, "topk": k},
              "flops": reference.flops(tokens, hidden, inter, experts, k), "band": band}
    spec = shapes.write_spec(work / name / "pipelink", packages, model, tokens, facts={"band": band})
    log(f"{name}: verify")
    v = pipelink.verify(spec, out_dir=work / name / "run", bench=False, seeds=2, timeout=120, console=quiet_console())
    record["verify"] = verify_record(v)
    log(f"  verify: {'passed' if v.passed else 'FAILED ' + str(record['verify']['rungs'])}")
    if not v.passed:
        return record

    x, wr, w1, w2 = shapes.inputs(model, tokens, skew=skew, device="cuda")
    ids, _ = reference.route(x.float() @ wr.float().t(), k)
    record["experts_without_tokens"] = int(experts - ids.unique().numel())
    ref = reference.moe_reference(x, wr, w1, w2, k)
    y = torch.full_like(x, float("nan"))
    args = [x, wr, w1.reshape(-1, hidden), w2.reshape(-1, inter), y]
    fns, kernels = {}, {}
    fns["pipelink"], kernels["pipelink"], linked_runtime = _launcher(spec, "pipelink", args)
    control = shapes.write_spec(work / name / "monolithic", open_packages, model, tokens, facts={"band": band})
    fns["monolithic"], kernels["monolithic"], _ = _launcher(control, "monolithic", args, linked_runtime)
    # A fresh compile for this shape alone: Dynamo keeps one cache per function across shapes and,
    # from the second shape on, compiles a dynamic-shape graph whose speed differs by up to 30 % (Qwen
    # 16384 tokens 4.1 ms after Qwen 4096, 5.4-5.7 ms after the Mixtral shapes: bench/NOTES.md), so
    # the baseline depended on the order of --shapes.
    torch._dynamo.reset()
    grouped = torch.compile(reference.moe_grouped_mm, dynamic=False)
    fns["torch_grouped_mm"] = lambda: grouped(x, wr, w1, w2, k)
    fns["torch_eager"] = lambda: reference.moe_eager(x, wr, w1, w2, k)
    record["checks"] = {label: check_run(fn, y if label in kernels else None, ref) for label, fn in fns.items()}
    from pipelink.backend.inspect import inspect_cubin, normalized_sass
    sass = {mode: normalized_sass(inspect_cubin(kn.cubin, kn.plan.entry)[0].instructions) for mode, kn in kernels.items()}
    record["sass_identical"] = sass["pipelink"] == sass["monolithic"]
    failed = {label: c for label, c in record["checks"].items() if not c["passed"]}
    if "pipelink" in failed or "monolithic" in failed:
        log(f"  not timed: a check failed {failed}")
        return record
    for label in failed:  # a torch path that disagrees with the reference is reported, not timed
        log(f"  {label}: not timed: {failed[label]}")
        fns.pop(label)
    warm_up(fns["pipelink"], seconds=1.0)
    times = time_interleaved(fns, reps)
    record["times"] = times
    med = {label: t["median_ms"] for label, t in times.items()}
    record["tflops"] = {label: record["flops"] / t / 1e9 for label, t in med.items()}
    # Linked against monolithic once more, the two alone (no torch launch between a pair), for as
    # many pairs as fit in PAIR_SECONDS: their ratio is the claim "linking costs nothing", and a
    # claim within 0.2 % needs the interval of the median to be that narrow.
    pair_reps = max(reps, min(PAIR_MAX, int(PAIR_SECONDS / (2 * (med["pipelink"] + FLUSH_MS) / 1000))))
    pairs = time_interleaved({"pipelink": fns["pipelink"], "monolithic": fns["monolithic"]}, pair_reps, seed=1)
    record["pair_times"] = pairs
    ratios = {"linked_over_monolithic": med["pipelink"] / med["monolithic"],
              "linked_over_monolithic_paired": paired_ratio(pairs["pipelink"], pairs["monolithic"]),
              "linked_over_monolithic_paired_ci95": paired_ratio_ci(pairs["pipelink"], pairs["monolithic"]),
              "linked_over_monolithic_paired_with_torch": paired_ratio(times["pipelink"], times["monolithic"])}
    for label in ("torch_grouped_mm", "torch_eager"):
        if label in med:
            ratios[f"speedup_vs_{label}"] = med[label] / med["pipelink"]
    record["ratios"] = ratios
    log("  " + ", ".join(f"{lb} {t:.4f} ms ({record['tflops'][lb]:.0f} TFLOP/s)" for lb, t in med.items()))
    log("  " + ", ".join(f"{key} {value:.4f}" for key, value in ratios.items() if not key.endswith("_ci95"))
        + " (95 %% interval %.4f-%.4f, %d pairs)" % (*ratios["linked_over_monolithic_paired_ci95"], pair_reps))
    return record


def plot(result: dict, path: Path) -> Path | None:
    """TFLOP/s of each implementation per shape (layer FLOPs / median time), beside the linked kernel."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    names = [n for n, r in result["shapes"].items() if "tflops" in r]
    if not names:
        return None
    kinds = ["pipelink", "monolithic", "torch_grouped_mm", "torch_eager"]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.2
    for j, kind in enumerate(kinds):
        vals = [result["shapes"][n]["tflops"].get(kind, 0) for n in names]
        ax.bar([i + (j - 1.5) * width for i in range(len(names))], vals, width, label=kind)
    for i, n in enumerate(names):
        ratio = result["shapes"][n]["ratios"].get("speedup_vs_torch_grouped_mm")
        if ratio:
            ax.annotate(f"{ratio:.2f}x", (i - 1.5 * width, result["shapes"][n]["tflops"]["pipelink"]),
                        ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(names)), names, rotation=12, fontsize=8)
    ax.set_ylabel("TFLOP/s (layer FLOPs / median time)")
    gpu = (result.get("machine") or {}).get("gpu", "?")
    ax.set_title(f"MoE layer, one linked kernel vs torch, {gpu} ({str(result.get('git_revision'))[:10]})", fontsize=10)
    ax.legend(fontsize=7, ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="results folder (default bench/results)")
    ap.add_argument("--reps", type=int, default=200, help="interleaved launches of each")
    ap.add_argument("--shapes", nargs="*", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--plot", type=Path, nargs="+", metavar="JSON", help="only draw the plot of these results "
                    "(their shapes together) beside the first, and exit")
    ap.add_argument("--band", type=int, default=None, help="the permute's tile order: 0 m-tile major, else bands "
                    "of this many m-tiles walked n-tile by n-tile (default: shapes.default_band, by the model)")
    args = ap.parse_args()
    if args.plot:
        results = [load_result(p) for p in args.plot]
        merged = {**results[0], "shapes": {n: r for x in results for n, r in x["shapes"].items()}}
        log(f"wrote {plot(merged, args.plot[0].with_suffix('.png'))}")
        return
    work = Path(tempfile.mkdtemp(prefix="pipelink-moe-"))
    log("packing the five MoE components (the permute --closed), and open copies for the monolithic control")
    packages = shapes.pack(work)
    open_packages = shapes.pack(work / "open", sources=True)
    result = {"example": "examples/moe", "reps": args.reps, "shapes": {}}
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    for name in args.shapes:
        result["shapes"][name] = run_shape(name, work, packages, open_packages, args.reps, args.band)
        path = write_result("moe", result, args.out, stamp=stamp)  # a cut-off run keeps its data
        png = plot(load_result(path), path.with_suffix(".png"))
    log(f"wrote {path}" + (f" and {png}" if png else ""))


if __name__ == "__main__":
    main()

"""The Llama-3.2-1B decode block (examples/llama_decode: qkv + RoPE + cache append, attention,
o-projection + residual, linked into one kernel) with each attention component, against its
monolithic control and the torch paths a user runs today.

    python bench/llama_decode.py [--out DIR] [--reps N] [--batches 1 8 64] [--contexts 16 512 4096]
                                 [--resume RESULT]  # add the configurations RESULT lacks (a cut table)

For each (batch, context, attention): verify (child process, float64 reference, the caches' new
rows included) first; then, on one set of inputs (Llama 3's scaled RoPE frequencies, weights at
1/sqrt(2048), random caches), each path checked against the reference and timed interleaved with
an L2 flush before every launch: the linked kernel and torch (the same block with
`scaled_dot_product_attention(enable_gqa=True)`: eager, under torch.compile, and replayed from a
CUDA graph; ratios against the fastest of the three). Then, apart, the linked kernel against its
monolithic control as the paper table times them (harness.time_roles: each loaded several times,
with the linked kernel again in the control's place as the A/A; `roles` holds the loads' times). The read bandwidth of the
same run (a 2 GiB `x.sum()`) is the floor's denominator: `pct_of_read_bw` is the K/V bytes read
over the median time, over that bandwidth; at context 4096 also `attention_phase_ms` and
`attention_pct_of_read_bw`, the attention component's own time inside the block (PHASE_CONTEXTS), beside the
attention alone as others do it on the same caches (`attention_anchors_ms`: SDPA with GQA from a CUDA graph, and
FlashInfer's batch decode where it imports; attention_anchors). Writes results/llama_decode-<gpu|cpu>-<stamp>.json with
`configs` (each: `batch`, `context`, `attention`, `verify_passed`, `median_ms`, `pct_of_read_bw`,
`linked_over_monolithic_paired`, `speedup_vs_torch`) and `read_bw_GBps`, and a plot.

Then, per batch, the crossover sweep (`--sweep`, contexts 16 .. 4096 in powers of two): both
attention components linked at each context, each output checked against the reference, timed
interleaved; `crossover.<batch>` holds the times, long / short, and `crosses_at`, the context
where long overtakes short (interpolated). The plot draws the sweep where there is one.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import numpy as np

from harness import (check, check_run, example, load_result, log, paired_ratio, quiet_console, resumed,
                     time_interleaved, time_roles, verify_record, warm_up, write_result)

import pipelink
from pipelink.runtime import Runtime

shapes = example("llama_decode/shapes.py")
HIDDEN, HEADS, KV_HEADS, HEAD_DIM = 2048, 32, 8, 64
# Contexts where the attention phase is also timed alone: the block cut short after qkv and after the
# attention, interleaved with the rest, their launch-by-launch difference the phase's time inside the
# one kernel (its grid barrier included). At 4096 the K/V read is most of the block, and this says how
# much of the read bandwidth the attention component itself reaches, apart from the projections; at every
# context it is what the attention anchors (SDPA, FlashInfer: attention_anchors) are set against.
PHASE_CONTEXTS = (16, 512, 4096)
SWEEP = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)  # contexts of the crossover sweep
ROLE_SECONDS = 6.0  # linked against its control, per configuration (as bench/paper_table.py --seconds)


def llama3_inv_freq():
    """Llama 3.2's RoPE frequencies: theta 500000 with the "llama3" scaling (factor 32, low / high
    frequency factors 1 and 4, original context 8192), as the model's config has them."""
    import torch
    inv = 1.0 / (500000.0 ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float64) / HEAD_DIM))
    factor, low, high, old = 32.0, 1.0, 4.0, 8192
    wavelen = 2 * math.pi / inv
    smooth = (old / wavelen - low) / (high - low)
    scaled = torch.where(wavelen > old / low, inv / factor, inv)
    middle = (wavelen <= old / low) & (wavelen >= old / high)
    scaled = torch.where(middle, (1 - smooth) * inv / factor + smooth * inv, scaled)
    return scaled.float()


def inputs(batch: int, context: int, seed: int = 0):
    import torch
    gen = torch.Generator(device="cuda").manual_seed(seed)
    rows = shapes.cache_rows(context)

    def normal(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen, device="cuda") * scale).to(torch.bfloat16)

    return {"x": normal(batch, HIDDEN), "wqkv": normal(HIDDEN + 1024, HIDDEN, scale=HIDDEN ** -0.5),
            "inv_freq": llama3_inv_freq().cuda(), "k_cache": normal(batch, KV_HEADS, rows, HEAD_DIM),
            "v_cache": normal(batch, KV_HEADS, rows, HEAD_DIM), "wo": normal(HIDDEN, HIDDEN, scale=HIDDEN ** -0.5)}


def torch_block(x, wqkv, inv_freq, k_cache, v_cache, wo, pos: int):
    """The block as torch code: projection, RoPE, cache append in place, SDPA with GQA, projection."""
    import torch
    import torch.nn.functional as F
    b = x.shape[0]
    qkv = x @ wqkv.t()
    q = qkv[:, :2048].view(b, HEADS, HEAD_DIM)
    k = qkv[:, 2048:2560].view(b, KV_HEADS, HEAD_DIM)
    v = qkv[:, 2560:].view(b, KV_HEADS, HEAD_DIM)
    angle = pos * inv_freq
    cos, sin = torch.cos(angle), torch.sin(angle)

    def rope(t):
        lo, hi = t[..., :32].float(), t[..., 32:].float()
        return torch.cat([lo * cos - hi * sin, hi * cos + lo * sin], dim=-1).to(t.dtype)

    q, k = rope(q), rope(k)
    k_cache[:, :, pos] = k
    v_cache[:, :, pos] = v
    o = F.scaled_dot_product_attention(q.unsqueeze(2), k_cache[:, :, :pos + 1], v_cache[:, :, :pos + 1],
                                       enable_gqa=True)
    return x + o.reshape(b, HIDDEN) @ wo.t()


def attention_anchors(batch: int, context: int, k_cache, v_cache) -> tuple[dict, dict]:
    """The attention alone as others do it, on the block's caches (after its append: context + 1 rows), a random
    query per head: torch's SDPA with GQA replayed from a CUDA graph (its launch cost out, as the block's is one
    launch), and where it imports FlashInfer's batch decode (BatchDecodeWithPagedKVCacheWrapper, tensor cores, as
    it recommends for 4 query heads per KV head) reading the same caches as one HND page per sequence, no copy.
    Returns the launchers (attn_sdpa_graph, attn_flashinfer) and what was checked or why one is missing."""
    import torch
    import torch.nn.functional as F
    n = context + 1
    gen = torch.Generator(device="cuda").manual_seed(7)
    q = torch.randn(batch, HEADS, 1, HEAD_DIM, generator=gen, device="cuda").to(torch.bfloat16)
    keys, values = k_cache[:, :, :n], v_cache[:, :, :n]
    want = F.scaled_dot_product_attention(q.double(), keys.double(), values.double(), enable_gqa=True)
    fns = {"attn_sdpa_graph": _graphed(lambda: F.scaled_dot_product_attention(q, keys, values, enable_gqa=True))}
    notes = {"attn_sdpa_graph": check(fns["attn_sdpa_graph"]().float(), want.float())}
    try:
        import flashinfer
    except Exception as exc:  # not on this machine (its wheel and needs travel in parts: GPU.md)
        notes["attn_flashinfer"] = f"not importable: {type(exc).__name__}: {exc}"[:300]
        return fns, notes
    workspace = torch.empty(128 << 20, dtype=torch.uint8, device="cuda")
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, kv_layout="HND", use_tensor_cores=True)
    wrapper.plan(torch.arange(batch + 1, dtype=torch.int32, device="cuda"),
                 torch.arange(batch, dtype=torch.int32, device="cuda"),
                 torch.full((batch,), n, dtype=torch.int32, device="cuda"), HEADS, KV_HEADS, HEAD_DIM,
                 k_cache.shape[2], pos_encoding_mode="NONE", q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
    qf, out = q.reshape(batch, HEADS, HEAD_DIM), torch.empty(batch, HEADS, HEAD_DIM, dtype=torch.bfloat16,
                                                            device="cuda")
    fns["attn_flashinfer"] = lambda: wrapper.run(qf, (k_cache, v_cache), out=out)
    notes["attn_flashinfer"] = check(fns["attn_flashinfer"]().float(), want.reshape(batch, HEADS, HEAD_DIM).float())
    notes["flashinfer_version"] = flashinfer.__version__
    return fns, notes


def _graphed(fn):
    """``fn`` captured once in a CUDA graph (its tensors static), replayed by the returned callable."""
    import torch
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return (lambda: (graph.replay(), out)[1])


def cut_launchers(spec: Path, keeps, ins: dict, k_cache, v_cache, y) -> dict:
    """A launcher of the block cut short after each phase list in ``keeps`` (shapes.prefix_spec), keyed
    "qkv", "qkv+attn", ...: each linked and loaded here, handed the block's own operands by name."""
    operands = {"qkv.x": ins["x"], "qkv.wqkv": ins["wqkv"], "qkv.inv_freq": ins["inv_freq"], "qkv.k_cache": k_cache,
                "qkv.v_cache": v_cache, "oproj.wo": ins["wo"], "oproj.y": y}
    fns = {}
    for keep in keeps:
        cut = pipelink.link(shapes.prefix_spec(spec, keep))
        runtime = Runtime(cut.cubin, cut.manifest)
        fns["+".join(keep)] = (lambda r=runtime, a=[operands[p.name] for p in runtime.params]: r.launch_arrays(a))
    return fns


def run_config(batch: int, context: int, attention: str, work: Path, packages: Path, reps: int, read_bw: float,
               reference) -> dict:
    import torch
    name = f"b{batch}_l{context}_{attention}"
    # the facts it links with beyond its shape (the projections' layout: shapes.chosen_facts)
    record = {"name": name, "batch": batch, "context": context, "attention": attention,
              "choices": shapes.chosen_facts(batch=batch)}
    spec = shapes.write_spec(work / name, packages, batch, context, attention)
    v = pipelink.verify(spec, out_dir=work / name / "run", bench=False, seeds=1, timeout=60, console=quiet_console())
    record["verify"] = verify_record(v)
    record["verify_passed"] = v.passed
    log(f"{name}: verify {'passed' if v.passed else 'FAILED ' + str(record['verify']['rungs'])}")
    if not v.passed:
        return record
    ins = inputs(batch, context)
    y_ref, k_ref, v_ref = reference.decode_block(ins["x"], ins["wqkv"], ins["inv_freq"], ins["k_cache"],
                                                 ins["v_cache"], ins["wo"], context)
    kernels, fns, runtimes = {}, {}, {}
    y = torch.full_like(ins["x"], float("nan"))
    caches = {mode: (ins["k_cache"].clone(), ins["v_cache"].clone()) for mode in ("pipelink", "monolithic")}
    for mode in ("pipelink", "monolithic"):
        kernels[mode] = pipelink.link(spec, mode=mode)
        runtimes[mode] = runtime = Runtime(kernels[mode].cubin, kernels[mode].manifest)
        args = [ins["x"], ins["wqkv"], ins["inv_freq"], *caches[mode], ins["wo"], y]
        fns[mode] = (lambda r=runtime, a=args: r.launch_arrays(a))
    # the control on the linked kernel's workspaces: the grid-barrier counters at one address, so the
    # ratio compares code, not where each load's counters lie (bench/NOTES.md, fifth session)
    runtimes["monolithic"].share_workspaces(runtimes["pipelink"])
    if context in PHASE_CONTEXTS:  # the block cut short after qkv and after the attention (see PHASE_CONTEXTS)
        cuts = cut_launchers(spec, (("qkv",), ("qkv", "attn")), ins, ins["k_cache"].clone(), ins["v_cache"].clone(), y)
        fns["phase_qkv"], fns["phase_qkv_attn"] = cuts["qkv"], cuts["qkv+attn"]
    record["checks"] = {}
    for mode in ("pipelink", "monolithic"):
        y.fill_(float("nan"))
        fns[mode]()
        torch.cuda.synchronize()
        record["checks"][mode] = check(y, y_ref)
        record["checks"][mode + "_k_cache"] = check(caches[mode][0], k_ref)
    torch_caches = (ins["k_cache"].clone(), ins["v_cache"].clone())
    targs = (ins["x"], ins["wqkv"], ins["inv_freq"], *torch_caches, ins["wo"], context)
    torch._dynamo.reset()  # a fresh compile per configuration (bench/moe.py says why)
    compiled = torch.compile(torch_block, dynamic=False)
    fns["torch_eager"] = lambda: torch_block(*targs)
    fns["torch_compile"] = lambda: compiled(*targs)
    fns["torch_graph"] = _graphed(lambda: torch_block(*targs))
    for label in ("torch_eager", "torch_compile", "torch_graph"):
        record["checks"][label] = check(fns[label](), y_ref)
    anchors, record["anchor_checks"] = attention_anchors(batch, context, *torch_caches)
    for label, fn in anchors.items():
        if record["anchor_checks"][label]["passed"]:
            fns[label] = fn
        else:
            log(f"  {label}: not timed: {record['anchor_checks'][label]}")
    failed = {k: c for k, c in record["checks"].items() if not c["passed"]}
    for label in [k for k in failed if k.startswith("torch")]:
        log(f"  {label}: not timed: {failed[label]}")
        fns.pop(label)
    if any(not k.startswith("torch") for k in failed):
        log(f"  not timed: a check failed {failed}")
        return record
    # timed on one set of caches: each mode's cache append was checked above on a copy of its own, and
    # both write the same row, so sharing changes no result, while two copies put the K/V reads of the
    # two modes at different addresses (the paper table, on one set of operands, had 64:512 long_wt at
    # 1.0013 where this table, on two copies, had 0.9840: bench/NOTES.md, sixth session). The checked
    # linked kernel is timed against torch; linked against its control is timed after, apart, as the
    # paper table times it (harness.time_roles: 16 loads a role for a short block), on the checked linked
    # kernel's workspaces and without the torch paths' long host slack.
    args = [ins["x"], ins["wqkv"], ins["inv_freq"], *caches["pipelink"], ins["wo"], y]

    def load(role):
        kernel = kernels["monolithic" if role == "monolithic" else "pipelink"]
        runtime = Runtime(kernel.cubin, kernel.manifest)
        runtime.share_workspaces(runtimes["pipelink"])
        return runtime

    del fns["monolithic"]
    from pipelink.backend.inspect import inspect_cubin, normalized_sass
    sass = {m: normalized_sass(inspect_cubin(k.cubin, k.plan.entry)[0].instructions) for m, k in kernels.items()}
    record["sass_identical"] = sass["pipelink"] == sass["monolithic"]
    warm_up(fns["pipelink"], seconds=0.5)
    # ~1 ms of GPU spin before each launch: torch eager enqueues a dozen ops from Python, and in the
    # run of ab1bf17 the 0.13 ms default let host time into the window (torch.compile median 248 us,
    # min 28 us at B = 1, L = 16; pipelink's own median 39 us, min 27, once).
    times = time_interleaved(fns, reps, host_slack_cycles=1 << 21)
    record["times"] = times
    med = {label: t["median_ms"] for label, t in times.items()}
    record["median_ms"] = med["pipelink"]
    kv_bytes = 2 * batch * KV_HEADS * (context + 1) * HEAD_DIM * 2
    weight_bytes = (HIDDEN + 1024) * HIDDEN * 2 + HIDDEN * HIDDEN * 2
    record["kv_bytes"], record["weight_bytes"] = kv_bytes, weight_bytes
    record["pct_of_read_bw"] = 100 * kv_bytes / (med["pipelink"] * 1e-3) / read_bw
    record["pct_of_read_bw_all_bytes"] = 100 * (kv_bytes + weight_bytes) / (med["pipelink"] * 1e-3) / read_bw
    roles = time_roles(load, lambda runtime: runtime.launch_arrays(args), ROLE_SECONDS)
    record["roles"] = {key: roles.pop(key) for key in ("reps", "medians_ms", "times")}
    record.update(roles)
    if "phase_qkv_attn" in times:  # launch by launch: (qkv + attention) - (qkv alone), neighbours in time
        diffs = np.asarray(times["phase_qkv_attn"]["times_ms"]) - np.asarray(times["phase_qkv"]["times_ms"])
        record["attention_phase_ms"] = float(np.median(diffs))
        record["attention_pct_of_read_bw"] = 100 * kv_bytes / (record["attention_phase_ms"] * 1e-3) / read_bw
        log(f"  the attention phase alone: {record['attention_phase_ms'] * 1e3:.1f} us, "
            f"{record['attention_pct_of_read_bw']:.1f} % of the read bandwidth (K/V)")
    anchors_ms = {label: med[label] for label in med if label.startswith("attn_")}
    if "attention_phase_ms" in record:
        anchors_ms["pipelink_attention_phase"] = record["attention_phase_ms"]
    if anchors_ms:  # the attention alone, ours inside the block and the anchors, as % of the read bandwidth (K/V)
        record["attention_anchors_ms"] = anchors_ms
        record["attention_anchors_pct_of_read_bw"] = {k: 100 * kv_bytes / (t * 1e-3) / read_bw
                                                      for k, t in anchors_ms.items()}
        log("  attention alone: " + ", ".join(f"{k} {t * 1e3:.1f} us" for k, t in anchors_ms.items()))
    torch_labels = [k for k in med if k.startswith("torch")]
    if torch_labels:
        fastest = min(torch_labels, key=med.get)
        record["fastest_torch"] = fastest
        record["speedup_vs_torch"] = med[fastest] / med["pipelink"]
    log(f"  {', '.join(f'{k} {t:.4f} ms' for k, t in med.items())}")
    log(f"  linked/monolithic {record['linked_over_monolithic_paired']:.4f}, {record['pct_of_read_bw']:.1f} % of the "
        f"read bandwidth (K/V), " + (f"{record['speedup_vs_torch']:.2f}x {record['fastest_torch']}"
                                     if "speedup_vs_torch" in record else "no torch path passed"))
    return record


def crossover(batch: int, contexts, work: Path, packages: Path, reps: int, reference, long: str = "long") -> dict:
    """Both attention components linked at each context of the sweep, each output checked against
    the reference (NaN-poisoned first), then the two timed interleaved: where long overtakes short.
    `crosses_at` interpolates the context where long / short passes 1, linearly in log(context) and
    log(ratio) between the two sweep points around it (None: no crossing in the sweep)."""
    import torch
    sweep = {"contexts": [], "short_ms": [], "long_ms": [], "long_over_short": [], "checked": []}
    for context in contexts:
        ins = inputs(batch, context)
        y_ref, _, _ = reference.decode_block(ins["x"], ins["wqkv"], ins["inv_freq"], ins["k_cache"], ins["v_cache"],
                                             ins["wo"], context)
        y = torch.empty_like(ins["x"])
        fns, checked = {}, True
        for label, attention in (("short", "short"), ("long", long)):
            spec = shapes.write_spec(work / f"sweep_b{batch}_l{context}_{attention}", packages, batch, context, attention)
            kernel = pipelink.link(spec)
            runtime = Runtime(kernel.cubin, kernel.manifest)
            args = [ins["x"], ins["wqkv"], ins["inv_freq"], ins["k_cache"].clone(), ins["v_cache"].clone(), ins["wo"], y]
            fns[label] = (lambda r=runtime, a=args: r.launch_arrays(a))
            checked &= check_run(fns[label], y, y_ref)["passed"]
        if not checked:
            log(f"  sweep B={batch} L={context}: an output failed its check; not timed")
            sweep["contexts"].append(context)
            for key in ("short_ms", "long_ms", "long_over_short"):
                sweep[key].append(None)
            sweep["checked"].append(False)
            continue
        times = time_interleaved(fns, reps, host_slack_cycles=1 << 21)
        sweep["contexts"].append(context)
        sweep["short_ms"].append(times["short"]["median_ms"])
        sweep["long_ms"].append(times["long"]["median_ms"])
        sweep["long_over_short"].append(paired_ratio(times["long"], times["short"]))
        sweep["checked"].append(True)
        log(f"  sweep B={batch} L={context}: short {times['short']['median_ms'] * 1e3:.1f} us, "
            f"long {times['long']['median_ms'] * 1e3:.1f} us (long / short {sweep['long_over_short'][-1]:.3f})")
    sweep["crosses_at"] = crossing(sweep["contexts"], sweep["long_over_short"])
    sweep["long_component"] = shapes.ATTENTION[long]
    return sweep


def crossing(contexts, ratios) -> float | None:
    """The context where ratio (long / short) falls through 1, interpolated in log-log."""
    points = [(c, r) for c, r in zip(contexts, ratios) if r is not None]
    for (c0, r0), (c1, r1) in zip(points, points[1:]):
        if r0 >= 1 > r1:
            f = math.log(r0) / (math.log(r0) - math.log(r1))
            return 2 ** (math.log2(c0) + f * (math.log2(c1) - math.log2(c0)))
    return None


def read_bandwidth() -> float:
    """Bytes per second of a streaming read in this run: x.sum() over 2 GiB of fp32."""
    import torch
    big = torch.ones(1 << 29, dtype=torch.float32, device="cuda")
    median = time_interleaved({"read_2GiB": lambda: big.sum()}, 20)["read_2GiB"]["median_ms"]
    return big.numel() * 4 / (median * 1e-3)


def plot(result: dict, path: Path) -> Path | None:
    """Median time against context, one line per (batch, attention), torch's fastest dashed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rows = [c for c in result["configs"] if "median_ms" in c]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(8, 5))
    sweeps = result.get("crossover") or {}
    colors = plt.get_cmap("tab10").colors
    for n, batch in enumerate(sorted({c["batch"] for c in rows})):
        sweep = sweeps.get(str(batch))
        swept = {"short": "short_ms"}  # attention -> the sweep's key, where the sweep has it
        if sweep:
            long = next(k for k, v in shapes.ATTENTION.items() if v == sweep.get("long_component", "attn_long"))
            swept[long] = "long_ms"
        for attention, style in (("short", "-o"), ("long", "-s"), ("long_wt", "-^")):
            if sweep and attention in swept:  # the sweep's finer contexts when there is one
                pts = [(c, t * 1e3) for c, t in zip(sweep["contexts"], sweep[swept[attention]]) if t is not None]
            else:
                pts = sorted((c["context"], c["median_ms"] * 1e3) for c in rows
                             if c["batch"] == batch and c["attention"] == attention)
            if pts:
                ax.plot(*zip(*pts), style, color=colors[n], markersize=4,
                        label=f"B={batch} attn_{attention}" + (" (sweep)" if sweep else ""))
        if sweep and sweep.get("crosses_at"):
            ax.axvline(sweep["crosses_at"], color=colors[n], linewidth=0.6, linestyle="--")
        torch_us = {}  # the same torch path is timed beside each attention: one point per context, the faster
        for c in rows:
            if c["batch"] == batch and "fastest_torch" in c:
                us = c["times"][c["fastest_torch"]]["median_ms"] * 1e3
                torch_us[c["context"]] = min(us, torch_us.get(c["context"], us))
        pts = sorted(torch_us.items())
        if pts:
            ax.plot(*zip(*pts), ":", color=colors[n], label=f"B={batch} torch (fastest)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("context (cached tokens)")
    ax.set_ylabel("median us per decode step")
    gpu = (result.get("machine") or {}).get("gpu", "?")
    ax.set_title(f"Llama-3.2-1B attention block, decode, {gpu} ({str(result.get('git_revision'))[:10]})",
                 fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="results folder (default bench/results)")
    ap.add_argument("--reps", type=int, default=400, help="interleaved launches of each")
    ap.add_argument("--batches", type=int, nargs="*", default=list(shapes.BATCHES))
    ap.add_argument("--contexts", type=int, nargs="*", default=list(shapes.CONTEXTS))
    # The long-context component by default is attn_long_wt: at B = 64, L = 4096 its phase read K/V at 99 % of
    # the read bandwidth where attn_long's took 174 us for the same bytes (results/llama_phases-gpu-20261202T121349
    # .json). attn_long stays linkable and verified (--attention long).
    ap.add_argument("--attention", nargs="*", default=["short", "long_wt"], choices=sorted(shapes.ATTENTION))
    ap.add_argument("--sweep", type=int, nargs="*", default=list(SWEEP),
                    help="contexts of the crossover sweep (both attentions, linked, at each batch); none to skip")
    ap.add_argument("--sweep-reps", type=int, default=150, help="interleaved launches of each in the sweep")
    ap.add_argument("--sweep-long", default="long_wt", choices=sorted(set(shapes.ATTENTION) - {"short"}),
                    help="the long-context component the sweep sets against attn_short")
    ap.add_argument("--plot", type=Path, help="only draw the plot of this result, and exit")
    ap.add_argument("--resume", type=Path, help="continue this result of the same revision (a table cut by a "
                    "device call's limit): its configurations and sweeps are kept, the rest run and are added")
    args = ap.parse_args()
    if args.plot:
        log(f"wrote {plot(load_result(args.plot), args.plot.with_suffix('.png'))}")
        return
    previous = resumed(args.resume, "llama_decode") if args.resume else None  # refused before any packing
    reference = example("llama_decode/reference.py")
    work = Path(tempfile.mkdtemp(prefix="pipelink-llama-"))
    log("packing the decode block's components")
    packages = shapes.pack(work)
    read_bw = read_bandwidth()
    log(f"read bandwidth {read_bw / 1e9:.0f} GB/s")
    # choices: the facts every configuration links with beyond its shape (the projections' spread, shapes.CHOICES;
    # each configuration's own, with what depends on the batch, under its `choices`)
    result = {"example": "examples/llama_decode", "reps": args.reps, "read_bw_GBps": read_bw / 1e9,
              "choices": shapes.chosen_facts(), "configs": []}
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    if args.resume:
        result, stamp = previous, args.resume.stem.rsplit("-", 1)[-1]
        args.out = args.out or args.resume.parent
    # each call's read bandwidth beside its configurations: a resumed table's calls are separate processes
    result.setdefault("calls", []).append({"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                           "read_bw_GBps": read_bw / 1e9})
    done = {(c["batch"], c["context"], c["attention"]) for c in result["configs"]}
    path = None
    for batch in args.batches:
        for context in args.contexts:
            for attention in args.attention:
                if (batch, context, attention) in done:
                    continue
                record = run_config(batch, context, attention, work, packages, args.reps, read_bw, reference)
                record["read_bw_GBps"] = read_bw / 1e9
                result["configs"].append(record)
                path = write_result("llama_decode", result, args.out, stamp=stamp)  # a cut-off run keeps its data
    if args.sweep:
        result.setdefault("crossover", {})
        for batch in [b for b in args.batches if str(b) not in result["crossover"]]:
            log(f"crossover sweep, B = {batch}")
            result["crossover"][str(batch)] = crossover(batch, args.sweep, work, packages, args.sweep_reps, reference,
                                                        args.sweep_long)
            path = write_result("llama_decode", result, args.out, stamp=stamp)
            at = result["crossover"][str(batch)]["crosses_at"]
            log(f"  B = {batch}: long overtakes short at L = {at:.0f}" if at else f"  B = {batch}: no crossing")
    png = plot(load_result(path), path.with_suffix(".png")) if path else None
    log(f"wrote {path}" + (f" and {png}" if png else ""))


if __name__ == "__main__":
    main()

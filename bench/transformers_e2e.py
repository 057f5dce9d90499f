"""Llama-3.2-1B decode in Hugging Face transformers, stock and routed to pipelink (issue 50).

    python bench/transformers_e2e.py [--out DIR] [--configs 1:16 8:512 ...] [--new 64] [--reps 3] [--resume RESULT]

The model is built from Llama-3.2-1B's config with random weights (seed 0, bf16): no download. For each
(batch, context), one prompt of `context` random tokens per sequence (no padding), greedy `generate()` of --new
tokens on a static cache whose rows are rounded up to 64 (max_cache_len). Paths, on one model:
- stock_eager: transformers' own code, static cache, generate's compile disabled;
- stock_compile: the same with generate's own torch.compile of the decode step (reduce-overhead: CUDA graphs),
  the fastest path transformers documents;
- pipelink, pipelink_compile: the model after pipelink.integrations.transformers.route (the attention half of
  every decoder layer on the decode block at each decode step), eager and compiled the same way.
Time per generated token: (time of generate(new) - time of generate(1)) / (new - 1), each the median of --reps
runs after one warm run, so the prefill and the compile are left out. Correctness: each path's tokens against
stock_eager's (`tokens_match`, the least count of equal tokens over the sequences) and, where they differ first,
the stock logits' gap between its top two tokens at that step.
The floor: the weight bytes one decode step reads (every layer's projections and the tied embedding as the
head) plus the K/V rows it attends to, over the read bandwidth measured in the same run (a 2 GiB x.sum()).
Writes results/transformers_e2e-<gpu|cpu>-<stamp>.json with llama[] (batch, context, tokens_match,
ms_per_token per path, speedup_vs_fastest_stock, floor_ms_per_token).
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from pathlib import Path

from harness import log, resumed, write_result

CONFIGS = ("1:16", "1:512", "1:4096", "8:16", "8:512", "8:4096", "64:16", "64:512", "64:4096")
LAYERS, HIDDEN, INTER, VOCAB, KV_HEADS, HEAD_DIM = 16, 2048, 8192, 128256, 8, 64


def llama_1b():
    import torch
    import transformers
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=LAYERS,
        num_attention_heads=32, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, max_position_embeddings=131072,
        rms_norm_eps=1e-5, tie_word_embeddings=True, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 8192})
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(config)
    return model.to(torch.bfloat16).eval()


def weight_bytes() -> int:
    per_layer = (HIDDEN + 2 * KV_HEADS * HEAD_DIM) * HIDDEN + HIDDEN * HIDDEN + 3 * INTER * HIDDEN
    return 2 * (LAYERS * per_layer + VOCAB * HIDDEN)


def read_bandwidth() -> float:
    import torch
    x = torch.empty(2 ** 29, dtype=torch.float32, device="cuda").uniform_()
    x.sum()
    times = []
    for _ in range(20):
        torch.cuda.synchronize()
        t = time.perf_counter()
        x.sum()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return x.numel() * 4 / statistics.median(times)


def generate(model, ids, new: int, rows: int, compiled: bool, scores: bool = False):
    return model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                          cache_implementation="static", max_cache_len=rows, disable_compile=not compiled,
                          return_dict_in_generate=True, output_scores=scores, pad_token_id=0)


def timed(fn, reps: int) -> list[float]:
    import torch
    fn()
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t) * 1e3)
    return out


def run_path(model, ids, new: int, rows: int, compiled: bool, reps: int) -> dict:
    full = timed(lambda: generate(model, ids, new, rows, compiled), reps)
    one = timed(lambda: generate(model, ids, 1, rows, compiled), reps)
    out = generate(model, ids, new, rows, compiled, scores=True)
    per_token = (statistics.median(full) - statistics.median(one)) / (new - 1)
    return {"ms_full": full, "ms_prefill_and_one": one, "ms_per_token": per_token,
            "tokens": out.sequences[:, ids.shape[1]:], "scores": out.scores}


def agreement(tokens, ref, scores) -> dict:
    """The least count of equal tokens over the sequences, and where a sequence first differs the reference's gap
    between its top two logits at that step (a near tie explains a divergence; a wide gap does not)."""
    equal = (tokens == ref)
    out = {"tokens_match": int(equal.sum(dim=1).min()), "of": int(tokens.shape[1]), "first_differences": []}
    for seq in range(tokens.shape[0]):
        wrong = (~equal[seq]).nonzero()
        if len(wrong):
            step = int(wrong[0])
            top = scores[step][seq].float().topk(2).values
            out["first_differences"].append({"sequence": seq, "step": step, "logit_gap": float(top[0] - top[1])})
    return out


def run_config(model, batch: int, context: int, new: int, reps: int, read_bw: float) -> dict:
    import torch
    from pipelink.integrations.transformers import route
    rows = -(-(context + new) // 64) * 64
    ids = torch.randint(1, VOCAB, (batch, context), generator=torch.Generator().manual_seed(batch * 7 + context))
    ids = ids.cuda()
    record = {"batch": batch, "context": context, "new_tokens": new, "cache_rows": rows, "paths": {}}
    runs = {}
    for label, compiled in (("stock_eager", False), ("stock_compile", True)):
        runs[label] = run_path(model, ids, new, rows, compiled, reps)
        log(f"  {label}: {runs[label]['ms_per_token']:.3f} ms/token")
    if not getattr(model, "_pipelink_routed", False):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            record["routing"] = str(route(model))
        model._pipelink_routed = True
    for label, compiled in (("pipelink", False), ("pipelink_compile", True)):
        runs[label] = run_path(model, ids, new, rows, compiled, reps)
        log(f"  {label}: {runs[label]['ms_per_token']:.3f} ms/token")
    ref = runs["stock_eager"]
    for label, r in runs.items():
        record["paths"][label] = {"ms_per_token": r["ms_per_token"], "ms_full": r["ms_full"],
                                  "ms_prefill_and_one": r["ms_prefill_and_one"],
                                  **agreement(r["tokens"], ref["tokens"], ref["scores"])}
    record["ms_per_token"] = {label: r["ms_per_token"] for label, r in runs.items()}
    record["tokens_match"] = min(p["tokens_match"] for p in record["paths"].values())
    fastest_stock = min(("stock_eager", "stock_compile"), key=lambda k: runs[k]["ms_per_token"])
    ours = min(("pipelink", "pipelink_compile"), key=lambda k: runs[k]["ms_per_token"])
    record["fastest_stock"], record["fastest_pipelink"] = fastest_stock, ours
    record["speedup_vs_fastest_stock"] = runs[fastest_stock]["ms_per_token"] / runs[ours]["ms_per_token"]
    kv_bytes = 2 * LAYERS * batch * KV_HEADS * (context + new // 2) * HEAD_DIM * 2  # the middle step's rows
    record["floor_bytes"] = weight_bytes() + kv_bytes
    record["floor_ms_per_token"] = record["floor_bytes"] / read_bw * 1e3
    log(f"  {ours} {record['speedup_vs_fastest_stock']:.3f}x {fastest_stock}; floor "
        f"{record['floor_ms_per_token']:.3f} ms; tokens match {record['tokens_match']}/{new}")
    return record


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--configs", nargs="+", default=list(CONFIGS), help="batch:context pairs")
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--resume", type=Path, default=None, help="add the configurations this result lacks")
    args = p.parse_args()
    import torch
    import transformers
    result = resumed(args.resume, "transformers_e2e") if args.resume else {}
    result.setdefault("llama", [])
    result["transformers_version"], result["torch_version"] = transformers.__version__, torch.__version__
    done = {(r["batch"], r["context"]) for r in result["llama"]}
    result["read_bw_GBps"] = read_bandwidth() / 1e9
    log(f"read bandwidth {result['read_bw_GBps']:.0f} GB/s")
    model = llama_1b()
    for config in args.configs:
        batch, context = (int(v) for v in config.split(":"))
        if (batch, context) in done:
            continue
        log(f"llama batch {batch}, context {context}")
        result["llama"].append(run_config(model, batch, context, args.new, args.reps, result["read_bw_GBps"] * 1e9))
        path = write_result("transformers_e2e", result, args.out, stamp=result.get("stamp"))
        result.setdefault("stamp", path.stem.split("-")[-1])
        log(f"wrote {path}")


if __name__ == "__main__":
    main()

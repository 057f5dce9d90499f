"""Why the routed Llama decodes slowly, and how far its hidden state is from stock's (issue 50), in one run:

1. each path's last hidden state at the first decode steps against the same model in fp32 (stock bf16, pipelink),
   so that pipelink's distance from stock can be read against stock's own rounding;
2. cProfile of the routed model's eager decode (where the host time of a step goes);
3. dynamo's recompiles and graph breaks while generate() compiles the routed model's steps, and the time of each.

    python bench/experiments/tf_decode_probe.py --out DIR      (on the GPU; writes DIR/tf_decode_probe.json + .txt)
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import io
import json
import logging
import os
import pstats
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def hidden_steps(model, ids, rows: int, steps: int):
    out = model.generate(ids, max_new_tokens=steps, min_new_tokens=steps, do_sample=False,
                         cache_implementation="static", max_cache_len=rows, disable_compile=True,
                         output_hidden_states=True, return_dict_in_generate=True, pad_token_id=0)
    # hidden_states[s][-1]: the last layer's output (after the final norm) at step s (0: the prefill)
    return out.sequences[:, ids.shape[1]:], [h[-1][:, -1].float() for h in out.hidden_states]


def rel(a, b) -> float:
    import torch
    return float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b))


def main() -> None:
    import torch
    from transformers_e2e import generate, llama_1b
    from pipelink.integrations.transformers import route, unroute
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--context", type=int, default=16)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    text = io.StringIO()
    result = {"batch": args.batch, "context": args.context}
    model = llama_1b()
    rows = 128

    def save() -> None:  # after each part: the run of 2026-12-07 crashed in the compiled part and kept nothing
        (args.out / "tf_decode_probe.json").write_text(json.dumps(result, indent=1, default=str))
        (args.out / "tf_decode_probe.txt").write_text(text.getvalue())
    ids = torch.randint(1, 32000, (args.batch, args.context), generator=torch.Generator().manual_seed(5)).cuda()

    # 1. hidden states against fp32, at the decode steps where every path still has the same inputs
    wide = copy.deepcopy(model).float()
    tok32, h32 = hidden_steps(wide, ids, rows, 6)
    del wide
    torch.cuda.empty_cache()
    tok_stock, h_stock = hidden_steps(model, ids, rows, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        route(model)
    tok_pl, h_pl = hidden_steps(model, ids, rows, 6)
    same = [s for s in range(1, 6) if torch.equal(tok32[:, :s], tok_stock[:, :s]) and
            torch.equal(tok32[:, :s], tok_pl[:, :s])]
    result["hidden"] = [{"step": s, "stock_vs_fp32": rel(h_stock[s], h32[s]), "pipelink_vs_fp32": rel(h_pl[s], h32[s]),
                         "pipelink_vs_stock": rel(h_pl[s], h_stock[s])} for s in same]
    print("hidden:", json.dumps(result["hidden"], indent=1), flush=True)
    save()

    # 2. where an eager routed step's host time goes
    generate(model, ids, 4, rows, False)
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.enable()
    generate(model, ids, 9, rows, False)
    torch.cuda.synchronize()
    prof.disable()
    result["eager_9_tokens_ms"] = (time.perf_counter() - t) * 1e3
    for key in ("cumulative", "tottime"):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats(key).print_stats(45)
        text.write(f"=== cProfile by {key} (routed, eager, 9 tokens) ===\n{s.getvalue()}\n")
    save()

    # 3. the compiled routed steps: recompiles and graph breaks, and each generate's time
    log = io.StringIO()
    handler = logging.StreamHandler(log)
    torch._logging.set_logs(recompiles=True, graph_breaks=True, perf_hints=True)  # perf_hints: cudagraphs skipped
    for name in ("torch._dynamo", "torch._logging", "torch._inductor"):
        logging.getLogger(name).addHandler(handler)
    for limit in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, 1024)
    times = []
    for _ in range(3):
        torch.cuda.synchronize()
        t = time.perf_counter()
        generate(model, ids, 9, rows, True)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e3)
    result["compiled_9_tokens_ms"] = times
    prof = cProfile.Profile()
    prof.enable()
    generate(model, ids, 9, rows, True)
    torch.cuda.synchronize()
    prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(45)
    text.write(f"=== cProfile by cumulative (routed, compiled, 9 tokens, 4th run) ===\n{s.getvalue()}\n")
    from torch._dynamo.utils import counters
    result["dynamo_counters"] = {k: dict(v) for k, v in counters.items() if v}
    text.write("=== dynamo log (routed, compiled) ===\n" + log.getvalue()[-60000:])
    unroute(model)
    save()
    print(json.dumps({k: v for k, v in result.items() if k != "dynamo_counters"}, indent=1), flush=True)
    print(json.dumps(result["dynamo_counters"], indent=1)[:4000], flush=True)


if __name__ == "__main__":
    main()
    # Leave without tearing the interpreter down: on the H100 image (torch 2.11) the teardown of torch and the CUDA
    # bindings' objects segfaulted after every result was written (2026-12-07), which made the call look failed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)

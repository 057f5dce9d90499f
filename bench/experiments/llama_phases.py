"""Where a Llama decode step's time goes: the block linked whole and linked cut short after each
phase (qkv alone; qkv + attention; all three), timed interleaved, with and without an L2 flush,
and replayed from a CUDA graph (the launch's host side out of the picture).

    python bench/experiments/llama_phases.py [--out DIR] [--configs 1:16:short 64:4096:long ...]
    (a config may add facts: 1:16:short:gemv_split=8)
    ncu --section SpeedOfLight --section WarpStateStats -k regex:pl_llama \
        python bench/experiments/llama_phases.py --launch-only qkv --configs 1:16:short

The differences between the prefixes are each phase's cost inside the one kernel (its grid barrier
included); the flushed and unflushed columns tell the weights' HBM read from the rest.
`--launch-only PREFIX` launches that prefix's kernel three times per configuration and times
nothing (for a profiler). Writes results/llama_phases-<gpu>-<stamp>.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import example, graph_replay_us, log, time_interleaved, write_result  # noqa: E402


shapes = example("llama_decode/shapes.py")


def main() -> None:
    import torch
    import llama_decode as block  # bench/, on the path above
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--configs", nargs="*", default=["1:16:short", "64:16:short", "64:4096:long", "1:4096:long"])
    ap.add_argument("--launch-only", choices=["qkv", "qkv+attn", "qkv+attn+oproj"])
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pipelink-llama-phases-"))
    packages = shapes.pack(work)
    result = {"configs": []}
    for config in args.configs:
        batch, context, attention, *choice = config.split(":")
        batch, context = int(batch), int(context)
        facts = {name: int(value) for name, value in (f.split("=") for f in choice[0].split(","))} if choice else {}
        folder = work / config.replace(":", "_").replace(",", "_").replace("=", "")
        spec = shapes.write_spec(folder, packages, batch, context, attention, facts)
        ins = block.inputs(batch, context)
        y = torch.empty_like(ins["x"])
        fns = block.cut_launchers(spec, (("qkv",), ("qkv", "attn"), ("qkv", "attn", "oproj")), ins, ins["k_cache"],
                                  ins["v_cache"], y)
        if args.launch_only:
            for _ in range(3):
                fns[args.launch_only]()
            torch.cuda.synchronize()
            continue
        record = {"batch": batch, "context": context, "attention": attention, "facts": facts}
        for flush in (True, False):
            times = time_interleaved(fns, args.reps, host_slack_cycles=1 << 21) if flush else _unflushed(fns, args.reps)
            record["flushed" if flush else "warm_l2"] = {k: t["median_ms"] * 1e3 for k, t in times.items()}
        record["graph_warm_l2"] = {k: graph_replay_us(fn) for k, fn in fns.items()}
        log(f"{config}: " + "; ".join(f"{kind}: " + ", ".join(f"{k} {v:.1f} us" for k, v in record[kind].items())
                                      for kind in ("flushed", "warm_l2", "graph_warm_l2")))
        result["configs"].append(record)
    if not args.launch_only:
        log(f"wrote {write_result('llama_phases', result, args.out)}")


def _unflushed(fns: dict, reps: int) -> dict:
    """time_interleaved without the flush: each launch right after the others (L2 warm)."""
    import torch
    from pipelink.verify import timing
    events = {n: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
              for n in fns}
    for i in range(reps):
        for name, fn in fns.items():
            torch.cuda._sleep(1 << 21)
            events[name][i][0].record()
            fn()
            events[name][i][1].record()
    torch.cuda.synchronize()
    return {n: timing.summarize([s.elapsed_time(e) for s, e in ev]) for n, ev in events.items()}


if __name__ == "__main__":
    main()

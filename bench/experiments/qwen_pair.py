"""Linked vs monolithic at one shape, with the launch order and the output buffers swapped: tells a
difference that follows the code from one that follows the position in the loop or the buffer.

    PYTHONPATH=src python3 bench/experiments/qwen_pair.py [--shape qwen_gate_up_128] [--config 256,4,column_major,0,1]

Run 20261130T011205 (bench/NOTES.md) used the fixed, alternating order of that time; the harness now
shuffles the order every round, so "order" here is only the order the callables are listed in.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the harness and qwen_mlp
import qwen_mlp  # noqa: E402
from harness import RESULTS, example, log, paired_ratio, time_interleaved, warm_up, write_result  # noqa: E402
from qwen_mlp import shapes  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="qwen_gate_up_128")
    ap.add_argument("--config", default="256,4,column_major,0,1")
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    config = qwen_mlp.parse_config(args.config)
    shape = qwen_mlp.SHAPES[args.shape]
    work = Path(tempfile.mkdtemp(prefix="pl-qwen-pair-"))
    spec = shapes.write_spec(work / "spec", shapes.pack(work), shape, config)
    case = qwen_mlp.Case(shape, example("qwen_mlp/reference.py"))
    buffers = [case.output(case.cols), case.output(case.cols)]
    launchers = {(mode, buf): qwen_mlp.linked_launch(spec, mode, case, case.cols, y=buffers[buf])[0]
                 for mode in ("pipelink", "monolithic") for buf in (0, 1)}

    result = {"shape": args.shape, "config": list(config), "arrangements": {}}
    for order in (("pipelink", "monolithic"), ("monolithic", "pipelink")):
        for first_buf in (0, 1):
            fns = {f"{mode} (buffer {(first_buf + i) % 2})": launchers[mode, (first_buf + i) % 2]
                   for i, mode in enumerate(order)}
            warm_up(next(iter(fns.values())), 0.5)
            times = time_interleaved(fns, args.reps)
            names = list(fns)
            key = " then ".join(names)
            ratio = paired_ratio(times[names[0]], times[names[1]]) if "pipelink" in names[0] else \
                1 / paired_ratio(times[names[0]], times[names[1]])
            result["arrangements"][key] = {"medians_ms": {n: times[n]["median_ms"] for n in names},
                                           "linked_over_monolithic_paired": ratio}
            log(f"{key}: linked/monolithic {ratio:.4f}")
    write_result("qwen_pair", result, args.out)


if __name__ == "__main__":
    main()

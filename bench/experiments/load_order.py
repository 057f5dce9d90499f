"""Does a load's time follow its place in the load order? One configuration's linked cubin loaded
six times, then the monolithic control and the linked cubin in turn twice more (ten loads, all on
the first load's workspaces), timed interleaved: each load's median and its paired ratio to the
first. Run once by hand on the H200 (2026-12-03, llama/b8_l512_long_wt, where the paper table had
measured linked/monolithic 1.0082 with each cubin's three loads within 0.1 %):
`results/logs/load_order-gpu-20261203T034800.json`; bench/NOTES.md, seventh session.

    python bench/experiments/load_order.py CONFIG [CONFIG ...]   (names of bench/configs.py; Llama only)

Writes $OUT/load_order-<where>-<stamp>.json (OUT defaults to the current folder) through the harness:
command, date, GPU, revision, each load's summary, and every launch's time beside it.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import paired_ratio, rounds_for, time_interleaved, write_result  # noqa: E402

import configs  # noqa: E402  (bench/, on the path above)

ORDER = ["pipelink"] * 6 + ["monolithic", "pipelink", "monolithic", "pipelink"]


def main() -> None:
    import pipelink
    from pipelink.spec import load_spec
    from pipelink.verify.child import Kernel
    work = Path(tempfile.mkdtemp(prefix="pipelink-load-order-"))
    specs = dict(configs.build(["llama"], work, progress=print))
    out = {}
    for name in sys.argv[1:]:
        files = {}
        for mode in ("pipelink", "monolithic"):
            kernel = pipelink.link(specs[name], mode=mode)
            files[mode] = {"cubin": str(work / f"{mode}.cubin"), "manifest": str(work / f"{mode}.json")}
            Path(files[mode]["cubin"]).write_bytes(kernel.cubin)
            Path(files[mode]["manifest"]).write_text(json.dumps(kernel.manifest))
        job = {"inputs": load_spec(specs[name]).verify.inputs}
        loads = {f"{i}_{mode}": Kernel(files[mode], job) for i, mode in enumerate(ORDER)}
        first = loads["0_pipelink"]
        for kernel in loads.values():
            if kernel is not first:
                kernel.runtime.share_workspaces(first.runtime)
        tensors = {**first.inputs(seed=0), **first.outputs()}
        fns = {n: (lambda k=k: k.launch(tensors)) for n, k in loads.items()}
        reps = rounds_for(fns["0_pipelink"], 10.0, len(fns), flush_ms=0.2, bounds=(100, 3000))
        times = time_interleaved(fns, reps, seed=2)
        out[name] = {n: {**times[n], "over_0": paired_ratio(times[n], times["0_pipelink"])} for n in fns}
        print(name, json.dumps({n: (round(r["median_ms"] * 1e3, 3), round(r["over_0"], 4)) for n, r in out[name].items()},
                               indent=1), flush=True)
    write_result("load_order", {"order": ORDER, "configs": out}, Path(os.environ.get("OUT", ".")))


if __name__ == "__main__":
    main()

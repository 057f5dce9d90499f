"""The timing child of `pipelink tune`: every verified configuration of one bucket, timed interleaved
launch by launch in this one process (L2 flushed before each launch), their summaries written to the job's
"out". The parent watches it with a timeout.

    python -m pipelink.tune.child JOB.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..fsutil import write_atomic


def main(argv: list[str]) -> int:
    from ..verify.child import Kernel
    from ..verify.timing import time_interleaved
    job = json.loads(Path(argv[0]).read_text())
    launchers = {}
    for k in job["kernels"]:
        kernel = Kernel({"cubin": k["cubin"], "manifest": k["manifest"]}, {"inputs": job["inputs"]})
        tensors = {**kernel.inputs(100), **kernel.outputs()}
        launchers[k["label"]] = (lambda kernel=kernel, tensors=tensors: kernel.launch(tensors))
    summaries = time_interleaved(launchers, job["reps"])
    write_atomic(job["out"], json.dumps(summaries))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

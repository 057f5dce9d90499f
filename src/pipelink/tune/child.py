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
        if job.get("low_end"):  # the same kernel on operands cut to the bucket's smallest size (its maps encoded so)
            launchers[f"{k['label']}@low"] = _at_low_end(kernel, tensors, job["low_end"])
    summaries = time_interleaved(launchers, job["reps"])
    write_atomic(job["out"], json.dumps(summaries))
    return 0


def _at_low_end(kernel, tensors: dict, low_end: list[dict]):
    """A launcher of ``kernel`` with each listed operand cut to ``size`` along ``dim`` (fresh contiguous tensors, as
    a caller's of that size would be), its TMA maps encoded at those shapes, as pipelink.op launches it."""
    cut = dict(tensors)
    for c in low_end:
        cut[c["param"]] = cut[c["param"]].narrow(c["dim"], 0, c["size"]).contiguous()
    shapes = {c["param"]: list(cut[c["param"]].shape) for c in low_end}
    arrays = kernel.abi.arguments(cut)
    return lambda: kernel.runtime.launch_arrays(arrays, shapes=shapes)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""GPU timing with CUDA events: warm-up, L2 flushed before every timed launch, many repeats,
median and spread; optional CUDA-graph replay. The timing runs in the verify child (needs torch);
its arithmetic (summarize, speedup) needs numpy only and is tested on the CPU."""

from __future__ import annotations

import random
import statistics

import numpy as np


def summarize(times_ms: list[float]) -> dict:
    """The median (what every ratio and roofline figure uses: one slow launch does not move it), the 10th and
    90th percentiles (numpy's linear interpolation), the extremes and the raw times."""
    arr = np.asarray(times_ms, dtype=np.float64)
    return {"median_ms": float(np.median(arr)), "p10_ms": float(np.percentile(arr, 10)),
            "p90_ms": float(np.percentile(arr, 90)), "min_ms": float(arr.min()), "max_ms": float(arr.max()),
            "runs": int(arr.size), "times_ms": [round(float(t), 5) for t in arr]}


def speedup(baseline_ms: float, kernel_ms: float) -> float:
    """How many times faster the kernel is than a baseline, from their medians: baseline / kernel (above 1: the
    kernel is faster; a slower kernel is below 1)."""
    return baseline_ms / kernel_ms


# GPU cycles of spin queued before each timed launch (about 0.1 ms): while the GPU spins, the host
# enqueues the start event, the launch and the end event, so host-side launch overhead (tens of us
# in Python) never shows as idle time inside the timed window of a short kernel.
HOST_SLACK_CYCLES = 1 << 18


def l2_flush(nbytes: int):
    """A function that evicts L2 by reading a buffer of ``nbytes`` (twice the L2). Reading leaves L2
    clean: a flush that writes (``fill_``) leaves tens of MB of dirty lines, which the timed kernel
    then pays to write back (about 12 us of DRAM time on an H200, 10-15 % of a 0.07 ms memory-bound
    kernel; bench/NOTES.md, demo bandwidth)."""
    import torch
    buf = torch.zeros(max(nbytes // 4, 1), dtype=torch.float32, device="cuda")
    return lambda: buf.sum()


def time_launches(launch, *, reps: int = 20, warmup: int = 3, flush_bytes: int = 0, sets: int = 1) -> list[float]:
    """``launch(i)`` runs input set ``i % sets`` on the current stream. Before each timed launch an
    L2-sized buffer is read (outside the timed window) so every launch starts cold, and the
    GPU is kept busy while the host enqueues the launch (HOST_SLACK_CYCLES)."""
    import torch
    flush = l2_flush(flush_bytes) if flush_bytes else None
    for i in range(warmup):
        launch(i % sets)
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        if flush is not None:
            flush()
        torch.cuda._sleep(HOST_SLACK_CYCLES)
        starts[i].record()
        launch(i % sets)
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def time_graph(launch, *, per_graph: int = 20, replays: int = 10) -> float:
    """Milliseconds per launch when ``per_graph`` launches are captured in one CUDA graph and the
    graph is replayed (launch overhead mostly gone; no L2 flush inside the graph)."""
    import torch
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        launch(0)  # warm-up on the capture stream
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(per_graph):
            launch(0)
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / per_graph)
    return statistics.median(times)


def l2_flush_bytes() -> int:
    """Twice the device's L2: what a flush reads so that no line of the last launch stays."""
    import torch
    return 2 * torch.cuda.get_device_properties(0).L2_cache_size


def time_interleaved(fns: dict, reps: int, *, write_flush: bool = False, seed: int = 0,
                     host_slack_cycles: int = HOST_SLACK_CYCLES) -> dict:
    """Each callable of ``fns`` timed ``reps`` times with CUDA events, launch by launch in turn: the
    H200's clock drifts under sustained load, and interleaving makes the drift fall on every callable
    alike. The order is shuffled every round (seeded), so what a position costs (which callable ran
    just before, the round's first launch) falls on all alike too; a fixed or reversed order left the
    first pair of each round 0.5 % apart (bench/NOTES.md, demo_bw run 155825). Before each launch, L2
    is flushed by reading twice its size (``write_flush``: by writing it, which leaves dirty lines
    the timed kernel writes back; kept to show that cost), and a GPU spin of ``host_slack_cycles`` is
    queued so the host's launch overhead never shows as idle GPU time inside a short kernel's window
    (raise it where the host is slow to enqueue: a torch path of many ops, or a process whose
    torch.compile workers share the CPU; a timing's min far below its median is the sign)."""
    import torch
    nbytes = l2_flush_bytes()
    if write_flush:
        written = torch.empty(nbytes, dtype=torch.uint8, device="cuda")

        def flush(i):
            written.fill_(i & 0xFF)
    else:
        read = l2_flush(nbytes)

        def flush(i):
            read()
    events = {name: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                     for _ in range(reps)] for name in fns}
    for fn in fns.values():
        fn()
    torch.cuda.synchronize()
    order = random.Random(seed)
    items = list(fns.items())
    for i in range(reps):
        order.shuffle(items)
        for name, fn in items:
            flush(i)
            torch.cuda._sleep(host_slack_cycles)
            start, end = events[name][i]
            start.record()
            fn()
            end.record()
    torch.cuda.synchronize()
    return {name: summarize([s.elapsed_time(e) for s, e in ev]) for name, ev in events.items()}

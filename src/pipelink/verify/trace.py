"""Per-component timeline from a traced kernel (`pipelink verify --trace`).

The traced glue stores, for every block, tile iteration and call site, the %globaltimer value
(ns) before and after the call, written by thread 0 of the role. Here that buffer becomes time per
component, a timeline picture, and the same timeline as a Chrome trace-event file (timeline.trace.json:
open it in Perfetto, ui.perfetto.dev, or chrome://tracing; one track per block and role). Unreached slots
stay 0.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np

from ..fsutil import write_atomic


def analyze(trace: np.ndarray, slots: list[dict], kernel_ms: float) -> dict:
    """``trace``: uint64 [grid, iters, slots, 2]. Returns per-component times and the coverage of
    the kernel time by the busiest role's components."""
    start = trace[..., 0].astype(np.int64)
    end = trace[..., 1].astype(np.int64)
    valid = (start > 0) & (end >= start)
    dur = np.where(valid, end - start, 0)                      # [grid, iters, slots]
    per_block = dur.sum(axis=1)                                # [grid, slots] ns
    t0 = start[valid].min()
    span_ms = (end[valid].max() - t0) / 1e6
    components = []
    for i, s in enumerate(slots):
        # When each block that ran the component last left it (us since t0): the phases of a kernel whose blocks meet
        # at grid barriers end with the slowest block, so the spread says how long the others waited for it.
        # Each block's end (block_end_us, None where it did not run the component) and its time inside it (block_us:
        # the work it had, and for a component that starts with a grid barrier, its wait there) say whether the
        # slowest are the ones with more work.
        ran = valid[..., i].any(axis=1)
        block_end = (np.where(valid[..., i], end[..., i], 0).max(axis=1) - t0) / 1e3
        last_end = block_end[ran]
        ends = ({"min": float(last_end.min()), "p10": float(np.percentile(last_end, 10)),
                 "median": float(np.median(last_end)), "p90": float(np.percentile(last_end, 90)),
                 "max": float(last_end.max())} if last_end.size else None)
        components.append({"label": s["label"], "role": s["role"],
                           "mean_ms_per_block": float(per_block[:, i].mean() / 1e6),
                           "max_ms_per_block": float(per_block[:, i].max() / 1e6),
                           "calls": int(valid[..., i].sum()), "blocks": int(ran.sum()), "end_us": ends,
                           "block_end_us": [round(float(x), 3) if r else None for x, r in zip(block_end, ran)],
                           "block_us": [round(float(x) / 1e3, 3) if r else None for x, r in zip(per_block[:, i], ran)]})
    roles = {}
    for role in dict.fromkeys(s["role"] for s in slots):
        idx = [i for i, s in enumerate(slots) if s["role"] == role]
        busy = per_block[:, idx].sum(axis=1)                   # ns per block spent in this role's calls
        critical = int(busy.argmax())
        roles[role] = {"critical_block": critical, "critical_block_ms": float(busy[critical] / 1e6),
                       "split_ms": {slots[i]["label"]: float(per_block[critical, i] / 1e6) for i in idx}}
    busiest = max(roles, key=lambda r: roles[r]["critical_block_ms"])
    coverage = roles[busiest]["critical_block_ms"] / kernel_ms
    return {"components": components, "roles": roles, "trace_span_ms": float(span_ms), "kernel_ms": kernel_ms,
            "busiest_role": busiest, "coverage": float(coverage), "t0_ns": int(t0)}


def plot_timeline(trace: np.ndarray, slots: list[dict], path: Path, title: str, max_blocks: int = 24) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    start = trace[..., 0].astype(np.int64)
    end = trace[..., 1].astype(np.int64)
    valid = (start > 0) & (end >= start)
    t0 = start[valid].min()
    roles = list(dict.fromkeys(s["role"] for s in slots))
    colors = plt.get_cmap("tab10").colors
    blocks = min(trace.shape[0], max_blocks)
    fig, ax = plt.subplots(figsize=(10, 0.32 * blocks * len(roles) + 1.5))
    labels, row = [], 0
    for b in range(blocks):
        for role in roles:
            for i, s in enumerate(slots):
                if s["role"] != role:
                    continue
                for it in range(trace.shape[1]):
                    if valid[b, it, i]:
                        ax.barh(row, (end[b, it, i] - start[b, it, i]) / 1e3, left=(start[b, it, i] - t0) / 1e3,
                                color=colors[i % 10], edgecolor="black", linewidth=0.3, height=0.8)
            labels.append(f"block {b} {role}")
            row += 1
    ax.set_yticks(range(row))
    ax.set_yticklabels(labels, fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("µs since the first traced call")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[i % 10]) for i in range(len(slots))]
    ax.legend(handles, [s["label"] for s in slots], fontsize=7, loc="lower right")
    ax.set_title(title)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return write_atomic(path, buf.getvalue())


def chrome_trace(trace: np.ndarray, slots: list[dict], path: Path, title: str) -> Path:
    """The traced calls as trace events (the Trace Event Format's complete events, "ph": "X"): one track per block
    and role ("block 3 producer"), each call an event named by its component, timestamps in µs since the first
    traced call. Every block is written (the picture shows the first few)."""
    start = trace[..., 0].astype(np.int64)
    end = trace[..., 1].astype(np.int64)
    valid = (start > 0) & (end >= start)
    t0 = int(start[valid].min())
    roles = list(dict.fromkeys(s["role"] for s in slots))
    events: list[dict] = [{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": title}}]
    for b in range(trace.shape[0]):
        for r, role in enumerate(roles):
            events.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": b * len(roles) + r,
                           "args": {"name": f"block {b} {role}"}})
    blocks, iters, slot_ids = np.nonzero(valid)
    for b, it, i in zip(blocks.tolist(), iters.tolist(), slot_ids.tolist()):
        s = slots[i]
        events.append({"ph": "X", "name": s["label"], "cat": s["role"], "pid": 0,
                       "tid": b * len(roles) + roles.index(s["role"]),
                       "ts": (int(start[b, it, i]) - t0) / 1e3, "dur": (int(end[b, it, i]) - int(start[b, it, i])) / 1e3,
                       "args": {"block": b, "iteration": it}})
    doc = {"traceEvents": events, "displayTimeUnit": "ns", "otherData": {"title": title, "t0_globaltimer_ns": t0}}
    return write_atomic(path, json.dumps(doc, separators=(",", ":")))

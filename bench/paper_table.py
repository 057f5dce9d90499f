"""The paper's table (issue 16): every configuration of the case studies (bench/configs.py)
verified in both modes and timed linked against its monolithic control, with the same kernel's
A/A spread of the same run as the noise band, and the SASS of the two compared.

    python bench/paper_table.py [--out DIR] [--only FAMILY,...] [--budget-s S] [--seconds S] [--jobs N] [--new]

Per configuration: link both ways and compare the normalized SASS (bench/sass_compare.py); run
`pipelink verify` on each (watched child, NaN-poisoned outputs, the spec's reference). That half
runs for --jobs configurations at once, in worker processes (a batch); when the whole batch is
done, each of its configurations is timed in this process, one after another, with nothing else
on the GPU: three roles, each loaded several times, in rotation (linked, monolithic, linked_again,
linked, ...): 16 loads a role for a kernel under 0.125 ms, 3 for a longer one (harness.loads_for);
the linked cubin, its monolithic control, and the linked cubin again standing in for the control
(A/A); every load launched interleaved with the others, L2 flushed, the order shuffled every round.
`linked_over_monolithic_paired` is the median over rounds of the mean of the linked loads' times
over the mean of the monolithic loads', with a bootstrap 95 % interval; `aa_paired`
is the same figure for linked_again over linked, and `aa_noise` is |1 - aa_paired|: the A/A goes
through exactly what the comparison goes through, with the same code on both sides. Why loads
matter: a set of loads of two cubins with the same SASS can sit apart by 0.8 % at 30 us while each
cubin's own loads agree within 0.1 %, and the next set of the same two cubins by -0.2 %
(bench/NOTES.md, seventh session); one load a role, as in the tables before 2026-12-03, drew that
once, and three loads a role left a short kernel's ratio uncertain by +-0.5 to 0.9 % (eighth
session). All loads launch on one set of workspaces, the first linked load's (`workspaces`: "shared";
"none" where the link has none): each load would otherwise have its grid-barrier counters at an
address of its own, which can cost as much as linking (bench/NOTES.md, the fifth session). Rows
timed another way (`loads_per_role` other than harness.loads_for gives for their kernel's time, or
on workspaces of their own) are not kept from an earlier table.

Resumable: a device call starts a batch only while one as long as its longest still ends before
--budget-s seconds, and the next call continues in the same JSON (the newest paper_table result of
this revision in --out, unless --new), skipping what is recorded; a family whose rows are all
recorded is not packed again. Started at a new revision, it keeps the rows of the newest table of
another revision whose two links are the same bytes as then (manifest sha256, cubin hash inside;
the row says `measured_at`, and `series_file` names the times file holding its per-launch series) and
measures the others. Writes results/paper_table-gpu-<stamp>.json with `configs`
(each: `name`, `verify_passed`, `linked_over_monolithic_paired`, `aa_noise`, `sass_identical`) and
`summary`, and beside it a plot of every row's ratio with its interval and A/A (plot; `--plot RESULT`
draws one again).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from configs import BUILDERS, FAMILIES
from harness import (git_revision, load_interval, load_result, loads_for, log, machine, quiet_console,
                     results_newest_first, time_roles, verify_record, write_result)
from sass_compare import compare

import pipelink
from pipelink.abi import KernelABI
from pipelink.contract import DTYPES
from pipelink.runtime import workspace_layout

BOUND = 0.002        # the claim: linked within 0.2 % of monolithic
FLUSH_MS = 0.2       # what each launch pays outside its window (the L2 flush and the queued spin)
MIN_REPS, MAX_REPS = 100, 3000
FIRST_BATCH_S = 150.0  # what the first batch is assumed to take, before one has been measured
# Of the card's memory, what a configuration's verify may count on (the CUDA context, torch's caching allocator and
# the verify child's own take the rest)
MEMORY_SHARE = 0.85


def newest_on(gpu: str | None, folder: Path) -> Path | None:
    """The newest paper table measured on ``gpu`` (machine.gpu): an H100's table continues only an H100's, and keeps
    no row an H200 timed."""
    return next((p for p in results_newest_first("paper_table", folder)
                 if json.loads(p.read_text()).get("machine", {}).get("gpu") == gpu), None)


def verify_bytes(manifest: dict) -> int:
    """Device memory one configuration's verify holds at once, at most: every operand and workspace, a second copy of
    each output (the poisoned rerun's), and the reference's outputs in fp64."""
    total = 0
    for p in manifest["params"]:
        if p.get("host_mapped"):
            continue
        n = 1
        for d in p["shape"]:
            n *= int(d)
        size = DTYPES[p["dtype"]][1] if p["dtype"] in DTYPES else 1
        total += n * size + (n * (size + 8) if p["access"] != "read" and not p.get("workspace") else 0)
    return total


def device_memory() -> int:
    """The card's memory in bytes (0: no card)."""
    try:
        from cuda.bindings import driver
        driver.cuInit(0)
        return int(driver.cuDeviceTotalMem(driver.cuDeviceGet(0)[1])[1])
    except Exception:  # no driver here: nothing is left out for memory
        return 0


def time_config(runs: dict, spec, seconds: float) -> dict:
    """Every load of both cubins on one set of operands and on the first linked load's workspaces (only
    the code and where it lands differ), interleaved for about ``seconds`` (harness.time_roles)."""
    from pipelink.verify.child import Kernel
    job = {"inputs": spec.verify.inputs}
    if spec.verify.prepare:  # inputs that must agree (a backward's saved tensors): made as verify makes them
        from pipelink.verify.callables import resolve_ref
        plan = json.loads((runs["pipelink"] / "kernel" / f"{spec.link.name}.plan.json").read_text())
        job.update(prepare=resolve_ref(spec.verify.prepare, spec.path.parent), facts=plan["facts"])
    files = {mode: {"cubin": str(out / "kernel" / f"{spec.link.name}.cubin"),
                    "manifest": str(out / "kernel" / f"{spec.link.name}.manifest.json")} for mode, out in runs.items()}
    operands = {mode: [(p.name, tuple(p.shape), p.dtype) for p in
                       KernelABI.from_manifest(json.loads(Path(f["manifest"]).read_text())).operands]
                for mode, f in files.items()}
    if operands["pipelink"] != operands["monolithic"]:
        return {"error": f"the two kernels take different operands: {operands['pipelink']} vs {operands['monolithic']}"}
    first = Kernel(files["pipelink"], job)
    tensors = {**first.inputs(seed=0), **first.outputs()}

    def load(role):
        kernel = Kernel(files["monolithic" if role == "monolithic" else "pipelink"], job)
        kernel.runtime.share_workspaces(first.runtime)
        return kernel

    timed = time_roles(load, lambda kernel: kernel.launch(tensors), seconds, first=first, flush_ms=FLUSH_MS,
                       bounds=(MIN_REPS, MAX_REPS))
    return {**timed, "workspaces": "shared" if workspace_layout(first.manifest) else "none"}


def kept_row(earlier: dict) -> dict:
    """An earlier table's row, kept: its figures as they were (`measured_at`: when), its per-launch
    series left in the times file that already holds them (`series_file`; copied into every later
    table they made each about 1.3 MB larger)."""
    times = {name: {k: v for k, v in t.items() if k != "times_ms"} for name, t in earlier.get("times", {}).items()}
    return {**earlier, "times": times, "measured_at": earlier.get("measured_at", earlier["revision"])}


def prepare(name: str, spec_path: Path, work: Path, earlier: dict | None = None,
            memory: int = 0) -> tuple[dict, dict]:
    """A configuration's CPU and correctness half, in a worker process: the SASS of both links
    compared, both modes verified (each verify a watched child of its own). Nothing is timed here,
    so several configurations prepare at once; the timing runs alone (time_config).
    ``earlier``: this configuration's row from a table of another revision; when both links are
    the same bytes as then (manifests, with the cubins' sha256, equal) and were timed the same way
    (the loads a role harness.loads_for gives for its linked kernel's recorded time, on shared
    workspaces or the link has none), that row is kept as it was,
    saying so (`measured_at`), and nothing is verified or timed again. A configuration whose verify would need more
    than MEMORY_SHARE of the card's ``memory`` is left out, the row saying why (`left_out`)."""
    t0 = time.perf_counter()
    row = {"name": name, "family": name.split("/")[0]}
    need = verify_bytes(pipelink.link(spec_path).manifest)
    row["verify_bytes"] = need
    if memory and need > MEMORY_SHARE * memory:
        row.update(sass={}, sass_identical=False, verify_passed=False, prepare_seconds=time.perf_counter() - t0,
                   left_out=f"its verify needs about {need / 2 ** 30:.1f} GiB of device memory, over "
                            f"{MEMORY_SHARE:.0%} of the card's {memory / 2 ** 30:.0f} GiB")
        return row, {}
    row["sass"] = compare(name, spec_path)
    row["sass_identical"] = row["sass"]["sass_identical"]
    medians = (earlier or {}).get("medians_ms") or {}  # a table before the three roles has no linked0
    same_method = "linked0" in medians and earlier.get("loads_per_role") == loads_for(medians["linked0"]) and (
        not row["sass"]["workspaces"] or earlier.get("workspaces") == "shared")
    if same_method and earlier.get("sass", {}).get("manifest_sha256") == row["sass"]["manifest_sha256"]:
        return kept_row(earlier), {}
    runs, verified = {}, {}
    for mode in ("pipelink", "monolithic"):
        runs[mode] = work / name.replace("/", "__") / mode
        v = pipelink.verify(spec_path, mode=mode, out_dir=runs[mode], bench=False, seeds=1, timeout=120,
                            console=quiet_console())
        verified[mode] = verify_record(v)
    row["verify"] = verified
    row["verify_passed"] = all(v["passed"] for v in verified.values())
    row["prepare_seconds"] = time.perf_counter() - t0
    row["revision"] = git_revision()
    return row, runs


def finish(row: dict, runs: dict, spec_path: Path, seconds: float) -> dict:
    """The timing half of a prepared configuration, in this process, with nothing else on the GPU."""
    if "measured_at" in row:
        log(f"  {row['name']}: the same link as at {row['measured_at'][:10]}, its row kept")
        return row
    if "left_out" in row:
        log(f"  {row['name']}: left out: {row['left_out']}")
        return row
    t0 = time.perf_counter()
    if row["verify_passed"]:
        try:
            row.update(time_config(runs, pipelink.load_spec(spec_path), seconds))
        except Exception as exc:  # recorded, and the table goes on: one configuration's failure is not the run's
            row["error"] = f"timing failed: {type(exc).__name__}: {exc}"
    row["seconds"] = row["prepare_seconds"] + time.perf_counter() - t0
    said = (f"linked/monolithic {row['linked_over_monolithic_paired']:.4f} (A/A {row['aa_paired']:.4f}, "
            f"{row['loads_per_role']} loads a role, {row['reps']} rounds)" if "linked_over_monolithic_paired" in row
            else row.get("error", "not timed"))
    log(f"  {row['name']}: verify {'passed' if row['verify_passed'] else 'FAILED'}, "
        f"SASS {'identical' if row['sass_identical'] else 'DIFFERENT'}, {said}")
    return row


def prepare_batch(pool, batch: list[tuple[str, Path]], work: Path, earlier: dict,
                  memory: int = 0) -> list[tuple[dict, dict]]:
    """prepare() of every configuration of ``batch`` in ``pool``'s worker processes, all finished
    before it returns (so no verify child shares the GPU with a timing). Separate processes, not
    threads: a link changes the process's working folder (backend/nvjitlink.py)."""
    futures = [pool.submit(prepare, name, spec, work, earlier.get(name), memory) for name, spec in batch]
    prepared = []
    for (name, _), future in zip(batch, futures):
        try:
            prepared.append(future.result())
        except Exception as exc:  # a configuration that cannot be linked or verified is a row saying so
            prepared.append(({"name": name, "family": name.split("/")[0], "sass": {}, "sass_identical": False,
                              "verify_passed": False, "prepare_seconds": 0.0,
                              "error": f"prepare failed: {type(exc).__name__}: {exc}"}, {}))
    return prepared


def explain(row: dict) -> str | None:
    """Why a configuration above the bound is there: its SASS differs, or the bound lies inside
    its own noise (the interval of its ratio over launches or over loads, or the A/A spread), or
    nothing explains it."""
    r = row.get("linked_over_monolithic_paired")
    if r is None or abs(1 - r) <= BOUND:
        return None
    if not row["sass_identical"]:
        return f"SASS differs: {row['sass'].get('opcode_diff')}"
    lo, hi = row["linked_over_monolithic_paired_ci95"]
    if lo <= 1 + BOUND and hi >= 1 - BOUND:
        return f"identical SASS; the 95 % interval {lo:.4f}-{hi:.4f} reaches within 0.2 % of 1"
    loads = row.get("linked_over_monolithic_load_ci95") or load_interval(row.get("medians_ms", {}))
    if loads and loads[0] <= 1 + BOUND and loads[1] >= 1 - BOUND:
        return (f"identical SASS; the 95 % interval over its loads {loads[0]:.4f}-{loads[1]:.4f} reaches within "
                "0.2 % of 1")
    if row["aa_noise"] >= abs(1 - r):
        return f"identical SASS; the A/A spread ({row['aa_noise']:.4f}) is as large"
    return "UNEXPLAINED: identical SASS, outside its interval and its A/A spread"


def summarize(rows: list[dict]) -> dict:
    import numpy as np
    timed = [r for r in rows if "linked_over_monolithic_paired" in r]
    dev = np.asarray([abs(1 - r["linked_over_monolithic_paired"]) for r in timed])
    summary = {"configs": len(rows), "verified": sum(r["verify_passed"] for r in rows), "timed": len(timed),
               "left_out": [{"name": r["name"], "why": r["left_out"]} for r in rows if "left_out" in r],
               "sass_identical": sum(r["sass_identical"] for r in rows),
               "sass_identical_fraction": sum(r["sass_identical"] for r in rows) / len(rows) if rows else None}
    if timed:
        summary.update({"median_abs_deviation": float(np.median(dev)), "max_abs_deviation": float(dev.max()),
                        "median_aa_noise": float(np.median([r["aa_noise"] for r in timed])),
                        "above_bound": [{"name": r["name"], "linked_over_monolithic_paired":
                                         r["linked_over_monolithic_paired"], "why": explain(r)}
                                        for r in timed if explain(r)]})
    return summary


def plot(result: dict, path: Path) -> Path | None:
    """Every timed configuration, family by family: linked/monolithic - 1, in %, with
    its 95 % interval over loads (over launches where a row has no loads' interval), beside the same
    row's A/A, and the 0.2 % bound. None without matplotlib or timed rows."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rows = [c for c in result["configs"] if "linked_over_monolithic_paired" in c]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(max(8.0, 0.12 * len(rows) + 2), 4.5))
    x = list(range(len(rows)))
    ratio = [100 * (c["linked_over_monolithic_paired"] - 1) for c in rows]
    interval = [c.get("linked_over_monolithic_load_ci95") or c.get("linked_over_monolithic_paired_ci95")
                or [c["linked_over_monolithic_paired"]] * 2 for c in rows]  # a row without one: no bar
    # The interval over loads need not hold the paired median (a row whose loads sit apart): drawn as it is, not as
    # error bars around the point (which would be negative there)
    ax.vlines(x, [100 * (lo - 1) for lo, _ in interval], [100 * (hi - 1) for _, hi in interval], linewidth=0.7)
    ax.plot(x, ratio, "o", markersize=3, color="C0", label="linked / monolithic - 1 (line: 95 % interval over loads)")
    aa = [(i, 100 * (c["aa_paired"] - 1)) for i, c in zip(x, rows) if "aa_paired" in c]
    if aa:
        ax.plot(*zip(*aa), "o", markersize=3, markerfacecolor="none", color="grey", label="A/A: linked again / linked - 1")
    for bound in (-100 * BOUND, 100 * BOUND):
        ax.axhline(bound, color="red", linewidth=0.6, linestyle="--")
    ax.axhline(0, color="black", linewidth=0.4)
    starts = [i for i, c in enumerate(rows) if i == 0 or c["family"] != rows[i - 1]["family"]]
    for i in starts[1:]:
        ax.axvline(i - 0.5, color="lightgrey", linewidth=0.6)
    ax.set_xticks([(a + b - 1) / 2 for a, b in zip(starts, starts[1:] + [len(rows)])])
    ax.set_xticklabels([rows[i]["family"] for i in starts], fontsize=8, rotation=30, ha="right")
    ax.set_xlim(-1, len(rows))
    ax.set_ylabel("%")
    gpu = (result.get("machine") or {}).get("gpu", "?")
    ax.set_title(f"linked vs monolithic, {len(rows)} configurations, {gpu} ({str(result.get('git_revision'))[:10]}); "
                 "red: the 0.2 % bound", fontsize=9)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def pack(pool, families: list[str], work: Path, result: dict, done: set[str]) -> list[tuple[str, Path]]:
    """Every configuration of ``families``, each family packed in a worker process (nvcc-bound: eight
    families at once take as long as the slowest, ~30 s on the H200's host, not ~90 s in turn). A family
    whose configurations a previous call recorded (``result["families"]``, names) is not packed again.
    Records each packed family's names in ``result["families"]``."""
    known = result.setdefault("families", {})
    skipped = [f for f in families if f in known and set(known[f]) <= done]
    if skipped:
        log(f"{', '.join(skipped)}: every configuration recorded, not packed again")
    jobs = {f: pool.submit(BUILDERS[f], work / f) for f in families if f not in skipped}
    if jobs:
        log(f"packing {', '.join(jobs)} in {len(jobs)} processes")
    configs = []
    for family, job in jobs.items():
        got = job.result()
        known[family] = [name for name, _ in got]
        configs += got
    return configs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="results folder (default bench/results)")
    ap.add_argument("--only", default=",".join(FAMILIES), help=f"comma-separated subset of {', '.join(FAMILIES)}")
    ap.add_argument("--budget-s", type=float, default=520.0,
                    help="end by about this many seconds: a batch starts only if one as long as the longest so far "
                         "still fits (a device call's limit is 600)")
    ap.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1),
                    help="configurations prepared (linked, compared, verified) at once, in worker processes")
    ap.add_argument("--seconds", type=float, default=6.0, help="timing per configuration, seconds")
    ap.add_argument("--new", action="store_true", help="start a new table instead of continuing this revision's")
    ap.add_argument("--plot", type=Path, help="only draw the plot of this result (beside it, .png), and exit")
    args = ap.parse_args()
    if args.plot:
        log(f"wrote {plot(load_result(args.plot), args.plot.with_suffix('.png'))}")
        return
    t0 = time.perf_counter()
    from harness import RESULTS
    out_dir = args.out or RESULTS
    gpu, memory = machine()["gpu"], device_memory()
    previous = None if args.new else newest_on(gpu, out_dir)
    result, stamp = {"configs": []}, None
    earlier_table = None  # a table of another revision: its rows are kept where the link is the same bytes
    if previous is not None:
        old = load_result(previous)
        if old.get("git_revision") != git_revision():
            earlier_table = previous.name
        else:
            result, stamp = {"configs": old["configs"], "families": old.get("families", {})}, \
                previous.stem.rsplit("-", 1)[-1]
            earlier_table = old.get("earlier_table")
            log(f"continuing {previous} ({len(old['configs'])} configurations recorded)")
    result["device_memory_bytes"] = memory
    earlier: dict = {}
    if earlier_table and (out_dir / earlier_table).exists():
        older = load_result(out_dir / earlier_table)
        # where each row's per-launch series lie (a kept row's own `series_file` names it already)
        series_file = older.get("times_file", earlier_table)
        earlier = {r["name"]: {"series_file": series_file, **r}
                   for r in older["configs"] if r.get("revision") and r.get("verify_passed")}
        result["earlier_table"] = earlier_table
        log(f"{earlier_table} (of {older.get('git_revision')}): {len(earlier)} rows to keep where the link has "
            "not changed")
    done = {r["name"] for r in result["configs"]}
    work = Path(tempfile.mkdtemp(prefix="pipelink-paper-"))
    path = None  # the table this call wrote
    batch_seconds: list[float] = []  # a batch starts only if one as long as the longest so far still fits
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        configs = pack(pool, [f for f in args.only.split(",") if f], work, result, done)
        log(f"{len(configs)} configurations to run, {len(done)} already recorded")
        todo = [(name, spec) for name, spec in configs if name not in done]
        while todo:
            if time.perf_counter() - t0 + max(batch_seconds, default=FIRST_BATCH_S) > args.budget_s:
                log(f"the next batch would end past {args.budget_s:.0f} s: run again to continue")
                break
            batch, todo = todo[:args.jobs], todo[args.jobs:]
            started = time.perf_counter()
            log(f"preparing {len(batch)} configurations in {args.jobs} processes")
            for row, runs in prepare_batch(pool, batch, work, earlier, memory):
                result["configs"].append(finish(row, runs, dict(batch)[row["name"]], args.seconds))
                result["summary"] = summarize(result["configs"])
                path = write_result("paper_table", result, args.out, stamp=stamp)
                stamp = path.stem.rsplit("-", 1)[-1]
            batch_seconds.append(time.perf_counter() - started)
        else:
            log("every configuration recorded")
    if path is not None:
        png = plot(json.loads(path.read_text()), path.with_suffix(".png"))
        log(f"wrote {path}" + (f" and {png}" if png else ""))
    s = summarize(result["configs"])
    log(f"{s['configs']} configurations: {s['verified']} verified, {s['sass_identical']} identical SASS"
        + (f", median |1 - ratio| {s['median_abs_deviation']:.4f}, max {s['max_abs_deviation']:.4f}"
           if "median_abs_deviation" in s else ""))


if __name__ == "__main__":
    main()

"""What every benchmark shares: the result record, interleaved GPU timing, clock and power
sampling, the correctness check and the verify record. A benchmark restates none of it.

Results: ``write_result`` writes ``results/<name>-<gpu|cpu>-<stamp>.json`` (command, date, machine,
GPU, git revision, the payload) with every per-launch series (``times_ms``) moved to
``<same name>.times.json.gz`` beside it; ``load_result`` puts them back. Profiler reports and logs
stay out of git (.gitignore): a log worth keeping is kept as a capped ``.log.gz``
(bench/gpu_session.sh writes them).
"""

from __future__ import annotations

import datetime
import gzip
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from pipelink.verify import metrics, timing

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
TIMES_SUFFIX = ".times.json.gz"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def quiet_console():
    """A rich console that prints nothing (verify's table is in its JSON)."""
    from rich.console import Console
    return Console(file=open(os.devnull, "w"), width=140)


def example(path: str):
    """examples/<path> as a module (the examples are not part of the pipelink package)."""
    name = "pipelink_example_" + path.removesuffix(".py").replace("/", "_")
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / path)
        module = sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name]


# --- the result record --------------------------------------------------------------------------

def git_revision() -> str:
    """HEAD (with -dirty for uncommitted changes); $PIPELINK_GIT_REVISION where the tree has no .git
    (the device machine gets a copy of the working tree without it)."""
    if os.environ.get("PIPELINK_GIT_REVISION"):
        return os.environ["PIPELINK_GIT_REVISION"]
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                             cwd=ROOT).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, cwd=ROOT).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine() -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    from pipelink.runtime import gpu_available
    ok, gpu = gpu_available()
    return {"host": platform.node(), "cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "gpu": gpu if ok else None}


def _split_times(node, pointer: str, series: dict):
    """``node`` without its ``times_ms`` lists, which go to ``series`` under their JSON pointer."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            here = f"{pointer}/{str(key).replace('~', '~0').replace('/', '~1')}"
            if key == "times_ms" and isinstance(value, list):
                series[here] = value
            else:
                out[key] = _split_times(value, here, series)
        return out
    if isinstance(node, list):
        return [_split_times(value, f"{pointer}/{i}", series) for i, value in enumerate(node)]
    return node


def times_path(path: Path) -> Path:
    return path.with_name(path.name.removesuffix(".json") + TIMES_SUFFIX)


def write_result(name: str, payload: dict, out_dir: Path | None = None, stamp: str | None = None) -> Path:
    """The summary JSON (and its per-launch series beside it); returns the JSON's path."""
    from pipelink.fsutil import write_atomic
    record = {"benchmark": name, "command": " ".join([Path(sys.executable).name, *sys.argv]),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "git_revision": git_revision(), "machine": machine(), **payload}
    stamp = stamp or datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S")
    where = "gpu" if record["machine"]["gpu"] else "cpu"
    path = (out_dir or RESULTS) / f"{name}-{where}-{stamp}.json"
    series: dict = {}
    summary = _split_times(record, "", series)
    if series:
        summary["times_file"] = times_path(path).name
        write_atomic(times_path(path), gzip.compress(json.dumps(series, separators=(",", ":")).encode(), 9, mtime=0))
    write_atomic(path, json.dumps(summary, indent=2))
    return path


def load_result(path: Path) -> dict:
    """A result JSON with its per-launch series (``times_ms``) back in place."""
    record = json.loads(Path(path).read_text())
    if "times_file" in record:
        series = json.loads(gzip.decompress((Path(path).parent / record["times_file"]).read_bytes()))
        for pointer, values in series.items():
            *parents, leaf = [p.replace("~1", "/").replace("~0", "~") for p in pointer.split("/")[1:]]
            node = record
            for key in parents:
                node = node[int(key)] if isinstance(node, list) else node[key]
            node[leaf] = values
    return record


def resumed(path: Path, name: str) -> dict:
    """The result of bench/<name>.py at ``path`` to continue (--resume: a run cut by a device call's
    limit); refused where it is missing, unreadable, or this checkout is another revision's."""
    if not path.is_file():
        raise SystemExit(f"--resume {path}: no such result (the JSON a cut {name} run wrote)")
    try:
        result = load_result(path)
    except (OSError, ValueError) as exc:  # a truncated JSON, or its times file missing or corrupt
        raise SystemExit(f"--resume {path}: not a readable result ({type(exc).__name__}: {exc})")
    if result.get("benchmark") != name:
        raise SystemExit(f"--resume {path}: a {result.get('benchmark')} result, not {name}'s")
    if result.get("git_revision") != git_revision():
        raise SystemExit(f"{path}: measured at {result.get('git_revision')}, this checkout is {git_revision()}; "
                         "a table is continued only at its own revision (start a new one without --resume)")
    for key in ("benchmark", "command", "date", "git_revision", "machine", "times_file"):
        result.pop(key, None)  # write_result sets them again
    return result


def results_newest_first(name: str, folder: Path = RESULTS) -> list[Path]:
    """Every ``<name>-*.json``, the newest first (stamps sort by time)."""
    return sorted(folder.glob(f"{name}-*.json"), key=lambda p: p.stem.rsplit("-", 1)[-1], reverse=True)


def newest_result(name: str, folder: Path = RESULTS) -> Path | None:
    """The newest ``<name>-*.json``."""
    found = results_newest_first(name, folder)
    return found[0] if found else None


class GpuSampler:
    """SM clock, power and temperature sampled by `nvidia-smi -lms` while a block of work runs:
    the H200 lowers its clock under sustained tensor-core load (power limit), and the figures say
    which regime a timing was taken in. Empty where nvidia-smi is missing.

        with GpuSampler() as s: ...;  s.summary() -> {"sm_mhz": {...}, "power_w": {...}, ...}
    """

    def __init__(self, period_ms: int = 100):
        self.period_ms, self.proc, self.rows = period_ms, None, []

    def __enter__(self) -> "GpuSampler":
        smi = shutil.which("nvidia-smi")
        if smi:
            self.proc = subprocess.Popen([smi, "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                                          "--format=csv,noheader,nounits", f"-lms={self.period_ms}"],
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=10)
        for line in out.splitlines():
            try:
                self.rows.append([float(x) for x in line.split(",")])
            except ValueError:
                continue

    def summary(self) -> dict:
        if not self.rows:
            return {}
        import numpy as np
        cols = np.asarray(self.rows)
        return {"samples": len(self.rows), "period_ms": self.period_ms,
                **{name: {"min": float(cols[:, i].min()), "median": float(np.median(cols[:, i])),
                          "max": float(cols[:, i].max())}
                   for i, name in enumerate(("sm_mhz", "power_w", "temp_c"))}}


# --- timing ---------------------------------------------------------------------------------------

TIMING = ("CUDA events per launch, L2 flushed by reading 2x L2 and a GPU spin queued before each, "
          "every callable interleaved launch by launch in a seeded random order each round; medians")


def compile_probe(source: str, name: str, folder: Path) -> Path:
    """A probe kernel's CUDA source (bench/experiments), built to ``folder``/<name>.cubin for sm_90a by the project's
    nvcc, with pipelink's component header (its mbarrier, TMA and grid-barrier wrappers) on the include path."""
    from pipelink.backend.toolchain import find_nvcc
    include = ROOT / "src" / "pipelink" / "include"
    (folder / f"{name}.cu").write_text(source)
    cubin = folder / f"{name}.cubin"
    subprocess.run([str(find_nvcc().path), "-arch=sm_90a", "-std=c++17", "-O3", "-cubin", "-I", str(include),
                    "-o", str(cubin), str(folder / f"{name}.cu")], check=True)
    return cubin


# l2_flush_bytes and time_interleaved live in pipelink.verify.timing (pipelink tune times with them too).
l2_flush_bytes = timing.l2_flush_bytes
time_interleaved = timing.time_interleaved


def paired_ratio(a: dict, b: dict) -> float:
    """Median of launch-by-launch ratios a_i / b_i of two interleaved series: neighbours in time
    share the clock, so drift cancels in each pair."""
    import numpy as np
    return float(np.median(np.asarray(a["times_ms"]) / np.asarray(b["times_ms"])))


def paired_ratio_ci(a: dict, b: dict, *, level: float = 0.95, draws: int = 2000, seed: int = 0) -> list[float]:
    """Bootstrap interval (``level``) of paired_ratio: launch pairs resampled with replacement. The
    per-pair ratios of a power-limited kernel spread by +-5 % (Mixtral MoE at 19 ms), so 200 pairs
    leave the median uncertain by about +-0.7 %; the interval says what a ratio can claim."""
    import numpy as np
    ratios = np.asarray(a["times_ms"]) / np.asarray(b["times_ms"])
    picks = np.random.default_rng(seed).integers(0, ratios.size, size=(draws, ratios.size))
    medians = np.median(ratios[picks], axis=1)
    tail = (1 - level) / 2 * 100
    return [float(np.percentile(medians, tail)), float(np.percentile(medians, 100 - tail))]


# A linked kernel against its monolithic control: three roles, each loaded several times in rotation
# (linked, monolithic, linked_again, linked, ...), all launched interleaved; each ratio is taken on the
# mean of a role's loads, and the A/A puts the linked cubin in the control's place. A set of loads can
# give one role an offset as a whole (0.8 % at 30 us with the same SASS, and -0.2 % for the next set of
# the same cubins: bench/NOTES.md, seventh session); the A/A goes through the same. How many loads a role
# gets follows the kernel's time (loads_for): a load's offset reaches +-0.5 % below 100 us and stays
# under 0.1 % above 1 ms (NOTES, eighth session), and it averages out only as 1/sqrt(loads), while a
# short kernel's extra loads cost little (its rounds are short).
LOADS = 3             # loads a role for a kernel of SHORT_MS or longer
SHORT_LOADS = 16      # loads a role below SHORT_MS: +-0.2 % at 95 % needs 11-15 there (NOTES, eighth session)
SHORT_MS = 0.125      # between the paper table's longest short kernel (97 us) and its shortest long one (144 us)
ROLES = ("linked", "monolithic", "linked_again")


def loads_for(launch_ms: float) -> int:
    """Loads a role for a kernel whose launch takes ``launch_ms``."""
    return SHORT_LOADS if launch_ms < SHORT_MS else LOADS


def role_loads(load, loads: int, first=None) -> dict:
    """``load(role)`` called ``loads`` times for each role, in rotation; named linked0, monolithic0, ...
    ``first``: linked0, loaded already (to time it before the number of loads is chosen)."""
    return {f"{role}{n}": first if first is not None and (role, n) == ("linked", 0) else load(role)
            for n in range(loads) for role in ROLES}


def loads_of(named: dict, role: str) -> list[str]:
    """The names of ``role``'s loads among role_loads' names (``linked`` does not take linked_again's)."""
    return [name for name in named if re.fullmatch(rf"{role}\d+", name)]


def mean_of_loads(times: dict, role: str) -> dict:
    """Launch by launch (round by round), the mean time of ``role``'s loads: one series for paired_ratio."""
    import numpy as np
    return {"times_ms": np.mean([times[name]["times_ms"] for name in loads_of(times, role)], axis=0).tolist()}


# Two-sided 95 % quantiles of Student's t by degrees of freedom (1-30); more are read as 30, which
# only widens the interval.
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
        2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
        2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def load_interval(medians_ms: dict) -> list[float] | None:
    """95 % interval of linked/monolithic with the load as the unit: each load's median is one sample
    (a set of loads gives a role an offset that every launch of the load shares, so launches are not
    independent samples of it; paired_ratio_ci resamples launches and cannot see it). Welch's interval
    of the difference of mean log times (linked loads against monolithic loads), its degrees of
    freedom rounded down. None where a role has fewer than two loads."""
    import numpy as np
    logs = {role: np.log([medians_ms[name] for name in loads_of(medians_ms, role)])
            for role in ("linked", "monolithic")}
    if min(v.size for v in logs.values()) < 2:
        return None
    var = {role: v.var(ddof=1) / v.size for role, v in logs.items()}
    se = float(np.sqrt(sum(var.values())))
    centre = float(logs["linked"].mean() - logs["monolithic"].mean())
    if se == 0:
        return [float(np.exp(centre))] * 2
    df = se ** 4 / sum(w * w / (logs[role].size - 1) for role, w in var.items())
    t = T975[max(1, min(int(df), len(T975))) - 1]  # Welch's df is at least 1; rounding must not make it 0
    return [float(np.exp(centre - t * se)), float(np.exp(centre + t * se))]


def role_ratios(times: dict) -> dict:
    """linked/monolithic and linked_again/linked (the A/A), each on the mean of a role's loads, from
    time_interleaved's series of role_loads' names; linked/monolithic's interval over launches and over
    loads (load_interval); and, for the record, the widest ratio of two loads of one role (`load_spread`)."""
    from itertools import combinations
    import numpy as np
    mean = {role: mean_of_loads(times, role) for role in ROLES}
    aa = paired_ratio(mean["linked_again"], mean["linked"])
    return {"loads_per_role": len(loads_of(times, "monolithic")),
            "linked_over_monolithic_paired": paired_ratio(mean["linked"], mean["monolithic"]),
            "linked_over_monolithic_paired_ci95": paired_ratio_ci(mean["linked"], mean["monolithic"]),
            "linked_over_monolithic_load_ci95": load_interval({name: float(np.median(t["times_ms"]))
                                                               for name, t in times.items()}),
            "aa_paired": aa, "aa_ci95": paired_ratio_ci(mean["linked_again"], mean["linked"]), "aa_noise": abs(1 - aa),
            "load_spread": max(abs(1 - paired_ratio(times[j], times[i]))
                               for role in ROLES for i, j in combinations(loads_of(times, role), 2))}


def warm_up(fn, seconds: float) -> None:
    """Back-to-back launches for about ``seconds``: brings the GPU to its sustained-load clock."""
    import torch
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()


def launch_ms(fn) -> float:
    """One launch of ``fn``, in ms, as time_interleaved times it (L2 flushed, host time hidden behind
    a GPU spin): the median of nine, after a warm-up. Timed back to back instead, a launcher slow on
    the host (the Llama block's launch_arrays, ~0.1 ms of Python) measured its own enqueue, not the
    kernel: 30 us blocks read as 0.13 ms and got 3 loads a role (llama_decode run 20261203T143535)."""
    warm_up(fn, seconds=0.5)
    return time_interleaved({"once": fn}, 9)["once"]["median_ms"]


def rounds_for(once_ms: float, seconds: float, launchers: int, *, flush_ms: float = 0.2, bounds=(100, 3000)) -> int:
    """Rounds of ``launchers`` interleaved launches, each taking ``once_ms`` (launch_ms), that fill about
    ``seconds`` (within ``bounds``); each launch of a round also pays about ``flush_ms`` outside its
    window (the L2 flush and the queued spin)."""
    return int(min(bounds[1], max(bounds[0], seconds * 1000 / (launchers * (once_ms + flush_ms)))))


def time_roles(load, launch, seconds: float, *, first=None, flush_ms: float = 0.2, bounds=(100, 3000)) -> dict:
    """A linked kernel against its monolithic control, as the paper table times them: the first linked
    load (``first``, or ``load("linked")``) timed alone (launch_ms) sets the loads a role (loads_for)
    and the rounds that fill about ``seconds`` (rounds_for); then every load of every role (role_loads),
    launched interleaved. ``load(role)`` loads a cubin (on the first load's workspaces: the caller's
    part), ``launch(kernel)`` launches one on the operands all share. Returns role_ratios' figures,
    with `reps`, `medians_ms` and `times` (each load's series)."""
    first = first if first is not None else load("linked")
    once_ms = launch_ms(lambda: launch(first))
    kernels = role_loads(load, loads_for(once_ms), first=first)
    fns = {name: (lambda k=k: launch(k)) for name, k in kernels.items()}
    reps = rounds_for(once_ms, seconds, len(fns), flush_ms=flush_ms, bounds=bounds)
    times = time_interleaved(fns, reps, seed=2)
    return {"reps": reps, "times": times, "medians_ms": {m: t["median_ms"] for m, t in times.items()},
            **role_ratios(times)}


# --- correctness ----------------------------------------------------------------------------------

def check(out, ref, precision: str = "bf16") -> dict:
    """An output tensor against its reference, judged by verify's criteria (metrics.judge): every
    element written (the output was NaN-poisoned), finite, within the precision's tolerances."""
    # verify's own figures (metrics.compare) on host copies: one definition of the criteria; numpy
    # has no bf16, so both sides are widened to fp32 first (exact).
    m = metrics.compare(out.float().cpu().numpy(), ref.float().cpu().numpy())
    passed, why = metrics.judge(m, precision)
    return {"passed": passed, "why": why, **m.to_json()}


def check_run(fn, out, ref, precision: str = "bf16") -> dict:
    """Run ``fn`` once and check what it made: ``out`` (NaN-poisoned first), the buffer a kernel
    writes, or, when ``out`` is None, what ``fn`` returns (a torch path)."""
    import torch
    if out is not None:
        out.fill_(float("nan"))
    got = fn()
    torch.cuda.synchronize()
    return check(out if out is not None else got, ref, precision)


def verify_record(v, detail_chars: int = 600) -> dict:
    """What a result keeps of a pipelink.verify result."""
    correctness = v.rung("correctness")
    return {"passed": v.passed, "rungs": {r.name: [r.status, r.detail[:detail_chars]] for r in v.rungs},
            "correctness": correctness.figures if correctness else None}


def graph_replay_us(fn, launches: int = 50) -> float:
    """Microseconds per launch of ``fn`` (what it enqueues: a memset and a kernel, or a kernel) captured
    ``launches`` times into one CUDA graph, replayed: no host work between the launches, L2 warm. How a
    serving engine replays a decode step; the benches' own timing (time_interleaved) flushes L2 instead."""
    import torch
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(launches):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / (5 * launches)

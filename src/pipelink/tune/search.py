"""`pipelink tune`: search a space of configurations for each shape bucket, and record the winners.

For every bucket (the sizes the operator links for, pipelink.op's buckets) and every configuration:

  1. link   in parallel worker processes (the CPU-heavy part: a CuTe variant takes tens of seconds), each
            link's result landing in the build cache; one that fails is recorded with its error;
  2. verify on the GPU, each linked configuration against the spec's reference (`pipelink verify`'s run and
            correctness rungs, in its watched child: a wrong, crashing or hung kernel is recorded with
            its reason and never chosen);
  3. time   every verified configuration of the bucket, interleaved launch by launch in one child process
            (verify.timing.time_interleaved: the clock's drift falls on all alike), L2 flushed before each;
  4. record the fastest in the tune cache (tune/cache.py), which pipelink.op reads.

Without a GPU (or with ``link_only``) the search stops after step 1: which configurations link, and why the
others do not. A progress bar shows elapsed time and configurations left.
"""

from __future__ import annotations

import io
import json
import math
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from ..errors import PipelinkError, SpecError
from .cache import Entry, TuneCache, bucket_label, new_entry
from .outcomes import BucketResult, Outcome, TuneResult
from .space import SHAPE_FLAG, make_space, parse_shape


def tune(spec: str | Path, shapes=(), facts=None, specs=(), settings=None, *, jobs: int | None = None,
         link_only: bool = False, reps: int = 30, timeout: float | None = None, cache_root: str | Path | None = None,
         work: str | Path | None = None, progress: bool = True, ray: str | None = None) -> TuneResult:
    """Search ``facts`` ({name: values} or ["name=1,2", "name=3..6"]) and ``settings`` ({"schedule.split":
    values} or ["schedule.split=tiles,stream_k"]: the [schedule] and [launch] fields of spec.TUNABLE) over
    ``spec`` and the alternative ``specs`` for each of ``shapes`` ([{"M": 128}, ...] or ["M=128", ...]). With no
    facts, settings or specs, the spaces are the spec's [tune] section's (its own search and each
    [[tune.search]]): for their own shapes, or for ``shapes``, each in the search listing the nearest shape. See
    the module's docstring. ``ray``: a Ray cluster's address ("auto", "ray://host:10001", or "local" for one started here)
    that links the configurations instead of local worker processes (tune/distributed.py)."""
    _check_options(jobs, reps, timeout)
    from ..shape_op import bound_dims, linked_sizes
    t0 = time.perf_counter()
    spec = Path(spec)
    if not facts and not specs and not settings:  # the spec's [tune] section says what to search
        searches = _section_searches(spec, shapes)
    else:
        searches = [(list(shapes), make_space(spec, facts, specs, settings))]
    parsed = []
    for shapes_of, space in searches:
        _check_alternatives(spec, space)
        parsed.append(([parse_shape(s) if isinstance(s, str) else _shape(s) for s in shapes_of], space))
    if not any(shapes_of for shapes_of, _ in parsed):
        raise SpecError("no shape to tune for", field=SHAPE_FLAG, hint="give one or more, e.g. --shape M=128")
    vary = tuple(parsed[0][0][0])
    if any(tuple(s) != vary for shapes_of, _ in parsed for s in shapes_of):
        raise SpecError(f"shapes name different facts "
                        f"({', '.join(sorted({','.join(s) for sh, _ in parsed for s in sh}))})",
                        field=SHAPE_FLAG, hint="give every shape the same facts, e.g. --shape M=1 --shape M=128")
    dims = bound_dims(spec, vary)
    for _, space in parsed:
        _check_names(space, vary)
    granule = _granule([space for _, space in parsed], vary, dims, cache_root, link_only, spec)
    by_bucket: dict[str, tuple[dict, dict, int]] = {}
    for n, (shapes_of, space) in enumerate(parsed):
        for s in shapes_of:
            bucket = dict(zip(vary, linked_sizes(dims, vary, s, granule)))
            label = bucket_label(bucket)
            if label in by_bucket and by_bucket[label][2] != n:
                raise SpecError(f"shape {bucket_label(s)} falls in bucket {label}, which search "
                                f"{by_bucket[label][2] + 1} also tunes (with shape {bucket_label(by_bucket[label][0])})",
                                file=str(spec), field="tune.search",
                                hint="give each bucket's shapes to one search: searches are shape ranges")
            by_bucket.setdefault(label, (s, bucket, n))
    results = [BucketResult(s, b, [Outcome(c) for c in parsed[n][1].configs()], low_end=_low_end(dims, vary, b, granule))
               for s, b, n in by_bucket.values()]

    _link_all(results, jobs, progress, ray)
    from .cache import device_identity
    device = device_identity()
    on_ray_gpus = False
    if ray and not link_only:
        from .distributed import cluster_gpus
        on_ray_gpus = cluster_gpus() >= 2  # several GPUs: the buckets are verified and timed side by side there
    result = TuneResult(str(spec), device, link_only or (device["gpu"] == "none" and not on_ray_gpus), results)
    if result.link_only:
        result.seconds = time.perf_counter() - t0
        return result
    _verify_time_and_record(result, spec, granule, on_ray_gpus, reps, timeout, cache_root, work, progress)
    result.seconds = time.perf_counter() - t0
    return result


def _verify_time_and_record(result: TuneResult, spec: Path, granule: dict, on_ray_gpus: bool, reps: int, timeout,
                            cache_root, work, progress: bool) -> None:
    """Steps 2 to 4: each bucket's linked configurations verified and timed (here, in one warm verify child, or
    by Ray tasks on the cluster's GPUs), and the winners recorded in the tune cache of the GPUs that timed them."""
    results, device = result.buckets, result.device
    if on_ray_gpus:
        from .distributed import time_on_ray_gpus
        n = sum(o.status == "linked" for r in results for o in r.outcomes)
        device = result.device = time_on_ray_gpus(results, reps, timeout, _verify_and_time,
                                                  lambda: _Progress(progress, "verify and time (Ray GPUs)", n))
        result.link_only = device["gpu"] == "none"  # the tasks found no GPU after all: nothing was timed
    else:
        folder = Path(work or Path(os.environ.get("TMPDIR", "/tmp")) / f"pipelink-tune-{os.getpid()}")
        from ..verify.watch import warm_child
        with warm_child():  # one verify child for every configuration: torch and the CUDA context start once
            for r in results:
                _verify_and_time(r, folder / bucket_label(r.bucket).replace("=", "").replace(",", "_"), reps,
                                 timeout, progress)
    if not result.link_only:
        cache = TuneCache(spec, cache_root, device)
        result.rebuilt = cache.rebuilt
        cache.granule = granule
        for r in results:
            if r.winner is not None:
                failed = sum(o.status not in ("timed",) for o in r.outcomes)
                w = r.winner.config
                cache.put(new_entry(w.spec, spec, r.bucket, r.shape, dict(w.facts), r.winner.median_ms,
                                    len(r.outcomes), failed, dict(w.settings)))
        result.cache = str(cache.save())


def _low_end(dims, vary: tuple[str, ...], bucket: dict[str, int], granule: dict[str, int]) -> list[dict]:
    """The smallest size of each varying fact that this bucket serves (1 for the first bucket, the previous bucket's
    size + 1 after it), as the bound operand dimensions to shrink: [{"param", "dim", "size"}]; none where the
    bucket serves one size."""
    from ..shape_op import linked_sizes
    out = []
    for i, fact in enumerate(vary):
        top, step, m = bucket[fact], granule[fact], bucket[fact]
        while m - step >= 1 and linked_sizes(dims, vary, {**bucket, fact: m - step}, granule)[i] == top:
            m -= step
        low = max(1, m - step + 1)
        if low < top:
            out += [{"param": d.param, "dim": d.dim, "size": low} for d in dims if d.fact == fact]
    return out


def _section_searches(spec: Path, shapes) -> list[tuple[list, object]]:
    """The [tune] section's searches, each with its shapes; with ``shapes`` given, those shapes instead, each in
    the search that lists the shape nearest it (sizes compared by their logarithms): a search stands for a range
    of shapes, as a hand-written table per shape range does."""
    from ..spec import load_spec
    section = load_spec(spec).tune.searches()
    spaces = [make_space(spec, dict(s.facts), [spec.parent / a for a in s.specs],
                         {f"{part}.{k}": v for part in ("schedule", "launch") for k, v in getattr(s, part).items()})
              for s in section]
    if not shapes:
        return [(list(s.shapes), space) for s, space in zip(section, spaces)]
    if not section:
        raise SpecError(f"nothing to search: no --fact, --set or --spec, and {spec} has no [tune] shapes",
                        file=str(spec), field="--fact", hint="give --fact NAME=VALUES, or a [tune] section")
    given = [parse_shape(s) if isinstance(s, str) else _shape(s) for s in shapes]
    chosen: list[list] = [[] for _ in section]

    def distance(a: dict, b: dict) -> float:
        return sum(abs(math.log2(a[k]) - math.log2(b[k])) if k in b else math.inf for k in a)
    for shape in given:
        n = min(range(len(section)), key=lambda i: min(distance(shape, t) for t in section[i].shapes))
        chosen[n].append(shape)
    return [(shapes_of, space) for shapes_of, space in zip(chosen, spaces) if shapes_of]


def _check_alternatives(spec: Path, space) -> None:
    for alt in space.specs[1:]:  # the tune cache names a winning alternative by its file name, beside the spec
        if alt.resolve().parent != spec.resolve().parent or not alt.is_file():
            raise SpecError(f"alternative spec {alt} is " + ("not a file" if not alt.is_file() else
                            f"not in the spec's folder ({spec.resolve().parent})"), file=str(alt), field="--spec",
                            hint="put each alternative spec beside the spec it competes with")


def _check_options(jobs, reps, timeout) -> None:
    for name, value, low in (("--jobs", jobs, 1), ("--reps", reps, 1)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not low <= value <= 4096):
            raise SpecError(f"{name} {value!r} is not a whole number from {low} to 4096", field=name)
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not 0 < timeout <= 86400):
        raise SpecError(f"--timeout {timeout!r} is not a number of seconds from 0 to 86400", field="--timeout")


def _granule(spaces, vary, dims, cache_root, link_only, spec: Path) -> dict[str, int]:
    """The bucket step of each varying fact: the smallest box along it among the configurations searched (a
    64-row tile in the space gives M = 1 .. 64 a bucket of its own), and never coarser than what the tune cache
    already has (its entries stay on its grid)."""
    from ..shape_op import bound_dims
    granule = {d.fact: d.granule for d in dims}
    seen = set()
    for config in (c for space in spaces for c in space.configs()):
        key = (config.spec, config.facts)  # the boxes are the facts' (settings do not size operands)
        if key in seen or (config.spec == spec and not config.facts):
            continue
        seen.add(key)
        try:
            found = bound_dims(config.spec, vary, dict(config.facts))
        except PipelinkError:  # a configuration that does not plan: its link will say why
            continue
        for d in found:
            granule[d.fact] = min(granule.get(d.fact, d.granule), d.granule)
    if not link_only:
        from .cache import device_identity
        old = TuneCache(spec, cache_root, device_identity()).granule
        granule = {k: min(v, old.get(k, v)) for k, v in granule.items()}
    return granule


def _shape(s) -> dict[str, int]:
    if not isinstance(s, dict):
        raise SpecError(f"shape {s!r} is not a table of sizes", field=SHAPE_FLAG, hint='e.g. {"M": 128}')
    return parse_shape(",".join(f"{k}={v}" for k, v in s.items()))


def _check_names(space, vary) -> None:
    """Every fact searched is one the spec sets or a component requires; none is a varying one; every setting's
    value is one the spec's field takes (the spec loaded with it: the schema's own error)."""
    from ..link.pipeline import plan_link
    from ..spec import load_spec
    for spec in space.specs:
        for key, values in space.settings.items():
            for value in values:
                load_spec(spec, settings={key: value})
        plan = plan_link(spec)
        known = set(plan.spec.facts) | {f for inst in plan.instances for f in inst.contract.facts.requires}
        for name in space.facts:
            if name in vary:
                raise SpecError(f"fact {name} is both searched and a shape's size", field="--fact",
                                hint=f"give {name} with --shape, and search other facts")
            if name not in known:
                raise SpecError(f"fact {name} is not a fact of {spec}: its [facts] and its components' requires "
                                f"name {', '.join(sorted(known)) or 'none'}", file=str(spec), field="--fact",
                                hint="search facts the spec or its components use (tile_n, stages, ...)")


# --- 1. link, in worker processes ------------------------------------------------------------------------------

def _link_one(spec: str, facts: dict, cache=None, settings: dict | None = None) -> tuple[str, str, float]:
    """In a worker: link one configuration (its result lands in the build cache). (status, reason, seconds)."""
    from ..link.pipeline import link
    from ..spec import load_spec
    t0 = time.perf_counter()
    try:
        link(load_spec(spec, facts=facts, settings=settings), cache=cache)
        return "linked", "", time.perf_counter() - t0
    except PipelinkError as exc:
        return "link failed", exc.format(), time.perf_counter() - t0
    except Exception as exc:  # a bug of ours: recorded, and the search goes on
        return "link failed", f"internal error: {type(exc).__name__}: {exc}", time.perf_counter() - t0


def _link_all(results: list[BucketResult], jobs: int | None, progress: bool, ray: str | None = None) -> None:
    work = [(o, str(o.config.spec), {**dict(o.config.facts), **r.bucket}, dict(o.config.settings))
            for r in results for o in r.outcomes]
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(work)))
    if ray:
        from .distributed import link_on_ray
        link_on_ray(work, ray, jobs, lambda: _Progress(progress, "link (Ray)", len(work)), _link_one)
        return
    with _Progress(progress, "link", len(work)) as bar:
        if jobs == 1:
            for o, spec, facts, settings in work:
                o.status, o.reason, o.link_s = _link_one(spec, facts, None, settings)
                bar.advance(o)
            return
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(_link_one, spec, facts, None, settings): o for o, spec, facts, settings in work}
            for f in as_completed(futures):
                o = futures[f]
                try:
                    o.status, o.reason, o.link_s = f.result()
                except Exception as exc:  # the worker died (killed, out of memory)
                    o.status, o.reason = "link failed", f"the link worker died: {type(exc).__name__}: {exc}"
                bar.advance(o)


# --- 2 and 3. verify, then time, on the GPU --------------------------------------------------------------------

def _verify_and_time(r: BucketResult, folder: Path, reps: int, timeout: float | None, progress: bool) -> None:
    from ..spec import load_spec
    from ..verify.runner import verify
    from rich.console import Console
    quiet = Console(file=io.StringIO())  # verify's tables, not shown (a file left open warns at exit)
    verified: list[tuple[Outcome, Path]] = []
    linked = [o for o in r.outcomes if o.status == "linked"]
    with _Progress(progress, f"verify {bucket_label(r.bucket)}", len(linked)) as bar:
        for n, o in enumerate(linked):
            out = folder / f"c{n}"
            v = verify(load_spec(o.config.spec, facts={**dict(o.config.facts), **r.bucket},
                                 settings=dict(o.config.settings)), bench=False,
                       graph=False, dumps=False, out_dir=out, console=quiet, timeout=timeout)
            rung = next((x for x in v.rungs if x.name == "correctness"), None)
            bad = next((x for x in v.rungs if x.status in ("FAILED", "hang", "crash")), None)
            if rung is not None and rung.status == "ok" and bad is None:
                verified.append((o, out / "kernel"))
            else:
                x = bad or rung
                o.status = {"hang": "hung", "crash": "crashed"}.get(x.status if x else "", "wrong")
                o.reason = f"{x.name}: {x.detail}" if x else "verify ran no correctness rung"
            bar.advance(o)
    if not verified:
        return
    _time(r, verified, folder, reps, timeout)
    r.winner = _pick([o for o in r.outcomes if o.status == "timed"])


def _pick(timed: list[Outcome]) -> Outcome | None:
    """The configuration whose worst time, against the best at each end of the bucket (its size, and its low end
    where timed there), is the least: a bucket serves every size down to its low end, and the fastest at the top
    can be the slowest at the bottom (at M = 1 .. 64, 128 x 208 tiles won at 64 by 1.4 % and lost at 1 by 9 %).
    Ties go to the faster at the bucket's size."""
    if not timed:
        return None
    ends = [("median_ms", lambda o: o.median_ms)]
    if all("low_end" in o.timing for o in timed):
        ends.append(("low_end", lambda o: o.timing["low_end"]["median_ms"]))
    best = {name: min(get(o) for o in timed) for name, get in ends}
    return min(timed, key=lambda o: (max(get(o) / best[name] for name, get in ends), o.median_ms))


def _time(r: BucketResult, verified: list[tuple[Outcome, Path]], folder: Path, reps: int,
          timeout: float | None) -> None:
    from ..fsutil import write_atomic
    from ..verify.watch import child_env, run_watched
    spec = verified[0][0].config.spec
    name = {}
    kernels = []
    for n, (o, kdir) in enumerate(verified):
        link = next(kdir.glob("*.manifest.json")).name[:-len(".manifest.json")]
        kernels.append({"label": f"c{n}", "cubin": str(kdir / f"{link}.cubin"),
                        "manifest": str(kdir / f"{link}.manifest.json")})
        name[f"c{n}"] = o
    from ..spec import load_spec
    inputs = load_spec(spec).verify.inputs
    job = {"kernels": kernels, "inputs": inputs, "reps": reps, "out": str(folder / "timing.json"), "low_end": r.low_end}
    path = write_atomic(folder / "timing-job.json", json.dumps(job))
    budget = (timeout or 60) + 5 * len(kernels) + 120  # the child's start (torch, the context) and its launches
    code, text = run_watched([sys.executable, "-m", "pipelink.tune.child", str(path)], budget, child_env())
    got = json.loads((folder / "timing.json").read_text()) if code == 0 and (folder / "timing.json").exists() else {}
    for label, o in name.items():
        if label in got:
            o.status, o.median_ms, o.timing = "timed", got[label]["median_ms"], got[label]
            if f"{label}@low" in got:
                o.timing = {**o.timing, "low_end": {"at": r.low_end, **got[f"{label}@low"]}}
        else:
            o.status = "timing failed"
            o.reason = (f"the timing child did not finish within {budget:g} s" if code is None else
                        f"the timing child exited {code}: {text[-400:]}")


class _Progress:
    """A bar with elapsed time and configurations left (rich, on stderr), or nothing."""

    def __init__(self, enabled: bool, what: str, total: int) -> None:
        self.enabled, self.what, self.total, self.done, self.failed = enabled and total > 0, what, total, 0, 0

    def __enter__(self):
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("{task.fields[left]} left, {task.fields[failed]} failed"),
                                TimeElapsedColumn(), console=Console(stderr=True), transient=False)
            self.bar.start()
            self.task = self.bar.add_task(self.what, total=self.total, left=self.total, failed=0)
        return self

    def advance(self, o: Outcome) -> None:
        self.done += 1
        self.failed += o.status not in ("linked", "timed", "pending")
        if self.enabled:
            self.bar.update(self.task, advance=1, left=self.total - self.done, failed=self.failed)

    def __exit__(self, *exc) -> None:
        if self.enabled:
            self.bar.stop()


__all__ = ["tune", "TuneResult", "BucketResult", "Outcome", "Entry"]

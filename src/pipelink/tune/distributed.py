"""`pipelink tune --ray ADDRESS`: the configurations' links spread over a Ray cluster (Ray is an optional
extra: pip install 'pipelink[ray]'; every node needs pipelink and the same toolchain).

A task gets the spec and its packages as bytes (no shared file system assumed), links in a folder of its own
with a build cache of its own, and sends back that cache's entries: the caller stores them in its build cache,
so the verify and the operator that follow find each link there (the link and the SASS inspection are keyed by
content; the glue's compile is keyed by the paths of the headers it read too, so on another node's install it
may run again here, in about a second). Ray schedules the tasks; there is no scheduler of our own.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from ..errors import UsageError

_ENTRY = re.compile(r"^v\d+/[0-9a-f]{2}/[0-9a-f]{64}$")   # a build-cache payload, as Cache._path names it
ENTRY_LIMIT = 1 << 30


def ship(spec_path: str, verify: bool = False) -> dict:
    """The spec's text with each package path made a file name of its own, and those packages' bytes; with
    ``verify``, also the Python files its [verify] section names (reference, baselines, rungs), which must lie
    beside the spec."""
    from ..spec import load_spec
    spec = load_spec(spec_path)
    text = Path(spec_path).read_text()
    files: dict[str, bytes] = {}
    if verify:
        v = spec.verify
        for ref in [v.reference, *v.baselines, *(r.check for r in v.rung)]:
            where = (ref or "").rpartition(":")[0]
            if not where.endswith(".py"):
                continue  # a module:function, importable on the node as here
            if "/" in where or "\\" in where or where.startswith("."):
                raise UsageError(f"--ray: {where} is not a file beside {spec_path}; a GPU task gets the spec's folder "
                                 "flat", field="--ray", file=str(spec_path),
                                 hint="put the reference beside the spec, or name it as module:function")
            files[where] = (Path(spec_path).parent / where).read_bytes()
    for inst in spec.instance:
        if inst.source is not None:
            raise UsageError(f"--ray: instance {inst.name} names a source ({inst.source}); a Ray task gets packages",
                             field="--ray", file=str(spec_path),
                             hint=f"pack it (`pipelink pack {inst.source} -o NAME.plc`) and name the package")
        package = Path(inst.package)
        package = package if package.is_absolute() else Path(spec_path).parent / package
        name = f"package_{inst.name}.plc"
        files[name] = package.read_bytes()
        text, n = re.subn(r'(package\s*=\s*)(["\'])' + re.escape(inst.package) + r"\2", rf'\g<1>"{name}"', text)
        if n == 0:
            raise UsageError(f"--ray: cannot find instance {inst.name}'s package line in {spec_path}", field="--ray",
                             file=str(spec_path), hint='write it as package = "PATH" on a line of its own')
    return {"spec": text, "files": files}


def link_shipped(shipped: dict, facts: dict, link_one, settings: dict | None = None
                 ) -> tuple[str, str, float, dict[str, bytes]]:
    """On a Ray worker: link one configuration of a shipped spec with ``link_one`` (search._link_one);
    (status, reason, seconds, cache entries)."""
    from ..backend.cache import Cache
    with tempfile.TemporaryDirectory(prefix="pipelink-ray-") as folder:
        root = Path(folder)
        for name, data in shipped["files"].items():
            (root / name).write_bytes(data)
        (root / "spec.toml").write_text(shipped["spec"])
        cache = Cache(root=root / "cache", enabled=True)
        status, reason, seconds = link_one(str(root / "spec.toml"), facts, cache, settings)
        entries = {str(p.relative_to(cache.root)): p.read_bytes() for p in (cache.root).rglob("*")
                   if p.is_file() and p.suffix != ".sha256" and not p.name.startswith(".")}
    return status, reason, seconds, entries


def store(entries: dict[str, bytes]) -> int:
    """A task's cache entries into this machine's build cache (each checked: a payload's name and size, its
    digest written here). Returns how many were stored."""
    from ..backend.cache import Cache
    cache = Cache()
    n = 0
    for rel, data in entries.items():
        if isinstance(rel, str) and _ENTRY.match(rel) and isinstance(data, bytes) and len(data) <= ENTRY_LIMIT \
                and cache._path(rel.rsplit("/", 1)[1]).relative_to(cache.root).as_posix() == rel:
            cache.put(rel.rsplit("/", 1)[1], data)
            n += 1
    return n


def link_on_ray(work: list, address: str, jobs: int, progress, link_one) -> None:
    """``work``: (outcome, spec path, facts, settings) for each configuration; each outcome's status, reason and link time
    are set as its task ends. ``progress()``: the bar's context manager."""
    try:
        import ray
    except ImportError:
        raise UsageError("--ray needs Ray, which is not installed here", field="--ray",
                         hint="pip install 'pipelink[ray]' (on every node of the cluster too)") from None
    if address == "local":
        ray.init(num_cpus=jobs, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    else:
        ray.init(address=address, log_to_driver=False, ignore_reinit_error=True)
    task = ray.remote(link_shipped)
    shipped = {spec: ray.put(ship(spec)) for spec in dict.fromkeys(spec for _, spec, _, _ in work)}
    refs = {task.remote(shipped[spec], facts, link_one, settings): o for o, spec, facts, settings in work}
    with progress() as bar:
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            o = refs[done[0]]
            try:
                o.status, o.reason, o.link_s, entries = ray.get(done[0])
                store(entries)
            except Exception as exc:  # the task or its node failed: recorded, the search goes on
                o.status, o.reason = "link failed", f"the Ray task failed: {type(exc).__name__}: {exc}"[:2000]
            bar.advance(o)


def cluster_gpus() -> int:
    """How many GPUs the Ray cluster this process is connected to offers (0 without Ray or a connection)."""
    try:
        import ray
        return int(ray.cluster_resources().get("GPU", 0)) if ray.is_initialized() else 0
    except ImportError:
        return 0


def verify_and_time_shipped(shipped: dict[str, dict], bucket: dict, shape: dict, configs: list, reps: int,
                            timeout, verify_and_time) -> dict:
    """On a Ray worker holding one GPU: the bucket's linked configurations (spec name, facts, settings) verified
    and timed there (search._verify_and_time, in one warm verify child), each spec written beside its own
    packages. Returns the outcomes (status, reason, median, timing), the GPU's identity and its Ray id."""
    import ray

    from .cache import device_identity
    from .outcomes import BucketResult, Outcome
    from .space import Config
    with tempfile.TemporaryDirectory(prefix="pipelink-ray-gpu-") as folder:
        root = Path(folder)
        paths = {}
        for n, (name, spec) in enumerate(shipped.items()):
            sub = root / f"s{n}"
            sub.mkdir()
            for file, data in spec["files"].items():
                (sub / file).write_bytes(data)
            (sub / "spec.toml").write_text(spec["spec"])
            paths[name] = sub / "spec.toml"
        outcomes = [Outcome(Config(paths[name], tuple(facts), tuple(settings)), status="linked")
                    for name, facts, settings in configs]
        result = BucketResult(dict(shape), dict(bucket), outcomes)
        from ..verify.watch import warm_child
        with warm_child():
            verify_and_time(result, root / "work", reps, timeout, False)
        return {"device": device_identity(), "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
                "node": ray.get_runtime_context().get_node_id(),
                "outcomes": [(o.status, o.reason, o.median_ms, o.timing) for o in outcomes]}


def time_on_ray_gpus(results: list, reps: int, timeout, verify_and_time, progress) -> dict:
    """Each bucket's linked configurations verified and timed by a Ray task holding one of the cluster's GPUs
    (buckets run side by side, one GPU each; the configurations of a bucket on one GPU, interleaved as on a
    machine of one). Sets each outcome's status, reason and median; returns the GPUs' identity, which must be one
    model and driver across the cluster (a tune cache holds for one)."""
    import ray
    task = ray.remote(num_gpus=1)(verify_and_time_shipped)
    shipped = {}
    refs = {}
    for r in results:
        linked = [o for o in r.outcomes if o.status == "linked"]
        if not linked:
            continue
        for o in linked:
            shipped.setdefault(str(o.config.spec), ship(str(o.config.spec), verify=True))
        mine = {s: shipped[s] for s in dict.fromkeys(str(o.config.spec) for o in linked)}
        configs = [(str(o.config.spec), list(o.config.facts), list(o.config.settings)) for o in linked]
        refs[task.remote(mine, r.bucket, r.shape, configs, reps, timeout, verify_and_time)] = (r, linked)
    devices = []
    with progress() as bar:
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            r, linked = refs[done[0]]
            try:
                got = ray.get(done[0])
                for o, (status, reason, median, timing) in zip(linked, got["outcomes"]):
                    o.status, o.reason, o.median_ms, o.timing = status, reason, median, timing
                r.where = f"Ray node {got['node'][:12]}, GPU {','.join(got['gpu_ids'])} ({got['device'].get('gpu')})"
                devices.append(got["device"])
            except Exception as exc:  # the task or its node failed: the bucket's configurations say so
                for o in linked:
                    o.status, o.reason = "timing failed", f"the Ray GPU task failed: {type(exc).__name__}: {exc}"[:2000]
            timed = [o for o in r.outcomes if o.status == "timed"]
            r.winner = min(timed, key=lambda o: o.median_ms, default=None)
            for o in linked:
                bar.advance(o)
    kinds = {(d.get("gpu"), d.get("driver")) for d in devices}
    if len(kinds) > 1:
        raise UsageError("the Ray cluster's GPUs differ (" + "; ".join(f"{g}, driver {v}" for g, v in sorted(kinds))
                         + "): a tune cache holds for one GPU model and driver", field="--ray",
                         hint="tune on a cluster (or a placement group) of one GPU model")
    return devices[0] if devices else {"gpu": "none"}

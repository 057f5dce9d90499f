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


def ship(spec_path: str) -> dict:
    """The spec's text with each package path made a file name of its own, and those packages' bytes."""
    from ..spec import load_spec
    spec = load_spec(spec_path)
    text = Path(spec_path).read_text()
    files: dict[str, bytes] = {}
    for inst in spec.instance:
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

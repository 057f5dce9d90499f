"""The tune cache: the winning configuration per shape bucket of a spec, on disk.

One JSON file per spec and machine identity (GPU model, driver, toolchain, pipelink, the spec's and its
packages' content hashes), under the build cache's root: <root>/tune/<link>-<identity hash>.json. A new
driver, toolchain or package gives another file, so nothing tuned for other code is served. The file is
read bounded and validated whole, as anything on disk may have been written by someone else: a file that
is corrupted (not JSON, wrong types, out-of-range values) or foreign (its identity is not this machine's
and spec's) is set aside and rebuilt, and the reason is kept (``TuneCache.rebuilt``). An entry naming an
alternative spec is served only while that spec file and its packages hash as they did when it won.
Writes are atomic.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from .._version import __version__
from ..backend.cache import default_root, make_key
from ..errors import PipelinkError
from ..fsutil import read_bounded, write_atomic
from ..schema import identifier_problem

FORMAT = 2  # 2: an entry's settings (the [schedule] / [launch] fields its search set)
FILE_LIMIT = 8 << 20        # bytes: thousands of entries fit in far less
MAX_ENTRIES = 4096
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_SPEC_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,200}\.toml$")  # a file beside the spec: no folder, no '..'


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def spec_hashes(spec_path: Path) -> dict[str, str]:
    """The spec file's content hash and each package it names (by instance), as they are now."""
    from ..spec import load_spec
    spec = load_spec(spec_path)
    out = {"spec": file_sha256(spec_path)}
    for inst in spec.instance:
        if inst.source is not None:  # packed by each link: the files it is packed from
            source, contract = spec.source_paths(inst)
            out[f"source:{inst.name}"] = "+".join(file_sha256(p) if p.is_file() else "missing"
                                                  for p in (source, contract))
            continue
        package = Path(inst.package)
        package = package if package.is_absolute() else spec_path.parent / package
        out[f"package:{inst.name}"] = file_sha256(package) if package.is_file() else "missing"
    return out


def device_identity() -> dict[str, str]:
    """The GPU model and driver version this process would time on ({"gpu": "none"} without one)."""
    from ..runtime import gpu_available
    ok, name = gpu_available()
    if not ok:
        return {"gpu": "none"}
    from cuda.bindings import driver
    return {"gpu": name, "driver": str(driver.cuDriverGetVersion()[1])}


def identity(spec_path: Path, device: dict[str, str] | None = None) -> dict:
    from ..backend.toolchain import toolchain_id
    return {"device": device if device is not None else device_identity(), "toolchain": toolchain_id(),
            "pipelink": __version__, "hashes": spec_hashes(spec_path)}


@dataclass(frozen=True)
class Entry:
    """The winner for one bucket."""
    bucket: dict[str, int]      # each varying fact's linked (bucketed) size
    shape: dict[str, int]       # the size it was timed at
    spec: str                   # "" (the spec itself) or an alternative spec's file name, beside it
    spec_sha256: str            # of that spec file and ...
    packages_sha256: str        # ... of its packages (one hash over spec_hashes), when it won
    facts: dict[str, int]       # what replaces the spec's [facts] entries
    settings: dict              # what replaces its [schedule] / [launch] fields ("schedule.split": "stream_k")
    median_ms: float
    candidates: int             # configurations tried for the bucket
    failed: int                 # of them, those that failed to link, verify or finish
    tuned: str                  # when (UTC, ISO 8601)

    def to_json(self) -> dict:
        return dict(self.__dict__)


def bucket_label(bucket: dict[str, int]) -> str:
    return ",".join(f"{k}={bucket[k]}" for k in sorted(bucket))


class TuneCache:
    def __init__(self, spec_path: str | Path, root: str | Path | None = None, device: dict | None = None) -> None:
        self.spec_path = Path(spec_path)
        self.identity = identity(self.spec_path, device)
        from ..spec import load_spec
        link = load_spec(self.spec_path).link.name
        self.path = Path(root or default_root()) / "tune" / f"{link}-{make_key(self.identity)[:20]}.json"
        self.entries: dict[str, Entry] = {}
        self.granule: dict[str, int] = {}   # the bucket step of each varying fact its search used
        self.rebuilt: str | None = None     # why the file on disk was set aside, if it was
        self._load()

    def _load(self) -> None:
        if not self.path.exists():
            return
        try:
            data = json.loads(read_bounded(self.path, FILE_LIMIT, "tune cache"))
            self.entries = _validated(data, self.identity)
            _facts(data.get("granule"), "granule", positive=True)
            self.granule = dict(data["granule"])
        except (PipelinkError, ValueError, TypeError, KeyError) as exc:
            why = exc.format() if isinstance(exc, PipelinkError) else f"{type(exc).__name__}: {exc}"
            self.rebuilt = f"{self.path} set aside and rebuilt: {why}"
            self.entries, self.granule = {}, {}

    def get(self, bucket: dict[str, int]) -> Entry | None:
        entry = self.entries.get(bucket_label(bucket))
        if entry is None or not entry.spec:
            return entry
        alt = self.spec_path.parent / entry.spec  # an alternative spec: served while it is what won
        if not alt.is_file() or file_sha256(alt) != entry.spec_sha256 or _packages_hash(alt) != entry.packages_sha256:
            return None
        return entry

    def nearest(self, bucket: dict[str, int]) -> Entry | None:
        """The tuned entry closest to ``bucket`` (by the log of each size): the heuristic where it has none."""
        def distance(e: Entry) -> float:
            return sum(abs(math.log2(e.bucket[k]) - math.log2(bucket[k])) for k in bucket)
        found = [e for e in self.entries.values() if set(e.bucket) == set(bucket) and self.get(e.bucket) is e]
        return min(found, key=distance, default=None)

    def put(self, entry: Entry) -> None:
        self.entries[bucket_label(entry.bucket)] = entry

    def save(self) -> Path:
        payload = {"format": FORMAT, "identity": self.identity, "granule": self.granule,
                   "entries": {k: e.to_json() for k, e in sorted(self.entries.items())}}
        return write_atomic(self.path, json.dumps(payload, indent=1, sort_keys=True))


def new_entry(spec_path: Path, main_spec: Path, bucket: dict, shape: dict, facts: dict, median_ms: float,
              candidates: int, failed: int, settings: dict | None = None) -> Entry:
    alt = Path(spec_path).resolve() != Path(main_spec).resolve()
    return Entry(dict(bucket), dict(shape), Path(spec_path).name if alt else "", file_sha256(spec_path),
                 _packages_hash(spec_path), dict(facts), dict(settings or {}), float(median_ms), candidates, failed,
                 datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))


def _packages_hash(spec_path: Path) -> str:
    return hashlib.sha256(json.dumps(spec_hashes(Path(spec_path)), sort_keys=True).encode()).hexdigest()


def _validated(data, expected: dict) -> dict[str, Entry]:
    """The entries of a parsed file, every field checked; anything off raises ValueError or TypeError."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"not a tune cache of format {FORMAT}")
    if data.get("identity") != expected:
        raise ValueError("foreign: made for another GPU, driver, toolchain, pipelink or spec content")
    entries = data.get("entries")
    if not isinstance(entries, dict) or len(entries) > MAX_ENTRIES:
        raise ValueError(f"entries is not a table of at most {MAX_ENTRIES}")
    out = {}
    for label, e in entries.items():
        if not isinstance(e, dict) or set(e) != set(Entry.__dataclass_fields__):
            raise ValueError(f"entry {label!r} does not have the fields {sorted(Entry.__dataclass_fields__)}")
        for name in ("bucket", "shape", "facts"):
            _facts(e[name], f"{label}.{name}", positive=name != "facts")
        _settings(e["settings"], f"{label}.settings")
        if bucket_label(e["bucket"]) != label or set(e["shape"]) != set(e["bucket"]):
            raise ValueError(f"entry {label!r} is filed under another bucket")
        if not isinstance(e["spec"], str) or (e["spec"] and not _SPEC_NAME.match(e["spec"])):
            raise ValueError(f"entry {label!r}: spec {e['spec']!r} is not a file name beside the spec")
        for name in ("spec_sha256", "packages_sha256"):
            if not isinstance(e[name], str) or not _HEX64.match(e[name]):
                raise ValueError(f"entry {label!r}: {name} is not a SHA-256")
        ms = e["median_ms"]
        if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not 0 < ms < 1e7:
            raise ValueError(f"entry {label!r}: median_ms {ms!r} is not a time")
        for name in ("candidates", "failed"):
            n = e[name]
            if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= 1 << 20:
                raise ValueError(f"entry {label!r}: {name} {n!r} is not a count")
        if not isinstance(e["tuned"], str) or len(e["tuned"]) > 64:
            raise ValueError(f"entry {label!r}: tuned is not a date")
        out[label] = Entry(**{k: e[k] for k in Entry.__dataclass_fields__})
    return out


def _facts(table, where: str, positive: bool) -> None:
    if not isinstance(table, dict) or len(table) > 64:
        raise ValueError(f"{where} is not a table of facts")
    for name, value in table.items():
        problem = identifier_problem(name) if isinstance(name, str) else "not a name"
        if problem:
            raise ValueError(f"{where}: {problem}")
        if isinstance(value, bool) or not isinstance(value, int) or not (1 if positive else -(1 << 31)) <= value < 1 << 31:
            raise ValueError(f"{where}.{name} = {value!r} is not a fact value")


def _settings(table, where: str) -> None:
    """Only fields a search may set (spec.TUNABLE), each a value of its kind; the spec checks the value itself
    when the operator loads it with them."""
    from ..spec import TUNABLE
    if not isinstance(table, dict) or len(table) > 16:
        raise ValueError(f"{where} is not a table of settings")
    for key, value in table.items():
        section, _, name = str(key).partition(".")
        kind = TUNABLE.get(section, {}).get(name)
        if kind is None:
            raise ValueError(f"{where}: {str(key)[:64]!r} is not a field a search may set")
        if kind is int and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 31):
            raise ValueError(f"{where}.{key} = {value!r} is not a whole number")
        if kind is str and (not isinstance(value, str) or len(value) > 64 or identifier_problem(value)):
            raise ValueError(f"{where}.{key} = {str(value)[:64]!r} is not a name")

"""Content-addressed build cache.

Keys hash the cache schema version, the toolchain versions, the options and every input's
content; for an nvcc run, also the content of every header it read (``get_or_build_tracked``).
Each entry stores its payload next to the payload's SHA-256; an entry whose payload does not
match (a torn write, a disk error, a hand edit) is discarded and rebuilt. Writes are atomic.
$PIPELINK_CACHE_DIR overrides the location; PIPELINK_CACHE=0 disables the cache. A cache that
cannot be read or written (its root a file, an entry a directory, no permission) is only a slower
build: the cache turns itself off with a CacheWarning and the build goes on without it.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..errors import PipelinkError
from ..fsutil import read_bounded, write_atomic

SCHEMA_VERSION = 2
ENTRY_LIMIT = 1 << 30  # bytes; a cubin or LTO-IR is far smaller: anything larger is not ours


class CacheWarning(UserWarning):
    """The build cache is unusable; the build continues without it."""


def default_root() -> Path:
    if os.environ.get("PIPELINK_CACHE_DIR"):
        return Path(os.environ["PIPELINK_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "pipelink"


def make_key(*parts: object) -> str:
    h = hashlib.sha256()
    h.update(f"pipelink-cache-v{SCHEMA_VERSION}".encode())
    for part in parts:
        blob = part if isinstance(part, bytes) else json.dumps(part, sort_keys=True, default=str).encode()
        h.update(len(blob).to_bytes(8, "little"))
        h.update(blob)
    return h.hexdigest()


@dataclass
class Cache:
    root: Path = field(default_factory=default_root)
    enabled: bool = field(default_factory=lambda: os.environ.get("PIPELINK_CACHE", "1") != "0")
    events: list[str] = field(default_factory=list)  # "hit <key>", "miss <key>", "corrupt <key>", "disabled (...)"

    def _path(self, key: str) -> Path:
        return self.root / f"v{SCHEMA_VERSION}" / key[:2] / key

    def _disable(self, what: str, reason: object) -> None:
        self.enabled = False
        self.events.append(f"disabled ({what})")
        warnings.warn(f"build cache {self.root} cannot be {what} ({reason}); building without a cache "
                      "(fix or remove it, or set PIPELINK_CACHE_DIR)", CacheWarning, stacklevel=3)

    def get(self, key: str) -> bytes | None:
        if not self.enabled:
            return None
        path = self._path(key)
        try:
            if not (path.exists() and path.with_suffix(".sha256").exists()):  # a payload alone: a torn write
                self.events.append(f"miss {key[:12]}")
                return None
            data = read_bounded(path, ENTRY_LIMIT, "cache entry")
            digest = read_bounded(path.with_suffix(".sha256"), 64, "cache digest").decode(errors="replace").strip()
        except (OSError, PipelinkError) as exc:  # not a file (a directory, a FIFO), no permission, ...
            self._disable("read", exc.message if isinstance(exc, PipelinkError) else exc.strerror)
            return None
        if hashlib.sha256(data).hexdigest() != digest:
            self.events.append(f"corrupt {key[:12]}")
            try:
                for p in (path, path.with_suffix(".sha256")):
                    p.unlink(missing_ok=True)
            except OSError as exc:
                self._disable("written", exc.strerror)
            return None
        self.events.append(f"hit {key[:12]}")
        return data

    def put(self, key: str, data: bytes) -> None:
        if not self.enabled:
            return
        path = self._path(key)
        try:
            # Payload first, digest last: a reader that finds a digest finds a complete payload.
            write_atomic(path, data)
            write_atomic(path.with_suffix(".sha256"), hashlib.sha256(data).hexdigest())
        except OSError as exc:
            self._disable("written", exc.strerror or exc)

    def get_or_build(self, key: str, build: Callable[[], bytes]) -> tuple[bytes, bool]:
        data = self.get(key)
        if data is not None:
            return data, True
        data = build()
        self.put(key, data)
        return data, False

    def get_or_build_tracked(self, key: str, build: Callable[[], tuple[bytes, list[str]]]) -> tuple[bytes, bool]:
        """For a build that reads files its key cannot list in advance (the headers an nvcc run
        includes). ``build`` returns the payload and the files it read; they are recorded under
        ``key``, and the payload is stored under a key that also hashes their contents. A later
        lookup re-hashes the recorded files: an edited, moved or deleted header is a miss, never a
        stale hit (ccache's "direct mode")."""
        deps_key = make_key("deps", key)
        recorded = self.get(deps_key)
        if recorded is not None:
            data = self.get(make_key(key, file_hashes(json.loads(recorded))))
            if data is not None:
                return data, True
        data, files = build()
        self.put(deps_key, json.dumps(sorted(files)).encode())
        self.put(make_key(key, file_hashes(files)), data)
        return data, False


def file_hashes(paths: list[str]) -> dict[str, str | None]:
    """SHA-256 of each file's content (None for a file that is not there)."""
    out = {}
    for p in sorted(paths):
        try:
            out[p] = hashlib.sha256(read_bounded(p, ENTRY_LIMIT, "header")).hexdigest()
        except PipelinkError:
            out[p] = None
    return out

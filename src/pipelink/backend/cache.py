"""Content-addressed build cache.

Keys hash the cache schema version, the toolchain versions, the options and every input's
content; for an nvcc run, also the content of every header it read (``get_or_build_tracked``).
Each entry stores its payload next to the payload's SHA-256. An entry whose payload does not
match (a torn write, a disk error, a hand edit), or whose payload is not what its caller stores
there (the ``decode`` a lookup passes fails: garbage written with its own digest), is corrupted: it
is discarded with a CacheWarning and rebuilt. Writes are atomic (temp file + rename), and there
are no locks: a process killed at any point leaves at most a temp file, which no lookup reads.
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
from typing import Callable, TypeVar

from ..errors import PipelinkError
from ..fsutil import read_bounded, write_atomic

SCHEMA_VERSION = 2
ENTRY_LIMIT = 1 << 30  # bytes; a cubin or LTO-IR is far smaller: anything larger is not ours
DIGEST_LIMIT = 4096    # a digest is 64 bytes; a longer one is a corrupted entry, not an unreadable cache
T = TypeVar("T")
_GONE = "removed since it was found"  # read_bounded's hint for a file that is not there: a miss, not a broken cache


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

    def get(self, key: str, decode: Callable[[bytes], T] = bytes) -> T | None:
        """The entry's payload passed through ``decode``, or None (a miss). Whatever ``decode`` raises
        means the payload is not what was stored there: the entry is corrupted, like one whose digest
        does not match."""
        if not self.enabled:
            return None
        path = self._path(key)
        if not _present(path):  # a payload alone: a torn write
            self.events.append(f"miss {key[:12]}")
            return None
        try:
            data = read_bounded(path, ENTRY_LIMIT, "cache entry", missing_hint=_GONE)
            digest = read_bounded(path.with_suffix(".sha256"), DIGEST_LIMIT, "cache digest",
                                  missing_hint=_GONE).decode(errors="replace").strip()
        except (OSError, PipelinkError) as exc:  # not a file (a directory, a FIFO), no permission, ...
            if getattr(exc, "hint", None) == _GONE:  # removed since the check (another process found it corrupted)
                self.events.append(f"miss {key[:12]}")
                return None
            self._disable("read", exc.message if isinstance(exc, PipelinkError) else exc.strerror)
            return None
        if hashlib.sha256(data).hexdigest() != digest:
            self._discard(key, "its digest does not match")
            return None
        try:
            value = decode(data)
        except Exception as exc:  # noqa: BLE001 -- any failure: UnicodeDecodeError, KeyError, RecursionError, ...
            self._discard(key, f"{type(exc).__name__}: {exc}"[:200])
            return None
        self.events.append(f"hit {key[:12]}")
        return value

    def _discard(self, key: str, why: str) -> None:
        path = self._path(key)
        self.events.append(f"corrupt {key[:12]}")
        warnings.warn(f"build cache entry {path} is corrupted ({why}); rebuilding it", CacheWarning, stacklevel=4)
        try:
            for p in (path, path.with_suffix(".sha256")):
                p.unlink(missing_ok=True)
        except OSError as exc:
            self._disable("written", exc.strerror)

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

    def get_or_build(self, key: str, build: Callable[[], bytes], decode: Callable[[bytes], T] = bytes
                     ) -> tuple[T, bool]:
        """(decoded payload, hit). A fresh build is decoded too, before it is stored: a builder whose
        output its own decoder refuses is a bug, not an entry to keep throwing away."""
        value = self.get(key, decode)
        if value is not None:
            return value, True
        data = build()
        value = decode(data)
        self.put(key, data)
        return value, False

    def get_or_build_tracked(self, key: str, build: Callable[[], tuple[bytes, list[str]]],
                             decode: Callable[[bytes], T] = bytes) -> tuple[T, bool]:
        """For a build that reads files its key cannot list in advance (the headers an nvcc run
        includes). ``build`` returns the payload and the files it read; they are recorded under
        ``key``, and the payload is stored under a key that also hashes their contents. A later
        lookup re-hashes the recorded files: an edited, moved or deleted header is a miss, never a
        stale hit (ccache's "direct mode")."""
        deps_key = make_key("deps", key)
        recorded = self.get(deps_key, _file_list)
        if recorded is not None:
            value = self.get(make_key(key, file_hashes(recorded)), decode)
            if value is not None:
                return value, True
        data, files = build()
        value = decode(data)
        self.put(deps_key, json.dumps(sorted(files)).encode())
        self.put(make_key(key, file_hashes(files)), data)
        return value, False


def _present(path: Path) -> bool:
    """The entry's payload and digest both exist; an error looking counts as present, so that the read
    that follows fails and says why."""
    try:
        return path.exists() and path.with_suffix(".sha256").exists()
    except OSError:
        return True


def _file_list(data: bytes) -> list[str]:
    """A tracked entry's recorded files: a JSON list of paths the OS can take."""
    files = json.loads(data)
    if not isinstance(files, list) or not all(isinstance(f, str) and "\0" not in f for f in files):
        raise ValueError("not a list of file paths")
    for f in files:
        os.fsencode(f)  # a lone surrogate cannot name a file: raises
    return files


# Decoders of payloads (``Cache.get(key, decode)``): each raises ValueError on bytes that cannot be
# the payload its caller stores, so that garbage written with its own digest is rebuilt, not used.

FATBIN_MAGIC = 0xBA55ED50


def fatbin(data: bytes) -> bytes:
    """LTO-IR as ``nvcc -fatbin`` writes it: the fatbin header's magic, and its header and body sizes
    adding up to the entry's."""
    if (len(data) < 16 or int.from_bytes(data[:4], "little") != FATBIN_MAGIC
            or int.from_bytes(data[6:8], "little") + int.from_bytes(data[8:16], "little") != len(data)):
        raise ValueError("not a fatbin")
    return data


def cubin(data: bytes) -> bytes:
    """A cubin: a 64-bit ELF file for CUDA (e_machine 190) whose section header table lies inside it."""
    if len(data) < 64 or data[:5] != b"\x7fELF\x02" or int.from_bytes(data[0x12:0x14], "little") != 190:
        raise ValueError("not a 64-bit CUDA ELF file")
    shoff = int.from_bytes(data[0x28:0x30], "little")
    if shoff + int.from_bytes(data[0x3A:0x3C], "little") * int.from_bytes(data[0x3C:0x3E], "little") > len(data):
        raise ValueError("its section headers lie past its end")
    return data


def file_hashes(paths: list[str]) -> dict[str, str | None]:
    """SHA-256 of each file's content (None for a file that is not there)."""
    out = {}
    for p in sorted(paths):
        try:
            out[p] = hashlib.sha256(read_bounded(p, ENTRY_LIMIT, "header")).hexdigest()
        except PipelinkError:
            out[p] = None
    return out

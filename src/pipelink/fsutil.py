"""File access for pipelink: atomic writes (a reader never sees a half-written output, and a failed
write leaves the old file in place) and bounded reads of files a user names."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from .errors import PipelinkError


def _umask() -> int:
    """The process's umask, read without changing it (Linux: /proc/self/status), else set and put back."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: str | Path, data: bytes | str, mode: int | None = None) -> Path:
    """``mode``: the new file's permission bits (a user's file rewritten in place keeps its own);
    without it, what any new file of the user gets: 0666 less the umask (mkstemp alone gives 0600)."""
    if mode is None:
        mode = 0o666 & ~_umask()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def read_bounded(path: str | Path, limit: int, what: str, *, error: type[PipelinkError] = PipelinkError,
                 field: str | None = None, missing_hint: str | None = None) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them; anything else is ``error``
    naming the file (``missing_hint`` says how to make a missing one). A FIFO is refused before it
    is opened (opening one blocks until a writer comes) and a device such as /dev/zero before it is
    read (it never ends)."""
    path = Path(path)

    def refuse(message: str, hint: str | None = None) -> PipelinkError:
        return error(message, file=str(path), field=field, hint=hint)

    try:
        mode = path.stat().st_mode
        if not stat.S_ISREG(mode):
            raise refuse(f"{what} is not a regular file ({_kind(mode)})", f"give the path of a {what} file")
        # O_NONBLOCK: should the path have become a FIFO since the stat, open returns at once.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise refuse(f"{what} is not a regular file ({_kind(info.st_mode)})", f"give the path of a {what} file")
            if info.st_size > limit:
                raise refuse(f"{what} is {info.st_size} bytes, over the limit of {limit} bytes",
                             f"is this the right file? a {what} is never this large")
            data = f.read(limit + 1)
    except FileNotFoundError:
        raise refuse(f"{what} not found", missing_hint) from None
    except OSError as exc:
        raise refuse(f"cannot read the {what}: {exc.strerror or exc}") from None
    if len(data) > limit:  # it grew while we read
        raise refuse(f"{what} is over the limit of {limit} bytes")
    return data


def read_text_bounded(path: str | Path, limit: int, what: str, *, error: type[PipelinkError] = PipelinkError,
                      field: str | None = None, missing_hint: str | None = None) -> str:
    """``read_bounded`` decoded as UTF-8; bytes that are not UTF-8 are ``error`` naming the offset."""
    data = read_bounded(path, limit, what, error=error, field=field, missing_hint=missing_hint)
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise error(f"{what} is not UTF-8 text (byte {exc.start}: {data[exc.start:exc.start + 1]!r})",
                    file=str(path), field=field, hint="save it as UTF-8") from None


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a plain file"

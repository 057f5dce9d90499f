"""`pipelink lock SPEC`: pin each [[instance]]'s package to the SHA-256 of its file's bytes.

The spec is the user's file, so it is edited as text, minimally: each instance's `sha256 = "..."`
line is replaced where it stands, or added right after its `package = ...` line; comments, order and
formatting stay. The edited text must parse to exactly the spec it was plus the pins, or nothing is
written (a layout this line editor does not follow, such as instances in an inline array, is
refused with the pins to add by hand). The file is replaced atomically, keeping its permissions,
and only when a pin changed: locking a locked spec leaves it byte for byte as it was.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from .errors import SpecError
from .fsutil import read_text_bounded, write_atomic
from .package import load_package
from .schema import TOML_LIMIT, parse_toml
from .spec import load_spec

_HEADER = re.compile(r"\s*\[")                                   # any table header ends an instance's keys
_INSTANCE = re.compile(r"\s*\[\[\s*instance\s*\]\]\s*(#.*)?\r?$")
_PACKAGE = re.compile(r"(\s*)(package|\"package\"|'package')\s*=")
_SHA256 = re.compile(r"(\s*(?:sha256|\"sha256\"|'sha256')\s*=\s*)(\"[^\"\\]*\"|'[^']*')")


@dataclass(frozen=True)
class Pin:
    instance: str
    package: Path
    sha256: str
    before: str | None     # the pin the spec held, if any


def lock(spec_path: str | Path) -> tuple[list[Pin], bool]:
    """Pin every instance of the spec at ``spec_path`` to its package's bytes; returns the pins and
    whether the file was rewritten. A missing or broken package is its PackageError, the spec
    untouched."""
    path = Path(spec_path)
    spec = load_spec(path)
    digests: dict[Path, str] = {}
    pins = []
    for i, inst in enumerate(spec.instance):
        if inst.source is not None:  # no package file to pin: the link packs it from a source that may change
            raise SpecError(f"instance '{inst.name}' names a source ({inst.source}); a lock pins package files",
                            file=str(path), field=f"instance[{i}].source",
                            hint=f"pack it (`pipelink pack {inst.source} -o NAME.plc`) and name the package, "
                                 "then lock")
        pkg_path = spec.package_path(inst)
        if pkg_path not in digests:  # loaded whole: a pin is never written for a package that cannot link
            digests[pkg_path] = load_package(pkg_path).file_sha256
        pins.append(Pin(inst.name, pkg_path, digests[pkg_path], inst.sha256))
    target = path.resolve()  # a spec reached through a symlink is edited where it lies, the link kept
    text = read_text_bounded(target, TOML_LIMIT, "link spec", error=SpecError)
    new = _pinned_text(text, [p.sha256 for p in pins])
    expected = parse_toml(text, str(path), SpecError)
    entries = expected.get("instance")
    if new is None or not isinstance(entries, list) or len(entries) != len(pins):
        raise _by_hand(pins, str(path), "its [[instance]] tables are not one header and one package line each")
    for entry, pin in zip(entries, pins):
        entry["sha256"] = pin.sha256
    # The one guarantee that matters: the new text says what the old one did, plus the pins (a line
    # this editor misread, say inside a multi-line string, fails here and nothing is written).
    try:
        same = parse_toml(new, str(path), SpecError) == expected
    except SpecError:
        same = False
    if not same:
        raise _by_hand(pins, str(path), "the edited text would not say what it said plus the pins")
    if new == text:
        return pins, False
    write_atomic(target, new, mode=stat.S_IMODE(os.stat(target).st_mode))
    return pins, True


def _pinned_text(text: str, digests: list[str]) -> str | None:
    """``text`` with instance k's sha256 line set to digests[k]: replaced where it is, or added right
    after its package line. None: the text's [[instance]] tables do not match the digests one to one."""
    lines = text.split("\n")  # "\r" stays on its line: a CRLF file keeps CRLF
    out: list[str] = []
    seen = 0                  # [[instance]] headers so far
    k = -1                    # the [[instance]] whose keys the lines are in; -1: none
    package_at = sha_at = None

    def close() -> bool:  # the instance's keys end: add its pin after its package line if it had none
        if k < 0 or sha_at is not None:
            return True
        if package_at is None:
            return False
        indent = _PACKAGE.match(out[package_at]).group(1)
        cr = "\r" if out[package_at].endswith("\r") else ""
        out.insert(package_at + 1, f'{indent}sha256 = "{digests[k]}"{cr}')
        return True

    for line in lines:
        if _HEADER.match(line):
            if not close():
                return None
            k, package_at, sha_at = -1, None, None
            if _INSTANCE.match(line):
                k, seen = seen, seen + 1
                if k >= len(digests):
                    return None
        elif k >= 0 and package_at is None and _PACKAGE.match(line):
            package_at = len(out)
        elif k >= 0 and sha_at is None and (m := _SHA256.match(line)):
            sha_at = len(out)
            line = f'{m.group(1)}"{digests[k]}"{line[m.end():]}'
        out.append(line)
    if not close() or seen != len(digests):
        return None
    return "\n".join(out)


def _by_hand(pins: list[Pin], file: str, why: str) -> SpecError:
    by_hand = "; ".join(f'{p.instance}: sha256 = "{p.sha256}"' for p in pins)
    return SpecError(f"cannot place the pins in this spec's text: {why}; nothing was written", file=file,
                     field="instance", hint=f"write each instance as an [[instance]] table with its own "
                                            f"`package = ...` line, or add the pins by hand: {by_hand}")

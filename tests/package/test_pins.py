"""Pinned packages (issue 48, "Beyond"): a link spec may pin each [[instance]]'s package to the
SHA-256 of its file (`sha256 = "..."`, as `sha256sum` prints it); a package whose bytes differ is
refused (PinMismatch, exit 2, nothing written), like pip's --require-hashes. `pipelink lock SPEC`
writes the pins into the spec's text, changing nothing else. The demo's packages, packed once per
session (conftest); a different package is the same one saved without its second variant (no nvcc)."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tomllib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pipelink
from pipelink import schema
from pipelink.errors import PackageError, PinMismatch, SpecError
from pipelink.lock import _pinned_text, lock
from pipelink.package import load_package
from pipelink.spec import LinkSpec, load_spec

from conftest import edit
from pipelink.demo import packaged_spec

HEX = "0123456789abcdef"


def cli(*args):
    return subprocess.run([sys.executable, "-m", "pipelink.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "COLUMNS": "400"})


def refused(proc, *words):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    for w in words:
        assert w in proc.stderr, (w, proc.stderr)


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def update(package):
    """A vendor's update: the same component, saved again with one variant fewer (a valid package of
    other bytes, which still links the demo: it keeps the 32-row variant)."""
    pkg = load_package(package)
    pkg.variants = pkg.variants[:1]
    pkg.save(package)


def test_lock_writes_the_pins_after_each_package_line_and_link_passes(demo_dir):
    spec = demo_dir / "link.toml"
    before = spec.read_text()
    proc = cli("lock", spec)
    assert proc.returncode == 0, proc.stderr
    after = spec.read_text()
    pins = {name: sha(demo_dir / "packages" / f"{name}.plc") for name in ("ring_producer", "ring_reduce", "tile_store")}
    want = before
    for name, digest in pins.items():
        want = want.replace(f'package = "packages/{name}.plc"\n',
                            f'package = "packages/{name}.plc"\nsha256 = "{digest}"\n')
    assert after == want  # comments, order and every other line as they were
    assert [i.sha256 for i in load_spec(spec).instance] == list(pins.values())
    kernel = pipelink.link(spec)
    assert kernel.cubin


def test_lock_is_idempotent(demo_dir):
    spec = demo_dir / "link.toml"
    assert cli("lock", spec).returncode == 0
    first, stamp = spec.read_bytes(), spec.stat().st_mtime_ns
    proc = cli("lock", spec)
    assert proc.returncode == 0 and "not rewritten" in proc.stdout, proc.stdout
    assert spec.read_bytes() == first and spec.stat().st_mtime_ns == stamp


def test_pin_mismatch_is_refused_naming_both_hashes(demo_dir):
    spec, out = demo_dir / "link.toml", demo_dir / "out"
    lock(spec)
    locked = sha(demo_dir / "packages" / "ring_reduce.plc")
    update(demo_dir / "packages" / "ring_reduce.plc")
    now = sha(demo_dir / "packages" / "ring_reduce.plc")
    assert now != locked
    text = spec.read_bytes()
    with pytest.raises(PinMismatch) as info:
        pipelink.link(spec)
    err = info.value
    assert isinstance(err, PackageError) and err.field == "instance[1].sha256" and err.file == str(spec)
    refused(cli("link", spec, "-o", out), "PinMismatch", str(spec), "instance[1].sha256", "instance 'reduce'",
            locked, now, "pipelink lock")
    assert not out.exists() and spec.read_bytes() == text
    # Trusting the update: lock again (only its pin changes), and the link passes.
    lock(spec)
    assert spec.read_bytes() == text.replace(locked.encode(), now.encode())
    pipelink.link(spec)


def test_lock_refuses_a_missing_package(demo_dir):
    spec = demo_dir / "link.toml"
    text = spec.read_bytes()
    (demo_dir / "packages" / "tile_store.plc").unlink()
    refused(cli("lock", spec), "PackageError", "tile_store.plc", "pipelink pack")
    assert spec.read_bytes() == text
    assert [p.name for p in demo_dir.iterdir() if p.name.startswith(".")] == []  # no temporary left


def test_lock_keeps_comments_indentation_crlf_and_mode(demo_dir):
    """A spec written by hand: CRLF lines, indented keys, comments, a stale pin with a comment after
    it, and its own permissions. Only the pin lines change."""
    spec = demo_dir / "link.toml"
    text = spec.read_text()
    text = text.replace('package = "packages/ring_producer.plc"\n',
                        '  package = "packages/ring_producer.plc"   # the vendor\'s\n')
    text = text.replace('package = "packages/ring_reduce.plc"\n',
                        f'package = "packages/ring_reduce.plc"\n# reviewed\nsha256 = \'{"0" * 64}\'  # old\n')
    text = text.replace("[[instance]]\nname = \"store\"", "[[instance]]   # last\nname = \"store\"")
    spec.write_bytes(text.replace("\n", "\r\n").encode())
    os.chmod(spec, 0o640)
    lock(spec)
    p, r, s = (sha(demo_dir / "packages" / f"{n}.plc") for n in ("ring_producer", "ring_reduce", "tile_store"))
    want = text.replace('package = "packages/ring_producer.plc"   # the vendor\'s\n',
                        f'package = "packages/ring_producer.plc"   # the vendor\'s\n  sha256 = "{p}"\n')
    want = want.replace(f'sha256 = \'{"0" * 64}\'  # old', f'sha256 = "{r}"  # old')
    want = want.replace('package = "packages/tile_store.plc"\n', f'package = "packages/tile_store.plc"\nsha256 = "{s}"\n')
    assert spec.read_bytes() == want.replace("\n", "\r\n").encode()
    assert oct(spec.stat().st_mode & 0o777) == oct(0o640)


def test_lock_refuses_a_spec_it_cannot_edit_line_by_line(demo_dir):
    """Instances as an inline array: nothing is written, and the hint gives the pins to add by hand."""
    spec = demo_dir / "link.toml"
    text = spec.read_text()
    inline = re.sub(r'\[\[instance\]\]\nname = "(\w+)"\npackage = "([^"]+)"\n(roles = (\{[^}]*\})\n)?',
                    lambda m: "", text)
    inline = inline.replace("[link]", 'instance = [{ name = "load", package = "packages/ring_producer.plc" }, '
                                      '{ name = "reduce", package = "packages/ring_reduce.plc" }, '
                                      '{ name = "store", package = "packages/tile_store.plc", '
                                      'roles = { store = "consumer" } }]\n\n[link]')
    spec.write_text(inline)
    load_spec(spec)  # a valid spec
    refused(cli("lock", spec), "SpecError", "nothing was written", sha(demo_dir / "packages" / "tile_store.plc"))
    assert spec.read_text() == inline


@pytest.mark.parametrize("value, words", [
    ('"' + "0" * 63 + '"', "63 characters long"),
    ('"' + "A" * 64 + '"', "not a lowercase hex digit"),
    ('"' + "0" * 63 + 'g"', "'g', which is not a lowercase hex digit"),
    ('"sha256:' + "0" * 64 + '"', "71 characters long"),
    ("64", "expected a string"),
])
def test_bad_pin_is_refused_on_load(demo_dir, value, words):
    spec, out = demo_dir / "link.toml", demo_dir / "out"
    edit(spec, 'package = "packages/tile_store.plc"\n', f'package = "packages/tile_store.plc"\nsha256 = {value}\n')
    with pytest.raises(SpecError) as info:
        load_spec(spec)
    assert info.value.field == "instance[2].sha256" and words in str(info.value)
    refused(cli("link", spec, "-o", out), "SpecError", "instance[2].sha256", words)
    assert not out.exists()


_DEMO = tomllib.loads(packaged_spec((__import__("conftest").ROOT / "examples" / "demo" / "link.toml").read_text()))


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=80), st.text(alphabet=HEX + "ABCDEFg ", min_size=62, max_size=66),
                 st.text(alphabet=HEX, min_size=64, max_size=64)))
def test_pin_is_accepted_exactly_when_it_is_64_lowercase_hex_digits(value):
    data = {**_DEMO, "instance": [dict(i) for i in _DEMO["instance"]]}
    data["instance"][0]["sha256"] = value
    ok = len(value) == 64 and all(c in HEX for c in value)
    try:
        spec = schema.load(LinkSpec, data, file="link.toml", path="", error=SpecError)
    except SpecError as exc:
        assert not ok and exc.field == "instance[0].sha256", (value, exc)
        return
    assert ok and spec.instance[0].sha256 == value


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet=HEX, min_size=64, max_size=64), min_size=3, max_size=3),
       st.sampled_from(["\n", "\r\n"]), st.booleans())
def test_pinned_text_says_the_spec_plus_the_pins(digests, newline, pinned_before):
    """The line editor on the demo spec: the result parses to the spec with exactly these pins, and
    pinning it again changes nothing."""
    text = packaged_spec((__import__("conftest").ROOT / "examples" / "demo" / "link.toml").read_text())
    if pinned_before:
        text = text.replace('package = "packages/ring_reduce.plc"\n',
                            f'package = "packages/ring_reduce.plc"\nsha256 = "{"f" * 64}"  # stale\n')
    text = text.replace("\n", newline)
    new = _pinned_text(text, digests)
    data = tomllib.loads(new)
    assert [i["sha256"] for i in data["instance"]] == digests
    assert {k: v for k, v in data.items() if k != "instance"} == {k: v for k, v in tomllib.loads(text).items()
                                                                 if k != "instance"}
    assert _pinned_text(new, digests) == new

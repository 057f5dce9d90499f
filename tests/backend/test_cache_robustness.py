"""Issue 48: the build cache under garbage, under many processes at once, and under SIGKILL.

Item 5: an entry whose digest matches but whose payload is not what its caller stores (garbage,
a truncated file, another entry's payload, JSON of another shape: a corrupted or tampered entry
written with its own digest) is corrupted like any other: discarded with a CacheWarning and
rebuilt, never a traceback.

Concurrency and interruption: 8 processes x 50 links of mixed specs into one cache (some of them
repacking a package the others read, or removing entries the others read) never corrupt it,
crash or return another spec's cubin; 50
packs and links SIGKILLed at random moments leave nothing that a later run trusts or that blocks it.

Everything is real: nvcc packs, nvJitLink links, cuobjdump reads; the demo's three packages.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

import pytest

import pipelink
from pipelink.backend.cache import Cache, CacheWarning

from conftest import DEMO_REDUCE_VARIANTS, RAW, ROOT
from pipelink.demo import packaged_spec

HERE = Path(__file__).resolve().parent

# (M, stages, mode): the demo spec with other facts and in every mode; each a different cubin
# (except where nothing in the code depends on the fact), each cheap to link.
SPECS = [(32768, 16, "pipelink"), (16384, 16, "pipelink"), (65536, 8, "pipelink"),
         (32768, 16, "symbol"), (8192, 4, "symbol"), (32768, 8, "monolithic")]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_specs(folder: Path) -> list[dict]:
    text = packaged_spec((ROOT / "examples" / "demo" / "link.toml").read_text())
    specs = []
    for m, stages, mode in SPECS:
        t = re.sub(r"^M = \d+$", f"M = {m}", text, flags=re.M)
        t = re.sub(r"^stages = \d+$", f"stages = {stages}", t, flags=re.M)
        path = folder / f"demo_{m}_{stages}.toml"
        path.write_text(t)
        specs.append({"path": str(path), "mode": mode})
    return specs


class _References:
    """Each spec variant's cubin SHA-256, linked by this process with no cache on first use (a test about one
    spec links that one only: the seeded-bug runner runs such a test alone, per mutant)."""

    def __init__(self, specs: list[dict]) -> None:
        self.specs, self.shas, self.seconds = specs, {}, {}

    def __getitem__(self, n: int) -> str:
        if n not in self.shas:
            s = self.specs[n]
            t0 = time.perf_counter()
            self.shas[n] = sha(pipelink.link(s["path"], mode=s["mode"], cache=Cache(enabled=False)).cubin)
            self.seconds[n] = time.perf_counter() - t0
        return self.shas[n]

    def link_s(self) -> float:
        """The mean uncached link time over every variant."""
        for n in range(len(self.specs)):
            self[n]
        return sum(self.seconds.values()) / len(self.specs)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, demo_packages) -> dict:
    """The spec variants beside the demo packages, and each one's cubin SHA-256 linked by this one
    process with no cache: what every cached or concurrent link must return."""
    folder = tmp_path_factory.mktemp("cache_reference")
    shutil.copytree(demo_packages, folder / "packages")
    specs = write_specs(folder)
    return {"folder": folder, "specs": specs, "sha256": _References(specs)}


def fresh_copy(reference: dict, dest: Path) -> list[dict]:
    """The reference folder (packages and specs) copied to ``dest``: the specs, pointing there."""
    shutil.copytree(reference["folder"], dest)
    return [{**s, "path": str(dest / Path(s["path"]).name)} for s in reference["specs"]]


def entries(root: Path) -> list[Path]:
    """Every payload of the cache (each has a .sha256 beside it); not the temp files of writes."""
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix != ".sha256" and not p.name.startswith("."))


def kind_of(data: bytes) -> str:
    if data[:4] == b"P\xedU\xba":
        return "ltoir"
    if data[:4] == b"\x7fELF":
        return "cubin"
    return "deps" if data[:1] == b"[" else "inspect"


def plant(entry: Path, data: bytes) -> None:
    """``data`` as the entry's payload, with its own digest: a tampered entry the digest cannot tell."""
    entry.write_bytes(data)
    entry.with_suffix(".sha256").write_text(sha(data))


def assert_intact(root: Path) -> None:
    """Every entry whose digest is there matches it (a payload alone is a torn write: a miss)."""
    for e in entries(root):
        digest = e.with_suffix(".sha256")
        if digest.exists():
            assert sha(e.read_bytes()) == digest.read_text().strip(), e


@contextmanager
def cache_warnings():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


# --- item 5: garbage with a matching digest is a corrupted entry ----------------------------------

NOT_UTF8 = b"\x80\x81\xfe\xff garbage \x00" * 64


def tampered(kind: str, data: bytes, others: dict[str, bytes]) -> dict[str, bytes]:
    """Payloads that are not what an entry of ``kind`` holds, each with what it tests."""
    out = {"not UTF-8": NOT_UTF8, "truncated": data[: len(data) // 2],
           "another entry's payload": next(v for k, v in others.items() if k != kind)}
    if kind == "deps":
        out["JSON of another shape"] = b'{"files": 1}'
        out["a path no file can have"] = b'["/usr/include/a\\u0000b"]'
    if kind == "inspect":
        d = json.loads(data)
        out["JSON of another shape"] = json.dumps({**d, "registers": "many"}).encode()
        out["a field too many"] = json.dumps({**d, "extra": 1}).encode()
        out["deeply nested"] = b"[" * 100000 + b"]" * 100000
    return out


@pytest.mark.slow
def test_a_garbage_entry_with_its_own_digest_is_rebuilt_with_a_warning(reference, tmp_path):
    spec = fresh_copy(reference, tmp_path / "demo")[0]
    root = tmp_path / "cache"
    cold = pipelink.link(spec["path"], cache=Cache(root=root))
    assert sha(cold.cubin) == reference["sha256"][0]
    saved = {e: e.read_bytes() for e in entries(root)}
    by_kind = {kind_of(d): d for d in saved.values()}
    assert sorted(by_kind) == ["cubin", "deps", "inspect", "ltoir"], "the four kinds of entry a link stores"
    for entry, data in saved.items():
        kind = kind_of(data)
        for what, garbage in tampered(kind, data, by_kind).items():
            plant(entry, garbage)
            cache = Cache(root=root)
            with cache_warnings() as caught:
                kernel = pipelink.link(spec["path"], cache=cache)
            assert sha(kernel.cubin) == reference["sha256"][0], (kind, what)
            assert any(e.startswith("corrupt") for e in cache.events), (kind, what, cache.events)
            msgs = [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]
            assert any("corrupted" in m and entry.name in m for m in msgs), (kind, what, msgs)
            assert not any("without a cache" in m for m in msgs), (kind, what, msgs)
            assert entry.read_bytes() == data, (kind, what)  # rebuilt: the entry holds the real payload again
    # A digest file of garbage, longer than any digest: that entry is corrupted, the cache stays on.
    entry, data = next(iter(saved.items()))
    entry.with_suffix(".sha256").write_bytes(NOT_UTF8)
    cache = Cache(root=root)
    with cache_warnings() as caught:
        assert sha(pipelink.link(spec["path"], cache=cache).cubin) == reference["sha256"][0]
    assert f"corrupt {entry.name[:12]}" in cache.events and cache.enabled, cache.events
    assert entry.with_suffix(".sha256").read_text() == sha(data)
    # and a link after all that is all hits, with no warning
    cache = Cache(root=root)
    with cache_warnings() as caught:
        warm = pipelink.link(spec["path"], cache=cache)
    assert warm.plan.backend.link == "cache hit" and sha(warm.cubin) == reference["sha256"][0]
    assert not caught and all(e.startswith("hit") for e in cache.events), (caught, cache.events)


@pytest.mark.slow
def test_the_cli_rebuilds_garbage_entries_and_exits_0(reference, tmp_path):
    spec = fresh_copy(reference, tmp_path / "demo")[0]
    root = tmp_path / "cache"
    pipelink.link(spec["path"], cache=Cache(root=root))
    for entry in entries(root):
        plant(entry, NOT_UTF8)
    env = {**os.environ, "PIPELINK_CACHE_DIR": str(root)}
    proc = subprocess.run([sys.executable, "-m", "pipelink.cli", "link", spec["path"], "-q", "-o",
                           str(tmp_path / "out")], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "CacheWarning" in proc.stderr and "corrupted" in proc.stderr, proc.stderr
    assert sha((tmp_path / "out" / "tile_fold.cubin").read_bytes()) == reference["sha256"][0]


# --- concurrency: 8 processes x 50 links into one cache --------------------------------------------

PROCESSES, LINKS = 8, 50


@pytest.mark.slow
def test_many_processes_linking_into_one_cache(reference, tmp_path):
    specs = fresh_copy(reference, tmp_path / "demo")
    root = tmp_path / "cache"
    packages = tmp_path / "demo" / "packages"
    package_bytes = {p.name: p.read_bytes() for p in packages.glob("*.plc")}
    names = sorted(package_bytes)
    env = {**os.environ, "PIPELINK_CACHE_DIR": str(root)}
    procs = []
    t0 = time.perf_counter()
    for i in range(PROCESSES):
        name = names[i % len(names)]
        pack = {"source": str(RAW / name.replace(".plc", ".cu")), "contract": str(RAW / name.replace(".plc", ".toml")),
                "output": str(packages / name), "variants": DEMO_REDUCE_VARIANTS if name == "ring_reduce.plc" else None}
        job = {"seed": 4800 + i, "links": LINKS, "specs": specs, "pack": pack, "evict": 0.04,
               "pack_at": random.Random(i).randrange(LINKS) if i % 2 == 0 else -1}  # half of them repack once
        (tmp_path / f"job{i}.json").write_text(json.dumps(job))
        procs.append(subprocess.Popen([sys.executable, str(HERE / "cache_worker.py"), str(tmp_path / f"job{i}.json"),
                                       str(tmp_path / f"out{i}.json")], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    try:
        outputs = [p.communicate(timeout=540)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    elapsed = time.perf_counter() - t0
    links = 0
    for i, p in enumerate(procs):
        result = json.loads((tmp_path / f"out{i}.json").read_text())
        assert p.returncode == 0 and result["error"] is None, (i, result["error"], outputs[i][-3000:])
        assert not result["warnings"], (i, result["warnings"])
        assert len(result["links"]) == LINKS
        for r in result["links"]:
            assert r["sha256"] == reference["sha256"][r["spec"]], (i, r)  # never another spec's cubin
            assert not r["events"], (i, r)  # nothing found corrupted, the cache never turned off
        links += len(result["links"])
    misses = sum(r["link"] == "linked" for i in range(PROCESSES)
                 for r in json.loads((tmp_path / f"out{i}.json").read_text())["links"])
    print(f"{links} links in {elapsed:.0f} s, {misses} of them misses")
    assert misses >= len(SPECS), "each spec was linked at least once"
    assert_intact(root)
    assert {p.name: p.read_bytes() for p in packages.glob("*.plc")} == package_bytes  # repacked whole
    assert not [p for p in packages.iterdir() if p.name.startswith(".")], "a repack's temp file left behind"
    # The cache as they left it gives every spec its cubin (a hit, or a miss where an entry was removed).
    for n, s in enumerate(specs):
        cache = Cache(root=root)
        with cache_warnings() as caught:
            kernel = pipelink.link(s["path"], mode=s["mode"], cache=cache)
        assert sha(kernel.cubin) == reference["sha256"][n] and not caught, caught


def _churn(root: str, stop) -> None:
    """Another process storing an entry and removing it again, as fast as it can."""
    cache = Cache(root=Path(root))
    while not stop.is_set():
        cache.put("k", b"payload" * 1000)
        time.sleep(0.001)  # long enough to be found whole now and then
        for p in (cache._path("k"), cache._path("k").with_suffix(".sha256")):
            p.unlink(missing_ok=True)


@pytest.mark.slow
def test_an_entry_removed_while_it_is_read_is_a_miss(tmp_path):
    """A lookup that finds an entry which another process removes before it is read (found corrupted
    there, or a cleaner) misses; it does not turn the cache off with a warning. (Before the fix, about
    35 lookups a second of this loop did.)"""
    ctx = multiprocessing.get_context("fork")
    stop = ctx.Event()
    churn = ctx.Process(target=_churn, args=(str(tmp_path / "cache"), stop))
    churn.start()
    found = lookups = 0
    try:
        with cache_warnings() as caught:
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < 4:
                cache = Cache(root=tmp_path / "cache")
                data = cache.get("k")
                assert data in (None, b"payload" * 1000) and cache.enabled, cache.events
                found += data is not None
                lookups += 1
    finally:
        stop.set()
        churn.join()
    assert not caught, [str(w.message) for w in caught]
    print(f"{lookups} lookups, {found} hits")


# --- interruption: SIGKILL at random moments of a pack or a link ----------------------------------

TRIALS = 50


def _job(kind: str, spec: dict, root: str, pack: dict, ready) -> None:
    """A forked child: its own process group (killed with its nvcc, cuobjdump), then the work."""
    os.setpgid(0, 0)
    ready.send("go")
    if kind == "pack":
        pipelink.pack(pack["source"], pack["contract"], pack["output"], variants=pack["variants"])
    else:
        pipelink.link(spec["path"], mode=spec["mode"], cache=Cache(root=Path(root)))


@contextmanager
def deadline(seconds: int):
    """A later run that waits on something a killed process left (a lock) fails here, not hangs."""
    def expired(signum, frame):
        raise TimeoutError(f"a run after a killed one took over {seconds} s: blocked?")
    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.slow
def test_a_killed_pack_or_link_leaves_nothing_trusted_or_blocking(reference, tmp_path):
    specs = fresh_copy(reference, tmp_path / "demo")
    root = tmp_path / "cache"
    package = tmp_path / "demo" / "packages" / "ring_reduce.plc"
    package_bytes = package.read_bytes()
    pack = {"source": str(RAW / "ring_reduce.cu"), "contract": str(RAW / "ring_reduce.toml"), "output": str(package),
            "variants": DEMO_REDUCE_VARIANTS}
    t0 = time.perf_counter()
    pipelink.pack(pack["source"], pack["contract"], tmp_path / "timed.plc", variants=pack["variants"])
    pack_s = time.perf_counter() - t0
    window = {"pack": pack_s, "link": reference["sha256"].link_s()}  # about as long as the work takes
    ctx = multiprocessing.get_context("fork")
    rng = random.Random(48)
    killed = 0
    for trial in range(TRIALS):
        kind = ("pack", "link", "link")[trial % 3]
        n = rng.randrange(len(specs))
        if kind == "link":  # drop some entries (or all): the killed link is writing them
            for e in entries(root):
                if rng.random() < 0.7:
                    e.with_suffix(".sha256").unlink(missing_ok=True)
                    e.unlink()
        parent_end, child_end = ctx.Pipe()
        child = ctx.Process(target=_job, args=(kind, specs[n], str(root), pack, child_end))
        child.start()
        assert parent_end.poll(60), "the child never started"
        parent_end.recv()
        child.join(rng.uniform(0, window[kind]))
        if child.exitcode is None:
            try:
                os.killpg(child.pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:  # it finished just now
                pass
            child.join()
        else:
            assert child.exitcode == 0, (trial, kind)
        # A later run: it succeeds, finds nothing corrupted (so nothing it could have trusted) and
        # returns the reference bytes.
        cache = Cache(root=root)
        with deadline(120), cache_warnings() as caught:
            kernel = pipelink.link(specs[n]["path"], mode=specs[n]["mode"], cache=cache)
        assert sha(kernel.cubin) == reference["sha256"][n], (trial, kind)
        assert not caught and not any(e.startswith(("corrupt", "disabled")) for e in cache.events), \
            (trial, kind, [str(w.message) for w in caught], cache.events)
        assert package.read_bytes() == package_bytes, (trial, kind)  # the old package or the new one, whole
    assert_intact(root)
    # A temp file left behind is a kill that landed inside a write: never read, never in the way.
    torn = [p for p in [*root.rglob(".*"), *package.parent.glob(".*")] if p.is_file()]
    print(f"{killed} of {TRIALS} killed before they finished, {len(torn)} of them inside a write")
    assert killed >= TRIALS // 3, f"only {killed} of {TRIALS} children were killed before they finished"


BIG = 16 << 20  # bytes: a write (and its fsync) long enough for random kills to land inside it


def _put_loop(root: str, ready) -> None:
    cache = Cache(root=Path(root))
    ready.send("go")
    for i in range(1000):
        cache.put(f"k{i % 4}", (i % 4).to_bytes(4, "little") * (BIG // 4))


@pytest.mark.slow
def test_a_put_killed_midway_leaves_a_miss_or_the_whole_entry(tmp_path):
    """The kills above rarely land inside a write (an entry is written in a few milliseconds); here
    a process writes large entries back to back and is killed at random moments, most of them inside
    a write. A later lookup finds each entry whole or not at all, and a later put of it works."""
    root = tmp_path / "cache"
    ctx = multiprocessing.get_context("fork")
    rng = random.Random(4848)
    torn = 0
    for trial in range(TRIALS):
        shutil.rmtree(root, ignore_errors=True)
        parent_end, child_end = ctx.Pipe()
        child = ctx.Process(target=_put_loop, args=(str(root), child_end))
        child.start()
        assert parent_end.poll(60), "the child never started"
        parent_end.recv()
        time.sleep(rng.uniform(0, 0.5))
        os.kill(child.pid, signal.SIGKILL)
        child.join()
        torn += any(p.name.startswith(".") for p in root.rglob("*"))
        cache = Cache(root=root)
        with deadline(60), cache_warnings() as caught:
            for i in range(4):
                assert cache.get(f"k{i}") in (None, i.to_bytes(4, "little") * (BIG // 4)), (trial, i)
            cache.put("k0", b"after")  # nothing left in the way of a write
            assert cache.get("k0") == b"after", trial
        assert not caught and cache.enabled, (trial, [str(w.message) for w in caught])
    print(f"{torn} of {TRIALS} kills left a temp file (killed inside a write)")
    assert torn >= TRIALS // 4, f"only {torn} of {TRIALS} kills landed inside a write"

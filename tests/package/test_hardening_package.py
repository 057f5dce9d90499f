"""Issue 10, packages and toolchain: a package cannot make a link run anything, names no folder of the
machine that packed it, and every bad package file, manifest or cache is a typed error (or, for a
cache, a warning) — never a traceback, a hang or a half-written output. Real nvcc, nvJitLink and
cuobjdump; the command line in a child process, as a user runs it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pipelink
from pipelink.backend.cache import Cache, CacheWarning
from pipelink.backend.nvcc import LTO_FLAGS
from pipelink.backend.toolchain import find_nvcc
from pipelink.demo import packaged_spec
from pipelink.errors import ContractError, ExpressionError, PackageError
from pipelink.package import PACKAGE_LIMIT, Package, Variant, load_package
from pipelink.probe import probe_facts

from conftest import RAW, ROOT, edit, paths, rezip, zip_entries

EXAMPLES = settings(max_examples=200, deadline=None, database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def cli(*args, cwd=None, timeout=300) -> subprocess.CompletedProcess:
    """pipelink as a user runs it (the child inherits PIPELINK_CACHE_DIR from the test)."""
    return subprocess.run([sys.executable, "-m", "pipelink.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout)


def refused(proc: subprocess.CompletedProcess, *words: str) -> None:
    """Exit 2, one typed error naming what it should, no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and "error" in proc.stderr, proc.stderr
    text = "".join(proc.stderr.split())  # the console wraps long lines, inside words too
    for w in words:
        assert "".join(w.split()) in text, (w, proc.stderr)


def entries(path: Path) -> dict[str, bytes]:
    return zip_entries(path.read_bytes())


# --- 1. a package's compile options never run anything ------------------------------------------

@pytest.fixture
def bindir(tmp_path) -> tuple[Path, Path]:
    """A folder whose gcc would leave a marker file: what --compiler-bindir=DIR makes nvcc run."""
    folder, marker = tmp_path / "evil", tmp_path / "ran"
    folder.mkdir()
    (folder / "gcc").write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    (folder / "gcc").chmod(0o755)
    return folder, marker


def test_the_marker_shows_a_run(bindir, tmp_path):
    """The control: nvcc given --compiler-bindir runs that folder's gcc, and the marker appears."""
    folder, marker = bindir
    (tmp_path / "a.cu").write_text("__device__ int f() { return 1; }\n")
    subprocess.run([str(find_nvcc().path), *LTO_FLAGS, f"--compiler-bindir={folder}", "a.cu", "-o", "a.fatbin"],
                   cwd=tmp_path, capture_output=True)
    assert marker.exists()


@pytest.mark.parametrize("option", ["--compiler-bindir={dir}", "-ccbin={dir}", "-Xcompiler=-B{dir}", "-I/usr/include",
                                    "-I../up", "-Isub/../..", "-include", "-o", "-DX=$(touch)", "-O3 -ccbin"])
def test_pack_refuses_an_option_outside_the_allow_list(tmp_path, bindir, option):
    folder, marker = bindir
    option = option.format(dir=folder)
    out = tmp_path / "t.plc"
    with pytest.raises(PackageError) as info:
        pipelink.pack(RAW / "tile_store.cu", RAW / "tile_store.toml", out, nvcc_flags=[option])
    err = info.value
    assert err.field == "compile_options" and repr(option) in err.message and "tile_store.cu" in err.file
    assert "-DNAME" in err.hint  # the allow-list is named
    assert not out.exists() and not marker.exists()


@pytest.mark.slow
def test_pack_cli_refuses_compiler_bindir_and_an_outside_include(tmp_path, bindir):
    folder, marker = bindir
    out = tmp_path / "t.plc"
    proc = cli("pack", RAW / "tile_store.cu", "--contract", RAW / "tile_store.toml", "-o", out,
               f"--nvcc-flag=--compiler-bindir={folder}")
    refused(proc, "PackageError", "tile_store.cu", "compile_options", "--compiler-bindir")
    proc = cli("pack", RAW / "tile_store.cu", "--contract", RAW / "tile_store.toml", "-o", out, "-I", tmp_path)
    refused(proc, "PackageError", "include_dirs", "outside the source's folder")
    assert not out.exists() and not marker.exists()


@pytest.mark.slow
def test_allowed_options_and_an_inner_include_folder_pack_and_link(demo_dir):
    """The allow-list's other side: a header in a folder inside the source's folder, found through
    -I (recorded relative) and needing a -D, both replayed by the monolithic control from the
    package (the header fails the compile without the -D)."""
    src = demo_dir / "src"
    (src / "inc").mkdir(parents=True)
    shutil.copyfile(RAW / "tile_store.cu", src / "tile_store.cu")
    edit(src / "tile_store.cu", "constexpr int kThreads", "#include <ts_extra.h>\nconstexpr int kThreads")
    (src / "inc" / "ts_extra.h").write_text("#ifndef TS_FLAG\n#error TS_FLAG is not replayed\n#endif\n")
    pkg = pipelink.pack(src / "tile_store.cu", RAW / "tile_store.toml", demo_dir / "packages" / "tile_store.plc",
                        include_dirs=[src / "inc"], nvcc_flags=["-DTS_FLAG=1", "--expt-relaxed-constexpr"])
    assert pkg.compile_options == [*LTO_FLAGS, "-DTS_FLAG=1", "--expt-relaxed-constexpr", "-Iinc"]
    assert pkg.headers == {"inc/ts_extra.h": (src / "inc" / "ts_extra.h").read_text()}
    assert pkg.replay_flags("src_t") == ["-Isrc_t", "-DTS_FLAG=1", "--expt-relaxed-constexpr", "-Isrc_t/inc"]
    shutil.rmtree(src)  # the link reads the package, not the folder it was packed from
    kernel = pipelink.link(demo_dir / "link.toml", mode="monolithic", cache=Cache(root=demo_dir / "cold-cache"))
    assert kernel.plan.backend.glue_compile == "compiled"


@pytest.mark.parametrize("flags", [[], ["--sanitize"]], ids=["monolithic", "sanitize"])
def test_link_refuses_a_package_that_carries_compiler_bindir(demo_dir, bindir, flags):
    """The package was made by hand, its content hash recomputed: only the allow-list stands between
    its options and the monolithic control or the sanitize build."""
    folder, marker = bindir
    path = demo_dir / "packages" / "tile_store.plc"
    pkg = load_package(path)
    pkg.compile_options = [*pkg.compile_options, f"--compiler-bindir={folder}"]
    pkg.save(path)
    with pytest.raises(PackageError) as info:
        load_package(path)
    assert info.value.field == "manifest.compile_options" and str(path) == info.value.file
    out = demo_dir / "out"
    mode = ["--mode", "pipelink" if flags else "monolithic"]
    proc = cli("link", demo_dir / "link.toml", *mode, *flags, "-o", out, cwd=demo_dir)
    refused(proc, "PackageError", "tile_store.plc", "manifest.compile_options", f"--compiler-bindir={folder}", "-DNAME")
    assert not out.exists() and not marker.exists()


# --- 2. the same inputs anywhere give the same bytes ---------------------------------------------

HEADER_SOURCE = """#include "v_scale.h"
extern "C" __device__ void v_run(pl_ctx ctx, pl_bind_v b) {
  b.out[ctx.tile * 128 + ctx.thread] = V_SCALE * b.in[ctx.thread];
}
"""


@pytest.mark.slow
def test_a_package_packed_in_two_folders_is_byte_identical(tmp_path):
    from contracts import violation_contract
    made = []
    for n, folder in enumerate([tmp_path / "a", tmp_path / "b" / "deeper" / "still"]):
        folder.mkdir(parents=True)
        (folder / "v.cu").write_text(HEADER_SOURCE)
        (folder / "v_scale.h").write_text("#define V_SCALE 3.0f\n")
        (folder / "v.toml").write_text(violation_contract())
        for f in folder.iterdir():
            os.utime(f, (1_000_000 * (n + 1), 1_000_000 * (n + 1)))  # other file times too
        made.append(pipelink.pack(folder / "v.cu", folder / "v.toml", folder / "v.plc").path.read_bytes())
    assert made[0] == made[1]
    assert b"/tmp" not in made[0] and str(tmp_path).encode() not in made[0]
    assert json.loads(entries(tmp_path / "a" / "v.plc")["manifest.json"])["headers"] == ["source/v_scale.h"]


@pytest.mark.slow
@pytest.mark.parametrize("mode,sanitize", [("pipelink", False), ("monolithic", False), ("pipelink", True)],
                         ids=["pipelink", "monolithic", "sanitize"])
def test_cubins_do_not_depend_on_the_folder_or_the_cache(tmp_path, demo_packages, monkeypatch, mode, sanitize):
    """Two folders, two caches, and two working folders: the second holds files named like the
    sources the line info records (a glue.cu, a component's .cu), which nvJitLink once stat'ed into
    the cubin's line table when the link ran there."""
    cubins = []
    for folder in (tmp_path / "one", tmp_path / "two" / "levels" / "down"):
        shutil.copytree(demo_packages, folder / "packages")
        (folder / "link.toml").write_text(packaged_spec((ROOT / "examples" / "demo" / "link.toml").read_text()))
        if cubins:
            (folder / "glue.cu").write_text("// not the glue\n" * 100)
            shutil.copyfile(RAW / "ring_reduce.cu", folder / "ring_reduce.cu")
        monkeypatch.chdir(folder)
        monkeypatch.setenv("PIPELINK_CACHE_DIR", str(folder / "cache"))
        kernel = pipelink.link(folder / "link.toml", mode=mode, sanitize=sanitize)
        assert kernel.plan.backend.glue_compile == "compiled"  # each folder compiled its own
        cubins.append(kernel.cubin)
    assert cubins[0] == cubins[1]
    assert str(tmp_path).encode() not in cubins[0]


@pytest.mark.slow
def test_links_from_several_threads_at_once_give_the_bytes_of_one(demo_dir, monkeypatch):
    """nvJitLink runs in an empty working folder (backend/nvjitlink.py), which is the process's: links from threads
    at once once left a folder that another had deleted (FileNotFoundError). A lock keeps them apart."""
    from concurrent.futures import ThreadPoolExecutor
    monkeypatch.setenv("PIPELINK_CACHE", "0")  # every link runs nvJitLink
    monkeypatch.chdir(demo_dir)
    alone = pipelink.link(demo_dir / "link.toml").cubin
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda _: pipelink.link(demo_dir / "link.toml").cubin, range(4)))
    assert together == [alone] * 4
    assert Path.cwd() == demo_dir


def test_a_child_started_while_another_thread_links_starts_in_the_callers_folder(tmp_path, monkeypatch):
    """A verify child inherits the working folder: started while a link had switched to its empty folder, it
    started in a folder then deleted (it could not load torch). run_watched waits for the link."""
    import threading
    from pipelink.backend.nvjitlink import _in_an_empty_folder
    from pipelink.verify.watch import run_watched
    monkeypatch.chdir(tmp_path)
    inside, started = threading.Event(), {}

    def link_for_a_while():
        with _in_an_empty_folder():
            inside.set()
            started["child"] = threading.Thread(target=lambda: started.setdefault("out", run_watched(
                [sys.executable, "-c", "import os; print(os.getcwd())"], timeout=30)))
            started["child"].start()
            started["child"].join(0.5)  # the child would have started and printed by now
    linker = threading.Thread(target=link_for_a_while)
    linker.start()
    assert inside.wait(30)
    linker.join(30)
    started["child"].join(30)
    code, out = started["out"]
    assert code == 0 and Path(out) == tmp_path



SECOND_INSTALL = """
import json, sys
from pathlib import Path
import pipelink
raw, out, variants = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])
for name in ("ring_producer", "ring_reduce", "tile_store"):
    pipelink.pack(raw / f"{name}.cu", raw / f"{name}.toml", out / "packages" / f"{name}.plc",
                  variants=variants if name == "ring_reduce" else None)
for mode, sanitize in json.loads(sys.argv[4]):
    kernel = pipelink.link(out / "link.toml", mode=mode, sanitize=sanitize)
    (out / f"{mode}{'_sanitize' * sanitize}.cubin").write_bytes(kernel.cubin)
print(pipelink.__file__)
"""


def _other_toolkit_nvcc() -> Path | None:
    """An nvcc of the same release as the one in use, installed elsewhere (the system toolkit and
    PyPI's wheel): its CUDA headers are in another folder, with other file times."""
    from pipelink.backend.toolchain import _candidates, nvcc_include_dirs
    mine = find_nvcc()
    for path in _candidates("nvcc", "NO_SUCH_VARIABLE"):  # every place looked at, not just $PIPELINK_NVCC
        if path.is_file() and {Path(d).resolve() for _, d in nvcc_include_dirs(path)} \
                .isdisjoint(Path(d).resolve() for _, d in nvcc_include_dirs()):
            out = subprocess.run([str(path), "--version"], capture_output=True, text=True).stdout
            if f"V{mine.version}" in out:
                return path
    return None


@pytest.mark.slow
def test_cubins_and_packages_do_not_depend_on_where_pipelink_and_the_toolkit_are(tmp_path, demo_packages):
    """A second install of pipelink (a copy of the package whose component.h has another file time),
    in a child process with its own cache and, where this machine has one, a second CUDA toolkit of
    the same release: it packs the demo's components to the same package bytes and links them to
    the same cubins. The line table used to name each header by its absolute path and record its
    file time (backend/nvcc.py, include_view)."""
    from conftest import DEMO_REDUCE_VARIANTS
    from pipelink.backend.toolchain import nvcc_include_dirs
    install = tmp_path / "install" / "elsewhere"
    shutil.copytree(ROOT / "src" / "pipelink", install / "pipelink", ignore=shutil.ignore_patterns("__pycache__"))
    for f in (install / "pipelink" / "include").rglob("*"):
        os.utime(f, (1_000_000_000, 1_000_000_000))
    out = tmp_path / "second"
    (out / "packages").mkdir(parents=True)
    (out / "link.toml").write_text(packaged_spec((ROOT / "examples" / "demo" / "link.toml").read_text()))
    modes = [("pipelink", False), ("monolithic", False), ("pipelink", True)]
    env = {**os.environ, "PYTHONPATH": str(install), "PIPELINK_CACHE_DIR": str(tmp_path / "cache2")}
    other_nvcc = _other_toolkit_nvcc()
    if other_nvcc is not None:
        env["PIPELINK_NVCC"] = str(other_nvcc)
    proc = subprocess.run([sys.executable, "-c", SECOND_INSTALL, str(RAW), str(out), json.dumps(DEMO_REDUCE_VARIANTS),
                           json.dumps(modes)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(install / "pipelink" / "__init__.py")  # the copy ran, not this checkout
    for plc in sorted(demo_packages.glob("*.plc")):
        assert (out / "packages" / plc.name).read_bytes() == plc.read_bytes(), plc.name
    installs = [ROOT, install, tmp_path, find_nvcc().path.resolve().parent.parent,
                *(Path(d).resolve() for _, d in nvcc_include_dirs())]
    installs += [other_nvcc.resolve().parent.parent, *(Path(d).resolve() for _, d in nvcc_include_dirs(other_nvcc))] \
        if other_nvcc else []
    here = tmp_path / "here"
    shutil.copytree(demo_packages, here / "packages")
    (here / "link.toml").write_text(packaged_spec((ROOT / "examples" / "demo" / "link.toml").read_text()))
    for mode, sanitize in modes:
        cubin = pipelink.link(here / "link.toml", mode=mode, sanitize=sanitize).cubin
        assert cubin == (out / f"{mode}{'_sanitize' * sanitize}.cubin").read_bytes(), (mode, sanitize)
        for folder in installs:
            assert str(folder).encode() not in cubin, (mode, sanitize, folder)


# --- 3. bounded reads and bad package files ------------------------------------------------------

def spec_with_package(folder: Path, package: str) -> Path:
    spec = folder / "link.toml"
    spec.write_text(f'[link]\nname = "x"\n\n[[instance]]\nname = "a"\npackage = "{package}"\n\n'
                    '[schedule]\ntiles = [1]\n')
    return spec


@pytest.mark.parametrize("kind", ["dev_zero", "fifo", "directory", "oversized"])
def test_a_package_path_that_is_not_a_package_file(tmp_path, kind):
    path = {"dev_zero": Path("/dev/zero"), "fifo": tmp_path / "p.plc", "directory": tmp_path / "d.plc",
            "oversized": tmp_path / "big.plc"}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "oversized":
        with open(path, "wb") as f:
            f.truncate(PACKAGE_LIMIT + 1)  # sparse: no disk used
    with pytest.raises(PackageError) as info:
        load_package(path)  # a hang here is the failure this guards against
    err = info.value
    assert err.file == str(path)
    if kind == "oversized":
        assert str(PACKAGE_LIMIT) in err.message and str(PACKAGE_LIMIT + 1) in err.message
    else:
        assert "not a regular file" in err.message
    proc = cli("link", spec_with_package(tmp_path, str(path)), "-o", tmp_path / "out", cwd=tmp_path, timeout=120)
    refused(proc, "PackageError", str(path))
    assert not (tmp_path / "out").exists()


def test_pack_reads_only_regular_files_and_overwrites_no_input(tmp_path):
    fifo = tmp_path / "v.cu"
    os.mkfifo(fifo)
    with pytest.raises(PackageError, match="not a regular file") as info:
        pipelink.pack(fifo, RAW / "tile_store.toml", tmp_path / "v.plc")  # a hang here is the failure
    assert info.value.file == str(fifo)
    contract = tmp_path / "tile_store.toml"
    shutil.copyfile(RAW / "tile_store.toml", contract)
    with pytest.raises(PackageError, match="overwrite") as info:
        pipelink.pack(RAW / "tile_store.cu", contract, contract)
    assert info.value.field == "output" and contract.read_bytes() == (RAW / "tile_store.toml").read_bytes()
    assert not (tmp_path / "v.plc").exists()


@pytest.fixture(scope="module")
def good_package(tmp_path_factory) -> Path:
    """A small real package (the seeded-violation contract, benign code): two variants, a conformance record."""
    from contracts import violation_contract
    tmp = tmp_path_factory.mktemp("good")
    mp = pytest.MonkeyPatch()
    mp.setenv("PIPELINK_CACHE_DIR", str(tmp / "cache"))
    try:
        (tmp / "v.cu").write_text(HEADER_SOURCE)
        (tmp / "v_scale.h").write_text("#define V_SCALE 3.0f\n")
        contract = tmp / "v.toml"
        contract.write_text(violation_contract().replace(
            "[roles.w]", 'W = { set = [1, 2], default = 1, compile = true }\n\n[roles.w]'))
        pipelink.pack(tmp / "v.cu", contract, tmp / "v.plc", variants=[{"W": 1}, {"W": 2}])
    finally:
        mp.undo()
    return tmp / "v.plc"


def rehash(files: dict[str, bytes], manifest: object) -> dict[str, bytes]:
    """The archive with ``manifest`` in it and its content hash (if it has one) recomputed from
    whatever it now says, so that the hash is no defence: what it holds must be checked for itself."""
    try:
        manifest["content_hash"]  # noqa: B018 (a manifest without one stays without)
        pkg = Package(contract=None, contract_text=files["contract.toml"].decode(),
                      variants=[Variant(v["facts"], files[v["ltoir"]]) for v in manifest["variants"]],
                      toolchain=manifest["toolchain"], compile_options=manifest["compile_options"],
                      source_name=manifest["source"][len("source/"):], source_text=files[manifest["source"]].decode(),
                      headers={h[len("source/"):]: files[h].decode() for h in manifest["headers"]},
                      conformance=manifest["conformance"])
        manifest = {**manifest, "content_hash": pkg.content_hash()}
    except (KeyError, TypeError, AttributeError, IndexError, UnicodeDecodeError):
        pass  # a manifest too broken to hash: it goes in as it is
    return {**files, "manifest.json": json.dumps(manifest).encode()}


BAD_MANIFESTS = {
    "array": (lambda m: [m], "manifest", "JSON array"),
    "no content_hash": (lambda m: {k: v for k, v in m.items() if k != "content_hash"}, "manifest.content_hash",
                        "missing"),
    "no toolchain.nvcc": (lambda m: {**m, "toolchain": {}}, "manifest.toolchain", "expected"),
    "nvcc not a version": (lambda m: {**m, "toolchain": {"nvcc": "new"}}, "manifest.toolchain.nvcc", "13.0.88"),
    "version banana": (lambda m: {**m, "format": "banana"}, "manifest.format", "banana"),
    "facts not integers": (lambda m: {**m, "variants": [{**v, "facts": {"W": "1"}} for v in m["variants"]]},
                           "manifest.variants[0].facts", "integers"),
    "fact outside its domain": (lambda m: {**m, "variants": [{**v, "facts": {"W": 3}} for v in m["variants"]]},
                                "manifest.variants[0].facts", "W=3"),
    "fact the contract lacks": (lambda m: {**m, "variants": [{**v, "facts": {"Q": 1}} for v in m["variants"]]},
                                "manifest.variants[0].facts", "compile-time facts"),
    "header escaping": (lambda m: {**m, "headers": ["source/../../etc/passwd"]}, "manifest.headers", "source/PATH"),
    "finding of the wrong shape": (lambda m: {**m, "conformance": {**m["conformance"], "findings": [{"severity": 1}]}},
                                   "manifest.conformance", "probe"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(BAD_MANIFESTS))
def test_a_bad_manifest_is_a_package_error_naming_the_field(tmp_path, good_package, case):
    change, field, words = BAD_MANIFESTS[case]
    files = entries(good_package)
    path = tmp_path / "bad.plc"
    path.write_bytes(rezip(rehash(files, change(json.loads(files["manifest.json"])))))
    with pytest.raises(PackageError) as info:
        load_package(path)
    assert info.value.file == str(path) and info.value.field == field and words in str(info.value), info.value
    refused(cli("inspect", path), "PackageError", str(path), field)


def test_invalid_utf8_in_a_package_is_a_package_error(tmp_path, good_package):
    files = entries(good_package)
    for name, field in (("manifest.json", "manifest"), ("contract.toml", "contract"), ("source/v.cu", "manifest.source"),
                        ("source/v_scale.h", "manifest.headers")):
        path = tmp_path / "bad.plc"
        path.write_bytes(rezip({**files, name: files[name][:5] + b"\xff\xfe" + files[name][5:]}))
        with pytest.raises(PackageError) as info:
            load_package(path)
        assert info.value.field == field and "UTF-8" in info.value.message and name in info.value.message
    refused(cli("inspect", path), "PackageError", "UTF-8")


@pytest.mark.parametrize("old,new,field", [("bytes = 1024", "bytes = 1024\nalign = 0", "contract.smem[0].align"),
                                           ("bytes = 1024", "bytes = 1024\noffset = -64", "contract.smem[0].offset")])
def test_a_packaged_contract_with_an_impossible_position_is_a_package_error(tmp_path, good_package, old, new, field):
    """The contract inside a package made by hand (the hash recomputed): its constant positions are
    checked when it is loaded, as pack would."""
    pkg = load_package(good_package)
    assert old in pkg.contract_text
    pkg.contract_text = pkg.contract_text.replace(old, new)
    path = pkg.save(tmp_path / "bad.plc")
    with pytest.raises(PackageError) as info:
        load_package(path)
    assert info.value.file == str(path) and info.value.field == field
    refused(cli("inspect", path), "PackageError", str(path), field)


JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                    max_leaves=5)


@EXAMPLES
@given(data=st.data())
def test_any_manifest_mutation_loads_or_is_a_package_error(tmp_path, good_package, data):
    """Random edits anywhere in the manifest, the content hash recomputed after each: every result
    loads or is a PackageError (a TypeError, KeyError, ValueError... fails this test)."""
    files = entries(good_package)
    manifest = json.loads(files["manifest.json"])
    for _ in range(data.draw(st.integers(1, 3))):
        places = list(paths(manifest))
        where = data.draw(st.sampled_from(places))
        parent = manifest
        for p in where[:-1]:
            parent = parent[p]
        if data.draw(st.booleans()):
            del parent[where[-1]]
        else:
            parent[where[-1]] = data.draw(JSON)
    path = tmp_path / "mutated.plc"
    path.write_bytes(rezip(rehash(files, manifest)))
    try:
        load_package(path)
    except PackageError as exc:
        assert exc.file == str(path)


# --- 4. a broken cache is skipped with a warning -------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("damage", ["root is a file", "entries are directories", "entries are FIFOs"])
def test_a_broken_cache_falls_back_to_no_cache(demo_dir, monkeypatch, damage):
    root = demo_dir / "cache"
    monkeypatch.setenv("PIPELINK_CACHE_DIR", str(root))
    reference = pipelink.link(demo_dir / "link.toml", cache=Cache(enabled=False)).cubin
    if damage == "root is a file":
        root.write_text("not a folder")
    else:
        pipelink.link(demo_dir / "link.toml")  # fill the cache, then break every entry
        for entry in [p for p in root.rglob("*") if p.is_file()]:
            entry.unlink()
            entry.mkdir() if damage == "entries are directories" else os.mkfifo(entry)
    with pytest.warns(CacheWarning, match="building without a cache"):
        assert pipelink.link(demo_dir / "link.toml").cubin == reference
    proc = cli("link", demo_dir / "link.toml", "-q", "-o", demo_dir / "out", cwd=demo_dir, timeout=300)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "CacheWarning" in proc.stderr and (demo_dir / "out").is_dir()
    if damage == "root is a file":
        assert root.read_text() == "not a folder"  # nothing the user gave is overwritten


# --- 5. the pack-time probe: facts that satisfy the contract, or a refusal ------------------------

def producer_contract(tmp_path: Path, k_domain: str) -> Path:
    """ring_producer with M and K free down to 1 (the issue's contract) and its own exact division."""
    contract = tmp_path / "ring_producer.toml"
    shutil.copyfile(RAW / "ring_producer.toml", contract)
    edit(contract, "M = { range = [128, 1073741824]", "M = { range = [1, 1073741824]")
    edit(contract, "K = { range = [64, 1073741824], multiple_of = 4", f"K = {{ {k_domain}")
    edit(contract, "[roles.producer]", '[facts.guarantees]\nk_boxes = "K / box_cols"\n\n[roles.producer]')
    return contract


@pytest.mark.slow
def test_the_probe_picks_facts_that_satisfy_the_contract(tmp_path):
    contract = producer_contract(tmp_path, "range = [1, 1073741824]")
    pkg = pipelink.pack(RAW / "ring_producer.cu", contract, tmp_path / "p.plc")
    assert pkg.conformance == {"checked": True, "findings": [], "reason": ""}
    facts = probe_facts(pkg.contract, {})
    assert (facts["M"], facts["K"]) == (128, 64)  # the smallest multiples of the default box
    proc = cli("pack", RAW / "ring_producer.cu", "--contract", contract, "-o", tmp_path / "q.plc")
    assert proc.returncode == 0 and "conformance: 0 finding(s)" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.slow
def test_a_probe_that_cannot_link_is_an_error(tmp_path):
    contract = producer_contract(tmp_path, "set = [100]")  # no K the box divides
    out = tmp_path / "p.plc"
    with pytest.raises((ContractError, ExpressionError)) as info:  # as a link with these facts says it
        pipelink.pack(RAW / "ring_producer.cu", contract, out)
    err = info.value
    assert err.file == str(contract) and err.field == "facts.guarantees.k_boxes" and "--no-check" in err.hint
    assert "100 / 64 does not divide" in err.message and "probe" in err.message
    refused(cli("pack", RAW / "ring_producer.cu", "--contract", contract, "-o", out),
            type(err).__name__, str(contract), "facts.guarantees.k_boxes", "probe", "--no-check")
    assert not out.exists()
    assert pipelink.pack(RAW / "ring_producer.cu", contract, out, check=False).conformance is None
    assert out.exists()


@pytest.mark.slow
def test_include_from_outside_the_source_folder_is_refused_at_pack(tmp_path):
    """A package carries its source's folder only: a quoted include by a '..' path (which the
    monolithic and sanitize builds could not find later) is refused at pack time, naming the line;
    the same header inside the folder packs and travels with the package."""
    (tmp_path / "comp").mkdir()
    (tmp_path / "common").mkdir()
    shutil.copyfile(RAW / "tile_store.cu", tmp_path / "common" / "tile_store.cu")
    hang = (ROOT / "tests" / "components" / "tile_store_hang.cu").read_text()
    (tmp_path / "comp" / "hang.cu").write_text(hang.replace('#include "tile_store.cu"', '#include "../common/tile_store.cu"'))
    contract = ROOT / "tests" / "components" / "tile_store_hang.toml"
    with pytest.raises(PackageError) as info:
        pipelink.pack(tmp_path / "comp" / "hang.cu", contract, tmp_path / "h.plc", check=False)
    assert info.value.field == "source" and "hang.cu:4" in info.value.message and "../common/tile_store.cu" in info.value.message
    assert not (tmp_path / "h.plc").exists()
    shutil.copyfile(RAW / "tile_store.cu", tmp_path / "comp" / "tile_store.cu")
    (tmp_path / "comp" / "hang.cu").write_text(hang)
    assert sorted(pipelink.pack(tmp_path / "comp" / "hang.cu", contract, tmp_path / "h.plc", check=False).headers) \
        == ["tile_store.cu"]

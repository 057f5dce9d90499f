"""Shared fixtures. Everything here uses the real toolchain: nvcc packs, nvJitLink links,
cuobjdump reads the cubins. Each test session gets its own empty build cache (CI's second Python
shares the first one's: see _isolated_cache)."""

from __future__ import annotations

import gc
import io
import os
import sys
import shutil
import zipfile
from pathlib import Path

import pytest
from hypothesis import Phase, settings

import pipelink
from pipelink.demo import packaged_spec

ROOT = Path(__file__).resolve().parent.parent

# Under the seeded-bug suite (tests/mutation/run.py sets PIPELINK_MUTATION_SRC) a property test only has to
# fail: it stops at the first failing example instead of shrinking it (a minute for some), which is what a
# reader of a failure wants and the suite does not.
settings.register_profile("mutation", phases=(Phase.explicit, Phase.reuse, Phase.generate))
if os.environ.get("PIPELINK_MUTATION_SRC"):
    settings.load_profile("mutation")
RAW = ROOT / "components" / "raw"
COLLIDE = ROOT / "examples" / "collide"
DEMO_COMPONENTS = ("ring_producer", "ring_reduce", "tile_store")


EXAMPLES = ROOT / "tests" / "examples"


def pytest_collection_modifyitems(config, items):
    """The case-study tests (tests/examples/) pack CUTLASS components and link whole examples: all slow.
    Elsewhere a test is marked slow where it takes seconds (the fast tier, -m "not slow", stays a few minutes
    on 2 cores)."""
    for item in items:
        if EXAMPLES in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    # Each session its own empty build cache, unless PIPELINK_TEST_CACHE_DIR names one: CI gives its second
    # Python the first one's (.ci/run), as the same nvcc and inputs make the same entries, and what that run
    # checks is pipelink's own Python under another version. A test about the cache itself makes its own.
    # Under pytest-xdist each worker has its own basetemp (.../popen-gwN): the workers share the folder above
    # it, as the cache's writes are atomic (tests/backend/test_cache_robustness.py), so no worker builds twice.
    shared = os.environ.get("PIPELINK_TEST_CACHE_DIR")
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    monkeypatch.setenv("PIPELINK_CACHE_DIR", shared or str(base / "cache"))


@pytest.fixture(scope="session")
def _warm_verify_child():
    with pipelink.warm_child() as child:
        yield child


@pytest.fixture(autouse=True)
def _gpu_tests_share_a_verify_child(request):
    """A GPU test's verifies run their GPU rungs in one child per test process (pipelink.warm_child): torch's
    import and the CUDA context once, not once a verify. A hang or crash still ends only that child. After the
    test, the device memory torch keeps cached in this process goes back (the workers share one GPU)."""
    if not request.node.get_closest_marker("gpu"):
        yield
        return
    request.getfixturevalue("_warm_verify_child")
    yield
    torch = sys.modules.get("torch")  # what the test itself ran in this process: the next may be another's
    if torch is not None and torch.cuda.is_initialized():
        gc.collect()
        torch.cuda.empty_cache()


@pytest.fixture(scope="session")
def demo_packages(tmp_path_factory) -> Path:
    """The three demo components, packed once per session."""
    out = tmp_path_factory.mktemp("demo_packages")
    for name in DEMO_COMPONENTS:
        variants = DEMO_REDUCE_VARIANTS if name == "ring_reduce" else None
        pipelink.pack(RAW / f"{name}.cu", RAW / f"{name}.toml", out / f"{name}.plc", variants=variants)
    return out


# The demo's own tile (32 x 64, 16 stages), and the 128 x 64 tile in a 4-stage ring that it used before
# issue 12: tests whose numbers (ring bytes, tile counts, the producer's default box) are easier to
# follow with 32 KB stages link that one (`classic_demo`).
DEMO_REDUCE_VARIANTS = [{"tile_rows": 32, "tile_cols": 64}, {"tile_rows": 128, "tile_cols": 64}]


def store_variant(name: str, folder: Path) -> Path:
    """tests/components/<name>.cu (a seeded tile_store: a skipped tile, a hang) in ``folder`` beside a
    copy of components/raw/tile_store.cu, which it includes: a package carries the headers of its
    source's folder only, so the monolithic and sanitize builds find it there."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(RAW / "tile_store.cu", folder / "tile_store.cu")
    shutil.copyfile(ROOT / "tests" / "components" / f"{name}.cu", folder / f"{name}.cu")
    return folder / f"{name}.cu"


def zip_entries(data: bytes) -> dict[str, bytes]:
    """Every entry of a package (a zip archive), by name."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return {name: z.read(name) for name in z.namelist()}


def rezip(files: dict[str, bytes]) -> bytes:
    """A zip archive of ``files``: a package rebuilt after a test changed its entries."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return buf.getvalue()


def paths(value, prefix=()):
    """Every place in a JSON document: keys of objects and items of arrays, at any depth."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield (*prefix, k)
            yield from paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield (*prefix, i)
            yield from paths(v, (*prefix, i))


def classic_demo(spec: Path) -> Path:
    """The demo spec at ``spec`` with 128-row tiles and 4 stages (32 KB per stage)."""
    edit(spec, "tile_rows = 32\n", "tile_rows = 128\n")
    edit(spec, "stages = 16\n", "stages = 4\n")
    return spec


@pytest.fixture
def demo_dir(tmp_path, demo_packages) -> Path:
    """A fresh folder holding the demo spec and copies of its packages (tests may edit both)."""
    shutil.copytree(demo_packages, tmp_path / "packages")
    (tmp_path / "link.toml").write_text(packaged_spec((ROOT / "examples" / "demo" / "link.toml").read_text()))
    return tmp_path


@pytest.fixture
def collide_dir(tmp_path) -> Path:
    """examples/collide: two components that both assume barrier 1 and scratch at 0, packed."""
    (tmp_path / "packages").mkdir()
    for op in ("sum", "max"):
        for suffix in ("", "_pinned"):
            pipelink.pack(COLLIDE / f"block_{op}.cu", COLLIDE / f"block_{op}{suffix}.toml",
                          tmp_path / "packages" / f"block_{op}{suffix}.plc")
    for spec in ("link.toml", "link_pinned.toml"):
        (tmp_path / spec).write_text(packaged_spec((COLLIDE / spec).read_text()))
    return tmp_path


@pytest.fixture
def relayout_dir(tmp_path) -> Path:
    """tests/components' smem -> smem relayout link, packed, with its reference."""
    comps = ROOT / "tests" / "components"
    for name in ("tile_load", "tile_emit"):
        pipelink.pack(comps / f"{name}.cu", comps / f"{name}.toml", tmp_path / "packages" / f"{name}.plc")
    for f in ("link.toml", "reference.py"):
        shutil.copyfile(comps / f, tmp_path / f)
    return tmp_path


def edit(path: Path, old: str, new: str) -> Path:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new))
    return path


def repack(tmp: Path, name: str, contract_edits: list[tuple[str, str]], package_name: str | None = None,
           source: Path | None = None) -> Path:
    """Pack a bundled component with an edited copy of its contract into tmp/packages."""
    contract = tmp / f"{name}.toml"
    shutil.copyfile(RAW / f"{name}.toml", contract)
    for old, new in contract_edits:
        edit(contract, old, new)
    out = tmp / "packages" / f"{package_name or name}.plc"
    pipelink.pack(source or RAW / f"{name}.cu", contract, out)
    return out


def inline_link(folder: Path, name: str, contract: str, source: str, spec: str, check: bool = False) -> Path:
    """A component written in a test (its contract and source as text) packed into ``folder`` beside
    the link spec; returns the spec's path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.toml").write_text(contract)
    (folder / f"{name}.cu").write_text(source)
    (folder / "link.toml").write_text(spec)
    pipelink.pack(folder / f"{name}.cu", folder / f"{name}.toml", folder / f"{name}.plc", check=check)
    return folder / "link.toml"



@pytest.fixture(scope="module")
def empty_part(tmp_path_factory):
    """empty_part(name, contract, variants=None) -> the path of a real package (nvcc) of the contract text
    (tests/contracts.py builds such texts) whose entries ``NAME_run`` are empty: for checks that run before
    any code is generated. One pack per distinct contract and variants in a test module."""
    root = tmp_path_factory.mktemp("parts")
    made: dict[str, Path] = {}

    def make(name: str, contract: str, variants: list[dict] | None = None) -> Path:
        key = contract + repr(variants)
        if key not in made:
            folder = root / str(len(made))
            folder.mkdir()
            (folder / f"{name}.toml").write_text(contract)
            (folder / f"{name}.cu").write_text(f'extern "C" __device__ void {name}_run(pl_ctx ctx, pl_bind_{name} b) {{}}\n')
            made[key] = pipelink.pack(folder / f"{name}.cu", folder / f"{name}.toml", folder / f"{name}.plc",
                                      variants=variants, check=False).path
        return made[key]
    return make

def gpu_ok() -> bool:
    from pipelink.runtime import gpu_available
    return gpu_available()[0]


def edit_glue(plan, kind, edit, count: int = 1):
    """A shallow copy of ``plan`` whose glue has its first ``count`` statements of type ``kind`` replaced by
    ``edit(statement)`` (None: removed): the glue a one-line bug in the generator would have built. The
    audit and the model read the statements (link/glue_ir.py), not the text."""
    import copy
    import dataclasses
    stmts, done = [], 0
    for s in plan.glue.statements:
        if isinstance(s, kind) and done < count:
            done += 1
            s = edit(s)
            if s is None:
                continue
        stmts.append(s)
    assert done, f"the glue has no {kind.__name__}"
    clone = copy.copy(plan)
    clone.glue = dataclasses.replace(plan.glue, statements=tuple(stmts))
    return clone

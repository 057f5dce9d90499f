"""Issue 18, part 5: a package is checked whole when it is loaded. Editing any entry of the .plc
(manifest.json, any field of it, contract.toml, variants/N.fatbin, source/FILE, a header) without repacking
is refused with PackageError, whatever the edit: the content hash covers everything that is not
derived, and what is derived (name, version, origin from the contract; each variant's path, size
and sha256 from its LTO-IR) is recomputed and compared. Real packages (nvcc), edited with
hypothesis-chosen edits."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import pipelink
from pipelink.backend.nvcc import LTO_FLAGS
from pipelink.errors import PackageError
from pipelink.package import FORMAT_VERSION, load_package

from conftest import paths, rezip, zip_entries
from contracts import violation_contract

SOURCE = """#include "v_w.h"
extern "C" __device__ void v_run(pl_ctx ctx, pl_bind_v b) {
  b.out[ctx.tile * 128 + ctx.thread] = static_cast<float>(V_W * ctx.thread);
}
"""
HEADER = "#define V_W pl_facts::W\n"  # a header of the source's folder: packed with the source
# Deterministic examples (the same ones in every run: CI does not flake), no example database.
EXAMPLES = settings(max_examples=12, deadline=None, database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def packages(tmp_path_factory) -> dict[str, bytes]:
    """An open package (two variants, its source and header, a conformance record) and a closed one."""
    tmp = tmp_path_factory.mktemp("integrity")
    mp = pytest.MonkeyPatch()
    mp.setenv("PIPELINK_CACHE_DIR", str(tmp / "cache"))  # the pack-time probe link's cache
    try:
        (tmp / "v.cu").write_text(SOURCE)
        (tmp / "v_w.h").write_text(HEADER)
        contract = tmp / "v.toml"
        contract.write_text(violation_contract().replace(
            "[roles.w]", 'W = { set = [1, 2], default = 1, compile = true }\n\n[roles.w]'))
        pipelink.pack(tmp / "v.cu", contract, tmp / "open.plc", variants=[{"W": 1}, {"W": 2}])
        pipelink.pack(tmp / "v.cu", contract, tmp / "closed.plc", closed=True, check=False)
    finally:
        mp.undo()
    out = {kind: (tmp / f"{kind}.plc").read_bytes() for kind in ("open", "closed")}
    manifest = json.loads(zip_entries(out["open"])["manifest.json"])
    assert len(manifest["variants"]) == 2 and manifest["conformance"]["checked"]
    assert manifest["headers"] == ["source/v_w.h"] and "source_dir" not in manifest
    return out



def load(data: bytes):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "edited.plc"
        path.write_bytes(data)
        return load_package(path)


def refused(data: bytes) -> PackageError:
    with pytest.raises(PackageError) as info:
        load(data)
    return info.value


def manifest_of(files):
    return json.loads(files["manifest.json"])


def with_manifest(files, manifest) -> bytes:
    return rezip({**files, "manifest.json": json.dumps(manifest, indent=2, sort_keys=True).encode()})


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["open", "closed"])
def test_unedited_packages_load(packages, kind):
    """The control: taking a package apart and zipping it again changes nothing that matters."""
    pkg = load(rezip(zip_entries(packages[kind])))
    assert pkg.name == "v" and pkg.closed == (kind == "closed") and [v.facts for v in pkg.variants][0] == {"W": 1}


# --- every zip entry, any edit ------------------------------------------------------------------

def edit_bytes(data: bytes, draw) -> bytes:
    how = draw(st.sampled_from(["flip", "insert", "delete", "replace"]))
    at = draw(st.integers(0, max(0, len(data) - 1)))
    if how == "flip":
        return data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1:] if data else b"x"
    if how == "insert":
        return data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]
    if how == "delete":
        return data[:at] + data[at + draw(st.integers(1, 64)):]
    return draw(st.binary(max_size=64))


ENTRIES = [("open", "manifest.json"), ("open", "contract.toml"), ("open", "variants/0.fatbin"),
           ("open", "variants/1.fatbin"), ("open", "source/v.cu"), ("open", "source/v_w.h"), ("closed", "manifest.json"),
           ("closed", "contract.toml"), ("closed", "variants/0.fatbin")]


def test_entries_listed_are_every_entry(packages):
    assert sorted(n for k, n in ENTRIES if k == "open") == sorted(zip_entries(packages["open"]))
    assert sorted(n for k, n in ENTRIES if k == "closed") == sorted(zip_entries(packages["closed"]))


@pytest.mark.parametrize("kind,name", ENTRIES)
@EXAMPLES
@given(data=st.data())
def test_any_edit_of_any_entry_is_refused(packages, kind, name, data):
    files = zip_entries(packages[kind])
    edited = edit_bytes(files[name], data.draw)
    assume(edited != files[name])
    if name == "manifest.json":  # reformatting the same JSON is no edit
        try:
            assume(json.dumps(json.loads(edited), sort_keys=True) != json.dumps(json.loads(files[name]), sort_keys=True))
        except ValueError:
            pass  # not JSON any more: an edit
    refused(rezip({**files, name: edited}))


@pytest.mark.parametrize("kind", ["open", "closed"])
def test_an_added_or_missing_entry_is_refused(packages, kind):
    files = zip_entries(packages[kind])
    err = refused(rezip({**files, "source/extra.h": b"#define X 1\n"}))
    assert "source/extra.h" in err.message
    for name in files:
        refused(rezip({n: d for n, d in files.items() if n != name}))


# --- every manifest field, any value --------------------------------------------------------------

def get(doc, path):
    for p in path:
        doc = doc[p]
    return doc


def put(doc, path, value):
    doc = json.loads(json.dumps(doc))
    get(doc, path[:-1])[path[-1]] = value
    return doc


def remove(doc, path):
    doc = json.loads(json.dumps(doc))
    del get(doc, path[:-1])[path[-1]]
    return doc


JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False)
                    | st.text(max_size=12),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                    max_leaves=6)


def near(old):
    """Values close to ``old`` (what a hand edit looks like), besides arbitrary JSON."""
    if isinstance(old, bool) or old is None:
        return st.sampled_from([True, False, None, 0, 1, ""])
    if isinstance(old, int):
        return st.sampled_from([old + 1, old - 1, 0, float(old), str(old), -old])
    if isinstance(old, str):
        return st.sampled_from([old + "x", old[:-1], old.upper(), "", old + "/", f"./{old}"])
    if isinstance(old, list):
        return st.sampled_from([old[:-1], old + old[-1:], old[::-1], []] if old else [[None], {}])
    return st.sampled_from([{}, {**old, "x": 1}, {k: old[k] for k in list(old)[:-1]}, list(old.values())])


def manifest_paths(kind):
    # the packages are made in a fixture; the paths are those of any package of this layout
    base = {"format": FORMAT_VERSION, "name": "", "version": "", "origin": "", "toolchain": {"nvcc": ""}, "compile_options": list(LTO_FLAGS),
            "variants": [{"facts": {"W": 1}, "ltoir": "", "bytes": 0, "sha256": ""}] * (2 if kind == "open" else 1),
            "source": "" if kind == "open" else None, "headers": [""] if kind == "open" else [],
            "conformance": {"checked": True, "findings": [], "reason": ""} if kind == "open" else None,
            "content_hash": ""}
    return [(kind, p) for p in paths(base)]


MANIFEST_PATHS = manifest_paths("open") + manifest_paths("closed")


def test_manifest_paths_cover_the_manifest(packages):
    """The parametrization above lists every place of the real manifests (and misses none)."""
    for kind in ("open", "closed"):
        real = sorted(map(str, paths(manifest_of(zip_entries(packages[kind])))))
        assert real == sorted(str(p) for k, p in MANIFEST_PATHS if k == kind)


@pytest.mark.parametrize("kind,path", MANIFEST_PATHS, ids=lambda x: x if isinstance(x, str) else ".".join(map(str, x)))
@EXAMPLES
@given(data=st.data())
def test_any_value_in_any_manifest_field_is_refused(packages, kind, path, data):
    files = zip_entries(packages[kind])
    manifest = manifest_of(files)
    old = get(manifest, path)
    new = data.draw(st.one_of(near(old), JSON))
    assume(json.dumps(new, sort_keys=True) != json.dumps(old, sort_keys=True))
    refused(with_manifest(files, put(manifest, path, new)))


@pytest.mark.parametrize("kind,path", [(k, p) for k, p in MANIFEST_PATHS if isinstance(p[-1], str)],
                         ids=lambda x: x if isinstance(x, str) else ".".join(map(str, x)))
def test_a_removed_manifest_field_is_refused(packages, kind, path):
    files = zip_entries(packages[kind])
    refused(with_manifest(files, remove(manifest_of(files), path)))


# --- the holes, one by one: what each edit did before load checked the whole package ----------

@pytest.mark.parametrize("key,value,field", [
    ("name", "w", "manifest.name"),             # not compared with the contract: a package named w linked as v
    ("version", "9.9.9", "manifest.version"),
    ("origin", "cutlass", "manifest.origin"),
    ("compile_options", [*LTO_FLAGS, "--compiler-bindir=/tmp"], "manifest.compile_options"),  # replayed by the monolithic control
    ("conformance", {"checked": False, "findings": [], "reason": "x"}, None),  # not hashed: the pack-time record rewritten
    ("format", 4.0, "manifest.format"),         # equal in Python, another file
])
def test_manifest_field_edits_that_loaded_before(packages, key, value, field):
    files = zip_entries(packages["open"])
    manifest = manifest_of(files)
    assert json.dumps(manifest[key]) != json.dumps(value)
    err = refused(with_manifest(files, {**manifest, key: value}))
    assert err.field == field and ("content hash" in err.message) == (field is None), err


def test_variant_size_and_source_name_are_checked(packages):
    files = zip_entries(packages["open"])
    manifest = manifest_of(files)
    manifest["variants"][1]["bytes"] += 1
    assert refused(with_manifest(files, manifest)).field == "manifest.variants"
    # The source renamed, entry and manifest together: line info and include names would change.
    manifest = manifest_of(files)
    manifest["source"] = "source/w.cu"
    renamed = {("source/w.cu" if n == "source/v.cu" else n): d for n, d in files.items()}
    assert "content hash" in refused(with_manifest(renamed, manifest)).message


def test_an_edited_contract_is_a_package_error_not_a_contract_error(packages):
    """The contract is parsed only once the hash says it is the packed one."""
    files = zip_entries(packages["open"])
    for edit in (files["contract.toml"] + b"\n[[[not toml", files["contract.toml"].replace(b'version = "1"', b'version = "2"')):
        assert "content hash" in refused(rezip({**files, "contract.toml": edit})).message


def test_a_manifest_of_the_wrong_shape_is_a_package_error(packages):
    files = zip_entries(packages["open"])
    for manifest in ([], "text", {"format": 3}, {**manifest_of(files), "variants": 5},
                     {**manifest_of(files), "variants": [{"facts": "W"}]}):
        refused(rezip({**files, "manifest.json": json.dumps(manifest).encode()}))


@pytest.mark.parametrize("facts", [{}, {"W": 1, "X": 1}], ids=["lacks W", "adds X"])
def test_a_variant_whose_facts_are_not_the_contracts_compile_time_facts_is_refused(packages, tmp_path, facts):
    """A package written with its hash right (as a careless tool or a stranger could) whose variant lacks a
    compile-time fact would match any value of it, and be linked for values it was not built for; one that
    sets a fact the contract does not declare was built for something else."""
    pkg = load(packages["open"])
    pkg.variants[0] = dataclasses.replace(pkg.variants[0], facts=facts)
    path = pkg.save(tmp_path / "forged.plc")
    with pytest.raises(PackageError) as info:
        load_package(path)
    assert info.value.field == "manifest.variants[0].facts" and "compile-time facts are ['W']" in info.value.message

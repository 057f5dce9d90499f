"""Source instances (issue 52 item 1): an [[instance]] may name a component's source and contract in place of a
package (`source = "x.cu"`, `contract = "x.toml"`, optional `variants`); the link packs it as `pipelink pack`
would (the same package bytes) and links it, so a spec links from a fresh clone with no pack step. The demo's
three components, named by source, against the same components packed (conftest's demo_packages)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pipelink
from pipelink.errors import PackageError, SpecError
from pipelink.lock import lock
from pipelink.spec import load_spec

from conftest import RAW, ROOT, edit

DEMO = ("ring_producer", "ring_reduce", "tile_store")


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "pipelink.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=300, cwd=cwd, env={**os.environ, "COLUMNS": "400"})


def refused(proc, *words):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    for w in words:
        assert w in proc.stderr, (w, proc.stderr)


@pytest.fixture
def source_demo(tmp_path):
    """The demo spec with each instance naming its source: the components copied into src/ beside it (the
    sources' relative paths are the spec's), the contracts found beside them by default."""
    tmp_path = tmp_path / "from_source"  # demo_dir, beside it, takes tmp_path itself
    src = tmp_path / "src"
    src.mkdir(parents=True)
    for name in DEMO:
        for suffix in (".cu", ".toml"):
            shutil.copyfile(RAW / f"{name}{suffix}", src / f"{name}{suffix}")
    for header in RAW.glob("*.h"):  # what the sources include from their folder
        shutil.copyfile(header, src / header.name)
    spec = tmp_path / "link.toml"
    shutil.copyfile(ROOT / "examples" / "demo" / "link.toml", spec)
    for name in DEMO:
        edit(spec, f'source = "../../components/raw/{name}.cu"', f'source = "src/{name}.cu"')
    return spec


@pytest.mark.parametrize("name", ["link.toml", "link_wide.toml"])
def test_the_demo_specs_link_as_they_are_in_a_fresh_clone(name, tmp_path):
    """examples/demo names its components by source: `pipelink link` from the checkout, no pack step."""
    proc = cli("link", ROOT / "examples" / "demo" / name, "-o", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert list((tmp_path / "out").glob("*.cubin"))


def test_a_source_instance_links_the_cubin_its_package_links(source_demo, demo_dir):
    from_source = pipelink.link(source_demo)
    from_packages = pipelink.link(demo_dir / "link.toml")
    assert from_source.cubin == from_packages.cubin
    load = next(i for i in from_source.plan.instances if i.name == "load").to_json(base=source_demo.parent)
    assert load["source"] == "src/ring_producer.cu" and load["package"] is None


def test_the_package_a_link_packs_is_the_bytes_pipelink_pack_writes(source_demo, tmp_path):
    from pipelink.packer import pack_source_instance
    spec = load_spec(source_demo)
    i = next(n for n, inst in enumerate(spec.instance) if inst.source.endswith("ring_reduce.cu"))
    packed = pack_source_instance(spec, i)
    # The one variant the spec's facts give (tile_rows = 32, tile_cols = 64: ring_reduce's compile-time facts).
    assert [v.facts for v in packed.variants] == [{"tile_rows": 32, "tile_cols": 64}]
    out = tmp_path / "by_hand.plc"
    proc = cli("pack", source_demo.parent / "src/ring_reduce.cu", "-o", out, "--variant", "tile_rows=32,tile_cols=64")
    assert proc.returncode == 0, proc.stderr
    assert packed.to_bytes() == out.read_bytes()


def test_an_edited_source_is_packed_again_in_the_same_process(source_demo):
    from pipelink.packer import pack_source_instance
    spec = load_spec(source_demo)
    first = pack_source_instance(spec, 2)
    assert pack_source_instance(spec, 2) is first  # unchanged files: the package this process packed
    store = source_demo.parent / "src/tile_store.cu"
    store.write_text(store.read_text() + "\n// edited after the first link\n")
    again = pack_source_instance(load_spec(source_demo), 2)
    assert "edited after the first link" in again.source_text and again.content_hash() != first.content_hash()


def test_the_cli_links_a_source_spec_and_writes_relative_sources_in_the_plan(source_demo, tmp_path):
    """plan.json names each source relative to the spec (the same bytes wherever the project lies)."""
    proc = cli("link", source_demo, "-o", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(next((tmp_path / "out").glob("*.plan.json")).read_text())
    sources = sorted(i.get("source") for i in plan["instances"])
    assert sources == ["src/ring_producer.cu", "src/ring_reduce.cu", "src/tile_store.cu"]
    assert all(i["package"] is None for i in plan["instances"])


def test_listed_variants_are_packed_and_the_link_picks_one(source_demo):
    edit(source_demo, 'source = "src/ring_reduce.cu"',
         'source = "src/ring_reduce.cu"\nvariants = [{ tile_rows = 128, tile_cols = 64 }, '
         '{ tile_rows = 32, tile_cols = 64 }]')
    kernel = pipelink.link(source_demo)
    reduce = next(i for i in kernel.plan.instances if i.name == "reduce")
    assert [v.facts["tile_rows"] for v in reduce.package.variants] == [128, 32]
    assert reduce.package.variants[reduce.variant].facts["tile_rows"] == 32


def test_a_variant_the_contract_refuses_names_the_instance(source_demo):
    edit(source_demo, 'source = "src/ring_reduce.cu"', 'source = "src/ring_reduce.cu"\nvariants = [{ stagse = 4 }]')
    with pytest.raises(PackageError) as exc:
        pipelink.link(source_demo)
    assert "instance 'reduce'" in exc.value.message and "stagse" in exc.value.message
    refused(cli("link", source_demo), "instance 'reduce'", "stagse")


@pytest.mark.parametrize("edit_from, edit_to, field, words", [
    ('source = "src/ring_producer.cu"', 'source = "src/ring_producer.cu"\npackage = "p.plc"',
     "instance[0]", ["both a package and a source"]),
    ('source = "src/ring_producer.cu"', 'roles = {}', "instance[0]", ["neither a package nor a source"]),
    ('source = "src/ring_producer.cu"', 'source = "src/nowhere.cu"', "instance[0].source", ["not a file"]),
    ('source = "src/ring_producer.cu"', 'source = "src/ring_producer.cu"\ncontract = "src/none.toml"',
     "instance[0].contract", ["not a file"]),
    ('source = "src/ring_producer.cu"', 'source = "src/ring_producer.cu"\nsha256 = "' + "0" * 64 + '"',
     "instance[0].sha256", ["pins a package", "pipelink pack"]),
])
def test_a_bad_source_instance_is_a_spec_error_naming_the_field(source_demo, edit_from, edit_to, field, words):
    edit(source_demo, edit_from, edit_to)
    with pytest.raises(SpecError) as exc:
        pipelink.link(source_demo)
    assert exc.value.field == field, exc.value.format()
    for w in words:
        assert w in exc.value.format()
    refused(cli("link", source_demo), *words)


def test_a_source_without_a_contract_beside_it_says_how_to_name_one(source_demo):
    (source_demo.parent / "src/tile_store.toml").rename(source_demo.parent / "src/store_contract.toml")
    with pytest.raises(SpecError) as exc:
        pipelink.link(source_demo)
    assert exc.value.field == "instance[2].contract" and 'contract = "PATH"' in exc.value.hint
    edit(source_demo, 'source = "src/tile_store.cu"', 'source = "src/tile_store.cu"\ncontract = "src/store_contract.toml"')
    pipelink.link(source_demo)


def test_package_fields_only_a_source_takes_are_refused_on_a_package_instance(demo_dir):
    spec = demo_dir / "link.toml"
    edit(spec, 'package = "packages/ring_producer.plc"', 'package = "packages/ring_producer.plc"\nvariants = [{}]')
    with pytest.raises(SpecError) as exc:
        load_spec(spec)
    assert exc.value.field == "instance[0].variants"


def test_lock_refuses_a_source_instance_and_leaves_the_spec(source_demo):
    before = source_demo.read_bytes()
    with pytest.raises(SpecError) as exc:
        lock(source_demo)
    assert exc.value.field == "instance[0].source" and "pipelink pack" in exc.value.hint
    assert source_demo.read_bytes() == before


FIELDS = {"package": '"p.plc"', "source": '"src/ring_producer.cu"', "contract": '"src/ring_producer.toml"',
          "variants": "[{ }]", "sha256": '"' + "a" * 64 + '"'}


@settings(max_examples=40, deadline=None)
@given(st.sets(st.sampled_from(sorted(FIELDS))))
def test_an_instances_origin_fields_are_one_valid_set_or_a_spec_error(tmp_path_factory, chosen):
    """Any combination of the fields that say where an instance's component comes from loads only when it is one
    of the two forms (a package, optionally pinned; a source, optionally with contract and variants), and is
    otherwise a SpecError naming that instance."""
    folder = tmp_path_factory.mktemp("origin")
    spec = folder / "link.toml"
    lines = "".join(f"{k} = {FIELDS[k]}\n" for k in sorted(chosen))
    spec.write_text(f'[link]\nname = "k"\n\n[[instance]]\nname = "a"\n{lines}\n[schedule]\ntiles = [1]\n')
    valid = (chosen <= {"package", "sha256"} and "package" in chosen) or \
        (chosen <= {"source", "contract", "variants"} and "source" in chosen)
    if valid:
        assert load_spec(spec).instance[0].name == "a"
    else:
        with pytest.raises(SpecError) as exc:
            load_spec(spec)
        assert exc.value.field.startswith("instance[0]"), exc.value.format()

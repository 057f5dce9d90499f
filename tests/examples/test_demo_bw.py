"""Issue 12: the demo's producer moves whole tiles with 2-D TMA tensor copies, its box is a link-time
fact taken from the consumer, and a consumer that does not match the box is refused at link time.
CPU tests read the linked SASS; the GPU test (marker `gpu`) verifies both tile shapes."""

import re
import shutil

import pytest

import pipelink
from pipelink.backend.inspect import inspect_cubin
from pipelink.demo import _bandwidth_line
from pipelink.errors import FactConflict, PortMismatch

from conftest import RAW, ROOT, edit, gpu_ok, repack
from pipelink.demo import packaged_spec

WIDE = {"tile_rows": 64, "tile_cols": 128}


def _sass(kernel) -> list[str]:
    return inspect_cubin(kernel.cubin, kernel.plan.entry)[0].instructions


def _wide(demo_dir, contract_edits=()):
    """The wide spec beside the demo's, and ring_reduce (its contract edited) repacked with both tile shapes."""
    contract = demo_dir / "ring_reduce.toml"
    shutil.copyfile(RAW / "ring_reduce.toml", contract)
    for old, new in contract_edits:
        edit(contract, old, new)
    pipelink.pack(RAW / "ring_reduce.cu", contract, demo_dir / "packages" / "ring_reduce.plc",
                  variants=[{"tile_rows": 32, "tile_cols": 64}, {"tile_rows": 128, "tile_cols": 64}, WIDE])
    (demo_dir / "link_wide.toml").write_text(packaged_spec((ROOT / "examples" / "demo" / "link_wide.toml").read_text()))
    return demo_dir / "link_wide.toml"


def test_demo_producer_copies_whole_boxes(demo_dir):
    kernel = pipelink.link(demo_dir / "link.toml")
    plan = kernel.plan
    load = plan.instance("load")
    assert (load.facts["box_rows"], load.facts["box_cols"]) == (32, 64)  # the spec's tile
    assert str(load.fact_sources["box_rows"]).startswith("reduce: ring_reduce")  # the consumer chose the box
    (x,) = [p for p in kernel.manifest["params"] if p["name"] == "load.x"]
    assert x["tma"] == {"box": [32, 64], "swizzle": 0}
    insns = _sass(kernel)
    tma = [i for i in insns if "UTMALDG" in i]
    # One 2-D tensor copy per stage: one instruction in the producer's loop (or one per stage if unrolled).
    assert tma and all("UTMALDG.2D" in i for i in tma) and len(tma) in (1, 2048 // 64)
    assert not any("UBLKCP" in i for i in insns), "no per-row bulk copies left"
    lds = [i for i in insns if re.search(r"\bLDS\b", i)]
    assert len(lds) >= 8 and all("LDS.128" in i for i in lds), "the consumer reads smem 16 bytes at a time"
    assert plan.backend.resources.local == 0 and not plan.postlink.findings


def test_same_producer_feeds_a_consumer_with_another_tile(demo_dir):
    producer = demo_dir / "packages" / "ring_producer.plc"
    before = producer.read_bytes()
    demo = pipelink.link(demo_dir / "link.toml")
    wide = pipelink.link(_wide(demo_dir))
    assert producer.read_bytes() == before, "the producer package is not repacked"
    load = wide.plan.instance("load")
    assert (load.facts["box_rows"], load.facts["box_cols"]) == (64, 128)
    assert str(load.fact_sources["box_cols"]).startswith("reduce: ring_reduce")
    assert wide.plan.instance("reduce").package.variants[wide.plan.instance("reduce").variant].facts == WIDE
    (x,) = [p for p in wide.manifest["params"] if p["name"] == "load.x"]
    assert x["tma"]["box"] == [64, 128]
    (y,) = [p for p in wide.manifest["params"] if p["name"] == "store.y"]
    assert y["shape"] == [32768, 128]
    for kernel in (demo, wide):
        insns = _sass(kernel)
        assert any("UTMALDG.2D" in i for i in insns) and not any("UBLKCP" in i for i in insns)
        assert not kernel.plan.postlink.findings


def test_consumer_written_for_the_old_producer(demo_dir):
    """A consumer whose contract says nothing about the box (as before issue 12): nothing sets the
    producer's box, so the linker solves it from the ring connection's shape equality (box = the
    consumer's tile), for the demo's tile and for the wide one, and says so."""
    old = [('box_rows = "tile_rows"\nbox_cols = "tile_cols"\n', "")]
    spec = _wide(demo_dir, old)
    for link_spec, box in ((demo_dir / "link.toml", (32, 64)), (spec, (64, 128))):
        kernel = pipelink.link(link_spec)
        load = kernel.plan.instance("load")
        assert (load.facts["box_rows"], load.facts["box_cols"]) == box
        source = load.fact_sources["box_rows"]
        assert source.kind == "tied" and "ring_reduce" in source.forced_by
        assert "load.ring -> reduce.ring: shape.row" in str(source)
        (choice,) = [c for c in kernel.plan.to_json()["fact_choices"] if c["fact"] == "box_rows"]
        assert choice["value"] == box[0] and choice["solutions"] == [box[0]] and len(choice["candidates"]) == 32
        (x,) = [p for p in kernel.manifest["params"] if p["name"] == "load.x"]
        assert x["tma"]["box"] == list(box)


def test_box_set_against_the_consumer_is_refused(demo_dir):
    edit(demo_dir / "link.toml", "stages = 16", "stages = 16\nbox_cols = 32")
    with pytest.raises(FactConflict) as info:
        pipelink.link(demo_dir / "link.toml")
    msg = str(info.value)
    assert "box_cols" in msg and "ring_reduce" in msg and "64" in msg and "32" in msg
    assert info.value.component == "ring_producer"


def test_consumer_expecting_another_smem_layout_is_refused(demo_dir):
    """A consumer that reads each stage column-major (or swizzled) is not fed a row-major box."""
    repack(demo_dir, "ring_reduce", [('offset = "s * tile_rows * tile_cols + row * tile_cols + col"',
                                      'offset = "s * tile_rows * tile_cols + col * tile_rows + row"')])
    with pytest.raises(PortMismatch, match="layouts differ"):
        pipelink.link(demo_dir / "link.toml")


def test_demo_prints_its_share_of_the_read_bandwidth():
    bench = {"median_ms": 0.0700, "speedup_vs": {"tile_fold_torch": 1.19}}
    roof = {"read_bytes": 268435456, "pct_of_read_bandwidth": 87.7, "peaks": {"read_bytes_per_s": 4.37e12}}
    line = _bandwidth_line("pipelink", bench, roof)
    assert "87.7 % of the read bandwidth" in line and "4.37 TB/s" in line and "1.19x" in line


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
def test_both_tile_shapes_verify(demo_dir, tmp_path):
    from rich.console import Console
    quiet = Console(file=open("/dev/null", "w"), width=140)
    wide = _wide(demo_dir)
    shutil.copyfile(ROOT / "examples" / "demo" / "reference.py", demo_dir / "reference.py")
    for spec in (demo_dir / "link.toml", wide):
        result = pipelink.verify(spec, out_dir=tmp_path / spec.stem, bench=False, console=quiet)
        assert result.passed, [(r.name, r.status, r.detail) for r in result.rungs]
        c = result.rung("correctness").figures
        assert c["store.y.unwritten"] == 0 and c["store.y.rel_l2"] < 1.2e-2

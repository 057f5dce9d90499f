"""Component packages: real nvcc packing, round trip, variants, tamper detection."""

import subprocess
import zipfile

import pytest

import pipelink
from pipelink.errors import FactDomainError, PackageError, VariantMissing
from pipelink.package import load_package

from conftest import RAW, edit


def test_pack_round_trip(demo_packages):
    pkg = load_package(demo_packages / "ring_reduce.plc")
    assert pkg.name == "ring_reduce"
    assert pkg.toolchain["nvcc"].startswith("13.")
    assert pkg.variants[0].facts == {"tile_rows": 32, "tile_cols": 64}
    assert pkg.variants[0].ltoir[:4] != b"", "LTO-IR present"
    assert "ring_reduce_tile" in pkg.source_text
    manifest = pkg.manifest()
    assert manifest["content_hash"] == pkg.content_hash()


@pytest.mark.slow
def test_packing_is_deterministic(tmp_path):
    a = pipelink.pack(RAW / "tile_store.cu", RAW / "tile_store.toml", tmp_path / "a.plc")
    b = pipelink.pack(RAW / "tile_store.cu", RAW / "tile_store.toml", tmp_path / "b.plc")
    assert a.path.read_bytes() == b.path.read_bytes()


@pytest.mark.slow
def test_variants_compiled_at_once_give_the_bytes_of_one_at_a_time(tmp_path, monkeypatch):
    """pack compiles the variants in parallel (one nvcc per core): the package must not depend on which finished
    first, nor on how many ran at once."""
    variants = [{"tile_rows": 128}, {"tile_rows": 64}, {"tile_rows": 32}]
    at_once = pipelink.pack(RAW / "ring_reduce.cu", RAW / "ring_reduce.toml", tmp_path / "a.plc", variants=variants)
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    one_by_one = pipelink.pack(RAW / "ring_reduce.cu", RAW / "ring_reduce.toml", tmp_path / "b.plc", variants=variants)
    assert at_once.path.read_bytes() == one_by_one.path.read_bytes()
    assert [v.facts["tile_rows"] for v in load_package(tmp_path / "a.plc").variants] == [128, 64, 32]


@pytest.mark.slow
def test_variants_and_closed_package(tmp_path):
    pipelink.pack(RAW / "ring_reduce.cu", RAW / "ring_reduce.toml", tmp_path / "r.plc",
                  variants=[{"tile_rows": 64}, {"tile_rows": 128}], closed=True)
    back = load_package(tmp_path / "r.plc")
    assert [v.facts for v in back.variants] == [{"tile_rows": 64, "tile_cols": 64}, {"tile_rows": 128, "tile_cols": 64}]
    assert back.closed and back.source_text is None
    assert back.variants[0].ltoir != back.variants[1].ltoir


def test_variant_outside_domain_is_refused(tmp_path):
    with pytest.raises(FactDomainError, match="tile_rows=96") as info:
        pipelink.pack(RAW / "ring_reduce.cu", RAW / "ring_reduce.toml", tmp_path / "r.plc", variants=[{"tile_rows": 96}])
    assert info.value.component == "ring_reduce" and info.value.field == "facts.requires.tile_rows"
    assert not (tmp_path / "r.plc").exists()


def test_missing_variant_is_named_at_link(demo_dir):
    pipelink.pack(RAW / "ring_reduce.cu", RAW / "ring_reduce.toml", demo_dir / "packages" / "ring_reduce.plc",
                  variants=[{"tile_rows": 64}])
    edit(demo_dir / "link.toml", "tile_rows = 32", "tile_rows = 256")
    with pytest.raises(VariantMissing) as info:
        pipelink.link(demo_dir / "link.toml")
    msg = str(info.value)
    assert "tile_rows=256" in msg and "tile_rows=64" in msg and "--variant" in msg


def test_compile_error_carries_nvcc_log(tmp_path):
    src = tmp_path / "bad.cu"
    src.write_text((RAW / "tile_store.cu").read_text().replace("kThreads)", "kThreadz)"))
    with pytest.raises(pipelink.errors.CompileError) as info:
        pipelink.pack(src, RAW / "tile_store.toml", tmp_path / "bad.plc")
    assert "kThreadz" in str(info.value) and "repro (the folder nvcc ran in, kept):" in str(info.value)
    # the repro runs after the pack's own folder is gone (issue 52), and fails the same way
    command = info.value.hint.split("repro (the folder nvcc ran in, kept): ", 1)[1]
    again = subprocess.run(["bash", "-c", command], capture_output=True, text=True, cwd=tmp_path)
    assert again.returncode != 0 and "kThreadz" in again.stderr + again.stdout, again.stderr[-2000:]


def test_corrupted_package_is_detected(tmp_path, demo_packages):
    data = bytearray((demo_packages / "tile_store.plc").read_bytes())
    # Flip bytes inside the stored (uncompressed) LTO-IR member.
    with zipfile.ZipFile(demo_packages / "tile_store.plc") as z:
        info = z.getinfo("variants/0.fatbin")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra) + 100
    data[start:start + 4] = b"\xde\xad\xbe\xef"
    bad = tmp_path / "bad.plc"
    bad.write_bytes(bytes(data))
    with pytest.raises(PackageError, match="corrupted|hash"):
        load_package(bad)
    (tmp_path / "junk.plc").write_bytes(b"not a zip")
    with pytest.raises(PackageError, match="not a pipelink package"):
        load_package(tmp_path / "junk.plc")

"""Bad input: each mistake is a typed pipelink error naming file, component and field, saying what
to change; no output is left half-written."""

import os
import subprocess
import sys

import pytest

import pipelink
from pipelink import errors
from pipelink.backend import toolchain
from pipelink.fsutil import write_atomic
from pipelink.package import load_package
from pipelink.spec import load_spec

from conftest import RAW, classic_demo, edit, repack


def link_error(demo_dir, kind):
    with pytest.raises(kind) as info:
        pipelink.link(demo_dir / "link.toml")
    return info.value


def test_malformed_spec(demo_dir):
    edit(demo_dir / "link.toml", "[[instance]]", "[[instance]")
    err = link_error(demo_dir, errors.SpecError)
    assert "malformed TOML" in str(err) and err.file.endswith("link.toml")


def test_unknown_spec_field(demo_dir):
    edit(demo_dir / "link.toml", 'package = "packages/ring_reduce.plc"', 'package = "packages/ring_reduce.plc"\nspeed = 3')
    err = link_error(demo_dir, errors.SpecError)
    assert err.field == "instance[1]" and "unknown field 'speed'" in str(err)


def test_a_misspelled_spec_key_gets_a_suggestion(demo_dir):
    edit(demo_dir / "link.toml", 'package = "packages/ring_reduce.plc"', 'pakage = "packages/ring_reduce.plc"')
    err = link_error(demo_dir, errors.SpecError)
    assert err.field == "instance[1]" and "unknown field 'pakage' (did you mean 'package'?)" in str(err)


def test_a_misspelled_command_line_fact_is_an_error_with_a_suggestion(demo_dir):
    """--fact stagse=8 used to link with the default stages and one warning under the report: a fact typed on
    the command line that nothing uses is an error (exit 2) naming the closest fact the link uses."""
    p = subprocess.run([sys.executable, "-m", "pipelink", "link", str(demo_dir / "link.toml"), "--fact", "stagse=8",
                        "-o", str(demo_dir / "out")], capture_output=True, text=True)
    assert p.returncode == 2 and "--fact stagse: no component or schedule of the link uses a fact 'stagse' " \
        "(did you mean 'stages'?)" in p.stderr, p.stderr
    assert not (demo_dir / "out").exists()
    spec = load_spec(demo_dir / "link.toml", facts={"stages": 8})  # a used one links
    assert pipelink.link(spec).plan.facts["stages"] == 8


def test_missing_package(demo_dir):
    (demo_dir / "packages" / "tile_store.plc").unlink()
    err = link_error(demo_dir, errors.PackageError)
    assert "tile_store.plc" in str(err) and "pipelink pack" in str(err)


def test_conflicting_facts_name_both_sides(demo_dir):
    # The producer is told the consumer frees a stage with 4 arrivals; the consumer guarantees 8.
    edit(demo_dir / "link.toml", 'package = "packages/ring_producer.plc"',
         'package = "packages/ring_producer.plc"\nfacts = { ring_arrivals = 4 }')
    err = link_error(demo_dir, errors.FactConflict)
    msg = str(err)
    assert "ring_arrivals" in msg and " 4" in msg and " 8" in msg
    assert "ring_reduce" in msg and "ring_reduce.plc" in msg and "link.toml" in msg
    assert err.component == "ring_producer"


def test_fact_outside_domain(demo_dir):
    edit(demo_dir / "link.toml", "stages = 16", "stages = 32")
    err = link_error(demo_dir, errors.FactDomainError)
    assert "stages=32" in str(err) and "[1, 16]" in str(err) and err.field == "facts.requires.stages"


def test_missing_fact(demo_dir):
    edit(demo_dir / "link.toml", "K = 2048\n", "")
    err = link_error(demo_dir, errors.MissingFact)
    assert "'K'" in str(err) and "[facts]" in str(err)


def test_smem_over_the_limit_says_by_how_much(demo_dir):
    edit(classic_demo(demo_dir / "link.toml"), "stages = 4", "stages = 7")  # 7 x 32 KB ring + 32 KB staging
    err = link_error(demo_dir, errors.SmemOverflow)
    msg = str(err)
    total = 7 * 32768 + 32768 + 2 * 7 * 8
    assert f"needs {total} bytes" in msg and "232448" in msg and f"by {total - 232448} bytes" in msg
    assert "load.ring 229376 B" in msg  # the largest buffer first


@pytest.mark.slow
def test_register_budget_over_the_file(demo_dir):
    repack(demo_dir, "ring_reduce", [("registers = 232", "registers = 256")])
    err = link_error(demo_dir, errors.RegisterBudgetError)
    assert "70656" in str(err) and "65536" in str(err) and "by 5120" in str(err)


@pytest.mark.slow
def test_warps_not_shared_evenly(demo_dir):
    repack(demo_dir, "tile_store", [("warps = 8", "warps = 4")])
    err = link_error(demo_dir, errors.WarpLayoutError)
    assert "ring_reduce" in str(err) and "tile_store" in str(err) and "8 warps" in str(err) and "4 warps" in str(err)


@pytest.mark.slow
def test_more_named_barriers_than_exist(demo_dir):
    # tile_store pins 1..7; a consumer that wants 8 relocatable barriers, plus the glue's own, is too many.
    extra = "".join(f'\n[[named_barrier]]\nname = "b{i}"\nthreads = 256\n' for i in range(8))
    repack(demo_dir, "ring_reduce", [("[[smem]]", extra + "\n[[smem]]")])
    err = link_error(demo_dir, errors.BarrierExhausted)
    assert "9 relocatable named barriers" in str(err) and "pinned [1, 2, 3, 4, 5, 6, 7]" in str(err)


@pytest.mark.slow
def test_port_dtype_mismatch(demo_dir):
    repack(demo_dir, "tile_store", [('dtype = "fp32"', 'dtype = "int32"')])
    err = link_error(demo_dir, errors.PortMismatch)
    assert "fp32" in str(err) and "int32" in str(err) and err.field == "connect[1]"


def test_port_shape_mismatch(demo_dir):
    edit(demo_dir / "link.toml", 'roles = { store = "consumer" }', 'roles = { store = "consumer" }\nfacts = { tile_rows = 64 }')
    err = link_error(demo_dir, errors.PortMismatch)
    assert "[32, 64]" in str(err) and "[64, 64]" in str(err)


@pytest.mark.slow
def test_mbarrier_arrival_mismatch_is_caught(demo_dir):
    # A stale consumer contract that arrives once per warpgroup instead of once per warp.
    repack(demo_dir, "ring_reduce", [('arrivals = "consumer_warps"\ndefault_offset = 128',
                                      'arrivals = "consumer_warps / 4"\ndefault_offset = 128')])
    err = link_error(demo_dir, errors.PortMismatch)
    assert "mbarrier 'empty' arrivals" in str(err) and "expects 8" in str(err) and "declares 2" in str(err)


def test_schedule_mismatch(demo_dir):
    edit(demo_dir / "link.toml", 'order = "row_major"', 'order = "column_major"')
    err = link_error(demo_dir, errors.ScheduleMismatch)
    assert "tile_store" in str(err) and "column_major" in str(err)


@pytest.mark.slow
def test_missing_entry_symbol(demo_dir):
    # Refused when packed (the pack-time probe links the component alone) ...
    with pytest.raises(errors.MissingSymbol) as info:
        repack(demo_dir, "tile_store", [('symbol = "tile_store_tile"', 'symbol = "tile_store_run"')])
    assert "tile_store_run" in str(info.value) and info.value.file == str(demo_dir / "tile_store.toml")
    # ... and when linked, packed without the probe.
    pipelink.pack(RAW / "tile_store.cu", demo_dir / "tile_store.toml", demo_dir / "packages" / "tile_store.plc",
                  check=False)
    err = link_error(demo_dir, errors.MissingSymbol)
    assert "tile_store_run" in str(err) and "tile_store" in err.component


def test_ltoir_newer_than_nvjitlink(demo_dir):
    path = demo_dir / "packages" / "tile_store.plc"
    pkg = load_package(path)
    pkg.toolchain = {"nvcc": "13.5.37"}
    pkg.save(path)
    err = link_error(demo_dir, errors.LtoVersionError)
    major, minor = toolchain.nvjitlink_version()
    assert "13.5.37" in str(err) and f"nvJitLink {major}.{minor}" in str(err) and err.file == str(path)


def test_no_nvcc_says_how_to_get_one(monkeypatch, tmp_path):
    monkeypatch.setenv("PIPELINK_NVCC", str(tmp_path / "no-nvcc"))
    toolchain.find_nvcc.cache_clear()
    try:
        with pytest.raises(errors.NvccNotFound) as info:
            pipelink.pack(RAW / "tile_store.cu", RAW / "tile_store.toml", tmp_path / "t.plc")
        assert "pipelink[toolkit]" in str(info.value) and "PIPELINK_NVCC" in str(info.value)
        assert not (tmp_path / "t.plc").exists()
    finally:
        monkeypatch.delenv("PIPELINK_NVCC")
        toolchain.find_nvcc.cache_clear()


def test_failed_write_leaves_the_old_file(tmp_path, monkeypatch):
    target = write_atomic(tmp_path / "out.json", "old")

    def boom(src, dst):
        raise OSError("disk full")
    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        write_atomic(target, "new content")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_written_files_get_the_users_umask(tmp_path, umask):
    """Outputs (a cubin, a manifest, a package) are files like any the user makes: 0666 less the umask, not the
    0600 of the temporary file they are written through. A file rewritten with an explicit mode keeps it."""
    old = os.umask(umask)
    try:
        made = write_atomic(tmp_path / "out.json", "x")
        kept = write_atomic(tmp_path / "lock.toml", "y", mode=0o640)
    finally:
        os.umask(old)
    assert made.stat().st_mode & 0o777 == 0o666 & ~umask
    assert kept.stat().st_mode & 0o777 == 0o640


def test_cli_prints_typed_error_and_writes_nothing(demo_dir):
    edit(classic_demo(demo_dir / "link.toml"), "stages = 4", "stages = 7")
    out = demo_dir / "out"
    proc = subprocess.run([sys.executable, "-m", "pipelink.cli", "link", str(demo_dir / "link.toml"), "-o", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "SmemOverflow" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()

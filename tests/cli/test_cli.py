"""The command line, end to end, in a child process as a user would run it."""

import json
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT


def run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "pipelink.cli", *args], capture_output=True, text=True, cwd=cwd)


@pytest.mark.slow
def test_demo_writes_every_output(tmp_path):
    proc = run("demo", "-o", str(tmp_path / "demo"), "--no-gpu")
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "demo"
    for mode in ("pipelink", "monolithic"):
        for suffix in (".cubin", ".manifest.json", ".plan.json", ".glue.cu", ".report.txt", ".smem.png"):
            assert (out / mode / f"tile_fold{suffix}").stat().st_size > 0
    summary = json.loads((out / "demo.json").read_text())
    assert summary["sass_identical_to_monolithic"] is True
    assert "post-link" in proc.stdout and "identical" in proc.stdout


def test_pack_link_inspect(tmp_path):
    pkg = tmp_path / "packages" / "tile_store.plc"
    proc = run("pack", str(ROOT / "components/raw/tile_store.cu"), "--contract",
               str(ROOT / "components/raw/tile_store.toml"), "-o", str(pkg))
    assert proc.returncode == 0, proc.stderr
    proc = run("inspect", str(pkg))
    assert proc.returncode == 0 and '"content_hash"' in proc.stdout and "tile_store_tile" in proc.stdout
    proc = run("pack", str(ROOT / "components/raw/ring_reduce.cu"), "--contract",
               str(ROOT / "components/raw/ring_reduce.toml"), "-o", str(tmp_path / "r.plc"), "--variant", "tile_rows=sixty")
    assert proc.returncode == 2 and "not an integer" in proc.stderr


def test_schema_command():
    proc = run("schema", "contract")
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["title"] == "pipelink component contract"


def test_version():
    proc = subprocess.run([sys.executable, "-m", "pipelink", "--version"], capture_output=True, text=True)
    from pipelink import __version__
    assert proc.returncode == 0 and proc.stdout.startswith(f"pipelink {__version__} (Python ")


def test_a_reader_that_leaves_early_ends_the_command_quietly():
    """`pipelink schema contract --markdown | head`: the reader closes the pipe before the output is written. The
    command ends with the shell's status for SIGPIPE (141), and nothing on stderr (no traceback, no
    "Exception ignored" from the interpreter's last flush)."""
    from pipelink.cli import BROKEN_PIPE
    proc = subprocess.Popen([sys.executable, "-m", "pipelink", "schema", "contract", "--markdown"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()  # before the child writes anything: its first write or flush meets a closed pipe
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == BROKEN_PIPE and err == "", err


def test_pack_finds_the_contract_beside_its_source(tmp_path):
    """Issue 52: `pipelink pack x.cu` takes x.toml beside it (the packages are the bytes --contract gives); with
    no such file it is a usage error naming --contract and the file it looked for (exit 2)."""
    for suffix in (".cu", ".toml"):
        shutil.copyfile(ROOT / "components" / "raw" / f"tile_store{suffix}", tmp_path / f"tile_store{suffix}")
    run = [sys.executable, "-m", "pipelink", "pack", str(tmp_path / "tile_store.cu")]
    found = subprocess.run(run + ["-o", str(tmp_path / "a.plc")], capture_output=True, text=True)
    given = subprocess.run(run + ["--contract", str(tmp_path / "tile_store.toml"), "-o", str(tmp_path / "b.plc")],
                           capture_output=True, text=True)
    assert found.returncode == 0 and given.returncode == 0, found.stderr + given.stderr
    assert (tmp_path / "a.plc").read_bytes() == (tmp_path / "b.plc").read_bytes()
    (tmp_path / "tile_store.toml").unlink()
    missing = subprocess.run(run + ["-o", str(tmp_path / "c.plc")], capture_output=True, text=True)
    assert missing.returncode == 2 and "--contract" in missing.stderr and "tile_store.toml" in missing.stderr
    assert "Traceback" not in missing.stderr and not (tmp_path / "c.plc").exists()

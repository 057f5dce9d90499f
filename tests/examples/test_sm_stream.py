"""bench/experiments/sm_stream.py: the streaming probe compiles to a TMA ring with no local memory, its
configurations fit the block's shared memory and read what they say; on a GPU, every active block streams its
share and stamps it."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import gpu_ok

ROOT = Path(__file__).resolve().parents[2]


def _probe():
    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("sm_stream_probe", ROOT / "bench" / "experiments" / "sm_stream.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_probe_is_a_tma_ring_without_local_memory(tmp_path):
    from pipelink.backend.toolchain import find_tool
    probe = _probe()
    cubin = probe.compile_cubin(tmp_path)
    sass = subprocess.run([str(find_tool("cuobjdump")), "-sass", "-res-usage", str(cubin)], capture_output=True,
                          text=True, check=True).stdout
    assert "UTMALDG.2D" in sass and "SYNCS.PHASECHK" in sass  # box copies, completed on mbarriers
    assert re.search(r"LOCAL:0\b", sass) and not re.search(r"\b(LDL|STL)\b", sass)
    # the parameter block the launch packs is the kernel's, byte for byte (a short one would be read past its end)
    elf = subprocess.run([str(find_tool("cuobjdump")), "-elf", str(cubin)], capture_output=True, text=True,
                         check=True).stdout
    sizes = re.findall(r"Index : 0x0\s+Ordinal : 0x0\s+Offset\s+: 0x[0-9a-f]+\s+Size\s+: (0x[0-9a-f]+)", elf)
    assert sizes and int(sizes[0], 16) == probe.PARAMS_BYTES


def test_every_configuration_fits_one_block_and_counts_the_bytes_it_reads():
    probe = _probe()
    configs = probe.configurations(["latency", "waves", "l2", "decode"])
    assert len({c["name"] for c in configs}) == len(configs)
    for c in configs:
        rows, cols = c["matrix"]
        box_rows, box_cols = c["box"]
        assert c["stages"] * (box_rows * box_cols * 2 + 8) <= probe.SMEM, c["name"]
        assert box_rows <= 256 and box_cols <= 256 and cols % box_cols == 0 and c["rows"] <= rows
        share = probe.block_rows(c)
        assert c["bytes"] == share.sum() * cols * 2 and len(share) == c["active"]
        assert share.sum() == (c["rows"] * c["active"] if c.get("every") else c["rows"])
        if c["active"]:  # every active block streams, none more than a band above another
            assert share.min() > 0 and share.max() - share.min() <= box_rows, c["name"]
    assert any(c["active"] == 0 for c in configs)  # the empty launch, the flushed timing's own cost


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
def test_every_active_block_streams_its_share_and_stamps_it(tmp_path):
    import torch
    probe = _probe()
    kernel = probe.Kernel(probe.compile_cubin(tmp_path))
    config = next(c for c in probe.configurations(["decode"]) if c["active"] == 96 and c["stages"] == 4)
    matrix = torch.randn(config["matrix"], dtype=torch.bfloat16, device="cuda")
    stamps = torch.zeros((probe.GRID, 2), dtype=torch.int64, device="cuda")
    kernel.launcher(config, matrix, stamps)()
    torch.cuda.synchronize()
    t = stamps.cpu()
    assert bool((t[:96, 1] > t[:96, 0]).all()) and bool((t[:96, 0] > 0).all())
    assert bool((t[96:] == 0).all())  # blocks past `active` return before their stamps
    rates = probe.block_rates(stamps, config)
    assert 0 < rates["block_GBps"]["median"] < 1000

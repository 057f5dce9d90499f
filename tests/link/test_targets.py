"""Targets other than Hopper (issue 54, first step): a device profile names its target (sm_90a for H100/H200,
sm_100a B200, sm_103a B300, sm_120a RTX 5090); a package holds LTO-IR for each target its contract lists; glue and
link are built for the device's; a package without it is refused. CPU only: no such GPU is here."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

import pipelink
from pipelink.backend.inspect import inspect_cubin, normalized_sass
from pipelink.backend.toolchain import find_tool
from pipelink.contract import ARCHS, load_contract
from pipelink.errors import ContractError, SmemOverflow
from pipelink.spec import DEVICES

from conftest import RAW, ROOT, edit

DEMO = ("ring_producer", "ring_reduce", "tile_store")


def demo_for(tmp_path, device: str, archs: list[str], stages: int = 8):
    """The demo (examples/demo) linked from copies of its components whose contracts list ``archs``, for ``device``."""
    tmp_path.mkdir(exist_ok=True)
    for name in DEMO:
        shutil.copyfile(RAW / f"{name}.cu", tmp_path / f"{name}.cu")
        text = (RAW / f"{name}.toml").read_text()
        text = re.sub(r"(?m)^(\[component\]\n)", rf"\1archs = {archs!r}\n".replace("'", '"'), text, count=1)
        (tmp_path / f"{name}.toml").write_text(text)
    spec = tmp_path / "link.toml"
    shutil.copyfile(ROOT / "examples" / "demo" / "link.toml", spec)
    shutil.copyfile(ROOT / "examples" / "demo" / "reference.py", tmp_path / "reference.py")
    edit(spec, 'device = "h200"', f'device = "{device}"')
    edit(spec, "stages = 16", f"stages = {stages}")
    spec.write_text(spec.read_text().replace("../../components/raw/", ""))
    return spec


def _elf(cubin: bytes, tmp_path) -> str:
    path = tmp_path / "k.cubin"
    path.write_bytes(cubin)
    return subprocess.run([str(find_tool("cuobjdump")), "-elf", str(path)], capture_output=True, text=True).stdout


def cubin_arch(cubin: bytes, tmp_path) -> str:
    return re.search(r"\bsm_\d+a?\b", _elf(cubin, tmp_path)).group(0)


def test_every_profile_names_a_target_pipelink_builds_for():
    assert {d["arch"] for d in DEVICES.values()} == set(ARCHS)
    assert DEVICES["rtx5090"]["smem_optin_bytes"] == 101376 and DEVICES["b200"]["smem_optin_bytes"] == 232448


def test_the_demo_links_for_the_rtx_5090(tmp_path):
    """Its components packed for sm_90a and sm_120a (one fatbin each), linked for the RTX 5090: glue and cubin for
    sm_120a, the audit and the conformance check on its SASS. 16 stages of 8 KB are over its 99 KB of shared memory
    (refused, naming the limit), 8 fit."""
    with pytest.raises(SmemOverflow, match="rtx5090 opt-in limit of 101376 bytes"):
        pipelink.link(demo_for(tmp_path / "a", "rtx5090", ["sm_90a", "sm_120a"], stages=16))
    kernel = pipelink.link(demo_for(tmp_path / "b", "rtx5090", ["sm_90a", "sm_120a"]))
    assert kernel.plan.device["arch"] == "sm_120a" and kernel.plan.grid == min(kernel.plan.num_tiles, 170)
    assert cubin_arch(kernel.cubin, tmp_path) == "sm_120a"
    assert kernel.plan.backend.link_options[0] == "-arch=sm_120a"
    # One warning, understood: on sm_120a the TMA load into a shared::cluster address (component.h's pl_tma_load_2d)
    # compiles to a check that the address is the block's own, with a call to the driver's
    # __cuda_syscall_cp_async_bulk_tensor_2d_tile_unicast where it is not, whose argument block is local memory.
    # sm_90a has neither (the demo's SASS there uses no local memory).
    warnings = [(f.severity, f.instance, f.message) for f in kernel.plan.postlink.conformance]
    assert warnings == [("warning", "load", "uses local memory (register spills)")]
    assert "__cuda_syscall_cp_async_bulk_tensor_2d_tile_unicast" in _elf(kernel.cubin, tmp_path)
    # the monolithic control, the same sources as one unit for sm_120a: the same SASS
    mono = pipelink.link(demo_for(tmp_path / "b", "rtx5090", ["sm_90a", "sm_120a"]), mode="monolithic")
    assert normalized_sass(inspect_cubin(kernel.cubin, kernel.plan.entry)[0].instructions) == \
        normalized_sass(inspect_cubin(mono.cubin, mono.plan.entry)[0].instructions)
    # the same packages linked for the H200: an sm_90a cubin
    assert cubin_arch(pipelink.link(demo_for(tmp_path / "b", "h200", ["sm_90a", "sm_120a"])).cubin, tmp_path) == "sm_90a"


def test_a_package_without_the_devices_target_is_refused(tmp_path):
    with pytest.raises(ContractError) as err:
        pipelink.link(demo_for(tmp_path, "b200", ["sm_90a"]))
    e = err.value
    assert e.field == "component.archs" and e.component == "ring_producer"
    assert "holds code for sm_90a, not for the b200's target sm_100a" in e.message and "archs" in e.hint


@pytest.mark.parametrize("archs, words", [(["sm_89"], "sm_89"), ([], "at least one"), (["sm_90a", "sm_90a"], "each once")])
def test_a_contracts_targets_are_checked_on_load(tmp_path, archs, words):
    text = (RAW / "tile_store.toml").read_text()
    text = re.sub(r"(?m)^(\[component\]\n)", rf"\1archs = {archs!r}\n".replace("'", '"'), text, count=1)
    (tmp_path / "c.toml").write_text(text)
    with pytest.raises(ContractError) as err:
        load_contract(tmp_path / "c.toml")
    assert "archs" in err.value.field and words in str(err.value), str(err.value)

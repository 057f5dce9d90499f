"""The MoE perturbation study's cases (bench/perturb.py --link moe, issue 13 item 4): the closed
permute repacked with one changed constant, linked against the unchanged packages of the other
four. On the CPU: symbol linking accepts every case (with nothing but warnings), pipelink
propagates the changed fact to the components that read it or refuses with the fact and both
sides named. The `gpu` test runs the loop on the control and on every case pipelink relinks."""

from __future__ import annotations

import importlib.util
import shutil
import sys

import pytest

import pipelink
from pipelink.errors import FactConflict

from conftest import ROOT, gpu_ok

sys.path.insert(0, str(ROOT / "bench"))  # perturb.py imports its harness from there
_spec = importlib.util.spec_from_file_location("perturb", ROOT / "bench" / "perturb.py")
perturb = importlib.util.module_from_spec(_spec)
sys.modules["perturb"] = perturb  # its dataclasses look their module up
_spec.loader.exec_module(perturb)

STUDY = perturb.MOE
CASES = {c.name: c for c in STUDY.cases}
PROPAGATED = {"permute_table_header_8": ("table_header", 8), "permute_tile_words_8": ("tile_words", 8),
              "permute_slot_major": ("slot_major", 1), "permute_row_base_16384": ("rows_max", 65408)}
REFUSED = {"permute_tile_m_64": "tile_m", "permute_tile_n_128": "tile_n"}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return STUDY.pack(tmp_path_factory.mktemp("moe_perturb"))


def _specs(base, tmp_path, name):
    packages = tmp_path / "packages"
    shutil.copytree(base, packages)
    perturb.closed_package(STUDY, CASES[name], tmp_path, packages)
    return STUDY.specs(tmp_path, packages)


def test_the_study_perturbs_the_closed_permute_six_ways():
    assert len(STUDY.cases) == 7 and STUDY.closed.name == "moe_permute"
    assert set(PROPAGATED) | set(REFUSED) == set(CASES) - {"unperturbed"}


@pytest.mark.parametrize("name", sorted(PROPAGATED))
def test_pipelink_propagates_the_changed_fact(base, tmp_path, name):
    symbol, spec = _specs(base, tmp_path, name)
    fact, value = PROPAGATED[name]
    plan = pipelink.link(spec).plan
    readers = [i for i in plan.instances if fact in i.facts and i.name != "permute"]
    assert readers and all(i.facts[fact] == value for i in readers)
    assert all(i.fact_sources[fact].kind == "guarantee" for i in readers)
    # Symbol linking accepts it: the readers keep the design's value. A port whose size changed gets a
    # warning; a changed layout of the same size (slot-major row map) passes without a word.
    sym = pipelink.link(symbol, mode="symbol").plan
    assert sym.instance("permute").facts[fact] == value
    assert all(i.facts[fact] != value for i in sym.instances if fact in i.facts and i.name != "permute")
    warned = any("unchecked by symbol linking" in w for w in sym.all_warnings())
    assert warned == (name != "permute_slot_major")


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_pipelink_refuses_what_no_reader_supports(base, tmp_path, name):
    symbol, spec = _specs(base, tmp_path, name)
    with pytest.raises(FactConflict) as info:
        pipelink.link(spec)
    fact = REFUSED[name]
    assert f"fact '{fact}'" in info.value.message
    assert "permute (moe_permute)" in info.value.message and "gemm (moe_mainloop)" in info.value.message
    sym = pipelink.link(symbol, mode="symbol").plan  # symbol linking: the permute's new value, nobody told
    assert sym.instance("permute").facts[fact] != sym.instance("gemm").facts[fact]


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
@pytest.mark.parametrize("name,mode", [("unperturbed", "symbol"), *[(n, "pipelink") for n in sorted(PROPAGATED)]])
def test_the_control_and_every_relinked_kernel_verify(base, tmp_path, name, mode):
    from rich.console import Console
    symbol, spec = _specs(base, tmp_path, name)
    result = pipelink.verify(symbol if mode == "symbol" else spec, mode=mode, out_dir=tmp_path / "run", bench=False,
                             seeds=1, timeout=60, console=Console(file=open("/dev/null", "w")))
    assert result.passed, [(r.name, r.status, r.detail) for r in result.rungs]

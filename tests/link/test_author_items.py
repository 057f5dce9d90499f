"""Issue 20, items 5-7 and 11: what a component author needs from the contract and the runtime.
(Items 8-10 are in test_author_cli.py.)"""

from __future__ import annotations

import pytest

from pipelink.abi import Param
from pipelink.contract import load_contract
from pipelink.errors import ContractError, DeviceError
from pipelink.runtime import check_alignment

from conftest import ROOT, edit


# --- item 7: an operand declares the alignment its accesses need --------------------------------

def _contract_with_bias_align(tmp_path, value: str):
    path = tmp_path / "c.toml"
    path.write_text((ROOT / "examples/bias_gelu/bias_gelu_store.toml").read_text())
    edit(path, 'access = "read"\nalign = 4', f'access = "read"\nalign = {value}')
    return path


def test_operand_alignment_is_a_power_of_two_up_to_256(tmp_path):
    assert load_contract(_contract_with_bias_align(tmp_path, "16")).operand[0].align == 16
    for bad in ("3", "512", "0", '"16"'):
        with pytest.raises(ContractError) as info:
            load_contract(_contract_with_bias_align(tmp_path, bad))
        assert info.value.field == "operand[0].align"


def test_the_runtime_refuses_a_misaligned_pointer_naming_the_operand():
    params = [Param.from_json({"name": name, "dtype": "bf16", "shape": [64], "access": "read", "offset": 0, "bytes": 8,
                               **more})
              for name, more in (("epilogue.bias", {"align": 16}), ("epilogue.y", {"tma": {"box": [128, 64]}}),
                                 ("mainloop.a", {}))]
    check_alignment(params, [0x1000, 0x2000, 0x3002])  # no align declared: any address
    with pytest.raises(DeviceError) as info:
        check_alignment(params, [0x1008, 0x2000, 0])
    assert "epilogue.bias" in info.value.message and "16-byte" in info.value.message and "off by 8" in info.value.message
    with pytest.raises(DeviceError) as info:  # a TMA operand needs 16 bytes without saying so
        check_alignment(params, [0x1000, 0x2004, 0])
    assert "epilogue.y" in info.value.message


# --- item 11: the report shows static smem beside dynamic ----------------------------------------

def test_the_report_shows_static_and_dynamic_smem(demo_dir):
    import pipelink
    from pipelink.link.report import report_text
    kernel = pipelink.link(demo_dir / "link.toml")
    text = report_text(kernel.plan)
    static = kernel.plan.backend.resources.static_smem
    assert f"{kernel.plan.smem_bytes} bytes dynamic + {static} static" in text
    assert f"of {kernel.plan.device['smem_optin_bytes']} usable" in text


# --- item 6: a component knows its block's last tile ---------------------------------------------

def test_the_glue_tells_each_call_whether_its_tile_is_the_blocks_last(demo_dir):
    """ctx.last is 1 on the tile after which the block's stride runs past the schedule: there an
    epilogue can wait for its final TMA store to complete instead of only for its reads."""
    import pipelink
    plan = pipelink.link(demo_dir / "link.toml").plan
    text = plan.glue.text
    assert text.count(f"ctx.last = pl_tile + {plan.grid} >= {plan.num_tiles};") == len(plan.roles)
    assert "int last;" in (ROOT / "src/pipelink/include/pipelink/component.h").read_text()

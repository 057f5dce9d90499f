"""Contracts load with precise, typed errors."""

from pathlib import Path

import pytest

from pipelink.contract import load_contract
from pipelink.errors import ContractError

from conftest import COLLIDE, RAW

GOOD = """
[component]
name = "comp"
version = "1"

[facts.requires]
n = { range = [1, 64] }

[roles.work]
warps = 4

[[entry]]
symbol = "comp_run"
role = "work"
phase = "run"

[[smem]]
name = "buf"
bytes = "n * 4"
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.toml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("path", sorted(RAW.glob("*.toml")) + sorted(COLLIDE.glob("block_*.toml")),
                         ids=lambda p: p.name)
def test_bundled_contracts_load(path):
    c = load_contract(path)
    assert c.entry and c.roles


def test_minimal_contract(tmp_path):
    c = load_contract(write(tmp_path, GOOD))
    assert c.smem[0].bytes.eval({"n": 8}) == 32


@pytest.mark.parametrize("text, field, words", [
    (GOOD.replace('version = "1"', 'version = "1"\ncolour = "red"'), "component", "unknown field 'colour'"),
    (GOOD.replace('symbol = "comp_run"\n', ""), "entry[0].symbol", "missing required field 'symbol'"),
    (GOOD.replace('bytes = "n * 4"', 'bytes = "n ** 4"'), "smem[0].bytes", "Pow"),
    (GOOD.replace('bytes = "n * 4"', 'bytes = "m * 4"'), "smem[0].bytes", "unknown name(s) m"),
    (GOOD.replace("warps = 4", "warps = 4\nregisters = 250"), "roles.work.registers", "multiple of 8"),
    (GOOD.replace("warps = 4", "warps = 3\nwarpgroup_aligned = true"), "roles.work.warps", "not a multiple of 4"),
    (GOOD.replace('name = "buf"', 'name = "n"'), "smem[0].name", "used twice"),
    (GOOD.replace('role = "work"', 'role = "play"'), "entry[0].role", "unknown role 'play'"),
    (GOOD.replace("warps = 4", 'warps = "four"'), "roles.work.warps", "expected an integer"),
    (GOOD + '\n[[named_barrier]]\nname = "b"\nthreads = 128\nid = 16\n', "named_barrier[0].id", "outside 1..15"),
    # the k-tiles the glue hands out (ctx.k_begin .. ctx.k_end): over facts, and a positive count
    (GOOD + '\n[schedule]\nk_tiles = "K / 64"\n', "schedule.k_tiles", "unknown name(s) K"),
    (GOOD + '\n[schedule]\nk_tiles = "0"\n', "schedule.k_tiles", "positive C int"),
])
def test_bad_contracts_name_file_component_and_field(tmp_path, text, field, words):
    path = write(tmp_path, text)
    with pytest.raises(ContractError) as info:
        load_contract(path)
    err = info.value
    assert err.field == field
    assert err.file == str(path)
    assert words in str(err)
    if "component" in text and "name = \"comp\"" in text:
        assert err.component == "comp"


def test_malformed_toml(tmp_path):
    path = write(tmp_path, GOOD.replace('[component]', '[component'))
    with pytest.raises(ContractError, match="malformed TOML") as info:
        load_contract(path)
    assert info.value.file == str(path)


def test_json_schema_and_reference_are_generated_from_the_schema():
    from pipelink import schema
    from pipelink.contract import Contract
    s = schema.json_schema(Contract, "contract")
    assert set(s["required"]) == {"component", "roles", "entry"}
    assert "named_barriers" in s["$defs"]["Reserve"]["properties"]
    md = schema.markdown_reference(Contract, "Contract reference")
    assert "`tx_bytes`" in md and "## MBarrier" in md


def test_docs_reference_and_json_schemas_are_current():
    """docs/reference.md and docs/*.schema.json are generated; `python docs/generate_reference.py`."""
    import subprocess
    import sys
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, str(root / "docs" / "generate_reference.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr

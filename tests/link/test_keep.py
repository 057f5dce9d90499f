"""[link] keep: a workspace the kernel hands its caller as an output (a training forward keeps what its backward
reads). The toy of test_global_ports.py: `counter` counts the even elements of X in a whole-block phase and writes
the tile count into its workspace `ntiles`; kept, that count becomes a write operand of the port's dtype and shape.
CPU tests: the ABI, the glue's cast and the audit's own derivation of it, each refusal; the `gpu` test reads the
kept count back."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pipelink
from pipelink.errors import PipelinkError, SpecError
from pipelink.link import audit
from pipelink.link.abi import kernel_abi
from pipelink.link.glue_ir import EntryCall
from pipelink.link.pipeline import plan_link
from pipelink.spec import load_spec

from conftest import edit, edit_glue, gpu_ok, inline_link
from contracts import COUNTER, COUNTER_SOURCE, COUNTER_WRITER_SPEC, WRITER, WRITER_SOURCE

# A copy of the tile count, `seen`, written before the tile loops and never cleared (zero = false), and a port that
# hands it out; `count` (its workspace `hits`, atomics on zero) and `ntiles` (the glue's tile count) stay as they were.
TILES_PORT = '[[port]]\nname = "tiles"\ndirection = "out"\nspace = "global"\nbuffer = "seen"\ndtype = "int32"\n' \
             'shape = { n = 1 }\n\n'
SEEN = '[[workspace]]\nname = "seen"\nbytes = 4\nzero = false\n\n'
COUNTER_KEPT = COUNTER.replace("[[workspace]]", SEEN + "[[workspace]]", 1).replace("[[port]]", TILES_PORT + "[[port]]", 1)
SOURCE_KEPT = COUNTER_SOURCE.replace(
    "    *reinterpret_cast<volatile int*>(b.ntiles) = (pl_ld_acquire_int(b.hits) + 127) / 128;",
    "    const int tiles = (pl_ld_acquire_int(b.hits) + 127) / 128;\n"
    "    *reinterpret_cast<int*>(b.seen) = tiles;\n"
    "    *reinterpret_cast<volatile int*>(b.ntiles) = tiles;")


def _spec(folder, keep: str, contract: str = COUNTER_KEPT):
    assert SOURCE_KEPT != COUNTER_SOURCE
    inline_link(folder, "counter", contract, SOURCE_KEPT, COUNTER_WRITER_SPEC)
    spec = inline_link(folder, "writer", WRITER, WRITER_SOURCE, COUNTER_WRITER_SPEC)
    return edit(spec, 'name = "evens2"\n', f'name = "evens2"\nkeep = {keep}\n')


def test_a_kept_workspace_is_a_write_operand_of_the_ports_type(tmp_path):
    plan = plan_link(_spec(tmp_path, '["c.tiles"]'))
    assert [k.port for k in plan.checked.kept] == ["c.tiles"]
    params = {p.name: p for p in kernel_abi(plan).params}
    kept = params["c.seen"]
    assert (kept.dtype, kept.shape, kept.access, kept.workspace, kept.kept) == ("int32", (1,), "write", None, "c.tiles")
    assert params["c.hits"].workspace == {"zero": True}  # the others stay the runtime's
    assert "kept workspaces" in {c.name for c in plan.checked.checks}


@pytest.mark.slow
def test_the_kept_output_reaches_the_component_as_its_workspace(tmp_path):
    kernel = pipelink.link(_spec(tmp_path, '["c.tiles"]'))
    calls = re.findall(r"counter_count\(ctx, pl_bind_counter\{([^}]*)\}", kernel.plan.glue.text)
    assert "(unsigned char*)p.c_seen" in calls[0].split(", ")  # the typed member, cast for the bindings field
    assert "  int* c_seen;" in kernel.plan.glue.text
    assert [p["name"] for p in kernel.manifest["params"] if "workspace" not in p] == ["c.x", "c.seen", "w.y"]
    assert audit.check_glue(kernel.plan).ok
    # a generator that forgot the kept workspace (the untyped member passed as it was) is caught by the audit
    wrong = edit_glue(kernel.plan, EntryCall,
                      lambda c: replace(c, binding=c.binding.replace("(unsigned char*)p.c_seen", "p.c_seen")),
                      count=99)
    assert wrong.glue.statements != kernel.plan.glue.statements
    assert "glue.bindings" in {v.invariant for v in audit.check_glue(wrong).violations}


@pytest.mark.parametrize("keep, contract, words", [
    ('["c.count"]', COUNTER_KEPT, ["workspace 'hits' is declared zero", "counts on finding it cleared"]),
    ('["c.nope"]', COUNTER_KEPT, ["has no global out-port 'nope'", "its global out-ports: tiles, count"]),
    ('["w.count"]', COUNTER_KEPT, ["has no global out-port 'count'"]),  # an in-port
    ('["c.tiles"]', COUNTER_KEPT.replace('buffer = "seen"', 'buffer = "x"').replace(
        'shape = { n = 1 }\n\n[[port]]', 'shape = { n = "N" }\n\n[[port]]', 1),
     ["holds operand 'x', which the caller passes already"]),
    ('["c.tiles"]', COUNTER_KEPT.replace('shape = { n = 1 }\n\n[[port]]', 'shape = { n = 2 }\n\n[[port]]', 1),
     ["the port holds int32[2] = 8 bytes, its workspace 'seen' 4", "larger than what the kernel writes"]),
    ('["c.tiles"]', COUNTER_KEPT.replace(SEEN, SEEN.replace("zero = false\n", "")),  # cleared before each launch
     ["workspace 'seen' is declared zero"]),
    ('["c.tiles"]', COUNTER_KEPT.replace('buffer = "seen"', 'buffer = "ntiles"').replace(
        'name = "ntiles"\nbytes = 4\n', 'name = "ntiles"\nbytes = 4\nzero = false\n'),
     ["holds the tile count the glue reads"]),
])
def test_a_workspace_that_cannot_be_the_callers_is_refused(tmp_path, keep, contract, words):
    with pytest.raises(SpecError) as info:
        plan_link(_spec(tmp_path, keep, contract))
    said = f"{info.value.message} {info.value.hint}"
    assert all(w in said for w in words), said
    assert info.value.field == "link.keep[0]" and info.value.file.endswith("link.toml") and info.value.hint


@pytest.mark.parametrize("keep, words", [
    ('["c"]', "is not 'instance.port' of a declared instance"),
    ('["z.tiles"]', "is not 'instance.port' of a declared instance"),
    ('["c.tiles", "c.tiles"]', "is kept twice"),
    ('["c.9x"]', "the port in"),
])
def test_keep_is_validated_on_load(tmp_path, keep, words):
    spec = _spec(tmp_path, keep)
    with pytest.raises(SpecError) as info:
        load_spec(spec)
    assert words in info.value.message and info.value.field.startswith("link.keep")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(max_size=12), max_size=3))
def test_any_keep_list_loads_or_is_a_typed_error(tmp_path_factory, names):
    folder = tmp_path_factory.mktemp("keep")
    (folder / "link.toml").write_text(COUNTER_WRITER_SPEC.replace(
        'name = "evens2"\n', f"name = \"evens2\"\nkeep = {json_list(names)}\n"))
    try:
        spec = load_spec(folder / "link.toml")
    except PipelinkError:
        return
    assert all(ref.partition(".")[0] in ("c", "w") for ref in spec.link.keep)


def json_list(names: list[str]) -> str:
    import json
    return json.dumps(names)  # a TOML array of basic strings


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
def test_the_kept_count_comes_back(tmp_path):
    import torch
    kernel = pipelink.link(_spec(tmp_path, '["c.tiles"]'))
    op = pipelink.torch_op(kernel, name="evens2_kept")
    x = torch.randint(0, 1 << 20, (65536,), generator=torch.Generator().manual_seed(3)).to(torch.int32).cuda()
    tiles, y = op(x)
    hits = int((x % 2 == 0).sum())
    assert tiles.tolist() == [(hits + 127) // 128] and y[: tiles.item()].eq(hits).all()

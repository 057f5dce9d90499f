"""The kernel's ABI (pipelink/abi.py, laid out for a plan by link/abi.py) is the one definition the glue, the manifest and the verify child
use: the struct the glue declares, the parameters the manifest lists and the child reads back, and
the sanitize report's word layout the glue writes and the child decodes."""

from __future__ import annotations

import re

import pytest

import pipelink
from pipelink.abi import REPORT_CLAIM, REPORT_LAYOUT, REPORT_WORDS, KernelABI, ReportKind, decode_report
from pipelink.link.abi import kernel_abi
from pipelink.link.pipeline import plan_link


@pytest.mark.slow
def test_glue_manifest_and_child_share_one_layout(demo_dir):
    kernel = pipelink.link(demo_dir / "link.toml", sanitize=True, trace=True)
    abi, manifest = kernel.abi, kernel.manifest
    assert abi.declaration() in kernel.plan.glue.text  # the glue declares the struct the ABI describes
    assert [p["name"] for p in manifest["params"]] == [p.name for p in abi.params] == \
        ["load.x", "store.y", "glue.trace", "glue.report"]
    # What the child reads back from the manifest is the same layout (less the C comments).
    back = KernelABI.from_manifest(manifest)
    assert [p.to_json() for p in back.params] == manifest["params"] and back.size == manifest["param_bytes"]
    assert [p.name for p in back.operands] == ["load.x", "store.y", "glue.trace"]  # the report is the harness's
    assert back.report.host_mapped and back.report.shape == (REPORT_WORDS,)
    assert back.trace.shape == tuple(manifest["trace"]["shape"])
    assert back.arguments({"load.x": 1, "store.y": 2, "glue.trace": 3}, report=4) == [1, 2, 3, 4]
    # Offsets: the tensor map of load.x is 64-byte aligned and 128 bytes; the struct a multiple of 64.
    offsets = [(p.offset, p.bytes) for p in abi.params]
    assert offsets == [(0, 128), (128, 8), (136, 8), (144, 8)] and abi.size == 192


def test_the_glue_writes_the_report_as_the_layout_says(demo_dir):
    """The glue's C helpers store the report words by index; each index holds what REPORT_LAYOUT
    names, and the claim word is the one the first reporter sets."""
    glue = pipelink.link(demo_dir / "link.toml", sanitize=True).plan.glue.text
    fail = glue[glue.index("void pl_sanitize_fail("):]
    fail = fail[:fail.index("}\n")]
    stores = dict(re.findall(r"report\[(\d)\] = ([^;]+);", fail))  # word -> the argument stored there
    names = REPORT_LAYOUT[ReportKind.CANARY]
    assert stores == {str(i): "blockIdx.x" if name == "block" else name for i, name in enumerate(names)}
    assert f"atomicCAS(report + {REPORT_CLAIM}, 0u, 1u)" in fail
    stuck = glue[glue.index("void pl_sanitize_stuck("):]
    stuck = stuck[:stuck.index("}\n")]
    assert f"report[0] = {int(ReportKind.STUCK)};" in stuck and f"atomicCAS(report + {REPORT_CLAIM}," in stuck
    assert len(re.findall(r"report\[\d\] =", stuck)) == len(REPORT_LAYOUT[ReportKind.STUCK])


def test_decode_report():
    assert decode_report([0] * REPORT_WORDS) is None  # nobody claimed it
    assert decode_report([1, 2, 3, 4, 5, 6, 7, 1]) == {"kind": 1, "site": 2, "buffer": 3, "tile": 4, "block": 5,
                                                       "word": 6, "value": 7}
    assert decode_report([2, 4, 64, 1, 9, 0, 0, 1]) == {"kind": 2, "warp": 4, "offset": 64, "parity": 1, "block": 9}
    assert decode_report([9, 0, 0, 0, 0, 0, 0, 1]) == {"kind": 9}


def test_a_tensor_map_after_a_pointer_is_aligned(demo_dir):
    """The store instance first: its pointer at 0, the TMA tensor map of load.x at the next multiple
    of 64, and the struct a multiple of 64 (no toolchain needed: the ABI follows from the plan)."""
    spec = demo_dir / "link.toml"
    text = spec.read_text()
    store = text[text.index('[[instance]]\nname = "store"'):text.index("[[connect]]")]
    load = text[text.index('[[instance]]\nname = "load"'):text.index('[[instance]]\nname = "reduce"')]
    spec.write_text(text.replace(store, "").replace(load, store + load))
    abi = kernel_abi(plan_link(spec))
    assert [(p.name, p.offset, p.bytes) for p in abi.params] == [("store.y", 0, 8), ("load.x", 64, 128)]
    assert abi.size == 192

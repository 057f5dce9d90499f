"""docs/component_api.md is generated from the comments in pipelink/component.h
(`python docs/generate_component_api.py`): it is up to date, and every pl_ function the header
declares is documented there."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

import pytest

from conftest import ROOT

HEADER = ROOT / "src" / "pipelink" / "include" / "pipelink" / "component.h"
DOC = ROOT / "docs" / "component_api.md"
GENERATOR = ROOT / "docs" / "generate_component_api.py"


def generator():
    spec = importlib.util.spec_from_file_location("generate_component_api", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def test_generated_file_is_up_to_date():
    proc = subprocess.run([sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_every_pl_function_is_documented():
    # Read the header with a pattern of its own, not the generator's parser.
    declared = set(re.findall(r'^(?:PL_DEVICE|extern "C" __device__)\s[^(]*?\b(pl_\w+)\s*\(', HEADER.read_text(),
                              flags=re.M))
    assert {"pl_mbar_wait", "pl_bulk_g2s", "pl_bar_sync", "pl_setmaxnreg_inc", "pl_sanitize_stuck"} <= declared
    doc = DOC.read_text()
    for name in declared:
        section = re.search(rf"^### `{name}`\n\n```c\+\+\n.*?\b{name}\(.*?\n```\n\n(.+?)(?=\n### |\n## |\Z)", doc,
                            flags=re.M | re.S)
        assert section and len(section.group(1).split()) >= 5, f"{name} has no documentation in {DOC.name}"


def test_an_undocumented_declaration_is_refused():
    text = HEADER.read_text()
    comment = "// This thread's lane in its warp (0..31).\n"
    assert comment in text
    gen = generator()
    with pytest.raises(gen.Undocumented, match="'pl_lane' has no comment"):
        gen.parse(text.replace(comment, ""))

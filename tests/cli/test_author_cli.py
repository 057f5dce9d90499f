"""Issue 20, what a component author meets on the command line: `pipelink inspect` shows contracts
and SASS as they are (item 8), `--fact NAME=VALUE` sets a spec's facts for link, verify and bench
(item 9), `pipelink.torch_op` says how it is called (item 10), and the generated reference does not
depend on how the Python version keeps docstring indentation. The command line runs in a child
process, as a user runs it."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import RAW, ROOT, gpu_ok
from pipelink import schema
from pipelink.backend.inspect import dump_sass_file
from pipelink.errors import SpecError
from pipelink.package import load_package
from pipelink.spec import fact_option, load_spec

DEMO_SPEC = ROOT / "examples" / "demo" / "link.toml"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def run(*args, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipelink.cli", *map(str, args)], capture_output=True, text=True,
                          env=None if env is None else {**os.environ, **env})


def on_terminal() -> dict:
    """The environment under which rich treats stdout as a narrow terminal (FORCE_COLOR)."""
    return {"FORCE_COLOR": "1", "TTY_COMPATIBLE": "1", "COLUMNS": "60"}


# --- item 8: inspect prints file text as it is -------------------------------------------------

def test_inspect_package_piped_prints_manifest_json_and_contract_verbatim(demo_packages):
    plc = demo_packages / "ring_producer.plc"
    pkg = load_package(plc)
    assert "[facts.requires]" in pkg.contract_text and "[[entry]]" in pkg.contract_text
    proc = run("inspect", plc)
    assert proc.returncode == 0, proc.stderr
    manifest = json.dumps(pkg.manifest(), indent=2) + "\n"
    assert proc.stdout.startswith(manifest)
    assert json.loads(manifest) == json.loads(json.dumps(pkg.manifest()))
    assert proc.stdout[len(manifest):].rstrip("\n") == pkg.contract_text.rstrip("\n")


def test_inspect_package_on_a_terminal_keeps_table_headers(demo_packages):
    """On a terminal the contract is still not read as rich markup: [facts.requires] and [[entry]]
    stay, whole lines (not wrapped at the terminal's width)."""
    plc = demo_packages / "ring_producer.plc"
    proc = run("inspect", plc, env=on_terminal())
    assert proc.returncode == 0, proc.stderr
    lines = set(ANSI.sub("", proc.stdout).splitlines())
    for line in load_package(plc).contract_text.splitlines():
        assert line.rstrip() in {x.rstrip() for x in lines}, line
    assert "[facts.requires]" in lines and "[[entry]]" in lines and "[]" not in lines


@pytest.mark.slow
def test_inspect_cubin_piped_is_cuobjdump_output_unwrapped(demo_dir):
    out = demo_dir / "out"
    proc = run("link", demo_dir / "link.toml", "-o", out, "-q")
    assert proc.returncode == 0, proc.stderr
    cubin = out / "tile_fold.cubin"
    sass = dump_sass_file(cubin)
    assert max(map(len, sass.splitlines())) > 80  # would have been wrapped before
    proc = run("inspect", cubin, "--raw")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rstrip("\n") == sass.rstrip("\n")
    # on a terminal: each SASS line stays one line (rich shows tabs as spaces)
    proc = run("inspect", cubin, "--raw", env=on_terminal())
    assert proc.returncode == 0, proc.stderr
    shown = ANSI.sub("", proc.stdout).rstrip("\n").splitlines()
    assert [line.rstrip() for line in shown] == [line.expandtabs(8).rstrip() for line in sass.rstrip("\n").splitlines()]
    # without --raw, the link's plan beside it: the same instructions, grouped by instance (tests/cli/test_inspect_sass.py)
    proc = run("inspect", cubin)
    assert proc.returncode == 0 and "SASS instructions by instance" in proc.stdout, proc.stderr
    # a plan JSON piped: plain JSON (parseable, long strings unbroken), then the glue as written
    plan = out / "tile_fold.plan.json"
    proc = run("inspect", plan)
    assert proc.returncode == 0, proc.stderr
    head, sep, glue = proc.stdout.partition("// ---- generated glue ----\n")
    data = json.loads(plan.read_text())
    assert sep and json.loads(head) == {k: v for k, v in data.items() if k != "glue"}
    assert glue.rstrip("\n") == data["glue"].rstrip("\n")


# --- item 9: --fact NAME=VALUE -----------------------------------------------------------------

@pytest.mark.slow
def test_fact_option_reaches_the_link(demo_dir):
    spec = demo_dir / "link.toml"
    assert "stages = 16\n" in spec.read_text() and "M = 32768\n" in spec.read_text()
    out = demo_dir / "out"
    proc = run("link", spec, "-o", out, "-q", "--fact", "stages=8", "--fact", "M=16384")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads((out / "tile_fold.plan.json").read_text())
    assert plan["facts"]["stages"] == 8 and plan["facts"]["M"] == 16384
    manifest = json.loads((out / "tile_fold.manifest.json").read_text())
    assert manifest["params"][0]["shape"][0] == 16384  # the problem size reached the ABI too
    load = next(i for i in plan["instances"] if i["name"] == "load")
    assert load["fact_sources"]["stages"] == "the command line (--fact stages=...)"
    assert load["fact_sources"]["K"].startswith("the link spec (")  # the file's own entries say so
    assert "stages = 16\n" in spec.read_text()  # the spec file is left as it was
    # paths relative to the spec: the plan JSON is the same bytes wherever the project lies
    assert plan["spec"] == "link.toml" and load["package"] == "packages/ring_producer.plc"


@pytest.mark.slow
def test_fact_option_reaches_verify(demo_dir):
    """verify links and checks with the override; without a GPU it stops there (status 3)."""
    shutil.copyfile(ROOT / "examples" / "demo" / "reference.py", demo_dir / "reference.py")
    out = demo_dir / "verify"
    proc = run("verify", demo_dir / "link.toml", "-o", out, "--no-bench", "--fact", "stages=8")
    assert proc.returncode == (0 if gpu_ok() else 3), proc.stdout + proc.stderr
    plan = json.loads((out / "kernel" / "tile_fold.plan.json").read_text())
    assert plan["facts"]["stages"] == 8


def test_fact_option_on_load_spec():
    spec = load_spec(DEMO_SPEC, {"stages": 4, "new_fact": -3})
    assert spec.facts["stages"] == 4 and spec.facts["new_fact"] == -3 and spec.facts["M"] == 32768
    assert fact_option(" tile_rows = 0x40 ") == ("tile_rows", 64)
    with pytest.raises(SpecError, match="over the limit"):
        load_spec(DEMO_SPEC, {"stages": 1 << 40})


BAD_FACTS = [
    ("stages", ["'stages' is not NAME=VALUE"]),                           # no value
    ("9stages=8", ["'9stages'", "not a C identifier"]),                  # bad name
    ("int=8", ["'int' is a C++ keyword"]),
    ("pl_stages=8", ["reserved prefix"]),
    ("stages=eight", ["'stages=eight'", "not an integer"]),              # bad value
    ("stages=8.0", ["not an integer"]),
    ("stages=", ["not an integer"]),
    ("stages=2147483648", ["over the limit 2147483647 by 1"]),            # out of range
    ("stages=-2147483648", ["below the minimum -2147483647 by 1"]),
    ("stages=" + "9" * 5000, ["5000 digits", "over the limit"]),
]


@pytest.mark.parametrize("command", ["link", "verify", "bench"])
@pytest.mark.parametrize("fact, words", BAD_FACTS, ids=[f[0][:20] for f in BAD_FACTS])
def test_malformed_fact_option_is_a_typed_error(tmp_path, command, fact, words):
    """Refused before any work: status 2, SpecError naming --fact, nothing written."""
    spec = tmp_path / "link.toml"
    spec.write_bytes(DEMO_SPEC.read_bytes())  # no packages: the option is checked before the link
    proc = run(command, spec, "-o", tmp_path / "out", "--fact", "stages=8", "--fact", fact)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "(SpecError)" in proc.stderr and "--fact" in proc.stderr, proc.stderr
    for word in words:
        assert word in proc.stderr, (word, proc.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.toml"]


# --- item 10: torch_op says how it is called ---------------------------------------------------

def test_torch_op_docstring_states_the_argument_order():
    import inspect

    from pipelink import torch_op
    text = " ".join((inspect.getdoc(torch_op) or "").split())
    assert "read** operands only" in text and "positionally in manifest order" in text
    assert "write** operands, which the operator allocates" in text
    assert "one tensor if the kernel writes one operand, else a tuple in manifest order" in text


# --- the generated reference: the same text whatever Python keeps of docstring indentation -----

def test_reference_uses_docstrings_without_their_indentation():
    """Python 3.13 strips a docstring's indentation at compile time, 3.11 keeps it: the reference
    and the JSON Schema must read the same from both (docs/ is checked byte for byte by
    test_docs_reference_and_json_schemas_are_current, under whichever Python runs the tests)."""
    @dataclasses.dataclass(kw_only=True)
    class Sample:
        size: int = schema.doc("A size.", 1)

    texts = {}
    for doc in ("[sample]: first line\n    second line.", "[sample]: first line\nsecond line."):  # 3.11, 3.13
        Sample.__doc__ = doc
        texts[doc] = (schema.markdown_reference(Sample, "Sample"),
                      schema.json_schema(Sample, "sample")["description"])
    md, description = texts.popitem()[1]
    assert texts.popitem()[1] == (md, description)
    assert "[sample]: first line\nsecond line." in md and description == "[sample]: first line\nsecond line."


def test_pack_on_a_terminal_shows_a_bar_of_the_variants_with_the_elapsed_time(tmp_path):
    """Issue 52 item 6: on a terminal, pack's variants as a progress bar (compiled of total, elapsed time) with the
    other steps printed above it; piped, the plain progress lines as before."""
    args = ("pack", RAW / "ring_reduce.cu", "-o", tmp_path / "r.plc", "--variant", "tile_rows=32",
            "--variant", "tile_rows=64", "--variant", "tile_rows=128")
    shown = ANSI.sub("", run(*args, env={**on_terminal(), "COLUMNS": "120"}).stdout)
    assert "3/3" in shown and re.search(r"\d:\d\d:\d\d", shown) and "nvcc ring_reduce.cu -> LTO-IR" in shown
    assert "conformance: linking ring_reduce alone" in shown
    piped = run(*args).stdout
    assert "variant 3/3 done" in piped or "variant 2/3 done" in piped  # the lines, in whichever order they finished
    assert "3/3 0:" not in piped


def test_link_on_a_terminal_shows_its_steps_with_the_elapsed_time(tmp_path):
    """Issue 52 item 6: on a terminal, link's steps (its source instances packed first) under a line with the step
    running and the elapsed time; piped, the plain progress lines."""
    spec = ROOT / "examples" / "demo" / "link.toml"
    shown = ANSI.sub("", run("link", spec, "-o", tmp_path / "tty", "--quiet", env={**on_terminal(), "COLUMNS": "120"})
                     .stdout)
    assert re.search(r"\d:\d\d:\d\d", shown) and "linked in" in shown, shown
    piped = run("link", spec, "-o", tmp_path / "piped", "--quiet")
    assert piped.returncode == 0 and "linked in" in piped.stdout and not re.search(r"\d:\d\d:\d\d", piped.stdout)

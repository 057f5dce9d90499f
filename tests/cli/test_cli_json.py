"""Issue 17, item 4: `--json` on pack, link, inspect and verify prints one JSON document on stdout
(nothing else), the result or a typed error, with the exit status the command has without it; every
document validates against the published schema, docs/cli.schema.json (`pipelink schema cli`). The
command line runs in a child process, as a user or an agent runs it."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import RAW, ROOT, edit, gpu_ok
from pipelink import cli_json
from pipelink.link.plan import PLAN_SCHEMA_VERSION

SCHEMA_FILE = ROOT / "docs" / "cli.schema.json"


def run(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipelink.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd)


def _no_constant(name):
    raise AssertionError(f"{name} is not JSON")


@pytest.fixture(scope="module")
def validator():
    jsonschema = pytest.importorskip("jsonschema")  # the test extra; the H200 image has none
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.fixture
def document(validator):
    """The one document a --json run printed: stdout is strict JSON and nothing else, it follows
    the published schema, and its exit_status is the process's."""
    def parse(proc: subprocess.CompletedProcess, command: str, status: int) -> dict:
        assert proc.returncode == status, proc.stdout + proc.stderr
        assert "Traceback" not in proc.stderr, proc.stderr
        doc = json.loads(proc.stdout, parse_constant=_no_constant)  # one document, nothing around it
        errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(doc)]
        assert not errors, errors
        assert doc["command"] == command and doc["exit_status"] == status
        return doc
    return parse


def error_of(doc: dict, error_type: str) -> dict:
    assert "result" not in doc
    error = doc["error"]
    assert error["type"] == error_type, error
    assert error["message"] and error["message"] in error["text"]
    return error


# --- the published schema ----------------------------------------------------------------------

def test_published_schema_is_current():
    """docs/cli.schema.json is cli_json.cli_schema(), as `pipelink schema cli` prints it; after a
    change: pipelink schema cli > docs/cli.schema.json"""
    proc = run("schema", "cli")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == cli_json.cli_schema()
    assert SCHEMA_FILE.read_text() == proc.stdout, "out of date: pipelink schema cli > docs/cli.schema.json"


def test_schema_rejects_what_is_not_a_document(validator):
    """The schema is no rubber stamp: a result without its fields, an error without its type, a
    verify status it does not know, or a user error with another exit status fail it."""
    ok = cli_json.document("inspect", 0, result={"file": "a.cubin", "kind": "cubin", "sass": "NOP"})
    assert validator.is_valid(ok)
    error = {"type": "SpecError", "bases": ["PipelinkError"], "message": "m", "file": None, "component": None,
             "field": None, "hint": None, "log": None, "text": "m"}
    assert validator.is_valid(cli_json.document("link", 2, error=error))
    bad = [cli_json.document("inspect", 0, result={"file": "a.cubin", "kind": "cubin"}),
           cli_json.document("link", 2, error={k: v for k, v in error.items() if k != "type"}),
           cli_json.document("link", 1, error=error),
           cli_json.document("pack", 3, result=ok["result"]),
           {**cli_json.document("verify", 0, result={}), "extra": 1}]
    assert not any(validator.is_valid(doc) for doc in bad)


def test_documents_are_strict_json():
    text = cli_json.dumps(cli_json.document("verify", 1, result={"figures": {"a": math.nan, "b": -math.inf,
                                                                             "p": Path("x")}}))
    figures = json.loads(text, parse_constant=_no_constant)["result"]["figures"]
    assert figures == {"a": "NaN", "b": "-Infinity", "p": "x"}


# --- each command's result ---------------------------------------------------------------------

@pytest.mark.slow
def test_pack_json(tmp_path, document):
    out = tmp_path / "ring_reduce.plc"
    proc = run("pack", RAW / "ring_reduce.cu", "--contract", RAW / "ring_reduce.toml", "-o", out,
               "--variant", "tile_rows=32,tile_cols=64", "--json")
    result = document(proc, "pack", 0)["result"]
    assert result["path"] == str(out) and out.exists()
    assert result["name"] == "ring_reduce" and result["version"]
    assert [v["facts"] for v in result["variants"]] == [{"tile_rows": 32, "tile_cols": 64}]
    assert result["conformance"]["checked"] is True and result["conformance"]["findings"] == []
    assert "conformance" in proc.stderr  # progress goes to stderr


@pytest.mark.slow
def test_link_and_inspect_json(demo_dir, document):
    proc = run("link", demo_dir / "link.toml", "-o", demo_dir / "out", "--json")
    result = document(proc, "link", 0)["result"]
    assert result["name"] == "tile_fold" and result["mode"] == "pipelink"
    for kind, path in result["files"].items():
        assert Path(path).stat().st_size > 0, kind
    assert result["facts"]["stages"] == 16 and result["launch"]["dynamic_smem"] == result["smem_bytes"]
    assert [(i["name"], i["component"]) for i in result["instances"]] == [
        ("load", "ring_producer"), ("reduce", "ring_reduce"), ("store", "tile_store")]
    assert result["checks"] and all(c["ok"] for c in result["checks"])
    assert result["resources"]["registers"] > 0 and result["cubin"]["bytes"] > 0

    files = result["files"]
    package = document(run("inspect", demo_dir / "packages" / "tile_store.plc", "--json"), "inspect", 0)["result"]
    assert package["kind"] == "package" and package["manifest"]["name"] == "tile_store"
    assert "[component]" in package["contract"]
    plan = document(run("inspect", files["plan"], "--json"), "inspect", 0)["result"]
    assert plan["kind"] == "plan" and plan["plan"]["entry"] == result["entry"] and "glue" not in plan["plan"]
    assert plan["plan"]["schema_version"] == PLAN_SCHEMA_VERSION  # the plan link wrote, read back
    assert plan["glue"] == Path(files["glue"]).read_text()
    cubin = document(run("inspect", files["cubin"], "--json"), "inspect", 0)["result"]
    assert cubin["kind"] == "cubin" and result["entry"] in cubin["sass"]


@pytest.mark.slow
@pytest.mark.skipif(gpu_ok(), reason="the not-run verdict needs a machine without a GPU")
def test_verify_json_without_a_gpu_is_not_run(demo_dir, document):
    (demo_dir / "reference.py").write_bytes((ROOT / "examples" / "demo" / "reference.py").read_bytes())
    proc = run("verify", demo_dir / "link.toml", "-o", demo_dir / "run", "--json")
    result = document(proc, "verify", 3)["result"]
    assert result["status"] == "not run" and result["device"] is None
    rungs = {r["name"]: r for r in result["rungs"]}
    assert [rungs[n]["status"] for n in ("pre-checks", "link", "dumps")] == ["ok", "ok", "ok"]
    for name in ("run", "correctness", "bench", "roofline"):
        assert rungs[name]["status"] == "skipped" and "not run" in rungs[name]["detail"], rungs[name]
    on_disk = json.loads((demo_dir / "run" / "verify.json").read_text())
    assert on_disk["rungs"] == result["rungs"] and on_disk["status"] == "not run"
    assert "NOT RUN" in proc.stderr  # the table goes to stderr


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an NVIDIA GPU (sm_90a)")
def test_verify_json_on_a_gpu_passes(demo_dir, document):
    (demo_dir / "reference.py").write_bytes((ROOT / "examples" / "demo" / "reference.py").read_bytes())
    proc = run("verify", demo_dir / "link.toml", "-o", demo_dir / "run", "--no-bench", "--json")
    result = document(proc, "verify", 0)["result"]
    assert result["status"] == "pass" and all(r["status"] in ("ok", "skipped") for r in result["rungs"])


# --- user errors -------------------------------------------------------------------------------

def test_link_error_json_names_the_type_file_and_field(demo_dir, document):
    """The error a link refuses with, as the document's error object: the same exit status (2) as
    without --json, and nothing written."""
    edit(demo_dir / "link.toml", "stages = 16\n", "stages = 99\n")
    args = ("link", demo_dir / "link.toml", "-o", demo_dir / "out")
    error = error_of(document(run(*args, "--json"), "link", 2), "FactDomainError")
    assert error["file"] == str(demo_dir / "packages" / "ring_producer.plc")
    assert error["component"] == "ring_producer" and error["field"] == "facts.requires.stages"
    assert "99" in error["message"] and error["hint"] and error["bases"] == ["PipelinkError"]
    assert not (demo_dir / "out").exists()
    assert run(*args).returncode == 2


def test_spec_error_json_names_the_spec_file_and_field(demo_dir, document):
    edit(demo_dir / "link.toml", "[link]\n", "[link]\nbogus = 1\n")
    for command in ("link", "verify"):
        doc = document(run(command, demo_dir / "link.toml", "-o", demo_dir / "out", "--json"), command, 2)
        error = error_of(doc, "SpecError")
        assert error["file"] == str(demo_dir / "link.toml") and error["field"] == "link"
        assert "bogus" in error["message"]


def test_pack_output_error_json(tmp_path, document):
    doc = document(run("pack", RAW / "tile_store.cu", "--contract", RAW / "tile_store.toml", "-o", tmp_path,
                       "--json"), "pack", 2)
    error = error_of(doc, "OutputError")
    assert error["file"] == str(tmp_path) and error["field"] == "-o/--output"


def test_inspect_error_json(tmp_path, document):
    path = tmp_path / "garbage.cubin"
    path.write_bytes(b"no ELF header here")
    error = error_of(document(run("inspect", path, "--json"), "inspect", 2), "PipelinkError")
    assert error["file"] == str(path) and "not a cubin" in error["message"]


def test_inspect_refuses_a_plan_of_another_schema_version_json(tmp_path, document):
    path = tmp_path / "old.plan.json"
    path.write_text(json.dumps({"schema_version": PLAN_SCHEMA_VERSION + 1, "entry": "pl_x", "glue": ""}))
    error = error_of(document(run("inspect", path, "--json"), "inspect", 2), "PlanVersionError")
    assert error["file"] == str(path) and error["field"] == "schema_version"
    assert f"version {PLAN_SCHEMA_VERSION + 1}; this pipelink reads version {PLAN_SCHEMA_VERSION}" in error["message"]


@pytest.mark.slow
def test_command_line_error_json(document):
    """argparse's complaint is a UsageError document under --json, its usual text without; both 2."""
    bad = ("pack", RAW / "ring_reduce.cu", "--contract", RAW / "ring_reduce.toml", "-o", "r.plc",
           "--variant", "tile_rows=sixty")
    error = error_of(document(run(*bad, "--json"), "pack", 2), "UsageError")
    assert "not an integer" in error["message"] and error["hint"] == "pipelink pack --help"
    error_of(document(run("verify", "--json"), "verify", 2), "UsageError")
    plain = run(*bad)
    assert plain.returncode == 2 and plain.stdout == ""
    assert plain.stderr.startswith("usage: pipelink pack") and "pipelink: error: argument --variant" in plain.stderr

"""Issue 10, link spec, command line and outputs: every mistake is a typed error (exit status 2)
that names the file and the field, never a traceback, and leaves nothing written; the command
line runs as `python -m pipelink`, in a child process as a user would run it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import RAW, ROOT, edit, gpu_ok
from pipelink.errors import PipelinkError, SpecError
from pipelink.link.plan import PLAN_SCHEMA_VERSION
from pipelink.spec import load_spec

DEMO_SPEC = ROOT / "examples" / "demo" / "link.toml"


def run(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipelink", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd)


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every file and folder under ``folder`` with its bytes (None for a folder)."""
    return {str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes() for p in sorted(folder.rglob("*"))}


def refused(proc: subprocess.CompletedProcess, error: str, *named: str) -> str:
    """Exit status 2, the typed error ``error``, each of ``named`` in its message, no traceback."""
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "Traceback" not in out, out
    assert f"({error})" in proc.stderr, proc.stderr
    for word in named:
        assert word in proc.stderr, (word, proc.stderr)
    return proc.stderr


def link_refused(folder: Path, spec: Path, error: str, *named: str) -> str:
    """`pipelink link` refuses ``spec``, naming the spec file and ``named``, and writes nothing."""
    before = snapshot(folder)
    message = refused(run("link", spec, "-o", folder / "out"), error, str(spec), *named)
    assert snapshot(folder) == before
    return message


# --- the link spec -----------------------------------------------------------------------------

@pytest.fixture
def spec_only(tmp_path) -> Path:
    """The demo spec alone (errors caught on load need no packages)."""
    spec = tmp_path / "link.toml"
    spec.write_bytes(DEMO_SPEC.read_bytes())
    return spec


@pytest.mark.parametrize("tiles, words", [
    ("0", ["tile count '0'", "below the minimum 1"]),
    ("-4", ["tile count '-4'", "below the minimum 1 by 5"]),
    ("1099511627776", ["1099511627776", "2147483647"]),
    ("65536, 65536", ["4294967296 tiles", "over the limit of 1073741824 by 3221225472"]),
])
def test_tile_grid_out_of_range_is_refused_on_load(spec_only, tiles, words):
    edit(spec_only, 'tiles = ["M / tile_rows"]', f"tiles = [{tiles}]")
    link_refused(spec_only.parent, spec_only, "SpecError", "schedule.tiles", *words)


@pytest.mark.parametrize("tiles, words", [
    ("M / M - 1", ["tile count 'M / M - 1'", "0 is below the minimum 1"]),
    ("M / (M - M)", ["division by zero"]),
    ("M / (M + 1)", ["does not divide exactly"]),
    ("M / nope", ["'nope'"]),
])
@pytest.mark.slow
def test_tile_grid_over_facts_names_the_spec_file(demo_dir, tiles, words):
    """Evaluated once the facts resolve: the error still names the spec file, not only the field."""
    spec = demo_dir / "link.toml"
    edit(spec, 'tiles = ["M / tile_rows"]', f'tiles = ["{tiles}"]')
    link_refused(demo_dir, spec, "SpecError", "schedule.tiles[0]", *words)


@pytest.mark.parametrize("grid, words", [
    ("-1", ["below the minimum 1 by 2"]),
    ("0", ["below the minimum 1"]),
    ("1099511627776", ["over the limit 1073741824 by 1098437885952"]),
])
def test_grid_out_of_range_is_refused(spec_only, grid, words):
    edit(spec_only, "[schedule]", f"[launch]\ngrid = {grid}\n\n[schedule]")
    link_refused(spec_only.parent, spec_only, "SpecError", "launch.grid", *words)


@pytest.mark.parametrize("before, after, field, words", [
    ('name = "tile_fold"', 'name = "tile_fold"\nentry = "my entry"', "link.entry", ["not a C identifier"]),
    ('name = "tile_fold"', 'name = "tile_fold"\nentry = "int"', "link.entry", ["C++ keyword"]),
    ('name = "tile_fold"', 'name = "' + "k" * 10_000 + '"', "link.name", ["10000 characters long", "limit of 64"]),
    ('name = "load"', 'name = "lo-ad"', "instance[0].name", ["not a C identifier"]),
    ('name = "load"', 'name = "' + "i" * 10_000 + '"', "instance[0].name", ["10000 characters long"]),
    ('roles = { store = "consumer" }', 'roles = { store = "consumer\\n}" }', "instance[2].roles.store",
     ["not a C identifier"]),
    ('roles = { store = "consumer" }', 'roles = { "st ore" = "consumer" }', "instance[2].roles",
     ["not a C identifier"]),
    ("M = 32768", "M = 32768\n" + "f" * 10_000 + " = 1", "facts", ["10000 characters long"]),
    ("M = 32768", "M = 4294967296", "facts.M", ["over the limit 2147483647"]),
    ('source = "../../components/raw/ring_producer.cu"', 'source = "' + "p" * 10_000 + '.cu"', "instance[0].source",
     ["10003 bytes long", "limit of 255"]),
    ('reference = "reference.py:tile_fold"', 'reference = "reference.py"', "verify.reference",
     ["'file.py:function'"]),
    ('reference = "reference.py:tile_fold"', 'reference = "reference.py:tile_fold"\nprepare = "inputs.py"',
     "verify.prepare", ["'file.py:function'"]),
    ('name = "tile_fold"', 'name = "tile_fold"\nkeep = ["load"]', "link.keep[0]", ["'instance.port'"]),
    ('name = "tile_fold"', 'name = "tile_fold"\nkeep = ["load.ring", "load.ring"]', "link.keep[1]", ["kept twice"]),
])
def test_names_and_values_are_refused_on_load(spec_only, before, after, field, words):
    edit(spec_only, before, after)
    message = link_refused(spec_only.parent, spec_only, "SpecError", field, *words)
    assert "k" * 100 not in message and "i" * 100 not in message  # a long name is shown cut short


def test_a_connection_given_twice_is_refused_on_load(spec_only):
    """A repeated [[connect]] would copy the tile twice, on a named barrier no code uses (issue 48)."""
    spec_only.write_text(spec_only.read_text() + '\n[[connect]]\nto = "reduce.ring"\nfrom = "load.ring"\n')
    link_refused(spec_only.parent, spec_only, "SpecError", "connect[2]",
                 "connects 'load.ring' to 'reduce.ring', as connect[0] does already", "delete one")


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rng=st.randoms(use_true_random=False))
def test_any_repeated_connection_is_refused_naming_both(tmp_path, rng):
    """The demo spec with one [[connect]] again anywhere after it (tests/fuzz/cases.py)."""
    from fuzz.cases import case
    path = tmp_path / "link.toml"
    path.write_bytes(case("broken-spec", rng))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    first = path.read_text().partition("\n")[0].split()[1]  # "# connect[i] given twice"
    assert info.value.file == str(path) and info.value.field.startswith("connect[")
    assert f"as {first} does already" in info.value.message


def test_spec_with_invalid_utf8_is_refused(spec_only):
    spec_only.write_bytes(spec_only.read_bytes().replace(b'"tile_fold"', b'"tile\xfffold"'))
    link_refused(spec_only.parent, spec_only, "SpecError", "UTF-8")


# --- outputs -----------------------------------------------------------------------------------

@pytest.fixture
def unwritable(tmp_path) -> Path:
    """A folder no file can be made in, for this user."""
    if os.geteuid() != 0:
        folder = tmp_path / "read-only"
        folder.mkdir()
        folder.chmod(0o555)
        return folder
    folder = Path("/sys/kernel")  # root passes permission bits; sysfs refuses new files even to root
    try:
        fd, probe = tempfile.mkstemp(dir=folder)
    except OSError:
        return folder
    os.close(fd)
    os.unlink(probe)
    pytest.skip("no folder here refuses new files to root")


@pytest.mark.slow
def test_link_output_problems_are_refused_before_any_work(demo_dir, unwritable):
    spec = demo_dir / "link.toml"
    (demo_dir / "notes.txt").write_text("mine\n")
    (demo_dir / "a_file").write_text("mine too\n")
    before = snapshot(demo_dir)
    cases = [(demo_dir / "notes.txt", "existing file"),
             (demo_dir / "a_file" / "out", "is a file, so no folder can be made in it"),
             (unwritable / "out", "cannot write in"),
             (demo_dir / ("o" * 300), "300 bytes long, over the 255-byte limit by 45")]
    for out, words in cases:
        refused(run("link", spec, "-o", out), "OutputError", str(out), "-o/--output", words)
    assert snapshot(demo_dir) == before


@pytest.mark.slow
def test_a_write_that_fails_midway_leaves_no_partial_outputs(demo_dir):
    """The third output's name is taken by a folder: the two written before it are removed again."""
    (demo_dir / "out" / "tile_fold.plan.json").mkdir(parents=True)
    before = snapshot(demo_dir)
    refused(run("link", demo_dir / "link.toml", "-o", demo_dir / "out", "-q"), "OutputError",
            str(demo_dir / "out" / "tile_fold.plan.json"), "cannot write")
    assert snapshot(demo_dir) == before


@pytest.mark.slow
def test_pack_never_overwrites_an_input_or_writes_into_a_folder(tmp_path):
    contract = tmp_path / "tile_store.toml"
    contract.write_bytes((RAW / "tile_store.toml").read_bytes())
    (tmp_path / "folder.plc").mkdir()
    before = snapshot(tmp_path)
    for out, words in [(contract, "not a package (.plc)"), (tmp_path / "folder.plc", "this is a folder")]:
        refused(run("pack", RAW / "tile_store.cu", "--contract", contract, "-o", out), "OutputError", str(out),
                "-o/--output", words)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("command", [["verify", str(DEMO_SPEC)], ["demo", "--no-gpu"]])
def test_verify_and_demo_refuse_a_file_as_their_folder(tmp_path, command):
    out = tmp_path / "taken"
    out.write_text("mine\n")
    refused(run(*command, "-o", out), "OutputError", str(out), "existing file")
    assert snapshot(tmp_path) == {"taken": b"mine\n"}


@pytest.mark.slow
def test_post_link_failure_is_an_error_and_writes_nothing(tmp_path):
    """A component that spills: its contract allows it (a conformance warning), the post-link
    check does not. The CLI follows the error rule: exit 2, nothing written."""
    from contracts import violation_link
    spec = violation_link(tmp_path, "spills", {}, False)
    before = snapshot(tmp_path)
    message = refused(run("link", spec, "-o", tmp_path / "out", "-q"), "PostLinkError", str(spec),
                      "field 'post-link'", "local memory in use", "nothing was written")
    assert "register spills" in message
    assert snapshot(tmp_path) == before


# --- verify without a GPU, python -m pipelink --------------------------------------------------

@pytest.mark.slow
def test_verify_without_a_gpu_says_not_run(demo_dir):
    """No GPU: the kernel is linked and checked but not run, which is neither a pass nor a failure."""
    (demo_dir / "reference.py").write_bytes((ROOT / "examples" / "demo" / "reference.py").read_bytes())
    proc = run("verify", demo_dir / "link.toml", "-o", demo_dir / "run", "--no-bench")
    record = json.loads((demo_dir / "run" / "verify.json").read_text())
    assert "Traceback" not in proc.stdout + proc.stderr
    if gpu_ok():
        assert proc.returncode == 0 and "PASS" in proc.stdout and record["status"] == "pass", proc.stdout
    else:
        assert proc.returncode == 3, proc.stdout + proc.stderr
        assert "NOT RUN (no GPU): compiled and checked only" in proc.stdout and "PASS" not in proc.stdout
        assert record["status"] == "not run"
        assert [r["status"] for r in record["rungs"]] == ["ok", "ok", "ok", "skipped", "skipped"]


def test_python_dash_m_pipelink_runs_the_cli():
    proc = run("schema", "spec")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["title"] == "pipelink link spec"
    assert run("link").returncode == 2  # argparse: the spec is missing


# --- inspect -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name, content, words", [
    ("empty.cubin", b"", ["not a cubin"]),
    ("garbage.cubin", b"no ELF header here " * 4, ["not a cubin"]),
    ("broken.cubin", b"\x7fELF" + b"\x00" * 60, ["cuobjdump failed"]),
    ("plan.json", b"[1, 2, 3]", ["is an array"]),
    ("latin1.plan.json", b'{"name": "caf\xe9"}', ["not UTF-8"]),
    ("deep.plan.json", b"[" * 10_000 + b"]" * 10_000, ["nested too deeply"]),
])
def test_inspect_refuses_bad_files_naming_them(tmp_path, name, content, words):
    path = tmp_path / name
    path.write_bytes(content)
    message = refused(run("inspect", path), "InspectError" if "cuobjdump" in words[0] else "PipelinkError",
                      str(path), *words)
    assert message.count(str(tmp_path)) == message.count(str(path))  # no temporary copy is named


@pytest.mark.parametrize("version, found", [
    (PLAN_SCHEMA_VERSION + 1, f"version {PLAN_SCHEMA_VERSION + 1};"),
    (1, "version 1;"),
    (None, "version 1 (no schema_version: written before plans carried one);"),  # a plan from before the field
    ("2", "version '2';"),
])
def test_inspect_refuses_a_plan_of_another_schema_version(tmp_path, version, found):
    """plan.json carries its schema version (link/plan.py: PLAN_SCHEMA_VERSION); inspect reads its own
    version only, and of any other says the file, the version found and the one it reads."""
    plan = {"entry": "pl_tile_fold", "glue": "// glue\n", **({} if version is None else {"schema_version": version})}
    path = tmp_path / "tile_fold.plan.json"
    path.write_text(json.dumps(plan))
    message = refused(run("inspect", path), "PlanVersionError", str(path), found,
                      f"this pipelink reads version {PLAN_SCHEMA_VERSION}", "schema_version")
    assert "link the spec again" in message
    path.write_text(json.dumps({**plan, "schema_version": PLAN_SCHEMA_VERSION}))
    proc = run("inspect", path)
    assert proc.returncode == 0 and json.loads(proc.stdout.partition("// ---- generated glue ----")[0]) == \
        {"entry": "pl_tile_fold", "schema_version": PLAN_SCHEMA_VERSION}


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_inspect_refuses_what_is_not_a_regular_file(tmp_path, kind):
    path = tmp_path / "plan.json"
    if kind == "fifo":
        os.mkfifo(path)  # opening it would wait for a writer forever
    else:
        path.symlink_to("/dev/zero")  # reading it would never end
    proc = subprocess.run([sys.executable, "-m", "pipelink", "inspect", str(path)], capture_output=True, text=True,
                          timeout=60)
    refused(proc, "PipelinkError", str(path), "not a regular file")


@pytest.mark.parametrize("kind", ["fifo", "device"])
@pytest.mark.parametrize("command, error", [("link", "SpecError"), ("pack", "ContractError")])
def test_spec_or_contract_that_is_not_a_regular_file(tmp_path, kind, command, error):
    """A link spec or a contract given as a FIFO (open would wait for a writer) or /dev/zero (read
    would never end) is refused before it is read; the watchdog timeout turns a hang into a failure."""
    path = tmp_path / "x.toml"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    args = ["link", path, "-o", tmp_path / "out"] if command == "link" else \
        ["pack", RAW / "ring_producer.cu", "--contract", path, "-o", tmp_path / "p.plc"]
    proc = subprocess.run([sys.executable, "-m", "pipelink", *map(str, args)], capture_output=True, text=True,
                          timeout=120)
    refused(proc, error, str(path), "not a regular file")
    assert not (tmp_path / "out").exists() and not (tmp_path / "p.plc").exists()


# --- any mutation of a valid spec: loaded, or refused with a typed error -------------------------

_LINES = DEMO_SPEC.read_text().splitlines()
_VALUES = st.sampled_from(['0', '-1', '1099511627776', '""', '"x"', '"' + "n" * 10_000 + '"', '"1 / 0"', '"a b"',
                           '[]', '[0, 0, 0]', '{}', '{ a = 1 }', 'true', '1.5', 'nan', '"é"', '"M / nope"',
                           '"reference.py"', '"ok.py:f"', '"int"', '[[1]]', '"' + "[" * 500 + '"'])


@st.composite
def mutated_spec(draw) -> bytes:
    lines = list(_LINES)
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(lines) - 1))
        action = draw(st.sampled_from(["value", "delete", "duplicate", "key"]))
        key, sep, _ = lines[i].partition("=")
        if action == "value" and sep:
            lines[i] = f"{key}= {draw(_VALUES)}"
        elif action == "delete":
            del lines[i]
        elif action == "duplicate":
            lines.insert(i, lines[i])
        elif action == "key" and sep:
            lines[i] = f"{draw(st.sampled_from(['x', 'grid', 'tiles', 'entry', 'ünï', 'a.b']))} ={lines[i][len(key) + 1:]}"
    data = "\n".join(lines).encode()
    if draw(st.booleans()):
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.binary(min_size=1, max_size=4)) + data[at:]
    return data


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=mutated_spec())
def test_mutated_spec_loads_or_raises_a_typed_error(tmp_path, data):
    path = tmp_path / "link.toml"
    path.write_bytes(data)
    try:
        load_spec(path)
    except PipelinkError as exc:
        assert exc.file == str(path)


# --- options given through the Python API: refused when made, naming the option ---------------------

@pytest.mark.parametrize("kwargs, field", [({"seeds": 0}, "seeds"), ({"timeout": -1}, "timeout"),
                                           ({"sanitizers": ("nosuchtool",)}, "sanitizers"),
                                           ({"trace": "yes"}, "trace")])
def test_bad_verify_options_are_typed_errors(kwargs, field):
    from pipelink import VerifyOptions
    with pytest.raises(PipelinkError) as info:
        VerifyOptions(**kwargs)
    assert info.value.field == field


def test_unknown_link_mode_is_a_spec_error():
    from pipelink import LinkOptions
    from pipelink.errors import SpecError
    with pytest.raises(SpecError, match="unknown link mode 'bogus'"):
        LinkOptions(mode="bogus")

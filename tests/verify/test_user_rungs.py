"""Rungs of the user's own (issue 17, item 3): a check named in the spec ([[verify.rung]]), given to
pipelink.verify (pipelink.rung) or on the command line (--rung) runs in the verify child after the
built-in rungs, on the same loaded kernel; figures make it ok, an exception makes it FAILED, and
the rungs after it still run. CPU: loading, validation, planning and the result schema; GPU: the
checks themselves."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from rich.console import Console

import pipelink
from pipelink.errors import PipelinkError, SpecError
from pipelink.verify import RungRef, VerifyOptions, result_schema

from conftest import ROOT, gpu_ok

QUIET = Console(file=open("/dev/null", "w"), width=140)

CHECKS = '''
def outputs_written(ctx):
    """Every output element written after one launch (their poison replaced)."""
    import torch
    ins, outs = ctx.inputs(7), ctx.outputs()
    ctx.launch({**ins, **outs})
    torch.cuda.synchronize()
    return {name: int(torch.isnan(t.float()).sum()) for name, t in outs.items()}


def always_fails(ctx):
    assert ctx.facts, "no facts"
    raise AssertionError("this check always fails")


def matches_reference(ctx):
    """The reference, called through the context, agrees on a seed the correctness rung does not use."""
    import torch
    ins, outs = ctx.inputs(11), ctx.outputs()
    ctx.launch({**ins, **outs})
    torch.cuda.synchronize()
    ref = ctx.reference({n: t.clone() for n, t in ins.items()}, ctx.facts)
    return {n: float((outs[n].float() - torch.as_tensor(r).float()).abs().max()) for n, r in ref.items()}
'''


@pytest.fixture
def spec_with_checks(demo_dir):
    shutil.copyfile(ROOT / "examples" / "demo" / "reference.py", demo_dir / "reference.py")
    (demo_dir / "checks.py").write_text(CHECKS)
    spec = demo_dir / "link.toml"
    spec.write_text(spec.read_text() + '\n[[verify.rung]]\nname = "written"\ncheck = "checks.py:outputs_written"\n'
                    '\n[[verify.rung]]\nname = "fails"\ncheck = "checks.py:always_fails"\n')
    return spec


def _with_rungs(spec, text: str):
    spec.write_text(spec.read_text() + text)
    return spec


@pytest.mark.parametrize("text,field,words", [
    ('\n[[verify.rung]]\nname = "bench"\ncheck = "c.py:f"\n', "verify.rung[0].name", "built-in rung"),
    ('\n[[verify.rung]]\nname = "pre_checks"\ncheck = "c.py:f"\n', "verify.rung[0].name", "built-in rung"),
    ('\n[[verify.rung]]\nname = "a"\ncheck = "c.py:f"\n\n[[verify.rung]]\nname = "a"\ncheck = "c.py:g"\n',
     "verify.rung[1].name", "names two rungs"),
    ('\n[[verify.rung]]\nname = "a b"\ncheck = "c.py:f"\n', "verify.rung[0].name", ""),
    ('\n[[verify.rung]]\nname = "a"\ncheck = "c.py"\n', "verify.rung[0].check", "file.py:function"),
    ('\n[[verify.rung]]\nname = "a"\n', "verify.rung[0].check", "missing required field"),
    ('\n[[verify.rung]]\nname = "a"\ncheck = "c.py:f"\nrun = "rm -rf /"\n', "verify.rung[0]", "unknown field"),
])
def test_a_bad_rung_in_the_spec_is_a_spec_error_naming_its_field(demo_dir, text, field, words):
    spec = _with_rungs(demo_dir / "link.toml", text)
    with pytest.raises(SpecError) as info:
        pipelink.load_spec(spec)
    assert info.value.field == field and words in str(info.value)


def test_more_than_64_rungs_are_refused(demo_dir):
    text = "".join(f'\n[[verify.rung]]\nname = "r{i}"\ncheck = "c.py:f"\n' for i in range(65))
    with pytest.raises(SpecError, match="65 rungs, over the limit 64 by 1"):
        pipelink.load_spec(_with_rungs(demo_dir / "link.toml", text))


def module_level_check(ctx):
    return {}


def test_rung_takes_a_reference_or_a_module_level_function():
    assert pipelink.rung("mine", "checks.py:f") == RungRef("mine", "checks.py:f")
    ref = pipelink.rung("mine", module_level_check)
    assert ref.check.endswith("test_user_rungs.py:module_level_check") and ref.check.startswith("/")
    with pytest.raises(PipelinkError, match="not importable"):
        pipelink.rung("mine", lambda ctx: {})
    with pytest.raises(PipelinkError, match="built-in rung"):
        pipelink.rung("correctness", "checks.py:f")
    with pytest.raises(PipelinkError, match="not 'file.py:function'"):
        pipelink.rung("mine", "checks.py")
    with pytest.raises(PipelinkError, match="is not a rung"):
        VerifyOptions(rungs=["checks.py:f"])


@pytest.mark.slow
def test_user_rungs_are_planned_after_the_built_in_ones_and_fit_the_schema(spec_with_checks, tmp_path):
    extra = pipelink.rung("again", str(spec_with_checks.parent / "checks.py") + ":outputs_written")
    result = pipelink.verify(spec_with_checks, out_dir=tmp_path / "run", bench=False, console=QUIET, rungs=[extra])
    names = [r.name for r in result.rungs]
    assert names == ["pre-checks", "link", "dumps", "run", "correctness", "written", "fails", "again"]
    data = json.loads((tmp_path / "run" / "verify.json").read_text())
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(data, result_schema())
    job = json.loads((tmp_path / "run" / "job.json").read_text()) if result.device else None
    if job:
        assert job["user_rungs"]["written"].endswith("checks.py:outputs_written")


def test_a_missing_check_file_fails_the_pre_checks(spec_with_checks, tmp_path):
    (spec_with_checks.parent / "checks.py").unlink()
    result = pipelink.verify(spec_with_checks, out_dir=tmp_path / "run", bench=False, console=QUIET)
    pre = result.rung("pre-checks")
    assert pre.status == "FAILED" and "rung 'written': check file" in pre.detail and "checks.py not found" in pre.detail
    assert not result.passed


def test_a_rung_named_twice_across_spec_and_options_is_refused(spec_with_checks, tmp_path):
    twice = pipelink.rung("written", "checks.py:outputs_written")
    result = pipelink.verify(spec_with_checks, out_dir=tmp_path / "run", bench=False, console=QUIET, rungs=[twice])
    assert result.rung("pre-checks").status == "FAILED" and "two rungs are named 'written'" in result.rung("pre-checks").detail


@pytest.mark.slow
def test_the_cli_option_is_checked(spec_with_checks, tmp_path):
    for bad, words in (("nameonly", "is not NAME=FILE.py:FUNCTION"), ("run=checks.py:f", "built-in rung")):
        proc = subprocess.run([sys.executable, "-m", "pipelink.cli", "verify", str(spec_with_checks), "-o",
                               str(tmp_path / bad.replace("=", "_").replace(":", "_")), "--rung", bad],
                              capture_output=True, text=True)
        assert proc.returncode == 2 and words in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
def test_user_rungs_run_on_the_gpu_and_a_failure_does_not_stop_the_next(spec_with_checks, tmp_path):
    extra = pipelink.rung("reference_again", str(spec_with_checks.parent / "checks.py") + ":matches_reference")
    result = pipelink.verify(spec_with_checks, out_dir=tmp_path / "run", bench=False, console=QUIET, rungs=[extra])
    written, fails, again = (result.rung(n) for n in ("written", "fails", "reference_again"))
    assert written.status == "ok" and written.figures and all(v == 0 for v in written.figures.values())
    assert fails.status == "FAILED" and "AssertionError: this check always fails" in fails.detail
    assert again.status == "ok" and all(v < 1 for v in again.figures.values())
    assert result.rung("correctness").status == "ok" and not result.passed  # a failed rung of yours fails the run

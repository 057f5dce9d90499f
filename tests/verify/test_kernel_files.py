"""`pipelink verify KERNEL.py` (issue 17, item 1): a kernel that is not a link (Triton, CuTe DSL,
TileLang, cuda.core, torch) goes through the same rungs. CPU: the file is read without running it
(AST: the four functions, VERIFY a literal dict, each value checked), the GPU rungs are planned and
skipped, the command line refuses link-only options; property-based: no VERIFY value gets past the
loader untyped. GPU: the Triton RMSNorm passes, the wrong one fails correctness, the hanging one is
a hang and the next verify passes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

import pipelink
from pipelink.errors import SpecError
from pipelink.verify import load_kernel_file, result_schema

from conftest import ROOT, gpu_ok

QUIET = Console(file=open("/dev/null", "w"), width=140)
LOOP = ROOT / "examples" / "loop"
FUNCTIONS = "def inputs(seed): ...\ndef outputs(ins): ...\ndef kernel(ins, outs): ...\ndef reference(ins): ...\n"


def test_the_examples_load_without_running():
    for name in ("rmsnorm_triton", "rmsnorm_cute", "rmsnorm_tilelang", "rmsnorm_wrong", "rmsnorm_hang"):
        kf = load_kernel_file(LOOP / f"{name}.py")
        assert kf.name == name and kf.settings["precision"] == "bf16"
    assert load_kernel_file(LOOP / "rmsnorm_triton.py").settings["bytes"] == 2 * 8192 * 4096 * 2 + 4096 * 2
    assert load_kernel_file(LOOP / "rmsnorm_triton.py").baselines


@pytest.mark.parametrize("text,field,words", [
    ("def inputs(seed): ...\n", "outputs", "defines no outputs, kernel, reference"),
    (FUNCTIONS + "VERIFY = {'precision': 'bf17'}\n", "VERIFY.precision", "is not one of fp32"),
    (FUNCTIONS + "VERIFY = {'seeds': 0}\n", "VERIFY.seeds", "is not a whole number from 1 to 1000"),
    (FUNCTIONS + "VERIFY = {'timeout': True}\n", "VERIFY.timeout", "is not seconds"),
    (FUNCTIONS + "VERIFY = {'flops': 2 ** 80}\n", "VERIFY", "not a literal dict"),  # an expression, not a literal
    (FUNCTIONS + "VERIFY = {'command': 'rm -rf /'}\n", "VERIFY", "unknown key 'command'"),
    (FUNCTIONS + "VERIFY = dict(precision='bf16')\n", "VERIFY", "not a literal dict"),
    (FUNCTIONS + "VERIFY = {'name': 'two words'}\n", "VERIFY.name", "is not an identifier"),
    ("def inputs(seed:\n", None, "not valid Python"),
])
def test_a_bad_kernel_file_is_a_spec_error_naming_the_field(tmp_path, text, field, words):
    path = tmp_path / "k.py"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        load_kernel_file(path)
    assert info.value.field == field and words in str(info.value) and str(path) in info.value.format()


def test_a_kernel_file_is_never_run_by_the_parent(tmp_path):
    """Top-level code that would leave a mark if the loader ran it."""
    mark = tmp_path / "ran"
    path = tmp_path / "k.py"
    path.write_text(f"open({str(mark)!r}, 'w').write('x')\n" + FUNCTIONS)
    load_kernel_file(path)
    if not gpu_ok():  # with a GPU the child runs it, as it should
        pipelink.verify(path, out_dir=tmp_path / "run", console=QUIET)
    assert not mark.exists()


VALUES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=20),
                   st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(settings_dict=st.dictionaries(st.sampled_from(["name", "precision", "rel_l2_tol", "seeds", "flops", "bytes",
                                                      "timeout", "other"]), VALUES, max_size=4))
def test_any_verify_dict_is_accepted_whole_or_refused_typed(tmp_path_factory, settings_dict):
    path = tmp_path_factory.mktemp("k") / "k.py"
    path.write_text(FUNCTIONS + f"VERIFY = {settings_dict!r}\n")
    try:
        kf = load_kernel_file(path)
    except SpecError as exc:
        assert exc.field and exc.field.startswith("VERIFY")
        return
    assert kf.settings == settings_dict  # accepted only as given, every value in range
    assert "other" not in settings_dict and all(isinstance(v, (int, float, str)) for v in settings_dict.values())


def test_on_the_cpu_the_gpu_rungs_are_planned_and_skipped(tmp_path):
    if gpu_ok():
        pytest.skip("a CPU machine's answer")
    result = pipelink.verify(LOOP / "rmsnorm_triton.py", out_dir=tmp_path / "run", console=QUIET)
    assert [r.name for r in result.rungs] == ["pre-checks", "compile", "dumps", "run", "correctness", "bench", "roofline"]
    assert result.rung("pre-checks").status == "ok" and result.status == "not run" and result.mode == "python"
    data = json.loads((tmp_path / "run" / "verify.json").read_text())
    pytest.importorskip("jsonschema").validate(data, result_schema())


def test_profile_and_sanitizers_are_rungs_of_a_kernel_file_too(tmp_path):
    """--profile and --compute-sanitizer run on kernel files as on link specs (here, with no GPU,
    as skipped rungs naming why); a file that fails its pre-checks gets them skipped for that."""
    if gpu_ok():
        pytest.skip("a CPU machine's answer")
    result = pipelink.verify(LOOP / "rmsnorm_triton.py", out_dir=tmp_path / "run", profile=True,
                             sanitizers=("memcheck", "racecheck"), console=QUIET)
    tools = [(r.name, r.status) for r in result.rungs][-3:]
    assert tools == [("profile", "skipped"), ("memcheck", "skipped"), ("racecheck", "skipped")]
    assert all("not run" in r.detail for r in result.rungs[-3:])
    bad = tmp_path / "bad.py"
    bad.write_text("VERIFY = 3\n")
    result = pipelink.verify(bad, out_dir=tmp_path / "bad", profile=True, console=QUIET)
    assert result.rungs[-1].name == "profile" and "pre-checks failed" in result.rungs[-1].detail
    proc = _cli("verify", LOOP / "rmsnorm_triton.py", "--profile", "--compute-sanitizer", "memcheck",
                "-o", tmp_path / "cli")
    assert proc.returncode == 3 and "Traceback" not in proc.stderr, proc.stderr


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "pipelink.cli", *map(str, args)], capture_output=True, text=True)


@pytest.mark.slow
def test_the_command_line_takes_a_kernel_file_and_refuses_link_options(tmp_path):
    proc = _cli("verify", LOOP / "rmsnorm_triton.py", "--trace", "-o", tmp_path / "a")
    assert proc.returncode == 2 and "--trace applies to a link spec" in proc.stderr and "Traceback" not in proc.stderr
    bad = tmp_path / "bad.py"
    bad.write_text("VERIFY = 3\n")
    proc = _cli("verify", bad, "-o", tmp_path / "b")
    assert proc.returncode == 2 and "defines no inputs" in proc.stderr
    if not gpu_ok():
        proc = _cli("verify", LOOP / "rmsnorm_triton.py", "-o", tmp_path / "c")
        assert proc.returncode == 3, proc.stderr  # not run: no GPU


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
def test_triton_rmsnorm_wrong_and_hang_on_the_gpu(tmp_path):
    pytest.importorskip("triton")
    good = pipelink.verify(LOOP / "rmsnorm_triton.py", out_dir=tmp_path / "good", console=QUIET)
    assert good.passed, [(r.name, r.status, r.detail) for r in good.rungs]
    assert good.rung("compile").figures["first_call_s"] > 0 and "torch_rms_norm" in good.rung("bench").figures["speedup_vs"]
    assert good.rung("roofline").status == "ok"
    wrong = pipelink.verify(LOOP / "rmsnorm_wrong.py", out_dir=tmp_path / "wrong", bench=False, console=QUIET)
    c = wrong.rung("correctness")
    assert c.status == "FAILED" and c.figures["y.rel_l2"] > 0.01 and c.figures["y.unwritten"] == 0
    # the missing weight (about 1 +- 0.1) puts many elements outside bf16's elementwise bound; counted
    assert 0 < c.figures["y.mismatched"] < c.figures["outputs"]["y"]["elements"] and "elements off by" in c.detail
    hang = pipelink.verify(LOOP / "rmsnorm_hang.py", out_dir=tmp_path / "hang", bench=False, console=QUIET)
    assert hang.rung("compile").status == "hang" and not hang.passed
    again = pipelink.verify(LOOP / "rmsnorm_triton.py", out_dir=tmp_path / "again", bench=False, console=QUIET)
    assert again.passed


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
def test_a_kernel_file_is_profiled_and_sanitized_alone(tmp_path):
    """ncu profiles the kernel's launch (the NVTX range), not the torch work that makes its inputs;
    memcheck finds nothing in a correct kernel."""
    pytest.importorskip("triton")
    result = pipelink.verify(LOOP / "rmsnorm_triton.py", out_dir=tmp_path / "p", bench=False, profile=True,
                             sanitizers=("memcheck",), console=QUIET)
    profile, memcheck = result.rung("profile"), result.rung("memcheck")
    assert profile.status == "ok", profile.detail
    assert any(k.startswith("Duration") for k in profile.figures) and Path(profile.figures["report"]).exists()
    assert memcheck.status == "ok" and memcheck.figures["errors"] == 0, memcheck.detail


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
def test_cute_dsl_rmsnorm_on_the_gpu(tmp_path):
    pytest.importorskip("cutlass.cute")
    result = pipelink.verify(LOOP / "rmsnorm_cute.py", out_dir=tmp_path / "cute", console=QUIET)
    assert result.passed, [(r.name, r.status, r.detail) for r in result.rungs]
    dumps = result.rung("dumps")
    assert dumps.status == "ok" and dumps.figures["kernels"][0]["registers"] > 0
    assert any(f.endswith(".mlir") for f in dumps.figures["kernels"][0]["files"])  # CUTE_DSL_KEEP=ir, set by the file


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
def test_tilelang_rmsnorm_on_the_gpu(tmp_path):
    pytest.importorskip("tilelang")
    result = pipelink.verify(LOOP / "rmsnorm_tilelang.py", out_dir=tmp_path / "tilelang", console=QUIET)
    assert result.passed, [(r.name, r.status, r.detail) for r in result.rungs]
    assert result.rung("dumps").status == "ok"


@pytest.mark.slow
def test_the_dumps_of_a_triton_kernel_compiled_without_a_gpu(tmp_path):
    """Triton compiles for sm_90a on a CPU machine: its stages, the cubin, SASS and registers."""
    triton = pytest.importorskip("triton")
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from pipelink.verify.dsl_dumps import triton_kernels, write_compiled

    @triton.jit
    def add_one(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + i, tl.load(x_ptr + i, mask=i < n) + 1.0, mask=i < n)

    compiled = triton.compile(ASTSource(add_one, signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32",
                                                            "BLOCK": "constexpr"}, constexprs={"BLOCK": 256}),
                              target=GPUTarget("cuda", 90, 32))
    figures = write_compiled([compiled], tmp_path / "dumps")
    (k,) = figures["kernels"]
    assert k["name"] == "add_one" and 0 < k["registers"] <= 255 and k["spill_instructions"] == 0
    for suffix in ("ttir", "ttgir", "llir", "ptx", "cubin", "sass"):
        assert (tmp_path / "dumps" / f"add_one.{suffix}").stat().st_size > 0
    assert ".entry add_one" in (tmp_path / "dumps" / "add_one.ptx").read_text()
    assert "LDG" in (tmp_path / "dumps" / "add_one.sass").read_text()
    assert triton_kernels({"add_one": add_one, "other": 3}) == []  # nothing launched: the cache is empty


@pytest.mark.slow
def test_the_dumps_of_a_cute_dsl_kernel_compiled_without_a_gpu(tmp_path, monkeypatch):
    """CuTe DSL compiles for sm_90a on a CPU machine too; the compiled function, kept in a dict
    global as examples/loop/rmsnorm_cute.py keeps it, gives its PTX, cubin, SASS and registers."""
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_90a")  # read when cutlass is imported: before it
    pytest.importorskip("cutlass.cute")
    import cute_probe

    from pipelink.verify.dsl_dumps import cute_kernels, write_compiled

    fn = cute_probe.compile_for_sm90a(tmp_path / "cute")
    assert any(p.name.endswith(".sm_90a.cubin") for p in (tmp_path / "cute").iterdir())
    (k,) = cute_kernels({"compiled": {"add_one": fn}, "other": 3})
    figures = write_compiled([k], tmp_path / "dumps")
    (record,) = figures["kernels"]
    assert "add_one" in record["name"] and 0 < record["registers"] <= 255
    stem = record["name"]
    assert ".entry" in (tmp_path / "dumps" / f"{stem}.ptx").read_text()
    assert (tmp_path / "dumps" / f"{stem}.cubin").stat().st_size > 0 and "STG" in (tmp_path / "dumps" / f"{stem}.sass").read_text()
    assert cute_kernels({"plain": {"a": 1}}) == []


def test_the_dumps_of_a_tilelang_kernel_compiled_without_a_gpu(tmp_path):
    """TileLang compiles to CUDA source and PTX without a GPU; the cubin is nvJitLink's."""
    pytest.importorskip("tilelang")
    import tilelang_probe

    from pipelink.verify.dsl_dumps import tilelang_kernels, write_compiled

    (k,) = tilelang_kernels({"compiled": {"add_one": tilelang_probe.compile_for_sm90a()}}, tmp_path / "dumps")
    (record,) = write_compiled([k], tmp_path / "dumps")["kernels"]
    assert 0 < record["registers"] <= 255
    for suffix in ("cu", "ptx", "cubin", "sass"):
        assert (tmp_path / "dumps" / f"{record['name']}.{suffix}").stat().st_size > 0
    assert not list((tmp_path / "dumps").glob("*.tmp"))


# --- verify on a machine without a GPU: compile_only() gives the compile and dumps rungs ----------------------

_TRITON_FILE = '''
import triton
import triton.language as tl

VERIFY = {"precision": "fp32"}


@triton.jit
def add_one(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + i, tl.load(x_ptr + i, mask=i < n) + 1.0, mask=i < n)


def inputs(seed):
    import torch
    return {"x": torch.randn(1000, generator=torch.Generator(device="cuda").manual_seed(seed), device="cuda")}


def outputs(ins):
    import torch
    return {"y": torch.empty_like(ins["x"])}


def kernel(ins, outs):
    add_one[(4,)](ins["x"], outs["y"], 1000, BLOCK=256)


def reference(ins):
    return {"y": ins["x"].double() + 1}


def compile_only():
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    source = ASTSource(add_one, signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                       constexprs={"BLOCK": 256})
    return [triton.compile(source, target=GPUTarget("cuda", 90, 32))]
'''


@pytest.mark.skipif(gpu_ok(), reason="a GPU is here: verify compiles and runs the kernel on it (the GPU tests)")
def test_without_a_gpu_compile_only_gives_the_compile_and_dumps_rungs(tmp_path):
    """Issue 52 item 4: a kernel file that defines compile_only() is compiled for sm_90a in the watched child on a
    machine without a GPU, and its dumps written (stages, cubin, SASS, registers); the rungs that run the kernel
    are said not run, and the verdict is NOT RUN, never PASS. The file imports torch only inside its functions,
    so this runs where torch is not installed (CI)."""
    pytest.importorskip("triton")
    kernel_file = tmp_path / "add_one.py"
    kernel_file.write_text(_TRITON_FILE)
    assert load_kernel_file(kernel_file).compile_only
    result = pipelink.verify(kernel_file, out_dir=tmp_path / "out", console=QUIET, bench=False)
    status = {r.name: r.status for r in result.rungs}
    assert status == {"pre-checks": "ok", "compile": "ok", "dumps": "ok", "run": "skipped", "correctness": "skipped"}
    assert not result.passed and result.status == "not run"
    (k,) = result.rung("dumps").figures["kernels"]
    assert k["name"] == "add_one" and 0 < k["registers"] <= 255
    for suffix in ("ttir", "ttgir", "llir", "ptx", "cubin", "sass"):
        assert (tmp_path / "out" / "dumps" / f"add_one.{suffix}").stat().st_size > 0
    assert ".target sm_90a" in (tmp_path / "out" / "dumps" / "add_one.ptx").read_text()
    assert "LDG" in (tmp_path / "out" / "dumps" / "add_one.sass").read_text()
    # a compile_only that raises fails the compile rung with its words; nothing is dumped
    kernel_file.write_text(_TRITON_FILE.replace("    return [triton.compile(", "    raise ValueError('no such tile')\n"
                                                                            "    return [triton.compile("))
    result = pipelink.verify(kernel_file, out_dir=tmp_path / "broken", console=QUIET, bench=False)
    assert result.rung("compile").status == "FAILED" and "no such tile" in result.rung("compile").detail
    assert result.rung("dumps").status == "skipped" and result.status == "fail"


@pytest.mark.skipif(gpu_ok(), reason="a GPU is here: verify compiles and runs the kernel on it (the GPU tests)")
def test_without_a_gpu_a_module_the_file_imports_that_is_missing_is_not_run_not_failed(tmp_path):
    """A kernel file importing a module this machine lacks (torch, on a CPU machine without it): its compile and
    dumps rungs are not run, naming the module and the install command; the verdict is NOT RUN."""
    kernel_file = tmp_path / "needs.py"
    kernel_file.write_text("import no_such_dsl_here\n" + _TRITON_FILE)
    result = pipelink.verify(kernel_file, out_dir=tmp_path / "out", console=QUIET, bench=False)
    for rung in ("compile", "dumps"):
        r = result.rung(rung)
        assert r.status == "skipped" and "no_such_dsl_here" in r.detail and "pip install no_such_dsl_here" in r.detail
    assert result.status == "not run"


@pytest.mark.slow
@pytest.mark.skipif(gpu_ok(), reason="a GPU is here: verify compiles and runs the kernel on it (the GPU tests)")
@pytest.mark.parametrize("name", ["rmsnorm_triton", "rmsnorm_cute"])
def test_without_a_gpu_the_examples_compile_for_sm90a(tmp_path, name):
    """examples/loop's Triton and CuTe DSL files through verify on a machine without a GPU: compiled for sm_90a
    by their compile_only(), their dumps written (they import torch at module level: skipped without it)."""
    pytest.importorskip("torch")
    pytest.importorskip("triton" if name == "rmsnorm_triton" else "cutlass.cute")
    result = pipelink.verify(LOOP / f"{name}.py", out_dir=tmp_path / name, console=QUIET)
    assert result.rung("compile").status == "ok" and result.rung("dumps").status == "ok", \
        [(r.name, r.status, r.detail) for r in result.rungs]
    (k,) = result.rung("dumps").figures["kernels"]
    assert 0 < k["registers"] <= 255 and any(f.endswith(".sass") for f in k["files"])
    assert result.status == "not run"


@pytest.mark.skipif(gpu_ok(), reason="a GPU is here: verify compiles and runs the kernel on it (the GPU tests)")
def test_verify_on_a_terminal_shows_each_rung_as_it_ends_with_the_elapsed_time(tmp_path):
    """Issue 52 item 6: the child's rungs heard while it runs (watch.rung_listener), and on a terminal each one's
    outcome and seconds printed as it ends, under a line with the rung running and the elapsed time; piped, only
    the table at the end."""
    pytest.importorskip("triton")
    from pipelink.verify.watch import rung_listener
    kernel_file = tmp_path / "add_one.py"
    kernel_file.write_text(_TRITON_FILE)
    heard = []
    with rung_listener(heard.append):
        pipelink.verify(kernel_file, out_dir=tmp_path / "heard", console=QUIET, bench=False)
    assert [(r["event"], r["rung"]) for r in heard] == [("start", "compile"), ("done", "compile"),
                                                         ("start", "dumps"), ("done", "dumps")]
    assert heard[1]["status"] == "ok" and heard[1]["seconds"] > 0
    terminal = {**__import__("os").environ, "FORCE_COLOR": "1", "TTY_COMPATIBLE": "1", "COLUMNS": "100"}
    shown = subprocess.run([sys.executable, "-m", "pipelink.cli", "verify", str(kernel_file), "--no-bench", "-o",
                            str(tmp_path / "tty")], capture_output=True, text=True, env=terminal).stdout
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown)
    assert re.search(r"compile ok \(\d+\.\d s\)", plain) and re.search(r"dumps ok \(\d+\.\d s\)", plain), plain
    piped = _cli("verify", kernel_file, "--no-bench", "-o", tmp_path / "piped").stdout
    assert not re.search(r"compile ok \(\d", piped)

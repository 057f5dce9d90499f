"""The verifiable loop on the CPU: metrics and tolerances, the rung runner (GPU rungs skip here),
the watchdog, the result JSON and its schema, the report table, and tracing in the glue."""

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
from rich.console import Console

import pipelink
from pipelink.errors import PipelinkError, SpecError
from pipelink import verify_terms
from pipelink.backend.inspect import inspect_cubin
from pipelink.verify import metrics, result_schema
from pipelink.verify.results import Rung, VerifyResult, print_table
from pipelink.verify.watch import read_progress, run_watched
from pipelink.verify.trace import analyze, chrome_trace

from conftest import ROOT, classic_demo, edit


def bf16_round(x: np.ndarray) -> np.ndarray:
    """Round float32 to bfloat16 (nearest even) and back, as the GPU does on conversion."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return bits.astype(np.uint32).view(np.float32)


def test_metrics_of_a_correct_bf16_output_pass_and_noise_fails():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal(100_000) * 30
    m = metrics.compare(bf16_round(ref), ref)
    assert 1e-3 < m.rel_l2 < 3.5e-3  # u/sqrt(3) = 2.3e-3 for bf16, as the docstring derives
    assert metrics.judge(m, "bf16")[0]
    noisy = metrics.compare(ref * (1 + 0.05 * rng.standard_normal(ref.size)), ref)
    ok, why = metrics.judge(noisy, "bf16")
    assert not ok and "relative L2 error" in why[0]
    assert not metrics.judge(metrics.compare(bf16_round(ref), ref), "fp32")[0]  # bf16 rounding is not fp32-exact


def test_poison_nonfinite_and_zero_outputs_fail():
    ref = np.arange(1, 101, dtype=np.float64)
    out = ref.copy()
    out[[3, 7, 9]] = np.nan
    m = metrics.compare(out, ref)
    assert m.unwritten == 3 and m.nonfinite == 0
    ok, why = metrics.judge(m, "fp32")
    assert not ok and "3 of 100 elements never written" in why[0]
    out = ref.copy()
    out[5] = np.inf
    m = metrics.compare(out, ref)
    assert m.nonfinite == 1 and m.unwritten == 0 and not metrics.judge(m, "fp32")[0]
    zero = metrics.compare(np.zeros(100), ref)
    assert zero.all_zero_vs_nonzero and "all zeros" in " ".join(metrics.judge(zero, "bf16", rel_l2_tol=10)[1])


def test_metrics_of_torch_tensors_are_those_of_numpy_arrays():
    # The verify child compares its outputs where they are (torch tensors on the GPU); the same
    # float64 metrics as the host path, unwritten, non-finite and all-zero cases included.
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    ref = rng.standard_normal(50_000) * 3
    out = bf16_round(ref).astype(np.float64)
    out[[10, 20]] = np.nan
    out[30] = np.inf
    ref[40] = np.nan  # a non-finite reference element is left out of the metrics either way
    cases = [(torch.tensor(out, dtype=torch.bfloat16), out, ref),  # bf16_round's values are bf16 exactly
             (torch.zeros(100), np.zeros(100), np.arange(1.0, 101.0)),
             (torch.tensor(ref[:100]), ref[:100], ref[:100])]
    for tensor_out, host_out, r in cases:
        host = metrics.compare(host_out, r).to_json()
        tensor = metrics.compare(tensor_out, torch.tensor(r)).to_json()
        assert tensor.keys() == host.keys()
        for key, value in host.items():  # float64 sums in another order: equal to ~1e-12
            assert tensor[key] == (value if value is None or isinstance(value, (bool, int))
                                   else pytest.approx(value, rel=1e-9, abs=1e-12)), key
    m = metrics.compare(torch.tensor(out), ref)  # a torch output against a numpy reference
    assert (m.unwritten, m.nonfinite) == (2, 1)


def test_metric_values():
    ref = np.array([1.0, -2.0, 4.0, 0.5])
    out = ref + np.array([0.0, 0.5, 0.0, 0.0])
    m = metrics.compare(out, ref)
    assert m.max_abs_err == 0.5 and m.max_rel_err == 0.25
    assert m.rmse == pytest.approx(0.25)
    assert m.rel_l2 == pytest.approx(0.5 / np.linalg.norm(ref))
    assert m.psnr_db == pytest.approx(20 * np.log10(4.0 / 0.25))
    assert m.cosine == pytest.approx(np.dot(out, ref) / np.linalg.norm(out) / np.linalg.norm(ref))


def test_a_wrong_output_counts_its_wrong_elements_and_names_the_worst():
    # A correct bf16 output has no element outside 1.6e-2 |ref| + 1.6e-2 rms; a bug that breaks
    # some elements is counted, its worst element named, in the failure's reasons.
    rng = np.random.default_rng(2)
    ref = rng.standard_normal(20_000) * 5
    good = metrics.compare(bf16_round(ref), ref, "bf16")
    assert good.mismatched == 0 and good.worst_index == -1
    assert metrics.judge(good, "bf16") == (True, [])
    bad = bf16_round(ref).astype(np.float64)
    wrong = rng.choice(ref.size, 300, replace=False)
    bad[wrong] *= -1.5  # sign and scale: far outside the bound wherever |ref| is not tiny
    bad[wrong[0]] = ref[wrong[0]] + 1000.0  # the worst of them
    m = metrics.compare(bad, ref, "bf16")
    outside = np.abs(bad - ref) > 1.6e-2 * np.abs(ref) + 1.6e-2 * np.sqrt(np.mean(ref * ref))
    assert m.mismatched == int(outside.sum()) and 250 < m.mismatched <= 300
    assert (m.worst_index, m.worst_out, m.worst_ref) == (wrong[0], bad[wrong[0]], ref[wrong[0]])
    ok, why = metrics.judge(m, "bf16")
    assert not ok and f"{m.mismatched} of 20000 elements off by more than 0.016|ref|" in why[-1]
    assert f"element {wrong[0]}," in why[-1]
    # exact precisions count every difference; a non-finite reference element is skipped, and the
    # worst index is still the element's index in the whole output
    ref_i = np.arange(10.0)
    ref_i[2] = np.nan
    out_i = np.arange(10.0)
    out_i[7] = 8.0
    m = metrics.compare(out_i, ref_i, "int32")
    assert (m.mismatched, m.worst_index, m.worst_out, m.worst_ref) == (1, 7, 8.0, 7.0)
    assert metrics.judge(m, "int32")[0] is False


def test_every_precision_has_a_tolerance_ordered_by_mantissa():
    assert verify_terms.ELEMENT_RTOL.keys() == verify_terms.TOLERANCES.keys()
    order = ["fp32", "tf32", "bf16", "fp8e4m3", "fp8e5m2"]
    tols = [verify_terms.TOLERANCES[p][0] for p in order]
    assert tols == sorted(tols)
    assert verify_terms.TOLERANCES["fp16"][0] < verify_terms.TOLERANCES["bf16"][0]


def test_watchdog_kills_a_hung_child_and_names_the_rung(tmp_path):
    progress = tmp_path / "progress.jsonl"
    script = (f"import json, time; f = open({str(progress)!r}, 'a', buffering=1); "
              "f.write(json.dumps({'event': 'start', 'rung': 'run'}) + '\\n'); "
              "f.write(json.dumps({'event': 'done', 'rung': 'run', 'status': 'ok', 'detail': '', 'figures': {}, "
              "'seconds': 0.1}) + '\\n'); f.write(json.dumps({'event': 'start', 'rung': 'correctness'}) + '\\n'); "
              "time.sleep(60)")
    code, _ = run_watched([sys.executable, "-c", script], timeout=2)
    assert code is None
    rungs = read_progress(progress, ["run", "correctness", "bench"], code, "", 2, "pl_kernel")
    assert [(r.name, r.status) for r in rungs] == [("run", "ok"), ("correctness", "hang"), ("bench", "skipped")]
    assert "pl_kernel" in rungs[1].detail and rungs[1].figures["rung"] == "correctness"
    crashed = read_progress(progress, ["run", "correctness"], 3, "CUDA_ERROR_ILLEGAL_ADDRESS", 2, "pl_kernel")
    assert crashed[1].status == "crash" and "ILLEGAL_ADDRESS" in crashed[1].detail


@pytest.fixture
def demo_spec(demo_dir):
    shutil.copyfile(ROOT / "examples" / "demo" / "reference.py", demo_dir / "reference.py")
    return demo_dir / "link.toml"


@pytest.mark.slow
def test_verify_runs_every_cpu_rung_and_writes_valid_json(demo_spec, tmp_path):
    console = Console(record=True, width=140, file=open("/dev/null", "w"))
    result = pipelink.verify(demo_spec, out_dir=tmp_path / "run", trace=True, console=console)
    names = [r.name for r in result.rungs]
    assert names == ["pre-checks", "link", "dumps", "run", "correctness", "bench", "roofline", "trace"]
    assert [r.status for r in result.rungs[:3]] == ["ok", "ok", "ok"]
    data = json.loads((tmp_path / "run" / "verify.json").read_text())
    try:
        import jsonschema
    except ImportError:  # the H200 image has no jsonschema; CI installs it (test extra)
        jsonschema = None
    if jsonschema:
        jsonschema.validate(data, result_schema())
    dumps = tmp_path / "run" / "dumps"
    for suffix in (".ptx", ".sass", ".cubin", ".resources.json", ".smem.png", ".plan.json"):
        assert (dumps / f"tile_fold{suffix}").stat().st_size > 0
    assert ".entry pl_tile_fold" in (dumps / "tile_fold.ptx").read_text()
    text = console.export_text()
    assert "pre-checks" in text and "dumps" in text
    if not result.device:  # CPU machine: the GPU rungs say why they did not run, and the verdict is no pass
        assert all(r.status == "skipped" and "not run" in r.detail for r in result.rungs[3:])
        assert "skipped" in text and "NOT RUN (no GPU): compiled and checked only" in text and "PASS" not in text
        assert result.status == data["status"] == "not run" and not result.passed


def test_verify_without_dumps_saves_the_kernel_and_writes_no_dumps(demo_spec, tmp_path):
    """dumps=False (what `pipelink tune` passes for every configuration): the dumps rung says it was not asked
    for, no dumps folder is written, and the kernel the GPU child loads is saved as always."""
    result = pipelink.verify(demo_spec, out_dir=tmp_path / "run", dumps=False, bench=False,
                             console=Console(file=open("/dev/null", "w")))
    assert [(r.name, r.status) for r in result.rungs[:3]] == [("pre-checks", "ok"), ("link", "ok"),
                                                               ("dumps", "skipped")]
    assert "dumps=False" in result.rung("dumps").detail
    # issue 52: torch, which the GPU rungs run under, is asked for up front where it is missing (here: no GPU, so
    # said in the pre-checks; with a GPU, verify refuses before anything is written)
    import importlib.util
    missing = importlib.util.find_spec("torch") is None
    assert ("torch is not installed" in result.rung("pre-checks").detail) == missing
    assert not missing or "pip install torch" in result.rung("pre-checks").detail
    assert not (tmp_path / "run" / "dumps").exists()
    assert (tmp_path / "run" / "kernel" / "tile_fold.cubin").stat().st_size > 0
    with pytest.raises(PipelinkError, match="dumps"):
        pipelink.verify(demo_spec, dumps="no")


def test_verify_records_a_failing_rung_and_goes_on(demo_spec, tmp_path):
    edit(classic_demo(demo_spec), "stages = 4", "stages = 7")
    result = pipelink.verify(demo_spec, out_dir=tmp_path / "run", console=Console(file=open("/dev/null", "w")))
    assert not result.passed
    pre = result.rung("pre-checks")
    assert pre.status == "FAILED" and "SmemOverflow" in pre.figures["error"] and "232448" in pre.detail
    assert all(r.status == "skipped" for r in result.rungs[1:])
    assert json.loads((tmp_path / "run" / "verify.json").read_text())["status"] == "fail"


def test_report_table_shows_each_status():
    result = VerifyResult("k", "spec.toml", "pipelink", "out", "NVIDIA H200", [
        Rung("run", "ok", "", {"first_launch_ms": 1.5}), Rung("correctness", "FAILED", "8192 never written"),
        Rung("bench", "hang", "kernel k did not finish"), Rung("roofline", "skipped", "not run")])
    con = Console(record=True, width=120, file=open("/dev/null", "w"))
    print_table(result, console=con)
    text = con.export_text()
    for word in ("ok", "FAILED", "hang", "skipped", "8192 never written", "first_launch_ms=1.5", "FAIL"):
        assert word in text


def test_tracing_is_absent_unless_asked(demo_spec):
    plain = pipelink.link(demo_spec)
    traced = pipelink.link(demo_spec, trace=True)
    assert "globaltimer" not in plain.plan.glue.text and plain.manifest["trace"] is None
    assert "globaltimer" in traced.plan.glue.text and traced.manifest["params"][-1]["name"] == "glue.trace"
    plain_ops = inspect_cubin(plain.cubin, plain.plan.entry)[0].instructions
    traced_ops = inspect_cubin(traced.cubin, traced.plan.entry)[0].instructions
    assert not any("GLOBALTIMER" in i for i in plain_ops)
    assert any("GLOBALTIMER" in i for i in traced_ops)
    assert [s.label for s in traced.plan.glue.trace_slots] == [
        "load.load", "reduce.reduce", "glue: reduce.acc -> store.tile", "store.store"]


def test_trace_analysis():
    # 2 blocks, 1 iteration, 2 slots of one role: block 1 is the busiest (3 + 5 us of 8 us).
    trace = np.zeros((2, 1, 2, 2), dtype=np.uint64)
    trace[0, 0, 0] = (1_000, 2_000)
    trace[0, 0, 1] = (2_000, 4_000)
    trace[1, 0, 0] = (1_000, 4_000)
    trace[1, 0, 1] = (4_000, 9_000)
    slots = [{"label": "a.x", "role": "r"}, {"label": "b.y", "role": "r"}]
    out = analyze(trace, slots, kernel_ms=0.008)
    assert out["roles"]["r"]["critical_block"] == 1
    assert out["roles"]["r"]["split_ms"] == {"a.x": 0.003, "b.y": 0.005}
    assert out["coverage"] == pytest.approx(1.0)
    assert out["trace_span_ms"] == pytest.approx(0.008)
    # when the blocks left each component, us since the first traced call: b.y's slowest block 4 us after its fastest
    assert out["components"][1]["end_us"] == {"min": 3.0, "p10": 3.5, "median": 5.5, "p90": 7.5, "max": 8.0}
    assert out["components"][1]["block_end_us"] == [3.0, 8.0]  # block by block: which one trails
    assert out["components"][1]["block_us"] == [2.0, 5.0]  # and how long it was inside
    trace[0, 0, 1] = 0  # a block that never ran b.y has no end there
    assert analyze(trace, slots, kernel_ms=0.008)["components"][1]["block_end_us"] == [None, 8.0]
    assert [c["blocks"] for c in out["components"]] == [2, 2]


def test_the_timeline_is_written_as_chrome_trace_events(tmp_path):
    """verify --trace's timeline as trace events (Perfetto, chrome://tracing): one complete event per traced call,
    on the track of its block and role, at its time since the first call (us), lasting what the buffer says;
    unreached slots make no event."""
    trace = np.zeros((3, 2, 3, 2), dtype=np.uint64)
    trace[0, 0, 0] = (5_000, 6_500)      # block 0, iteration 0, producer's call
    trace[0, 0, 1] = (5_200, 9_000)      # the consumer's
    trace[2, 1, 2] = (12_000, 12_750)    # block 2's second iteration, the epilogue
    trace[1, 0, 2] = (0, 0)              # unreached
    slots = [{"label": "load.load", "role": "producer"}, {"label": "reduce.acc", "role": "consumer"},
             {"label": "store.store", "role": "consumer"}]
    path = chrome_trace(trace, slots, tmp_path / "timeline.trace.json", "k (traced build)")
    doc = json.loads(path.read_text())
    calls = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert [(e["name"], e["ts"], e["dur"]) for e in calls] == [
        ("load.load", 0.0, 1.5), ("reduce.acc", 0.2, 3.8), ("store.store", 7.0, 0.75)]
    tracks = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert [tracks[e["tid"]] for e in calls] == ["block 0 producer", "block 0 consumer", "block 2 consumer"]
    assert calls[2]["args"] == {"block": 2, "iteration": 1} and len(tracks) == 3 * 2
    assert doc["otherData"]["t0_globaltimer_ns"] == 5_000


def test_ncu_summary_reads_the_details_csv():
    from pipelink.verify.tools import ncu_summary
    csv_text = ('"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"\n'
                '"0","pl_tile_fold","GPU Speed Of Light Throughput","DRAM Throughput","%","25.15"\n'
                '"0","pl_tile_fold","GPU Speed Of Light Throughput","Duration","us","225.73"\n'
                '"0","pl_tile_fold","Launch Statistics","Grid Size","","132"\n')
    assert ncu_summary(csv_text) == {"DRAM Throughput (%)": "25.15", "Duration (us)": "225.73"}


def test_device_pointer_from_array_interfaces():
    from pipelink.abi import Param
    from pipelink.errors import DeviceError
    from pipelink.runtime import device_pointer

    class CudaArray:  # what CuPy and Numba expose
        def __init__(self, shape, typestr="<f4"):
            self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (0xDEAD000, False),
                                             "version": 3, "strides": None}

    param = Param.from_json({"name": "load.x", "shape": [4, 8], "dtype": "fp32", "access": "read", "offset": 0,
                             "bytes": 8})
    assert device_pointer(CudaArray((4, 8)), param) == 0xDEAD000
    with pytest.raises(DeviceError, match=r"shape \[8, 4\], expected \[4, 8\]"):
        device_pointer(CudaArray((8, 4)), param)
    with pytest.raises(DeviceError, match="typestr <f2"):
        device_pointer(CudaArray((4, 8), "<f2"), param)
    with pytest.raises(DeviceError, match="cannot take a device pointer"):
        device_pointer(object(), param)


def test_compute_sanitizer_summaries():
    from pipelink.verify.tools import sanitizer_errors
    # The closing lines as compute-sanitizer printed them on the H200 (bench/results/sanitize_gpu-*.json).
    assert sanitizer_errors("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n") == 0
    assert sanitizer_errors("========= ERROR SUMMARY: 3 errors\n") == 3
    assert sanitizer_errors("========= COMPUTE-SANITIZER\n========= RACECHECK SUMMARY: 0 hazards displayed "
                            "(0 errors, 0 warnings)") == 0
    assert sanitizer_errors("========= RACECHECK SUMMARY: 4 hazards displayed (2 errors, 2 warnings)") == 2
    assert sanitizer_errors("nothing here") is None


def test_sanitize_builds_bound_the_waits_and_reports_decode(demo_spec, tmp_path):
    from pipelink.verify.child import describe_report
    plain = pipelink.link(demo_spec)
    kernel = pipelink.link(demo_spec, sanitize=True)
    assert kernel.plan.backend.sanitize_builds == ("load", "reduce", "store")
    timer = lambda k: sum("SR_GLOBALTIMER" in i for i in inspect_cubin(k.cubin, k.plan.entry)[0].instructions)
    assert timer(plain) == 0 and timer(kernel) > 0  # bounded waits exist only in the sanitize build
    assert kernel.plan.postlink.conformance == () and not kernel.plan.postlink.findings
    info = kernel.manifest["sanitize"]
    full = next(m for m in info["mbarriers"] if "reduce.full" in m["users"])
    consumer_warp = next(r for r in info["roles"] if r["name"] == "consumer")["warp_start"]
    stuck = describe_report([2, consumer_warp, full["offset"] + 16, 1, 7, 0, 0, 1], info)
    assert stuck.startswith("sanitize: reduce (role consumer") and "slot 2" in stuck and "parity 1" in stuck
    staging = next(i for i, b in enumerate(info["buffers"]) if b["name"] == "store.staging")
    site = info["sites"].index("store.store")
    overran = describe_report([1, site, staging, 3, 9, 2, 0xDEAD, 1], info)
    assert "after store.store returned (tile 3, block 9)" in overran and "store.staging" in overran
    assert describe_report([0] * 8, info) is None


def test_sanitize_keeps_closed_components_as_packaged(demo_spec):
    pipelink.pack(ROOT / "components/raw/tile_store.cu", ROOT / "components/raw/tile_store.toml",
                  demo_spec.parent / "packages" / "tile_store.plc", closed=True)
    kernel = pipelink.link(demo_spec, sanitize=True)
    assert kernel.plan.backend.sanitize_builds == ("load", "reduce")
    assert any("store (tile_store) is closed" in w for w in kernel.plan.backend.warnings)


def test_run_child_writes_the_job_and_reads_back_a_child_that_dies(tmp_path):
    """The child started on a job it cannot load (a missing kernel file, or no torch) reports every
    planned rung FAILED with the error, and nothing of a previous run's progress file survives; the
    job file is where the child was told to look."""
    from pipelink.verify.watch import run_child
    job = {"python": {"file": str(tmp_path / "missing.py"), "name": "missing"}, "rungs": ["run", "correctness"],
           "progress": str(tmp_path / "progress.jsonl"), "out_dir": str(tmp_path)}
    (tmp_path / "progress.jsonl").write_text('{"event": "start", "rung": "stale"}\n')  # a previous run's
    rungs = run_child(job, tmp_path, timeout=60, kernel="missing")
    assert [(r.name, r.status) for r in rungs] == [("run", "FAILED"), ("correctness", "FAILED")]
    assert all("Error" in r.detail for r in rungs)
    assert json.loads((tmp_path / "job.json").read_text())["rungs"] == job["rungs"]


@pytest.mark.parametrize("tol", [0, 0.0, 0.05, None])
def test_the_specs_tolerance_reaches_the_child_as_written(demo_spec, tmp_path, tol):
    """[verify] rel_l2_tol = 0 asks for an exact output: the child's job carries 0 (not the precision's default,
    which a falsy test would put in its place), and the child judges with metrics.tolerance (test_metrics)."""
    from pipelink.verify import runner
    if tol is not None:
        edit(demo_spec, "[verify]\n", f"[verify]\nrel_l2_tol = {tol}\n")
    spec = pipelink.load_spec(demo_spec)
    assert spec.verify.rel_l2_tol == tol
    job = runner._job(pipelink.link(spec), None, spec, None, ["run"], tmp_path, 1, 1, False)
    assert job["rel_l2_tol"] == tol and (job["rel_l2_tol"] is None) == (tol is None)
    assert metrics.tolerance("bf16", job["rel_l2_tol"]) == (verify_terms.TOLERANCES["bf16"][0] if tol is None else tol)


def test_a_missing_reference_file_or_function_is_a_spec_error_before_anything_is_written(demo_spec, tmp_path):
    """Issue 52: the [verify] reference is checked before any work (the file read with ast, not run: it may import
    torch, which a CPU machine may lack): a missing file or a misspelled function is a SpecError naming the field
    (exit 2 on the command line), and no output folder is made."""
    text = demo_spec.read_text()
    assert 'reference = "reference.py:' in text
    edit(demo_spec, 'reference = "reference.py:', 'reference = "missing.py:')
    with pytest.raises(SpecError) as info:
        pipelink.verify(demo_spec, out_dir=tmp_path / "a")
    assert info.value.field == "verify.reference" and "not found" in info.value.message
    demo_spec.write_text(text)
    function = text.split('reference = "reference.py:', 1)[1].split('"', 1)[0]
    edit(demo_spec, f'reference = "reference.py:{function}"', f'reference = "reference.py:{function}x"')
    with pytest.raises(SpecError) as info:
        pipelink.verify(demo_spec, out_dir=tmp_path / "b")
    assert f"defines no '{function}x' (did you mean '{function}'?)" in info.value.message
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    p = subprocess.run([sys.executable, "-m", "pipelink", "verify", str(demo_spec), "-o", str(tmp_path / "c")],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "verify.reference" in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_a_run_no_reference_checked_is_unchecked_not_a_pass():
    """Issue 52: the kernel ran, but its correctness rung was skipped (no reference): no PASS, exit 3 as for a run
    that never happened, and the table says why."""
    from io import StringIO
    result = VerifyResult("k", "k.toml", "pipelink", "out", "NVIDIA H100 80GB HBM3")
    result.rungs += [Rung("pre-checks", "ok", ""), Rung("run", "ok", ""),
                     Rung("correctness", "skipped", "no reference: set [verify] reference")]
    assert result.status == "unchecked" and not result.passed
    from pipelink.cli import verify_exit_status
    assert verify_exit_status(result) == 3
    buf = StringIO()
    print_table(result, console=Console(file=buf, width=200))
    assert "UNCHECKED" in buf.getvalue() and "PASS" not in buf.getvalue()
    result.rungs[-1] = Rung("correctness", "ok", "")
    assert result.status == "pass" and verify_exit_status(result) == 0

"""The GPU side of `pipelink verify`, run in a child process: run, correctness, bench, roofline,
trace. The parent watches it with a timeout; each rung is announced in the progress file before
it starts and recorded when it ends, so a hang or crash is pinned to its rung.

    python -m pipelink.verify.child JOB.json
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
import traceback
from pathlib import Path

import numpy as np

from ..errors import PipelinkError
from ..abi import REPORT_WORDS, KernelABI, Param, ReportKind, decode_report
from ..runtime import Runtime, torch_dtype
from ..spec import input_distribution
from . import metrics, roofline, timing, trace
from .callables import load_callable
from .pykernel import CallableKernel, CompileOnlyKernel
from .rungs import RungContext


class SanitizerReport(PipelinkError):
    """A sanitize-mode kernel stopped itself and said why."""


class Kernel:
    """A loaded cubin with its operands as torch tensors (inputs filled, outputs poisoned)."""

    def __init__(self, files: dict, job: dict):
        import torch
        self.manifest = json.loads(Path(files["manifest"]).read_text())
        self.abi = KernelABI.from_manifest(self.manifest)
        self.runtime = Runtime(Path(files["cubin"]).read_bytes(), self.manifest)
        self.job = job
        self.torch = torch
        self.report = self.runtime.host_mapped(4 * REPORT_WORDS) if self.abi.report else None

    def params(self) -> tuple[Param, ...]:
        """Operands the caller provides (the sanitize report buffer is the harness's own)."""
        return self.abi.operands

    def inputs(self, seed: int, draw_launch: bool = False) -> dict:
        """Fresh inputs for ``seed``; a fact given at launch holds its linked value, or with ``draw_launch`` a value
        drawn from the range the kernel serves (the correctness rung's later seeds)."""
        torch = self.torch
        gen = torch.Generator(device="cuda").manual_seed(seed)
        out = {}
        for p in self.params():
            if p.access == "write":
                continue
            if p.fact is not None:
                value = p.fact["high"] if not draw_launch else int(torch.randint(
                    p.fact["low"], p.fact["high"] + 1, (1,), generator=gen, device="cuda").item())
                out[p.name] = torch.full(p.shape, value, dtype=torch.int64, device="cuda")
                continue
            dist, scale = input_distribution(self.job["inputs"].get(p.name, "normal"))
            dtype = torch_dtype(p.dtype)
            if dtype.is_floating_point:
                if dist == "ones":
                    t = torch.ones(p.shape, device="cuda")
                elif dist == "uniform":
                    t = torch.rand(p.shape, generator=gen, device="cuda") * 2 - 1
                else:
                    t = torch.randn(p.shape, generator=gen, device="cuda")
                out[p.name] = (t * scale if scale != 1.0 else t).to(dtype)
            else:
                out[p.name] = torch.randint(-8, 8, p.shape, generator=gen, device="cuda").to(dtype)
        if self.job.get("prepare"):
            out.update(self._prepared(out))
        return out

    def _prepared(self, drawn: dict) -> dict:
        """[verify] prepare's tensors, each a read operand of its declared shape and dtype, on the GPU."""
        got = load_callable(self.job["prepare"])(dict(drawn), dict(self.job["facts"]))
        reads = {p.name: p for p in self.params() if p.access != "write"}
        if not isinstance(got, dict):
            raise PipelinkError(f"[verify] prepare returned {type(got).__name__}, not {{operand: tensor}}",
                                field="verify.prepare")
        for name, t in got.items():
            p = reads.get(name)
            if p is None:
                raise PipelinkError(f"[verify] prepare returned '{name}', which is no read operand of the kernel",
                                    field="verify.prepare", hint=f"read operands: {', '.join(reads)}")
            want = (tuple(p.shape), torch_dtype(p.dtype))
            if not hasattr(t, "shape") or (tuple(t.shape), t.dtype) != want or not t.is_cuda:
                raise PipelinkError(f"[verify] prepare returned '{name}' as {getattr(t, 'dtype', type(t).__name__)}"
                                    f"{list(getattr(t, 'shape', []))}; the operand is {p.dtype}{list(p.shape)} on the "
                                    "GPU", field="verify.prepare")
        return {name: t.contiguous() for name, t in got.items()}

    def launch_values(self, inputs: dict) -> dict:
        """The facts given at launch in ``inputs``, by fact name: what the reference must see in place of the linked
        values (the bench and the first seed launch with the linked values)."""
        return {p.fact["name"]: int(inputs[p.name].item()) for p in self.params() if p.fact is not None}

    def outputs(self) -> dict:
        """Outputs poisoned (metrics.poison_value: NaN, or an integer type's sentinel): anything the kernel does
        not write keeps it."""
        torch = self.torch
        return {p.name: torch.full(p.shape, metrics.poison_value(p.dtype), dtype=torch_dtype(p.dtype), device="cuda")
                for p in self.params() if p.access == "write"}

    def launch(self, tensors: dict) -> None:
        if self.report is None:
            self.runtime.launch_arrays(self.abi.arguments(tensors))
            return
        self.report.clear()
        self.runtime.launch_arrays(self.abi.arguments(tensors, report=self.report.device))
        try:
            self.torch.cuda.synchronize()
        except Exception as exc:
            raise SanitizerReport(self.explain() or f"kernel failed: {exc}") from None

    def close(self) -> None:
        """Free what the kernel holds on the device (a serving child loads one kernel per job)."""
        if self.report is not None:
            self.report.free()
            self.report = None
        self.runtime.close()

    def explain(self) -> str | None:
        """The sanitize report as a sentence, if the kernel wrote one before it trapped."""
        return describe_report(self.report.words(REPORT_WORDS), self.manifest["sanitize"])


def describe_report(words: list[int], info: dict) -> str | None:
    """Turn a sanitize-mode report (pipelink/abi.py: REPORT_LAYOUT) into who did what, from the
    manifest's names."""
    said = decode_report(words)
    if said is None:
        return None
    if said["kind"] == ReportKind.CANARY:
        site, buffer, tile, block, word, value = (said[k] for k in ("site", "buffer", "tile", "block", "word", "value"))
        where = info["sites"][site] if site < len(info["sites"]) else f"site {site}"
        buf = info["buffers"][buffer]
        return (f"sanitize: after {where} returned (tile {tile}, block {block}), the canary after smem buffer "
                f"{buf['name']} ({' = '.join(buf['users'])}, [{buf['offset']}, {buf['offset'] + buf['bytes']})) "
                f"was overwritten (word {word} = {value:#x}): {where.split('.')[0]} wrote past the end of its buffer; "
                "make the contract's bytes cover what the code writes, or fix the index")
    if said["kind"] == ReportKind.STUCK:
        warp, offset, parity, block = said["warp"], said["offset"], said["parity"], said["block"]
        role = next((r for r in info["roles"] if r["warp_start"] <= warp < r["warp_start"] + r["warps"]), None)
        array = next((m for m in info["mbarriers"] if m["offset"] <= offset < m["offset"] + 8 * m["count"]), None)
        if array is None:
            what = f"an mbarrier at smem offset {offset} that no contract declares"
            who = role["instances"] if role else []
        else:
            slot = (offset - array["offset"]) // 8
            what = f"mbarrier {' = '.join(array['users'])} slot {slot}"
            who = [i for i in (role["instances"] if role else []) if i in array["instances"]] or \
                (role["instances"] if role else [])
        return (f"sanitize: {' or '.join(who) or 'a component'} (role {role['name'] if role else '?'}, warp {warp}, "
                f"block {block}) waited 2 s on {what} for phase parity {parity} and nobody arrived: check the "
                "arrival counts and who signals this barrier")
    return f"sanitize report of unknown kind {said['kind']}: {words}"


# --- rungs -----------------------------------------------------------------------------------

def rung_compile(ctx: RungContext) -> tuple[str, str, dict]:
    """A kernel file's first call, where its DSL compiles (a linked kernel compiles in the parent)."""
    if getattr(ctx.kernel, "missing", None):
        return _missing(ctx.kernel.missing)
    seconds = ctx.kernel.compile()
    return "ok", "", {"first_call_s": round(seconds, 3)}


def rung_dumps(ctx: RungContext) -> tuple[str, str, dict]:
    """A kernel file's compiled kernels (a link's dumps are written by the parent)."""
    from .dsl_dumps import cute_kernels, tilelang_kernels, triton_kernels, write_compiled
    if getattr(ctx.kernel, "missing", None):
        return _missing(ctx.kernel.missing)
    namespace = vars(ctx.kernel.module)
    kernels = triton_kernels(namespace) + cute_kernels(namespace) + tilelang_kernels(namespace, ctx.out_dir / "dumps")
    if not kernels:
        return "skipped", ("no compiled kernel found in the file's globals (the dumps know Triton's JIT functions, "
                           "CuTe DSL's compiled functions kept with --keep-ptx --keep-cubin, TileLang's JIT kernels)"), {}
    figures = write_compiled(kernels, ctx.out_dir / "dumps")
    return "ok", ", ".join(f"{k['name']}: {k.get('registers', '?')} registers" for k in figures["kernels"]), figures


def _missing(module: str) -> tuple[str, str, dict]:
    top = module.split(".")[0]
    return "skipped", (f"not run: the kernel file imports {module}, which is not installed here "
                       f"(pip install {top})"), {"missing_module": module}


def rung_run(ctx: RungContext) -> tuple[str, str, dict]:
    k = ctx.kernel
    torch = k.torch
    ins, outs = k.inputs(0), k.outputs()
    t0 = time.perf_counter()
    k.launch({**ins, **outs})
    torch.cuda.synchronize()
    first_ms = (time.perf_counter() - t0) * 1e3
    figures = {"first_launch_ms": round(first_ms, 3)}
    bad = []
    kept = {p.name for p in k.params() if p.kept}  # may keep rows the kernel leaves unused: checked by their reader
    for name, t in outs.items():
        if name in kept:
            continue
        finite = int(torch.isfinite(t.float()).sum()) if t.dtype.is_floating_point else t.numel()
        figures[f"{name}.shape"] = list(t.shape)
        figures[f"{name}.finite"] = f"{finite}/{t.numel()}"
        if finite != t.numel():
            bad.append(f"{name}: {t.numel() - finite} non-finite (unwritten or NaN/Inf)")
    return ("FAILED" if bad else "ok"), "; ".join(bad), figures


def rung_correctness(ctx: RungContext) -> tuple[str, str, dict]:
    k, job = ctx.kernel, ctx.job
    torch = k.torch
    reference = ctx.reference
    if reference is None:
        return "skipped", "no reference: set [verify] reference = 'file.py:function' in the spec", {}
    worst: dict[str, dict] = {}
    reasons: list[str] = []
    access = {p.name: p.access for p in k.params()}
    for seed in range(job["seeds"]):
        ins, outs = k.inputs(seed, draw_launch=seed > 0), k.outputs()
        before = {n: t.clone() for n, t in ins.items()}
        k.launch({**ins, **outs})
        torch.cuda.synchronize()
        for n, t in ins.items():
            if access.get(n, "read") == "read" and not torch.equal(t, before[n]):
                reasons.append(f"seed {seed}: input {n} was modified by the kernel")
        refs = reference({n: t.clone() for n, t in before.items()}, {**job["facts"], **k.launch_values(before)})
        for p in k.params():
            if p.access == "read":
                continue
            name = p.name
            if p.kept and name not in refs:  # a kept workspace the reference does not give: checked by its reader
                continue
            if name not in refs:
                reasons.append(f"reference returned no '{name}' (it returned {sorted(refs)})")
                continue
            # a readwrite operand (a cache the kernel appends to) is an input that the reference
            # returns updated: compared as an output, without the NaN poison (it holds data)
            got = outs[name] if name in outs else ins[name]
            precision = job["precision"] or p.dtype
            poison = metrics.poison_value(p.dtype) if name in outs else None
            m = metrics.compare(got, refs[name], precision, poison)  # on the GPU, where the output is
            ok, why = metrics.judge(m, precision, job["rel_l2_tol"])
            reasons += [f"seed {seed}, {name}: {w}" for w in why]
            prev = worst.get(name)
            if prev is None or m.rel_l2 > prev["rel_l2"] or m.unwritten > prev["unwritten"]:
                worst[name] = {**m.to_json(), "precision": precision,
                               "rel_l2_tol": metrics.tolerance(precision, job["rel_l2_tol"])}
    figures = {"seeds": job["seeds"], "outputs": worst}
    for name, m in worst.items():
        figures[f"{name}.rel_l2"] = m["rel_l2"]
        figures[f"{name}.unwritten"] = m["unwritten"]
        figures[f"{name}.mismatched"] = m["mismatched"]
    unique = list(dict.fromkeys(reasons))
    return ("FAILED" if unique else "ok"), "; ".join(unique[:6]), figures


def rung_bench(ctx: RungContext) -> tuple[str, str, dict]:
    k, job = ctx.kernel, ctx.job
    torch = k.torch
    props = torch.cuda.get_device_properties(0)
    l2 = props.L2_cache_size
    in_bytes = sum(int(np.prod(p.shape)) * p.element_bytes for p in k.params() if p.access != "write")
    sets = min(16, max(1, -(-2 * l2 // max(in_bytes, 1)))) if in_bytes < l2 else 1
    tensors = [{**k.inputs(100 + i), **k.outputs()} for i in range(sets)]
    times = timing.time_launches(lambda i: k.launch(tensors[i]), reps=job["reps"], flush_bytes=2 * l2, sets=sets)
    figures = {"kernel": timing.summarize(times), "l2_flush_bytes": 2 * l2, "input_sets": sets}
    median = figures["kernel"]["median_ms"]
    figures["median_ms"] = median
    if job["graph"]:
        figures["graph_ms_per_launch"] = timing.time_graph(lambda i: k.launch(tensors[i]))
    ratios = {}
    for label, fn in ctx.baselines():
        ins = tensors[0]
        base = timing.time_launches(lambda i: fn({n: ins[n] for n in ins}, dict(job["facts"])),
                                    reps=job["reps"], flush_bytes=2 * l2)
        figures[f"baseline:{label}"] = timing.summarize(base)
        ratios[label] = timing.speedup(figures[f"baseline:{label}"]["median_ms"], median)
    if ratios:
        figures["speedup_vs"] = ratios  # baseline median / kernel median: > 1 means the kernel is faster
    job["_median_ms"] = median
    return "ok", "", figures


def rung_roofline(ctx: RungContext) -> tuple[str, str, dict]:
    k, job = ctx.kernel, ctx.job
    median = job.get("_median_ms")
    if median is None:
        return "skipped", "needs the bench rung", {}
    peaks = roofline.device_peaks()
    read_bytes = sum(int(np.prod(p.shape)) * p.element_bytes for p in k.params() if p.access != "write")
    r = roofline.roofline(job["flops"] or 0.0, job["bytes"], median, peaks, read_bytes)
    png = roofline.plot(r, peaks, Path(job["out_dir"]) / "roofline.png", k.manifest["kernel"])
    return "ok", "", {**r, "peaks": peaks, "png": str(png)}


def rung_trace(ctx: RungContext) -> tuple[str, str, dict]:
    k, job = ctx.kernel, ctx.job
    traced = Kernel(job["traced"], job)
    try:
        return _trace(k, traced, job)
    finally:
        traced.close()


def _trace(k: Kernel, traced: Kernel, job: dict) -> tuple[str, str, dict]:
    torch = k.torch
    info, buffer = traced.manifest["trace"], traced.abi.trace
    ins, outs = traced.inputs(0), traced.outputs()
    buf = torch.zeros(buffer.shape, dtype=torch_dtype(buffer.dtype), device="cuda")
    tensors = {**ins, **outs, buffer.name: buf}
    times = timing.time_launches(lambda i: traced.launch(tensors), reps=10, flush_bytes=0)
    buf.zero_()
    traced.launch(tensors)
    torch.cuda.synchronize()
    data = buf.cpu().numpy()
    kernel_ms = float(np.median(times))
    result = trace.analyze(data, info["slots"], kernel_ms)
    png = trace.plot_timeline(data, info["slots"], Path(job["out_dir"]) / "timeline.png",
                              f"{k.manifest['kernel']}: per-component timeline (traced build)")
    events = trace.chrome_trace(data, info["slots"], Path(job["out_dir"]) / "timeline.trace.json",
                                f"{k.manifest['kernel']} (traced build)")
    untraced = job.get("_median_ms")
    figures = {**result, "png": str(png), "trace_events": str(events), "traced_kernel_ms": kernel_ms}
    if untraced:
        figures["tracing_overhead"] = kernel_ms / untraced - 1
    ok = 0.9 <= result["coverage"] <= 1.1
    detail = (f"{result['busiest_role']} components cover {100 * result['coverage']:.1f}% of the kernel time"
              + ("" if ok else " (outside 90-110%: time goes somewhere the trace does not see)"))
    return ("ok" if ok else "FAILED"), detail, figures


RUNG_FUNCS = {"compile": rung_compile, "dumps": rung_dumps, "run": rung_run, "correctness": rung_correctness,
              "bench": rung_bench, "roofline": rung_roofline, "trace": rung_trace}


def run_rung(fn, ctx: RungContext) -> tuple[str, str, dict]:
    """One rung, built-in or the user's, in one form: (status, detail, figures) from a built-in; a
    dict of figures (or None) from a user's check is ok. Exceptions are the caller's."""
    got = fn(ctx)
    if isinstance(got, tuple):
        return got
    if got is None:
        return "ok", "", {}
    if not isinstance(got, dict):
        raise TypeError(f"a rung returns a dict of figures or None, not {type(got).__name__}")
    return "ok", "", got


def _rung_function(name: str, job: dict):
    if name in RUNG_FUNCS:
        return RUNG_FUNCS[name]
    return load_callable(job["user_rungs"][name])


def run_job(job_path: str) -> int:
    """Run one job's rungs, each announced in its progress file and recorded when it ends; the last record is
    the job's exit code. 0, or 3 after a device fault (the context is unusable: the process must end)."""
    job = json.loads(Path(job_path).read_text())
    with open(job["progress"], "a", buffering=1) as progress:
        def emit(record: dict) -> None:  # each record stamped with the wall clock (where a verify's seconds go)
            progress.write(json.dumps({**record, "t": time.time()}, default=str) + "\n")

        emit({"event": "ready", "pid": os.getpid()})
        code, ctx = _run_rungs(job, emit)
        if code == 0 and ctx is not None and hasattr(ctx.kernel, "close"):
            try:
                ctx.kernel.close()
            except Exception:  # the device is not what the rungs left: no next job in this context
                traceback.print_exc()
                code = 3
        emit({"event": "exit", "code": code})
    return code


def _run_rungs(job: dict, emit) -> tuple[int, RungContext | None]:
    ctx = None
    for name in job["rungs"]:
        emit({"event": "start", "rung": name})
        t0 = time.perf_counter()
        try:
            if ctx is None:
                kernel = (CompileOnlyKernel(job) if job.get("compile_only") else CallableKernel(job)) \
                    if job.get("python") else Kernel(job["kernel"], job)
                ctx = RungContext(kernel, dict(job["facts"]), Path(job["out_dir"]), job)
            status, detail, figures = run_rung(_rung_function(name, job), ctx)
        except Exception as exc:  # a CUDA error or a failing reference: this rung fails, the child goes on
            text = f"{type(exc).__name__}: {exc}"
            crashed = isinstance(exc, SanitizerReport) or "CUDA" in text or "cuda" in text or "illegal" in text.lower()
            status, detail, figures = ("crash" if crashed else "FAILED"), text, {
                "traceback": traceback.format_exc(limit=4)[-2000:]}
            emit({"event": "done", "rung": name, "status": status, "detail": detail, "figures": figures,
                  "seconds": time.perf_counter() - t0})
            if crashed:  # the context is unusable after a device fault
                return 3, ctx
            continue
        emit({"event": "done", "rung": name, "status": status, "detail": detail, "figures": figures,
              "seconds": time.perf_counter() - t0})
    return 0, ctx


def serve() -> int:
    """Job after job, each a line on stdin ({"job": JOB.json, "log": FILE}), until stdin closes: the warm child
    of watch.WarmChild, which pays the interpreter, torch's import and the CUDA context once for a loop of
    verifies. Each job's output goes to its own log; the parent watches each job's progress file with the job's
    own timeout. After a device fault the process ends (its context is unusable), and the parent starts
    another for the next job."""
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)  # the parent removed the last
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        code = run_job(request["job"])
        if code:
            return code
        _release_cached_memory()
    return 0


def _release_cached_memory() -> None:
    """Give the job's device memory back: torch's allocator keeps what it freed for reuse, and a child serving
    job after job (beside other processes on the GPU: a test suite's workers) would hold its largest job's."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        gc.collect()  # tensors held in reference cycles (a reference's closures)
        torch.cuda.empty_cache()


def main(argv: list[str]) -> int:
    return serve() if argv == ["--serve"] else run_job(argv[0])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

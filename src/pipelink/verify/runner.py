"""`pipelink verify`: every rung of the loop, each run even if an earlier one failed, into one
JSON result and a table. CPU rungs (pre-checks, link, dumps) run here; GPU rungs run in a child
process under a watchdog, so a hung kernel becomes a `hang` result naming the kernel and its rung,
and a crash a `crash` result with the CUDA error, while this process stays responsive.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import time
from pathlib import Path

import numpy as np

from ..backend.inspect import dump_sass
from ..errors import DeviceError, PipelinkError, SpecError
from ..fsutil import write_atomic
from ..link.build import linked_ptx
from ..link.options import with_overrides
from ..link.pipeline import LinkedKernel, build_plan, plan_link
from ..link.plan import LinkPlan
from ..runtime import gpu_available
from ..spec import DEVICES, LinkSpec, load_spec
from .callables import resolve_ref
from .options import VerifyOptions
from .results import Rung, VerifyResult, git_revision, print_table
from .rungs import RungRef, resolve_rungs
from .tools import profile_job, sanitize_job
from .watch import run_child


TORCH_INSTALL = "pip install torch (a CUDA build: pip install torch --index-url https://download.pytorch.org/whl/cu128)"


def _check_defines(path: Path, name: str, spec: LinkSpec) -> None:
    """The reference file defines ``name`` at module level (read with ast, not run: it may import torch, which a
    CPU machine may lack), so a misspelled function is said before any work, not by the GPU child."""
    import ast
    from ..fsutil import read_bounded
    from ..schema import did_you_mean
    try:
        tree = ast.parse(read_bounded(path, 8 << 20, "reference file"), filename=str(path))
    except SyntaxError as exc:
        raise SpecError(f"reference file {path} is not valid Python: line {exc.lineno}: {exc.msg}",
                        file=str(spec.path), field="verify.reference") from None
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    defined |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    defined |= {a.asname or a.name.split(".")[0] for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in n.names}
    if name not in defined:
        guess = did_you_mean(name, defined)
        raise SpecError(f"reference file {path} defines no '{name}'" + (f" (did you mean '{guess}'?)" if guess else ""),
                        file=str(spec.path), field="verify.reference",
                        hint=f"it defines {', '.join(sorted(defined))[:300] or 'nothing at module level'}")


def _reference_ref(reference, spec: LinkSpec) -> str | None:
    """The reference as 'file:function' for the child process."""
    if reference is None:
        reference = spec.verify.reference
        if reference is None:
            return None
        where, _, name = reference.rpartition(":")
        if where.endswith(".py"):
            path = Path(where)
            if not path.is_absolute():
                path = (spec.path.parent if spec.path else Path(".")) / path
            if not path.exists():
                raise SpecError(f"reference file {path} not found", file=str(spec.path), field="verify.reference",
                                hint="give [verify] reference = 'file.py:function', the file relative to the spec")
            _check_defines(path, name, spec)
            return f"{path.resolve()}:{name}"
        return reference
    if isinstance(reference, str):
        return reference
    qual = getattr(reference, "__qualname__", "")
    if "<" in qual:
        raise PipelinkError(f"reference {qual} is not importable by the verify child",
                            hint="define the reference at module level (no lambda or nested function), "
                                 "or name it as 'file.py:function'")
    return f"{Path(inspect.getsourcefile(reference)).resolve()}:{qual}"


def verify(spec: str | Path | LinkSpec, options: VerifyOptions | None = None, **kwargs) -> VerifyResult:
    """Run the loop on a link spec with ``options`` (VerifyOptions; keyword arguments set its
    fields: ``verify(spec, seeds=5)``), or on a kernel file (a path ending in .py, or the module
    itself: see pipelink.verify.pykernel): pre-checks, link, dumps, then on the GPU run, correctness,
    bench, roofline, (trace), (profile) and (compute-sanitizer tools: memcheck, racecheck,
    synccheck). With ``sanitize`` the kernel is linked in sanitize mode (smem canaries checked after
    every component call) and not benchmarked."""
    if inspect.ismodule(spec) or (isinstance(spec, (str, Path)) and str(spec).endswith(".py")):
        from .pykernel import verify_file  # a kernel file (Triton, CuTe DSL, TileLang, cuda.core, torch)
        return verify_file(spec.__file__ if inspect.ismodule(spec) else spec, options, **kwargs)
    o = with_overrides(VerifyOptions, options, kwargs)
    spec = spec if isinstance(spec, LinkSpec) else load_spec(spec)
    _reference_ref(o.reference, spec)  # a missing reference file or function: a SpecError before anything is written
    ok_gpu, device = gpu_available(DEVICES[spec.link.device]["arch"])
    torch_missing = importlib.util.find_spec("torch") is None
    if ok_gpu and torch_missing:  # the GPU child, the reference and the inputs all run under torch
        raise DeviceError(f"verify runs the kernel on {device} under torch, which is not installed here",
                          hint=TORCH_INSTALL)
    out = Path(o.out_dir or f"verify-{spec.link.name}-{o.mode}")
    out.mkdir(parents=True, exist_ok=True)
    result = VerifyResult(spec.link.name, str(spec.path), o.mode, str(out), device if ok_gpu else None,
                          git_revision=git_revision(spec.path.parent if spec.path else Path(".")))
    timeout = o.timeout or spec.verify.timeout
    plan, ref = _pre_checks(spec, o, result.rungs)
    kernel, traced = _link(plan, spec, o, out, result.rungs)
    result.rungs.append(_dumps_rung(kernel, out) if o.dumps else
                        Rung("dumps", "skipped", "not asked for (dumps=False)"))
    # GPU rungs in a watched child
    try:
        user = _user_rungs(spec, o)
    except PipelinkError:  # already the pre-checks rung's failure
        user = []
    planned = ["run", "correctness", *(["bench", "roofline"] if o.benchmarks else []), *(["trace"] if o.trace else []),
               *(r.name for r in user)]
    if kernel is None or not ok_gpu:
        why = "not run: no linked kernel" if kernel is None else f"not run: {device}"
        result.rungs += [Rung(n, "skipped", why) for n in planned]
    else:
        result.rungs += _gpu_rungs(kernel, traced, spec, ref, planned, out, o.seeds, o.reps, o.graph, timeout, user)
    if o.profile:
        result.rungs.append(_profile(kernel, out, ok_gpu, device, timeout, spec, ref) if kernel else
                            Rung("profile", "skipped", "not run: no linked kernel"))
    for tool in o.sanitizers:
        result.rungs.append(_compute_sanitizer(tool, kernel, out, ok_gpu, device, timeout, spec, ref) if kernel else
                            Rung(tool, "skipped", "not run: no linked kernel"))
    write_atomic(out / "verify.json", json.dumps(result.to_json(), indent=2, default=str))
    print_table(result, console=o.console)
    return result


def _user_rungs(spec: LinkSpec, o: VerifyOptions) -> list[RungRef]:
    """The spec's [[verify.rung]] checks (files relative to the spec), then the options' (relative
    to the working folder)."""
    base = spec.path.parent if spec.path else Path(".")
    return resolve_rungs([(r, base, f"verify.rung[{i}].check") for i, r in enumerate(spec.verify.rung)]
                         + [(r, Path("."), "rungs") for r in o.rungs], str(spec.path))


def _pre_checks(spec: LinkSpec, o: VerifyOptions, rungs: list[Rung]) -> tuple[LinkPlan | None, str | None]:
    """The pre-checks rung: contracts and plan (no toolchain). Returns the plan and the reference."""
    t0 = time.perf_counter()
    try:
        _user_rungs(spec, o)
        ref = _reference_ref(o.reference, spec)
        plan = plan_link(spec, mode=o.mode, sanitize=o.sanitize)
    except PipelinkError as exc:
        rungs.append(Rung("pre-checks", "FAILED", exc.format(), {"error": type(exc).__name__},
                          time.perf_counter() - t0))
        return None, None
    unchecked = [] if ref else ["no [verify] reference: the kernel's output will not be checked, and the run cannot "
                                "pass (set reference = 'file.py:function')"]
    if importlib.util.find_spec("torch") is None:  # no GPU here either (else verify refused): said for the GPU run
        unchecked.append(f"torch is not installed: the GPU rungs run under it ({TORCH_INSTALL})")
    rungs.append(Rung("pre-checks", "ok", "; ".join([*unchecked, *plan.all_warnings()]), {
        "instances": len(plan.instances), "smem_bytes": plan.smem_bytes, "block": plan.block, "grid": plan.grid,
        "checks": [f"{c.name}: {c.detail}" for c in plan.all_checks()]}, time.perf_counter() - t0))
    return plan, ref


def _link(plan: LinkPlan | None, spec: LinkSpec, o: VerifyOptions, out: Path,
          rungs: list[Rung]) -> tuple[LinkedKernel | None, LinkedKernel | None]:
    """The link rung: the kernel (and with ``trace`` the traced build), saved under ``out``."""
    t0 = time.perf_counter()
    if plan is None:
        rungs.append(Rung("link", "skipped", "not run: pre-checks failed"))
        return None, None
    try:
        kernel, traced = build_plan(plan), None
        kernel.save(out / "kernel")
        if o.trace:
            traced = build_plan(plan_link(spec, mode=o.mode, trace=True))
            traced.save(out / "traced")
    except PipelinkError as exc:
        rungs.append(Rung("link", "FAILED", exc.format(), {"error": type(exc).__name__}, time.perf_counter() - t0))
        return None, None
    findings, res = plan.postlink.findings, plan.backend.resources
    rungs.append(Rung("link", "FAILED" if findings else "ok", "; ".join(findings), {
        "registers": res.registers, "local_bytes": res.local, "dynamic_smem": plan.smem_bytes,
        "sass_instructions": res.instructions, "cubin_bytes": len(kernel.cubin), "traced": traced is not None},
        time.perf_counter() - t0))
    return kernel, traced


def _dumps_rung(kernel: LinkedKernel | None, out: Path) -> Rung:
    """The dumps rung: PTX, SASS, cubin, resource usage, smem map."""
    if kernel is None:
        return Rung("dumps", "skipped", "not run: no linked kernel")
    t0 = time.perf_counter()
    try:
        return Rung("dumps", "ok", "", _dumps(kernel, out / "dumps"), time.perf_counter() - t0)
    except PipelinkError as exc:
        return Rung("dumps", "FAILED", exc.format(), {}, time.perf_counter() - t0)


def _dumps(kernel, folder: Path) -> dict:
    plan = kernel.plan
    files = kernel.save(folder)
    ptx = write_atomic(folder / f"{plan.spec.link.name}.ptx", linked_ptx(plan.backend))
    sass = write_atomic(folder / f"{plan.spec.link.name}.sass", dump_sass(kernel.cubin))
    res = write_atomic(folder / f"{plan.spec.link.name}.resources.json",
                       json.dumps(plan.backend.sass.to_json(), indent=2))
    files.update({"ptx": ptx, "sass": sass, "resources": res})
    return {"folder": str(folder), "files": sorted(p.name for p in files.values())}


def _job(kernel, traced, spec: LinkSpec, ref, rungs, out: Path, seeds, reps, graph, work: Path | None = None,
         user_rungs=()) -> dict:
    """The child's instructions. ``out`` holds the linked kernel (kernel/, traced/); ``work`` (default
    ``out``) receives the child's progress file and pictures."""
    plan = kernel.plan
    v = spec.verify
    env = {**plan.facts}
    default_bytes = sum(int(np.prod(p.shape)) * p.element_bytes for p in kernel.abi.params)
    base = spec.path.parent if spec.path else Path(".")

    return {
        "kernel": {"cubin": str(out / "kernel" / f"{plan.spec.link.name}.cubin"),
                   "manifest": str(out / "kernel" / f"{plan.spec.link.name}.manifest.json")},
        "traced": None if traced is None else {
            "cubin": str(out / "traced" / f"{plan.spec.link.name}.cubin"),
            "manifest": str(out / "traced" / f"{plan.spec.link.name}.manifest.json")},
        "facts": env, "reference": ref, "baselines": [resolve_ref(b, base) for b in v.baselines], "inputs": v.inputs,
        "prepare": resolve_ref(v.prepare, base) if v.prepare else None,
        "precision": v.precision, "rel_l2_tol": v.rel_l2_tol, "seeds": seeds or v.seeds,
        "flops": v.flops.eval(env, where="verify.flops") if v.flops else None,
        "bytes": v.bytes.eval(env, where="verify.bytes") if v.bytes else default_bytes,
        "reps": reps, "graph": graph, "rungs": rungs, "user_rungs": {r.name: r.check for r in user_rungs},
        "out_dir": str(work or out),
        "progress": str((work or out) / "progress.jsonl"),
    }


def _gpu_rungs(kernel, traced, spec, ref, planned, out: Path, seeds, reps, graph, timeout, user=()) -> list[Rung]:
    job = _job(kernel, traced, spec, ref, planned, out, seeds, reps, graph, user_rungs=user)
    return run_child(job, out, timeout, kernel.plan.entry, shared=True)


def _profile(kernel, out: Path, ok_gpu: bool, device: str, timeout: float, spec, ref) -> Rung:
    """Nsight Compute on one launch of the linked kernel."""
    return profile_job(lambda work: _job(kernel, None, spec, ref, ["run"], out, 1, 1, False, work=work),
                       out / "profile", ["--kernel-name", kernel.plan.entry, "--launch-count", "1"],
                       ok_gpu, device, timeout)


def _compute_sanitizer(tool: str, kernel, out: Path, ok_gpu: bool, device: str, timeout: float, spec, ref) -> Rung:
    """compute-sanitizer --tool <tool> on the linked kernel's run rung (one launch, one seed)."""
    return sanitize_job(tool, lambda work: _job(kernel, None, spec, ref, ["run"], out, 1, 1, False, work=work),
                        out / tool, ok_gpu, device, timeout)

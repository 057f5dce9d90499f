"""`pipelink verify KERNEL.py`: the loop for a kernel that is not a pipelink link: a Triton, CuTe
DSL, TileLang or cuda.core launch, or a torch function, named by a Python file.

The file defines, at module level:

    def inputs(seed): ...            # -> {name: tensor}, fresh inputs on the GPU for this seed
    def outputs(inputs): ...         # -> {name: tensor}, the outputs to write (verify fills them with NaN)
    def kernel(inputs, outputs): ... # launches the kernel under test, which writes `outputs`
    def reference(inputs): ...       # -> {name: tensor}, the slow reference (float64 is fine)
    baselines = {"torch": fn}        # optional: fn(inputs) -> anything, timed beside the kernel
    VERIFY = {"precision": "bf16", "flops": 33554432, "bytes": 100663296}  # optional; literals only
    def compile_only(): ...          # optional: compiles the kernel(s) for sm_90a without a GPU and returns
                                     # them ({name: compiled} or a list): triton.compile(..., target=
                                     # GPUTarget("cuda", 90, 32)), cute.compile on fake tensors (CUTE_DSL_ARCH
                                     # is set to sm_90a first), TileLang's compiled kernel

The parent reads the file without running it: it parses it, checks those names are defined at
module level and validates VERIFY (a literal dict). Everything that runs the file's code, including
the DSL's compilation on the first call (the `compile` rung), happens in the watched child, so a
hang while compiling or launching is reported like a hung kernel. The `dumps` rung writes what the
DSL compiled (verify/dsl_dumps.py). The child then runs the same rungs as for a link (run,
correctness, bench, roofline) through an adapter with the linked kernel's interface.

On a machine without a GPU, a file that defines compile_only() still gets its compile and dumps
rungs, in the watched child too: the kernel compiled for sm_90a, its stages, cubin, SASS and
resources written; the rungs that run the kernel are said not run.
"""

from __future__ import annotations

import ast
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import PipelinkError, SpecError
from ..fsutil import write_atomic
from ..runtime import gpu_available
from ..schema import identifier_problem
from ..verify_terms import TOLERANCES
from .options import VerifyOptions
from .results import Rung, VerifyResult, git_revision, print_table
from .rungs import resolve_rungs
from .tools import profile_job, sanitize_job
from .watch import run_child

REQUIRED = ("inputs", "outputs", "kernel", "reference")
MAX_FILE_BYTES = 1 << 20
# VERIFY's keys: (type check, what it must be)
SETTINGS = {
    "name": (lambda v: isinstance(v, str) and identifier_problem(v) is None, "an identifier"),
    "precision": (lambda v: isinstance(v, str) and v in TOLERANCES, f"one of {', '.join(TOLERANCES)}"),
    "rel_l2_tol": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1,
                   "a number between 0 and 1"),
    "seeds": (lambda v: type(v) is int and 1 <= v <= 1000, "a whole number from 1 to 1000"),
    "flops": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e21,
              "a number of operations, >= 0"),
    "bytes": (lambda v: type(v) is int and 0 <= v < 1 << 50, "a whole number of bytes, >= 0"),
    "timeout": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 86400,
                "seconds, more than 0 and at most 86400"),
}


@dataclass(frozen=True)
class KernelFile:
    """A kernel file, read and checked without running it."""
    path: Path
    name: str
    settings: dict
    baselines: bool
    compile_only: bool = False  # defines compile_only(): compile and dumps without a GPU


def load_kernel_file(path: str | Path) -> KernelFile:
    """``path`` parsed and checked: the four functions defined at module level, VERIFY a literal
    dict of known keys with valid values. A SpecError names the file and the field."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"kernel file {path} not found", file=str(path))
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise SpecError(f"kernel file is {size} bytes, over the limit {MAX_FILE_BYTES} by {size - MAX_FILE_BYTES}",
                        file=str(path), hint="keep the kernel file small: import the rest")
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
        raise SpecError(f"kernel file is not valid Python: {exc}", file=str(path)) from None
    defined: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    defined[t.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                defined[(alias.asname or alias.name).split(".")[0]] = node
    missing = [n for n in REQUIRED if n not in defined]
    if missing:
        raise SpecError(f"kernel file defines no {', '.join(missing)} at module level", file=str(path),
                        field=missing[0], hint="it needs inputs(seed), outputs(inputs), kernel(inputs, outputs) and "
                                               "reference(inputs); see pipelink.verify.pykernel")
    settings = _settings(defined.get("VERIFY"), path)
    compile_only = isinstance(defined.get("compile_only"), (ast.FunctionDef, ast.AsyncFunctionDef))
    return KernelFile(path.resolve(), settings.get("name", _stem_name(path)), settings, "baselines" in defined,
                      compile_only)


def _stem_name(path: Path) -> str:
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in path.stem) or "kernel"
    return name if not name[0].isdigit() else f"k_{name}"


def _settings(node, path: Path) -> dict:
    if node is None:
        return {}
    value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
    try:
        settings = ast.literal_eval(value) if value is not None else None
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        settings = None
    if not isinstance(settings, dict):
        raise SpecError("VERIFY is not a literal dict (numbers and strings only: it is read without running the "
                        "file)", file=str(path), field="VERIFY", hint="e.g. VERIFY = {\"precision\": \"bf16\", "
                                                                     "\"flops\": 68719476736}")
    for key, v in settings.items():
        if key not in SETTINGS:
            raise SpecError(f"unknown key {key!r}", file=str(path), field="VERIFY",
                            hint=f"allowed: {', '.join(SETTINGS)}")
        ok, what = SETTINGS[key]
        if not ok(v):
            raise SpecError(f"{key} = {v!r} is not {what}", file=str(path), field=f"VERIFY.{key}")
    return settings


def verify_file(path: str | Path, options: VerifyOptions | None = None, **kwargs) -> VerifyResult:
    """The loop on a kernel file: pre-checks here, then compile, run, correctness, bench, roofline
    and your own rungs in a watched child."""
    from ..link.options import with_overrides
    o = with_overrides(VerifyOptions, options, kwargs)
    path = Path(path)
    t0 = time.perf_counter()
    rungs: list[Rung] = []
    try:
        kf = load_kernel_file(path)
        user = resolve_rungs([(r, Path("."), "rungs") for r in o.rungs])
    except PipelinkError as exc:
        kf, user = None, []
        rungs.append(Rung("pre-checks", "FAILED", exc.format(), {"error": type(exc).__name__}, time.perf_counter() - t0))
    name = kf.name if kf else _stem_name(path)
    out = Path(o.out_dir or f"verify-{name}-python")
    out.mkdir(parents=True, exist_ok=True)
    ok_gpu, device = gpu_available()
    result = VerifyResult(name, str(path), "python", str(out), device if ok_gpu else None,
                          git_revision=git_revision(path.resolve().parent))
    result.rungs += rungs
    planned = ["compile", "dumps", "run", "correctness", *(["bench", "roofline"] if o.benchmarks else []),
               *(r.name for r in user)]
    if kf is not None:
        result.rungs.append(Rung("pre-checks", "ok", "", {"file": str(kf.path), "settings": kf.settings,
                                                           "baselines": kf.baselines}, time.perf_counter() - t0))
    if kf is None or not ok_gpu:
        why = "not run: pre-checks failed" if kf is None else f"not run: {device}"
        if kf is not None and kf.compile_only:  # the DSL compiles for sm_90a here: compile and dumps
            job = {**_job(kf, o, ["compile", "dumps"], out), "compile_only": True}
            result.rungs += run_child(job, out, o.timeout or kf.settings.get("timeout", 60), kf.name)
            planned = [n for n in planned if n not in ("compile", "dumps")]
        result.rungs += [Rung(n, "skipped", why) for n in planned]
    else:
        result.rungs += run_child(_job(kf, o, planned, out, user), out, o.timeout or kf.settings.get("timeout", 60),
                                  kf.name)
    _tools(kf, o, out, ok_gpu, device, result.rungs)
    write_atomic(out / "verify.json", json.dumps(result.to_json(), indent=2, default=str))
    print_table(result, console=o.console)
    return result


def _job(kf: KernelFile, o: VerifyOptions, rungs: list[str], work: Path, user=(), nvtx: bool = False) -> dict:
    """The child's instructions for the kernel file; ``work`` receives its progress file and pictures.
    ``nvtx``: each launch of the kernel inside an NVTX range "pipelink_kernel" (what --profile selects)."""
    s = kf.settings
    return {"python": {"file": str(kf.path), "name": kf.name}, "kernel": None, "traced": None, "facts": {},
            "reference": None, "baselines": [], "inputs": {}, "precision": s.get("precision"),
            "rel_l2_tol": s.get("rel_l2_tol"), "seeds": o.seeds or s.get("seeds", 3), "flops": s.get("flops"),
            "bytes": s.get("bytes"), "reps": o.reps, "graph": o.graph, "rungs": rungs,
            "user_rungs": {r.name: r.check for r in user}, "out_dir": str(work),
            "progress": str(work / "progress.jsonl"), "nvtx": nvtx}


def _tools(kf: KernelFile | None, o: VerifyOptions, out: Path, ok_gpu: bool, device: str, rungs: list[Rung]) -> None:
    """On request, Nsight Compute on the kernel's launches (the NVTX range around them selects them
    from the torch work that makes the inputs) and compute-sanitizer tools, each on one run (one seed)."""
    tools = (["profile"] if o.profile else []) + list(o.sanitizers)
    if kf is None:
        rungs += [Rung(t, "skipped", "not run: pre-checks failed") for t in tools]
        return
    timeout = o.timeout or kf.settings.get("timeout", 60)
    one = replace(o, seeds=1)
    if o.profile:
        rungs.append(profile_job(lambda work: _job(kf, one, ["run"], work, nvtx=True), out / "profile",
                                 ["--nvtx", "--nvtx-include", "pipelink_kernel/", "--launch-count", "1"],
                                 ok_gpu, device, timeout))
    for tool in o.sanitizers:
        rungs.append(sanitize_job(tool, lambda work: _job(kf, one, ["run"], work), out / tool, ok_gpu, device, timeout))


# --- the child's side -------------------------------------------------------------------------

@dataclass(frozen=True)
class TensorParam:
    """An operand of a kernel file, as the rungs see a linked kernel's Param."""
    name: str
    shape: tuple
    dtype: str          # pipelink's name: bf16, fp32, ...
    access: str         # read | write
    element_bytes: int


def _poison(dtype) -> float | int:
    from .metrics import INT_POISON, poison_value
    if dtype.is_floating_point:
        return float("nan")
    name = _dtype_name(dtype)
    return poison_value(name) if name in INT_POISON else 0


def _dtype_name(t) -> str:
    """The contract dtype of a tensor (or a torch dtype)."""
    import torch
    names = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp32",
             torch.int32: "int32", torch.int8: "int8", torch.uint8: "uint8", torch.int64: "uint64"}
    return names.get(getattr(t, "dtype", t), "fp32")


class CallableKernel:
    """A kernel file loaded in the child, with the interface the rungs use on a linked kernel."""

    def __init__(self, job: dict):
        import torch
        self.torch, self.job = torch, job
        self.module = _import(job["python"]["file"])
        self.manifest = {"kernel": job["python"]["name"]}
        probe = self.module.inputs(0)
        _check_tensors(probe, "inputs(0)")
        made = self.module.outputs(probe)
        _check_tensors(made, "outputs(inputs)")
        self._outputs = {n: (tuple(t.shape), t.dtype) for n, t in made.items()}
        clash = sorted(set(probe) & set(made))
        if clash:
            raise ValueError(f"inputs and outputs share names {clash}")
        self._params = tuple(
            [TensorParam(n, tuple(t.shape), _dtype_name(t), "read", t.element_size()) for n, t in probe.items()]
            + [TensorParam(n, tuple(t.shape), _dtype_name(t), "write", t.element_size()) for n, t in made.items()])
        self.report = None

    def params(self) -> tuple:
        return self._params

    def launch_values(self, inputs: dict) -> dict:
        """A kernel file's facts are its own: none is given at launch."""
        return {}

    def inputs(self, seed: int, draw_launch: bool = False) -> dict:
        got = self.module.inputs(seed)
        _check_tensors(got, f"inputs({seed})")
        return got

    def outputs(self) -> dict:
        """The outputs, poisoned as a link's are (metrics.poison_value); an integer type pipelink has no name for
        is filled with 0."""
        torch = self.torch
        return {n: torch.full(shape, _poison(dtype), dtype=dtype, device="cuda") for n, (shape, dtype) in self._outputs.items()}

    def launch(self, tensors: dict) -> None:
        outs = {n: tensors[n] for n in self._outputs}
        ins = {n: t for n, t in tensors.items() if n not in self._outputs}
        if self.job.get("nvtx"):  # a profile run: the range tells ncu which launches are the kernel's
            with self.torch.cuda.nvtx.range("pipelink_kernel"):
                self.module.kernel(ins, outs)
        else:
            self.module.kernel(ins, outs)

    def compile(self) -> float:
        """The first call (a DSL compiles its kernel here), synchronized: seconds."""
        t0 = time.perf_counter()
        ins, outs = self.module.inputs(0), self.outputs()
        self.module.kernel(ins, outs)
        self.torch.cuda.synchronize()
        return time.perf_counter() - t0

    def reference(self, inputs: dict, facts: dict) -> dict:
        return self.module.reference(inputs)

    def baselines(self) -> list:
        """(label, f(inputs, facts)) for each entry of the file's `baselines`."""
        found = getattr(self.module, "baselines", None) or {}
        if not isinstance(found, dict):
            raise TypeError("baselines is not a dict of name -> function")
        return [(str(label), (lambda ins, facts, fn=fn: fn(ins))) for label, fn in found.items()]


class CompileOnlyKernel:
    """A kernel file on a machine without a GPU: compile() calls its compile_only() (no tensors, no launch) and
    keeps what it returned where the dumps rung looks (the module's globals, under ``compiled_for_sm90a``). A
    module the file imports that is not installed here (``missing``) makes both rungs not run, not failed."""

    def __init__(self, job: dict):
        import os
        os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")  # CuTe DSL reads it when cutlass is imported: before
        self.job, self.missing = job, None
        try:
            self.module = _import(job["python"]["file"])
        except ModuleNotFoundError as exc:  # torch, say, on a machine that has neither it nor a GPU: not run
            self.module, self.missing = None, exc.name
        self.manifest = {"kernel": job["python"]["name"]}
        self.report = None

    def compile(self) -> float:
        t0 = time.perf_counter()
        compiled = self.module.compile_only()
        if isinstance(compiled, (list, tuple)):
            compiled = {f"kernel_{i}": k for i, k in enumerate(compiled)}
        if not isinstance(compiled, dict):
            compiled = {"kernel": compiled}
        self.module.compiled_for_sm90a = compiled
        return time.perf_counter() - t0


def _import(file: str):
    import importlib.util
    folder = str(Path(file).parent)
    if folder not in sys.path:  # the file's own imports of its neighbours (a shared reference, say)
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(f"pipelink_kernel_file_{abs(hash(file))}", file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # DSLs that inspect their kernel's module (Triton) need it registered
    spec.loader.exec_module(module)
    return module


def _check_tensors(got, what: str) -> None:
    import torch
    if not isinstance(got, dict) or not got:
        raise TypeError(f"{what} returned {type(got).__name__}, not a dict of tensors")
    for n, t in got.items():
        if not isinstance(n, str) or not isinstance(t, torch.Tensor):
            raise TypeError(f"{what}: {n!r} is not a name with a tensor")
        if not t.is_cuda:
            raise TypeError(f"{what}: {n} is on {t.device}, not on the GPU")

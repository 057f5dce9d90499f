"""One operator for every problem size: a linked kernel serves a bucket of sizes of a `bound` fact.

    op = pipelink.op("examples/qwen_mlp/link.toml", vary=("M",))
    y = op(x, w)                      # any M the contracts take: torch.ops.pipelink.<name>_any(x, w)

A fact a contract declares `bound` (facts.requires.M.bound) reaches the code only through the tile grid and
through TMA dimensions that may be partial. A kernel linked for a size then serves every smaller one: the tiles
past the operands load zeros and store nothing, and the runtime encodes the tensor maps with the shapes at hand.
So the operator links once per bucket, not per size: the size in units of the operand's TMA box, rounded up to
at most four significant bits (1..16, 18, 20, ..., 32, 36, 40, ...: at most 12.5 % more boxes than the size
needs; 32 buckets for 1 to 64 boxes). Each bucket's kernel is linked on first use (the package and build caches make a relink cheap), kept in
memory, and launched on torch's current stream, so the operator works in eager code, under CUDA graphs (call
``prepare`` for the sizes first: a link cannot be captured) and under torch.compile with dynamic shapes (the
fake implementation gives the output shapes from the inputs').

Which configuration serves a bucket is the tune cache's word (`pipelink tune`, tune/cache.py): the winner
recorded for that bucket on this GPU, driver, toolchain and package content. A bucket with no entry is served
by the heuristic, said once per operator (a TuningWarning): the winner of the nearest tuned bucket (sizes
compared by their logarithms), else the spec's own facts. ``tuned=False`` always takes the spec's facts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

import warnings

from .errors import DeviceError, SpecError
from .link.pipeline import link, plan_link
from .spec import load_spec
from .tune.cache import TuneCache, bucket_label


class TuningWarning(UserWarning):
    """An operator serves a bucket the tune cache has no entry for (said once per operator)."""

BUCKET_BITS = 4


def bucket(n: int) -> int:
    """``n`` rounded up to a value with at most BUCKET_BITS significant bits (at most 12.5 % more)."""
    if n < 1:
        raise ValueError(f"a size is at least 1, got {n}")
    shift = max(0, n.bit_length() - BUCKET_BITS)
    return -(-n >> shift) << shift


class Served(NamedTuple):
    """What serves a bucket (ShapeOp.config_for): the spec, the facts and settings that replace its own, and why."""
    spec: Path
    facts: dict
    why: str
    settings: dict


@dataclass(frozen=True)
class BoundDim:
    param: str      # "instance.operand", as the manifest names it
    dim: int
    fact: str
    granule: int    # the operand's TMA box along ``dim``: buckets count whole boxes


def bound_dims(spec_path: str | Path, vary: tuple[str, ...], facts: dict | None = None) -> list[BoundDim]:
    """Where each varying fact enters the operands, from the plan at the spec's own facts (and ``facts``, which
    replace some). Refused with a SpecError: a fact some instance requires without declaring it bound (its code
    may read the linked value), and a fact no read operand carries (nothing would give its size at a call)."""
    plan = plan_link(load_spec(spec_path, facts=facts) if facts else spec_path)
    dims: list[BoundDim] = []
    for fact in vary:
        takers = [inst for inst in plan.instances if fact in inst.contract.facts.requires]
        unbound = [f"{inst.name} ({inst.contract.name}, {inst.file})" for inst in takers
                   if not inst.contract.facts.requires[fact].bound]
        if not takers or unbound:
            raise SpecError(f"fact '{fact}' cannot vary at launch: " + (
                f"{', '.join(unbound)} require{'s' if len(unbound) == 1 else ''} it without declaring it bound (the "
                "code may read the linked value)" if unbound else "no component requires it"),
                file=str(spec_path), field="vary",
                hint=f"vary only facts every component declares `bound = true` under facts.requires.{fact}")
        for inst in takers:
            for o in inst.contract.operand:
                for d, e in enumerate(o.shape):
                    if e.text.strip() == fact:  # the contract's load check: bare, TMA, partial
                        box = inst.facts_eval(o.tma.box[d], f"operand.{o.name}.tma.box")
                        dims.append(BoundDim(f"{inst.name}.{o.name}", d, fact, box))
        if not any(b.fact == fact for b in dims):
            raise SpecError(f"fact '{fact}' is the size of no operand, so no call can give it", file=str(spec_path),
                            field="vary", hint="vary a fact that is an operand's dimension")
    return dims


def linked_sizes(dims: list[BoundDim], vary: tuple[str, ...], sizes: dict[str, int],
                 granule: dict[str, int] | None = None) -> tuple[int, ...]:
    """The size each varying fact is linked for: its bucket, in whole boxes of the first operand carrying it
    (the boxes of the spec's own facts, or ``granule``: the tune cache's, the smallest box its search
    linked, so that small sizes get buckets of their own; partial tiles take any configuration)."""
    out = []
    for fact in vary:
        if sizes[fact] < 1:
            raise DeviceError(f"{fact} = {sizes[fact]}: the operator takes sizes from 1 up",
                              hint="leave an empty batch out of the call")
        g = (granule or {}).get(fact) or next(b.granule for b in dims if b.fact == fact)
        out.append(g * bucket(-(-sizes[fact] // g)))
    return tuple(out)


class ShapeOp:
    """The operator ``pipelink.op`` returns: see the module's docstring."""

    def __init__(self, spec: str | Path, vary: tuple[str, ...], name: str | None = None, tuned: bool = True,
                 tune_root: str | Path | None = None, **link_options) -> None:
        import torch

        self.spec_path = Path(spec)
        self.vary = tuple(vary)
        self.dims = bound_dims(self.spec_path, self.vary)
        self.link_options = link_options
        self.kernels: dict[tuple[int, ...], tuple[object, object]] = {}  # linked sizes -> (kernel, runtime)
        first = link(self.spec_path, **link_options)  # the spec's own sizes: the operator's signature
        params = list(first.abi.launch_params)
        if first.abi.trace is not None or first.abi.report is not None or any(p.access == "readwrite" for p in params):
            raise DeviceError("a traced or sanitize-mode kernel, or one with a readwrite operand, cannot be an "
                              "operator", hint="link without trace and sanitize")
        self.params = params
        self.inputs = [p for p in params if p.access == "read"]
        self.outputs = [p for p in params if p.access == "write"]
        self.by_param = {}
        for b in self.dims:
            self.by_param.setdefault(b.param, []).append(b)
        self.name = name or f"{first.manifest['kernel']}_any"
        self._said = False
        self._torch = torch
        _bind_torch(torch)
        self._plans: dict[tuple, _CallPlan] = {}  # the inputs' shapes -> what a call on them needs
        self.tuned = TuneCache(self.spec_path, tune_root) if tuned else None
        self._register(torch)

    # -- sizes and buckets --------------------------------------------------------------------
    def sizes(self, tensors) -> dict[str, int]:
        """Each varying fact's size at this call, from the inputs that carry it (they must agree)."""
        sizes: dict[str, int] = {}
        for p, t in zip(self.inputs, tensors):
            for b in self.by_param.get(p.name, ()):
                n = int(t.shape[b.dim])
                if sizes.setdefault(b.fact, n) != n:
                    raise DeviceError(f"operand '{p.name}' has {n} along dimension {b.dim} ({b.fact}), another "
                                      f"operand {sizes[b.fact]}", hint=f"pass operands of one {b.fact}")
        return sizes

    def linked_sizes(self, sizes: dict[str, int]) -> tuple[int, ...]:
        return linked_sizes(self.dims, self.vary, sizes, self.tuned.granule if self.tuned is not None else None)

    def config_for(self, key: tuple[int, ...]) -> "Served":
        """Which spec, facts and settings serve the bucket ``key``, and why: the tune cache's winner for it; with
        none, the heuristic: the winner of the nearest tuned bucket (sizes compared by their logarithms), else the
        spec's own facts. The first bucket served by the heuristic is said once (a warning)."""
        bucket = dict(zip(self.vary, key))
        entry = self.tuned.get(bucket) if self.tuned is not None else None
        if entry is not None:
            return Served(self._spec_of(entry), entry.facts, f"tuned ({self.tuned.path})", entry.settings)
        near = self.tuned.nearest(bucket) if self.tuned is not None else None
        why = (f"the nearest tuned bucket's ({', '.join(f'{k}={v}' for k, v in near.bucket.items())})" if near else
               "the spec's own facts")
        if not self._said:
            self._said = True
            warnings.warn(f"pipelink.op {self.name}: no tuned configuration for {bucket_label(bucket)} in the tune "
                          f"cache ({self.tuned.path if self.tuned else 'not read'}); serving it, and any other such "
                          f"bucket, with {why}. Run `pipelink tune {self.spec_path} --shape "
                          f"{bucket_label(bucket)} --fact ...` to tune it", TuningWarning, stacklevel=3)
        return Served(self._spec_of(near), near.facts, why, near.settings) if near else \
            Served(self.spec_path, {}, why, {})

    def _spec_of(self, entry) -> Path:
        return self.spec_path.parent / entry.spec if entry.spec else self.spec_path

    def kernel_for(self, **sizes: int):
        """The linked kernel that serves these sizes (linked now, on first use of its bucket)."""
        from .runtime import Runtime
        key = self.linked_sizes(sizes)
        if key not in self.kernels:
            served = self.config_for(key)
            kernel = link(load_spec(served.spec, facts={**served.facts, **dict(zip(self.vary, key))},
                                    settings=served.settings), **self.link_options)
            self.kernels[key] = (kernel, Runtime(kernel.cubin, kernel.manifest))
        return self.kernels[key][0]

    def prepare(self, **sizes) -> None:
        """Link ahead for every size listed (``op.prepare(M=range(1, 257))``): before CUDA-graph capture, or
        before serving."""
        lists = {f: list(v) if hasattr(v, "__iter__") else [v] for f, v in sizes.items()}
        for combo in zip(*lists.values()) if len(lists) > 1 else ((v,) for v in next(iter(lists.values()))):
            self.kernel_for(**dict(zip(lists, combo)))

    # -- the call -------------------------------------------------------------------------------
    def shape_of(self, p, sizes: dict[str, int]) -> list:
        shape = list(p.shape)
        for b in self.by_param.get(p.name, ()):
            shape[b.dim] = sizes[b.fact]
        return shape

    def __call__(self, *tensors, out=None):
        """The outputs for these inputs: a tensor, or a tuple where the kernel writes several. ``out`` (a tensor,
        or one per written operand) is written instead of new ones: each of the call's output shape and dtype,
        contiguous on cuda:0, overlapping no input (the kernel reads its inputs while it writes). In eager code
        the call launches directly (the torch dispatcher would cost more than the launch: bench/NOTES.md, the
        thirty-second session); under torch.compile, a dispatch or function mode (make_fx) or with tensor
        subclasses it goes through ``torch.ops.pipelink.<name>``, whose result is then copied into ``out``."""
        if out is not None and not isinstance(out, (tuple, list)):
            out = (out,)
        if _eager(self._torch, tensors):
            return self._run(tensors, out)
        result = self.op(*tensors)
        if out is None:
            return result
        results = result if isinstance(result, tuple) else (result,)
        if len(out) != len(results):
            raise self._out_count_error(len(out))
        for given, r in zip(out, results):
            given.copy_(r)
        return out[0] if len(out) == 1 else tuple(out)

    def _launch(self, *tensors):
        """The operator's CUDA implementation (the torch dispatcher's way in)."""
        return self._run(tensors, None)

    def _run(self, tensors, out):
        plan = self._plans.get(tuple([t.shape for t in tensors]))
        outs = plan.run(tensors, out) if plan is not None else None
        if outs is None:  # a new set of shapes, or operands the plan's quick checks refuse (said here in full)
            plan = self._plan(tensors, out)
            outs = plan.run(tensors, out)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _plan(self, tensors, out=None) -> "_CallPlan":
        """The plan for calls on these inputs' shapes: their sizes agree, the bucket's kernel is linked, and the
        inputs (and ``out``) pass launch_arrays' checks against the shapes at hand (shape, dtype, contiguity,
        device: a DeviceError naming the operand otherwise)."""
        if len(tensors) != len(self.inputs):
            raise DeviceError(f"operator {self.name} takes {len(self.inputs)} tensors "
                              f"({', '.join(p.name for p in self.inputs)}), got {len(tensors)}")
        sizes = self.sizes(tensors)
        self.kernel_for(**sizes)
        runtime = self.kernels[self.linked_sizes(sizes)][1]
        self._check_operands(self.inputs, tensors, sizes)
        if out is not None:
            if len(out) != len(self.outputs):
                raise self._out_count_error(len(out))
            self._check_operands(self.outputs, out, sizes)
        if len(self._plans) >= 4096:  # ever new shapes
            self._plans.clear()
        plan = self._plans[tuple([t.shape for t in tensors])] = _CallPlan(self, runtime, sizes, tensors[0].device)
        return plan

    def _out_count_error(self, given: int) -> DeviceError:
        return DeviceError(f"out= gives {given} tensor(s); operator {self.name} writes {len(self.outputs)} "
                           f"({', '.join(p.name for p in self.outputs)})", hint="give one tensor per output")

    def _check_operands(self, params, tensors, sizes) -> None:
        from .runtime import device_pointer
        for p, t in zip(params, tensors):
            if not isinstance(t, self._torch.Tensor):
                raise DeviceError(f"operand '{p.name}' is a {type(t).__name__}, not a tensor")
            device_pointer(t, replace(p, shape=tuple(self.shape_of(p, sizes))))
            if t.get_device() != 0:
                raise DeviceError(f"operand '{p.name}' is on {t.device}; the operator's kernels are loaded on "
                                  "device 0 (cuda:0)", hint="call it on tensors of cuda:0")

    def _fake(self, *tensors):
        import torch
        sizes = {}
        for p, t in zip(self.inputs, tensors):
            for b in self.by_param.get(p.name, ()):
                sizes.setdefault(b.fact, t.shape[b.dim])  # a SymInt under torch.compile(dynamic=True)
        outs = [torch.empty(self.shape_of(p, sizes), dtype=_dtype(p), device=tensors[0].device) for p in self.outputs]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _register(self, torch) -> None:
        def arg(p) -> str:
            return p.name.replace(".", "_")
        returns = "Tensor" if len(self.outputs) == 1 else f"({', '.join('Tensor' for _ in self.outputs)})"
        lib = torch.library.Library("pipelink", "FRAGMENT")
        lib.define(self.name + f"({', '.join(f'Tensor {arg(p)}' for p in self.inputs)}) -> {returns}")
        lib.impl(self.name, self._launch, "CUDA")
        torch.library.register_fake(f"pipelink::{self.name}", self._fake, lib=lib)
        self._library = lib  # keeps the registration alive with the operator
        self.op = getattr(torch.ops.pipelink, self.name)


class _CallPlan:
    """What a call on inputs of one set of shapes needs but their addresses, worked out once (``ShapeOp._plan``):
    the bucket's runtime, the shapes its TMA maps take, the inputs' dtypes, the outputs' shapes and dtypes, and
    a parameter block per set of addresses (torch's caching allocator hands a loop the same ones again). A call
    then checks dtype, contiguity and device, allocates the outputs (or checks ``out``) and launches on torch's
    current stream."""

    def __init__(self, op: ShapeOp, runtime, sizes: dict[str, int], device) -> None:
        self.torch, self.runtime, self.device = op._torch, runtime, device
        self.shapes = {p.name: op.shape_of(p, sizes) for p in op.params if p.name in op.by_param}
        self.in_dtypes = [_dtype(p) for p in op.inputs]
        self.outs = [(tuple(op.shape_of(p, sizes)), _dtype(p)) for p in op.outputs]
        self.names = [p.name for p in op.inputs] + [p.name for p in op.outputs]
        self.order = [self.names.index(p.name) for p in runtime.params]  # the runtime's operands, by position
        self.arguments: dict[tuple[int, ...], object] = {}
        self.stream = getattr(self.torch._C, "_cuda_getCurrentRawStream", None)  # torch's own, without a Stream object

    def run(self, tensors, out=None) -> list | None:
        """The outputs (new ones, or ``out``), launched; None where an operand fails the quick checks (the caller
        says why in full)."""
        for t, dtype in zip(tensors, self.in_dtypes):
            if t.dtype is not dtype or not t.is_contiguous() or t.get_device() != 0:  # dtypes are singletons
                return None
        torch = self.torch
        if out is None:  # the sizes as separate arguments: torch parses them ~2 us faster than one tuple
            outs = [torch.empty(*shape, dtype=dtype, device=self.device) if shape else
                    torch.empty((), dtype=dtype, device=self.device) for shape, dtype in self.outs]
        else:
            outs = list(out)
            if len(outs) != len(self.outs):
                return None
            for t, (shape, dtype) in zip(outs, self.outs):
                if t.shape != shape or t.dtype is not dtype or not t.is_contiguous() or t.get_device() != 0:
                    return None
        given = (*tensors, *outs)
        addresses = tuple([given[i].data_ptr() for i in self.order])
        arguments = self.arguments.get(addresses)
        if arguments is None:
            if out is not None:  # the same addresses at the same shapes overlap alike: checked once for them
                self._refuse_overlap(tensors, outs)
            if len(self.arguments) >= 64:  # ever new activations
                self.arguments.clear()
            arguments = self.arguments[addresses] = self.runtime.arguments(list(addresses), self.shapes)
        stream = self.stream(0) if self.stream else torch.cuda.current_stream(self.device).cuda_stream
        self.runtime.launch_prepared(arguments, stream)
        return outs

    def _refuse_overlap(self, tensors, outs) -> None:
        """An output that shares bytes with an input or another output would be written while the kernel reads
        it (or written twice): a wrong result, so refused."""
        spans = [(name, t.data_ptr(), t.data_ptr() + t.numel() * t.element_size())
                 for name, t in zip(self.names, (*tensors, *outs))]
        for i, (name, start, end) in enumerate(spans[len(tensors):], len(tensors)):
            for other, o_start, o_end in spans[:i]:
                if start < o_end and o_start < end and end > start and o_end > o_start:
                    raise DeviceError(f"out= operand '{name}' overlaps operand '{other}' (bytes "
                                      f"{max(start, o_start):#x}..{min(end, o_end):#x})",
                                      hint="give an output tensor of its own, not a view of an input")


def _eager(torch, tensors) -> bool:
    """Whether a call may launch directly: plain tensors, no torch.compile trace, no dispatch or function mode
    (those must see the registered operator). torch.compile sees the first test as True and stops there."""
    if _IS_COMPILING() or _DISPATCH_MODES() or _FUNCTION_MODES():
        return False
    for t in tensors:
        if type(t) is not _TENSOR:
            return False
    return True


_IS_COMPILING = _DISPATCH_MODES = _FUNCTION_MODES = _TENSOR = None  # set by _bind_torch when an operator is made


def _bind_torch(torch) -> None:
    """The torch functions a call asks, bound once (a module attribute lookup a call adds up: bench/NOTES.md)."""
    global _IS_COMPILING, _DISPATCH_MODES, _FUNCTION_MODES, _TENSOR
    _IS_COMPILING, _TENSOR = torch.compiler.is_compiling, torch.Tensor
    _DISPATCH_MODES, _FUNCTION_MODES = torch._C._len_torch_dispatch_stack, torch._C._is_torch_function_mode_enabled


def _dtype(p):
    from .runtime import torch_dtype
    return torch_dtype(p.dtype)


_OPS: dict[str, ShapeOp] = {}


def op(spec: str | Path, vary: tuple[str, ...] | list[str], name: str | None = None, tuned: bool = True,
       tune_root: str | Path | None = None, **link_options) -> ShapeOp:
    """The spec's kernel as an operator for every size of the ``vary`` facts (each declared `bound` by every
    component that requires it): ``torch.ops.pipelink.<name>``, ``name`` defaulting to the spec's link name
    + "_any". Arguments are the kernel's read operands in manifest order, results its write operands,
    allocated at the call's sizes. Each bucket takes its configuration from the tune cache (``tuned``; see the
    module's docstring), found in ``tune_root``/tune (default: the build cache's root, where `pipelink tune`
    writes; a deployment can ship a tuned folder beside the model). Made once per name in a process (a second
    call returns the first)."""
    key = name or str(Path(spec).resolve())
    if key not in _OPS:
        _OPS[key] = ShapeOp(spec, tuple(vary), name, tuned, tune_root, **link_options)
    return _OPS[key]

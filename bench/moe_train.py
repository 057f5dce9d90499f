"""The MoE training step (issue 51): forward + backward of the linked layer (examples/moe_train: the training
forward and the backward link, chained by pipelink.linked_function) against its monolithic control and torch (the
same layer with torch._grouped_mm forward and backward under torch.compile), in one process; then a short training
run of a 2-layer MoE model on random data with each.

    python bench/moe_train.py [--out DIR] [--reps N] [--shapes NAME ...] [--steps N] [--no-training]

Per shape (Qwen3-30B-A3B and Mixtral-8x7B, 4096 and 16384 tokens, routing from real-looking hidden states):
`pipelink verify` of the backward link (its prepare makes the saved tensors; float64 autograd reference); then on one
set of inputs every path's y and gradients against float64 autograd of the reference layer at the routing the
forward chose (rel L2 each, nothing non-finite), then the step timed interleaved with an L2 flush before each, and
linked against monolithic once more, the two alone; then each mode's forward and backward kernel alone (`parts`).
The training run: x -> x + moe1(x) -> + moe2(.), mean squared error to a random target, Adam, `--steps` steps from
one seed with pipelink's layers and with torch's, and torch eager as a third run whose distance from torch compiled
is the bf16 noise the pipelink run is held to.
Writes results/moe_train-<gpu|cpu>-<stamp>.json: `shapes[]` (`model`, `tokens`, `verify_passed`, `grads` (rel L2
per gradient), `median_ms` per path, `speedup_vs_torch`, `linked_over_monolithic_paired`) and `training` (`steps`,
`loss_pipelink[]`, `loss_torch[]`, `loss_torch_eager[]`, `max_abs_loss_diff`, `noise_bound`, `wall_s` per path: steps
2 on; the first, which compiles, is `first_step_s`).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from harness import (example, log, paired_ratio, paired_ratio_ci, quiet_console, time_interleaved, verify_record,
                     warm_up, write_result)

import pipelink

shapes = example("moe_train/shapes.py")
layer = example("moe_train/layer.py")
SHAPES = {f"{model}_{tokens}": (model, tokens) for model in shapes.MODELS for tokens in (4096, 16384)}
TOL = 1e-2  # bf16's rel L2 bound (verify's)
PAIR_SECONDS, PAIR_MAX, FLUSH_MS = 30.0, 2000, 0.2


def torch_layer(x, wr, w1, w2, k: int):
    """The layer as a torch user writes it for training: fp32 router logits, the top k (no gradient), softmax over
    the chosen, tokens sorted by expert, two torch._grouped_mm with SwiGLU between, index_add combine. w1 [E, 2I, H]
    (gate/up interleaved every 8 rows, as the kernels read it), w2 [E, H, I]."""
    import torch
    import torch.nn.functional as F
    reference = example("moe_train/reference.py")
    logits = x.float() @ wr.float().t()
    ids = torch.sort(logits.detach(), dim=-1, descending=True, stable=True).indices[:, :k]
    weights = torch.softmax(torch.gather(logits, 1, ids), dim=-1)
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    tok = order // k
    offs = torch.cumsum(torch.bincount(flat, minlength=w1.shape[0]), 0).to(torch.int32)
    h = torch._grouped_mm(x[tok], w1.transpose(-2, -1), offs=offs)
    gate, up = reference.split_gate_up(h)
    out = torch._grouped_mm(F.silu(gate) * up, w2.transpose(-2, -1), offs=offs)
    y = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    y = y.index_add(0, tok, out.float() * weights.reshape(-1)[order, None])
    return y.to(x.dtype)


def _pack(work: str, sources: bool) -> str:
    return str(shapes.pack(Path(work), sources=sources))


def _link(spec: str, mode: str) -> str:
    pipelink.link(Path(spec), mode=mode)
    return spec


def specs_of(work: Path, name: str, packages: Path, open_packages: Path) -> dict[str, tuple[Path, Path]]:
    """Each mode's (forward, backward) specs of shape ``name``, where run_shape reads them."""
    model, tokens = SHAPES[name]
    return {"pipelink": shapes.write_specs(work / name / "pipelink", packages, model, tokens),
            "monolithic": shapes.write_specs(work / name / "monolithic", open_packages, model, tokens)}


def prepare(work: Path, names: list[str], jobs: int) -> tuple[Path, Path]:
    """Both packings at once, then every link the shapes need (each mode's forward and backward), ``jobs``
    processes at a time into the build cache, so the timed part finds them built: one after another the
    monolithic controls alone (a CuTe translation unit each) take minutes."""
    spawn = multiprocessing.get_context("spawn")
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=jobs, mp_context=spawn) as pool:
        packed = pool.map(_pack, [str(work), str(work / "open")], [False, True])
        packages, open_packages = (Path(p) for p in packed)
        log(f"packed in {time.perf_counter() - t0:.0f} s; linking {4 * len(names)} kernels, {jobs} at a time")
        todo = [(str(spec), mode) for name in names
                for mode, pair in specs_of(work, name, packages, open_packages).items() for spec in pair]
        list(pool.map(_link, *zip(*todo)))
    log(f"prepared in {time.perf_counter() - t0:.0f} s")
    return packages, open_packages


def run_shape(name: str, work: Path, packages: Path, open_packages: Path, reps: int,
              pair_seconds: float = PAIR_SECONDS) -> dict:
    import torch
    reference = example("moe_train/reference.py")
    model, tokens = SHAPES[name]
    hidden, inter, experts, k = shapes.MODELS[model]
    record = {"name": name, "model": model, "tokens": tokens, "shape": {"H": hidden, "I": inter, "E": experts,
                                                                         "topk": k},
              "flops_step": 2 * tokens * hidden * experts * 3 + tokens * k * 18 * hidden * inter}
    specs = specs_of(work, name, packages, open_packages)
    fwd_spec, bwd_spec = specs["pipelink"]
    log(f"{name}: verify of the backward link")
    v = pipelink.verify(bwd_spec, out_dir=work / name / "run", bench=False, seeds=2, timeout=300,
                        console=quiet_console())
    record["verify"] = verify_record(v)
    record["verify_passed"] = v.passed
    log(f"  verify: {'passed' if v.passed else 'FAILED ' + str(record['verify']['rungs'])}")
    if not v.passed:
        return record
    x, wr, w1, w2 = shapes.inputs(model, tokens, seed=0, device="cuda")
    w1, w2 = w1.reshape(-1, hidden), w2.reshape(-1, inter)
    dy = (torch.randn(tokens, hidden, generator=torch.Generator().manual_seed(1)) / 8).bfloat16().cuda()
    leaves = [t.detach().clone().requires_grad_() for t in (x, wr, w1, w2)]

    def step(fn):
        y = fn(*leaves)
        return (y, *torch.autograd.grad(y, leaves, dy))

    # float64 autograd at the routing the forward chose, before any path holds device memory (at Mixtral's shapes
    # the float64 weights and their gradients alone are 23 GB)
    ids, _ = reference.route(x.float() @ wr.float().t(), k)
    ref_leaves = [t.double().requires_grad_() for t in (x, wr, w1, w2)]
    y_ref = reference.layer(*ref_leaves, ids)
    want = [y_ref.detach(), *torch.autograd.grad(y_ref, ref_leaves, dy.double())]
    del y_ref, ref_leaves
    torch.cuda.empty_cache()

    kernels = {mode: [pipelink.link(s, mode=mode) for s in pair] for mode, pair in specs.items()}
    fns = {mode: layer.moe_layer(*kernels[mode], name=f"moe_train_{mode}_{name}") for mode in kernels}
    torch._dynamo.reset()
    compiled = torch.compile(torch_layer, dynamic=False)
    fns["torch"] = lambda x, wr, w1, w2: compiled(x, wr, w1.reshape(experts, 2 * inter, hidden),
                                                  w2.reshape(experts, hidden, inter), k)
    names = ["y", "x", "wr", "w1", "w2"]
    record["grads"], ok = {}, {}
    for label, fn in fns.items():
        got = step(fn)
        with torch.no_grad():
            rel = {n: float((g.double() - w).norm() / w.norm()) for n, g, w in zip(names, got, want)}
            finite = all(bool(torch.isfinite(g).all()) for g in got)
        record["grads"][label] = {**rel, "finite": finite}
        ok[label] = finite and all(r < TOL for r in rel.values())
        log(f"  {label}: " + ", ".join(f"{n} {r:.2e}" for n, r in rel.items()) + ("" if finite else ", NON-FINITE"))
        del got
    del want
    record["grads_passed"] = ok
    if not (ok["pipelink"] and ok["monolithic"]):
        return record
    timed = {label: (lambda fn=fn: step(fn)) for label, fn in fns.items() if ok[label]}
    warm_up(timed["pipelink"], seconds=1.0)
    times = time_interleaved(timed, reps, host_slack_cycles=2_000_000)
    record["times"] = times
    med = {label: t["median_ms"] for label, t in times.items()}
    record["median_ms"] = med
    record["tflops"] = {label: record["flops_step"] / t / 1e9 for label, t in med.items()}
    if "torch" in med:
        record["speedup_vs_torch"] = med["torch"] / med["pipelink"]
    pair_reps = max(reps, min(PAIR_MAX, int(pair_seconds / (2 * (med["pipelink"] + FLUSH_MS) / 1000))))
    pairs = time_interleaved({m: timed[m] for m in ("pipelink", "monolithic")}, pair_reps, seed=1,
                             host_slack_cycles=2_000_000)
    record["pair_times"] = pairs
    record["linked_over_monolithic_paired"] = paired_ratio(pairs["pipelink"], pairs["monolithic"])
    record["linked_over_monolithic_paired_ci95"] = paired_ratio_ci(pairs["pipelink"], pairs["monolithic"])
    log("  " + ", ".join(f"{lb} {t:.3f} ms ({record['tflops'][lb]:.0f} TFLOP/s)" for lb, t in med.items())
        + f"; speedup vs torch {record.get('speedup_vs_torch', float('nan')):.3f}, linked/monolithic "
        f"{record['linked_over_monolithic_paired']:.4f} ({pair_reps} pairs)")
    record["parts"] = time_parts(kernels, name, x, wr, w1, w2, dy, pair_reps)
    return record


def time_parts(kernels: dict, name: str, x, wr, w1, w2, dy, reps: int) -> dict:
    """The forward and the backward kernel alone (their torch ops, no autograd around them), each mode's, paired:
    where the step's time goes, and whether a linked/monolithic gap is the kernels' or the host's."""
    import torch
    calls = {}
    for mode, (fwd_kernel, bwd_kernel) in kernels.items():
        fwd = pipelink.torch_op(fwd_kernel, name=f"moe_train_{mode}_{name}_fwd")  # the layer's operators
        bwd = pipelink.torch_op(bwd_kernel, name=f"moe_train_{mode}_{name}_bwd")
        with torch.no_grad():
            got = dict(zip(layer._names(fwd_kernel, "write"), fwd(x, wr, w1, w2)))
        held = {"x": x, "wr": wr, "w1": w1, "w2": w2, "dy": dy, **{v: got[k] for k, v in layer.SAVED.items()}}
        args = [held[layer.BACKWARD_TAKES[n]] for n in layer._names(bwd_kernel, "read")]
        calls[f"{mode}_forward"] = lambda fwd=fwd: fwd(x, wr, w1, w2)
        calls[f"{mode}_backward"] = lambda bwd=bwd, args=args: bwd(*args)
    with torch.no_grad():
        times = time_interleaved(calls, reps, seed=2)
    out = {"times": times, "median_ms": {label: t["median_ms"] for label, t in times.items()}}
    for part in ("forward", "backward"):
        a, b = times[f"pipelink_{part}"], times[f"monolithic_{part}"]
        out[f"{part}_linked_over_monolithic_paired"] = paired_ratio(a, b)
        out[f"{part}_linked_over_monolithic_paired_ci95"] = paired_ratio_ci(a, b)
    log("  alone: " + ", ".join(f"{lb} {t:.3f} ms" for lb, t in out["median_ms"].items()) + "; linked/monolithic "
        f"forward {out['forward_linked_over_monolithic_paired']:.4f}, "
        f"backward {out['backward_linked_over_monolithic_paired']:.4f} ({reps} rounds)")
    return out


def free_device_memory() -> None:
    """What the last shape left (its kernels, the compiled torch path, the allocator's cache) given back: a shape's
    verify child ran out of memory beside a parent still holding 20-32 GB (H100, 2026-12-07)."""
    import gc

    import torch
    torch._dynamo.reset()
    gc.collect()
    torch.cuda.empty_cache()


def train(work: Path, packages: Path, steps: int, model: str = "qwen3_30b_a3b", tokens: int = 4096) -> dict:
    """Two MoE layers with residuals, MSE to a random target, Adam (lr 1e-4): ``steps`` steps from one seed with
    pipelink's layers, torch compiled's and torch eager's (the noise floor: the same bf16 math in another order)."""
    import torch
    hidden, inter, experts, k = shapes.MODELS[model]
    fwd_spec, bwd_spec = shapes.write_specs(work / "train", packages, model, tokens)
    linked = layer.moe_layer(pipelink.link(fwd_spec), pipelink.link(bwd_spec), name=f"moe_train_run_{model}")
    torch._dynamo.reset()
    compiled = torch.compile(torch_layer, dynamic=False)
    paths = {"pipelink": lambda x, p: linked(x, *p),
             "torch": lambda x, p: compiled(x, p[0], p[1].reshape(experts, 2 * inter, hidden),
                                            p[2].reshape(experts, hidden, inter), k),
             "torch_eager": lambda x, p: torch_layer(x, p[0], p[1].reshape(experts, 2 * inter, hidden),
                                                     p[2].reshape(experts, hidden, inter), k)}
    out = {"model": model, "tokens": tokens, "steps": steps, "optimizer": "Adam lr 1e-4", "layers": 2}
    for label, fn in paths.items():
        params = []
        for seed in (10, 11):
            _, wr, w1, w2 = shapes.inputs(model, 8, seed=seed, device="cuda")
            params.append([torch.nn.Parameter(t.contiguous()) for t in
                           (wr, w1.reshape(-1, hidden), w2.reshape(-1, inter))])
        opt = torch.optim.Adam([p for layer_params in params for p in layer_params], lr=1e-4)
        # the data is drawn on the GPU from one seed (the same batches for every path; drawing 2 x 4096 x 2048 on
        # the host would cost more than a step)
        data = torch.Generator(device="cuda").manual_seed(5)
        losses, step_s = [], []
        for _ in range(steps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            x = torch.randn(tokens, hidden, generator=data, device="cuda").bfloat16()
            target = (torch.randn(tokens, hidden, generator=data, device="cuda") * 0.5).bfloat16()
            h = x + fn(x, params[0])
            h = h + fn(h, params[1])
            loss = (h.float() - target.float()).pow(2).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(float(loss))  # synchronizes
            step_s.append(time.perf_counter() - t0)
        out[f"loss_{label}"] = losses
        out.setdefault("step_s", {})[label] = step_s
        # the first step holds torch.compile's compilation (and the kernels' module load): reported apart
        out.setdefault("first_step_s", {})[label] = step_s[0]
        out.setdefault("wall_s", {})[label] = sum(step_s[1:])
        log(f"  training {label}: loss {losses[0]:.4f} -> {losses[-1]:.4f}, first step {step_s[0]:.2f} s, "
            f"steps 2-{steps} {out['wall_s'][label]:.2f} s")
    diff = [abs(a - b) for a, b in zip(out["loss_pipelink"], out["loss_torch"])]
    noise = [abs(a - b) for a, b in zip(out["loss_torch_eager"], out["loss_torch"])]
    out["max_abs_loss_diff"] = max(diff)
    # The bound: at each step, 2x the largest distance between the two torch runs so far (the same bf16 math,
    # rounded in another order, drifts apart as training compounds it), and never under 1e-3 of the loss
    running, bound = 0.0, []
    for n, loss in zip(noise, out["loss_torch"]):
        running = max(running, n)
        bound.append(max(2 * running, 1e-3 * abs(loss)))
    out["noise_bound"] = bound
    out["within_noise"] = all(d <= b for d, b in zip(diff, bound))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="results folder (default bench/results)")
    ap.add_argument("--reps", type=int, default=50, help="interleaved steps of each path")
    ap.add_argument("--shapes", nargs="*", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--pair-seconds", type=float, default=PAIR_SECONDS,
                    help="seconds of linked/monolithic pairs a shape (the paired ratio's sample)")
    ap.add_argument("--steps", type=int, default=200, help="training steps of each run")
    ap.add_argument("--no-training", action="store_true", help="time the step only")
    ap.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1),
                    help="processes packing and linking before anything is timed")
    ap.add_argument("--prepare-only", action="store_true", help="pack and link, then stop (no GPU needed)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pipelink-moe-train-"))
    log("packing the forward's and the backward's components (the plan and the gather --closed), and open copies")
    packages, open_packages = prepare(work, args.shapes, args.jobs)
    if args.prepare_only:
        os._exit(0)
    result = {"example": "examples/moe_train", "reps": args.reps, "shapes": []}
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    path = None
    for name in args.shapes:
        result["shapes"].append(run_shape(name, work, packages, open_packages, args.reps, args.pair_seconds))
        free_device_memory()  # the next shape's verify runs in a child beside this process (Mixtral: ~60 GB)
        path = write_result("moe_train", result, args.out, stamp=stamp)  # a cut-off run keeps its data
    if not args.no_training:
        result["training"] = train(work, packages, args.steps)
        path = write_result("moe_train", result, args.out, stamp=stamp)
    log(f"wrote {path}")
    os._exit(0)  # torch.compile's workers can hang the interpreter's exit (bench/NOTES.md, issue 50)


if __name__ == "__main__":
    main()

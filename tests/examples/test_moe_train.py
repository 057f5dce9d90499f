"""The MoE training step (issue 51, docs/design/moe_training.md): the training forward (examples/moe's link keeping
what its backward reads) and the backward link (components/moe_train: combine^T, plan, a grouped WGMMA mainloop with
K- and MN-major operands, the SwiGLU-backward epilogue, the closed gather^T). CPU: both link, the kept outputs are
typed write operands, the gather ships closed. `gpu`: every gradient against float64 autograd of the reference
layer (examples/moe_train/reference.py), through `pipelink verify` (its prepare makes the saved tensors) and through
the two kernels chained as one differentiable layer, with routing where a quarter of the experts get no token."""

from __future__ import annotations

import importlib.util
import sys
import zipfile

import pytest

import pipelink

from conftest import ROOT, gpu_ok


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # torch.compile imports a traced function's module by its name
    spec.loader.exec_module(module)
    return module


shapes = _load("moe_train_shapes", ROOT / "examples" / "moe_train" / "shapes.py")
layer = _load("moe_train_layer", ROOT / "examples" / "moe_train" / "layer.py")


def _reference():  # imports torch
    return _load("moe_train_reference", ROOT / "examples" / "moe_train" / "reference.py")


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    return shapes.pack(tmp_path_factory.mktemp("moe_train"))


@pytest.mark.slow
def test_the_training_step_links(packages, tmp_path):
    fwd_spec, bwd_spec = shapes.write_specs(tmp_path, packages, "qwen3_30b_a3b", 4096)
    fwd, bwd = pipelink.link(fwd_spec), pipelink.link(bwd_spec)
    rows = -(-(4096 * 8 + 128 * 127) // 128) * 128  # the forward permute's row space
    kept = {p["name"]: (p["dtype"], p["shape"]) for p in fwd.manifest["params"] if p.get("kept")}
    assert kept == {"router.ids": ("int32", [4096, 8]), "router.weights": ("fp32", [4096, 8]),
                    "permute.row_token": ("int32", [rows]), "permute.token_row": ("int32", [4096, 8]),
                    "epilogue.hidden": ("bf16", [rows, 768]), "epilogue.out_rows": ("bf16", [rows, 2048]),
                    "epilogue.pre": ("bf16", [rows, 1536])}
    # the backward reads exactly what the forward keeps, at the forward's row space (the plan's guarantee)
    reads = {p["name"]: p["shape"] for p in bwd.manifest["params"] if p["access"] == "read"}
    assert reads["combine.row_token"] == [rows] and reads["epilogue.h"] == [rows, 1536] and reads["gemm.a"] == [rows, 768]
    assert bwd.plan.instance("plan").facts["rows_max"] == rows
    for kernel in (fwd, bwd):
        assert kernel.plan.postlink.conformance == () and not kernel.plan.postlink.findings
        assert kernel.plan.backend.resources.local == 0
    from pipelink.backend.inspect import inspect_cubin
    ops = inspect_cubin(bwd.cubin, bwd.plan.entry)[0].opcode_histogram
    # kinds 0/2 read B N-major (W as stored), kinds 1/3 both operands M/N-major: four 64 x 256 WGMMAs a k-step each
    assert ops.get("HGMMA.64x256x16.F32.BF16") == 8 and ops.get("UTMALDG.2D") == 8
    for closed in ("moe_bwd_plan", "moe_bwd_gather"):  # the table's writer and the gather^T ship closed
        with zipfile.ZipFile(packages / f"{closed}.plc") as z:
            assert not any(n.startswith("source/") for n in z.namelist())


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
def test_the_backward_matches_float64_autograd(packages, tmp_path):
    from rich.console import Console
    _, bwd_spec = shapes.write_specs(tmp_path, packages, "qwen3_30b_a3b", 4096)
    result = pipelink.verify(bwd_spec, out_dir=tmp_path / "run", bench=False, seeds=2, timeout=300,
                             console=Console(file=open("/dev/null", "w")))
    assert result.passed, [(r.name, r.status, r.detail) for r in result.rungs]
    c = result.rung("correctness").figures
    for name in ("gather.dx", "gather.dwr", "epilogue.dw1", "epilogue.dw2"):
        assert c[f"{name}.unwritten"] == 0 and c[f"{name}.rel_l2"] < 1e-2, (name, c)


def _gradients(fn, x, wr, w1, w2, dy):
    leaves = [t.detach().clone().requires_grad_() for t in (x, wr, w1, w2)]
    y = fn(*leaves)
    y.backward(dy)
    return y.detach(), [t.grad for t in leaves]


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
@pytest.mark.parametrize("model, tokens, skew", [("qwen3_30b_a3b", 4096, shapes.forward_shapes.SKEW),
                                                 ("qwen3_30b_a3b", 300, 0.0), ("mixtral", 1024, 0.0)])
def test_the_linked_layer_trains_like_the_reference(packages, tmp_path, model, tokens, skew):
    """The two kernels as one differentiable layer (pipelink.linked_function): y and every gradient against float64
    autograd at the routing the forward chose; with skew, a quarter of the experts get no token (their weight
    gradients must be written as zeros, not left as the poison)."""
    import torch
    reference = _reference()
    fwd, bwd = (pipelink.link(s) for s in shapes.write_specs(tmp_path, packages, model, tokens))
    fn = layer.moe_layer(fwd, bwd, name=f"moe_train_{model}_{tokens}_{int(skew)}")
    hidden, inter, experts, k = shapes.MODELS[model]
    x, wr, w1, w2 = shapes.inputs(model, tokens, skew=skew, seed=1, device="cuda")
    w1, w2 = w1.reshape(experts * 2 * inter, hidden), w2.reshape(experts * hidden, inter)
    dy = (torch.randn(tokens, hidden, generator=torch.Generator().manual_seed(2)) / 8).bfloat16().cuda()
    y, grads = _gradients(fn, x, wr, w1, w2, dy)
    ids, _ = reference.route(x.float() @ wr.float().t(), k)
    leaves = [t.double().requires_grad_() for t in (x, wr, w1, w2)]
    y_ref = reference.layer(*leaves, ids)
    y_ref.backward(dy.double())
    if skew:
        cold = set(range(experts)) - set(ids.unique().tolist())
        assert len(cold) >= experts // 4
        assert grads[2].reshape(experts, -1)[sorted(cold)].eq(0).all()
    for got, want, name in zip([y, *grads], [y_ref.detach(), *[t.grad for t in leaves]], ["y", "dx", "dwr", "dw1",
                                                                                           "dw2"]):
        got = got.double()
        assert torch.isfinite(got).all(), name
        rel = float((got - want).norm() / want.norm())
        assert rel < 1e-2, (name, rel)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
def test_the_linked_layer_under_torch_compile_and_an_optimizer(packages, tmp_path):
    """torch.compile traces both kernels as torch.ops.pipelink.* calls (fullgraph: no break around them): the
    compiled loss's gradients are the eager ones up to the order of fp32 sums (not bit for bit: the forward permute
    orders an expert's rows by its atomics, so the weight gradients sum the rows in another order each call; seen on
    an H100, bench/results/logs/h100-moe-train-compile-test-20261207.log.gz), and three Adam steps move every
    weight."""
    import torch
    fwd, bwd = (pipelink.link(s) for s in shapes.write_specs(tmp_path, packages, "qwen3_30b_a3b", 300))
    fn = layer.moe_layer(fwd, bwd, name="moe_train_compiled_300")
    hidden, inter, experts, _ = shapes.MODELS["qwen3_30b_a3b"]
    x, wr, w1, w2 = shapes.inputs("qwen3_30b_a3b", 300, seed=3, device="cuda")
    params = [torch.nn.Parameter(t.contiguous()) for t in (wr, w1.reshape(-1, hidden), w2.reshape(-1, inter))]

    # a loss whose gradient with respect to y is a fixed bf16 tensor, exactly: y . probe (a square's gradient 2 y / n
    # would be rounded to bf16 by inductor's fused code and by eager's ops in different places)
    probe = (torch.randn(300, hidden, generator=torch.Generator().manual_seed(4)) / 8).bfloat16().float().cuda()

    def loss_of(x, wr, w1, w2):
        return (fn(x, wr, w1, w2).float() * probe).sum()

    eager = torch.autograd.grad(loss_of(x, *params), params)
    compiled = torch.compile(loss_of, fullgraph=True)
    got = torch.autograd.grad(compiled(x, *params), params)
    for g, e, name in zip(got, eager, ("dwr", "dw1", "dw2")):
        assert torch.isfinite(g).all(), name
        rel = float((g.double() - e.double()).norm() / e.double().norm())
        assert rel < 1e-2, (name, rel)  # a gradient routed to the wrong input or saved tensor is ~1
    before = [p.detach().clone() for p in params]
    opt = torch.optim.Adam(params, lr=1e-3)
    for _ in range(3):
        opt.zero_grad(set_to_none=True)
        compiled(x, *params).backward()
        opt.step()
    assert all(not torch.equal(p, b) and torch.isfinite(p).all() for p, b in zip(params, before))

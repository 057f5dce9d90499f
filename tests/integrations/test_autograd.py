"""pipelink.linked_function (issue 51): a forward operator and its backward as one differentiable torch function.
Checked here with torch functions in the operators' place (the wrapper only routes tensors between two callables;
with linked kernels it runs on the GPU, in tests/examples/test_moe.py once the training link exists): gradients
against torch.autograd.gradcheck in float64, saved activations reaching the backward, an input without a gradient,
torch.compile over forward and backward, an optimizer loop, and every declaration error typed."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import pipelink  # noqa: E402
from pipelink.errors import OperatorError  # noqa: E402


def swiglu_pair():
    """y = (silu(x W1g^T) * (x W1u^T)) W2^T as a forward that saves its pre-activations h and a backward that reads
    them: the MoE expert's arithmetic (examples/moe/backward.py), on one expert."""
    def forward(x, w1, w2):
        h = x @ w1.t()
        g, u = h.chunk(2, dim=-1)
        a = torch.nn.functional.silu(g) * u
        return a @ w2.t(), h, a

    def backward(dy, h, a, x, w1, w2):
        g, u = h.chunk(2, dim=-1)
        s = torch.sigmoid(g)
        da = dy @ w2
        dh = torch.cat([da * u * s * (1 + g * (1 - s)), da * g * s], dim=-1)
        return dh @ w1, dh.t() @ x, dy.t() @ a

    return pipelink.linked_function(forward, backward, inputs=("x", "w1", "w2"), outputs=("y",), saved=("h", "a"),
                                    backward_takes=("dy", "h", "a", "x", "w1", "w2"), grads=("x", "w1", "w2"),
                                    name="swiglu_expert")


def inputs(dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(*shape, generator=g, dtype=dtype) * 0.5).requires_grad_() for shape in ((5, 6), (8, 6), (6, 4))]


def test_the_gradients_are_autograds():
    assert torch.autograd.gradcheck(swiglu_pair(), inputs())


def test_an_input_without_a_gradient_gets_none_and_a_saved_activation_reaches_the_backward():
    seen = {}

    def forward(x, scale):
        return x * scale, x.sum(dim=1)

    def backward(dy, rowsum, scale):
        seen["rowsum"] = rowsum
        return dy * scale

    f = pipelink.linked_function(forward, backward, inputs=("x", "scale"), outputs=("y",), saved=("rowsum",),
                                 backward_takes=("dy", "rowsum", "scale"), grads=("x",))
    x, scale = torch.randn(3, 4, dtype=torch.float64, requires_grad=True), torch.tensor(2.0, dtype=torch.float64)
    f(x, scale).sum().backward()
    assert torch.equal(x.grad, torch.full_like(x, 2.0)) and torch.equal(seen["rowsum"], x.detach().sum(dim=1))


def test_it_compiles_and_trains():
    """Under torch.compile (forward and backward traced), and 20 SGD steps that lower a least-squares loss."""
    layer = swiglu_pair()
    x, w1, w2 = inputs(torch.float32, seed=1)
    target = torch.randn(5, 6, generator=torch.Generator().manual_seed(2))
    compiled = torch.compile(lambda *t: layer(*t), fullgraph=True)
    eager_grads = torch.autograd.grad(((layer(x, w1, w2) - target) ** 2).sum(), (x, w1, w2))
    compiled_grads = torch.autograd.grad(((compiled(x, w1, w2) - target) ** 2).sum(), (x, w1, w2))
    for a, b in zip(eager_grads, compiled_grads):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)
    opt = torch.optim.SGD([w1, w2], lr=0.5)
    losses = []
    for _ in range(20):
        opt.zero_grad()
        loss = ((layer(x.detach(), w1, w2) - target) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0], losses


@pytest.mark.parametrize("kwargs, words", [
    (dict(inputs=("x", "x")), "'x' is named twice"),
    (dict(saved=("y",)), "'y' is named twice"),
    (dict(inputs=("x-1",)), "not a C identifier"),
    (dict(backward_takes=("dz",)), "'dz', which is no input"),
    (dict(grads=("y",)), "must name inputs"),
    (dict(outputs=()), "at least one input and one output"),
])
def test_a_wrong_declaration_is_refused(kwargs, words):
    base = dict(inputs=("x",), outputs=("y",), saved=(), backward_takes=("dy",), grads=("x",))
    with pytest.raises(OperatorError, match=words):
        pipelink.linked_function(lambda x: x, lambda dy: dy, **{**base, **kwargs})


def test_operators_returning_what_was_not_declared_are_refused():
    f = pipelink.linked_function(lambda x: (x * 2, x), lambda dy: dy, inputs=("x",), outputs=("y",),
                                 backward_takes=("dy",), grads=("x",))
    with pytest.raises(OperatorError, match="returned 2 tensors; 1 outputs"):
        f(torch.ones(2, requires_grad=True))
    g = pipelink.linked_function(lambda x: x * 2, lambda dy: (dy, dy), inputs=("x",), outputs=("y",),
                                 backward_takes=("dy",), grads=("x",))
    with pytest.raises(OperatorError, match="returned 2 tensors for the 1 gradients"):
        g(torch.ones(2, requires_grad=True)).sum().backward()
    with pytest.raises(OperatorError, match="takes 1 tensors"):
        g(torch.ones(2), torch.ones(2))

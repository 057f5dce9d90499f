"""Issue 51, first step: the MoE layer's backward cut into the parts the training link will link
(examples/moe/backward.py, float64 numpy), every gradient held to central differences of the forward, on routings
where an expert gets no token and one gets most. CPU only: the arithmetic the kernels will be written to."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("moe_backward", ROOT / "examples" / "moe" / "backward.py")
moe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(moe)

T, H, I, E, K = 7, 6, 4, 5, 2


def layer(seed: int, skew: float):
    """Random inputs; ``skew`` pushes the router towards expert 0 and away from expert E - 1 (the inputs positive, so
    a router row of +skew gains on every token: at skew 3 expert E - 1 gets no token, expert 0 every one)."""
    rng = np.random.default_rng(seed)
    x = np.abs(rng.normal(size=(T, H))) if skew else rng.normal(size=(T, H))
    wr = rng.normal(size=(E, H)) * 0.5
    wr[0] += skew
    wr[-1] -= skew
    w1 = rng.normal(size=(E, 2 * I, H)) * 0.4
    w2 = rng.normal(size=(E, H, I)) * 0.4
    return x, wr, w1, w2


def numeric(f, value: np.ndarray, eps: float = 1e-4) -> np.ndarray:
    """Central differences: eps 1e-4 keeps their rounding (~1e-16 / eps of the loss) below the gradients of a
    saturated router (~3e-4 at skew 3), and their truncation (~eps^2) far below the bound."""
    grad = np.zeros_like(value)
    for idx in np.ndindex(value.shape):
        keep = value[idx]
        value[idx] = keep + eps
        up = f()
        value[idx] = keep - eps
        down = f()
        value[idx] = keep
        grad[idx] = (up - down) / (2 * eps)
    return grad


@pytest.mark.parametrize("group", [2, I])  # W1 interleaved every 2 rows, and as [gate; up] halves
@pytest.mark.parametrize("seed, skew", [(0, 0.0), (1, 0.0), (2, 3.0)])
def test_every_gradient_matches_central_differences(seed, skew, group):
    x, wr, w1, w2 = layer(seed, skew)
    dy = np.random.default_rng(seed + 100).normal(size=(T, H))
    _, saved = moe.forward(x, wr, w1, w2, K, group)
    counts = np.diff(saved.starts)
    if skew:  # the routing the issue names: an expert without tokens, one with most
        assert counts[-1] == 0 and counts[0] >= T - 1, counts
    got = moe.backward(dy, wr, w1, w2, saved, group)
    # the top-k choice is piecewise constant: no logit pair of a token within reach of a step
    logits = np.sort(x @ wr.T, axis=1)[:, ::-1]
    assert (logits[:, K - 1] - logits[:, K]).min() > 1e-4
    loss = lambda: float((moe.forward(x, wr, w1, w2, K, group)[0] * dy).sum())  # noqa: E731
    for name, value in (("x", x), ("wr", wr), ("w1", w1), ("w2", w2)):
        want = numeric(loss, value)
        err = np.linalg.norm(got[name] - want) / np.linalg.norm(want)
        assert err < 1e-6, (name, err)


def test_an_expert_without_tokens_gets_zero_weight_gradients():
    x, wr, w1, w2 = layer(2, 3.0)
    _, saved = moe.forward(x, wr, w1, w2, K, I)
    got = moe.backward(np.ones((T, H)), wr, w1, w2, saved, I)
    assert not got["w1"][-1].any() and not got["w2"][-1].any() and got["w1"][0].any()


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 12), st.sampled_from([1, 2, 4]))
def test_join_inverts_split(rows, group):
    h = np.arange(rows * 2 * 4 * group, dtype=float).reshape(rows, 8 * group)
    gate, up = moe.split(h, group)
    assert gate.shape == up.shape == (rows, 4 * group)
    assert np.array_equal(moe.join(gate, up, group), h)

"""The MoE shapes of issue 13 and their inputs: routing that looks like a trained router's (not
uniform), and a skewed case in which some experts get no tokens."""

from __future__ import annotations

import math

# (hidden, expert intermediate, experts, top-k)
MODELS = {"qwen3_30b_a3b": (2048, 768, 128, 8), "mixtral": (4096, 14336, 8, 2)}
TOKENS = (4096, 16384)
MEAN = 6.0   # the hidden states' shared mean, along one direction
SKEW = 4.0   # the skewed case: cold experts' logits at least SKEW * 2 lower than any other's noise


def inputs(model: str, tokens: int, *, skew: float = 0.0, seed: int = 0, device="cpu", dtype=None):
    """x [T, H], wr [E, H], w1 [E, 2I, H] (gate/up interleaved), w2 [E, H, I], all bf16 (or ``dtype``).

    Hidden states share a mean direction m, as real ones do; each expert's router row leans on it by
    a random amount, so the experts' loads differ. With ``skew`` > 0 (SKEW) the last quarter of the
    experts lean away from m: their logits drop by skew * (x . m), at least 2 * skew, far below the
    others' spread, so they win no token ("cold" experts): the case the kernel must handle with
    zero-row groups."""
    import torch
    dtype = dtype or torch.bfloat16
    hidden, inter, experts, _ = MODELS[model]
    gen = torch.Generator().manual_seed(seed)
    m = torch.randn(hidden, generator=gen)
    m /= m.norm()
    x = torch.randn(tokens, hidden, generator=gen) + MEAN * m  # x . m ~ N(MEAN, 1): positive for every token
    wr = torch.randn(experts, hidden, generator=gen) / math.sqrt(hidden)
    wr += torch.randn(experts, 1, generator=gen) * (0.3 / MEAN) * m  # uneven loads (a logit offset ~ N(0, 0.3))
    if skew:
        cold = experts - max(1, experts // 4)
        wr[cold:] -= skew * m  # logits lower by skew * (x . m) >= skew * (MEAN - 4) for every token
    w1 = torch.randn(experts, 2 * inter, hidden, generator=gen) / math.sqrt(hidden)
    w2 = torch.randn(experts, hidden, inter, generator=gen) / math.sqrt(inter)
    return tuple(t.to(dtype).to(device) for t in (x, wr, w1, w2))

"""The decode block in float32 (float64 where it costs nothing), as verify calls it: the kernel's
operands keyed 'instance.operand', to its outputs, the caches included (updated at row L)."""

import torch

HEADS, KV_HEADS, HEAD_DIM = 32, 8, 64


def rope(t: torch.Tensor, pos: int, inv_freq: torch.Tensor) -> torch.Tensor:
    """Llama's rotate_half RoPE of t [..., 64] at position pos: pairs (i, i + 32)."""
    angle = pos * inv_freq.double()
    cos, sin = torch.cos(angle), torch.sin(angle)
    lo, hi = t[..., :32], t[..., 32:]
    return torch.cat([lo * cos - hi * sin, hi * cos + lo * sin], dim=-1)


def decode_block(x, wqkv, inv_freq, k_cache, v_cache, wo, pos: int, residual=None):
    """y = residual + attention(x) Wo^T for one new token per sequence (the residual x itself unless given: in a
    model it is the layer's input before its norm); returns (y, k_cache, v_cache)."""
    b = x.shape[0]
    qkv = x.double() @ wqkv.double().t()
    q = qkv[:, :2048].reshape(b, HEADS, HEAD_DIM)
    k = qkv[:, 2048:2560].reshape(b, KV_HEADS, HEAD_DIM)
    v = qkv[:, 2560:].reshape(b, KV_HEADS, HEAD_DIM)
    q, k = rope(q, pos, inv_freq), rope(k, pos, inv_freq)
    k_cache, v_cache = k_cache.clone(), v_cache.clone()
    k_cache[:, :, pos] = k.to(k_cache.dtype)  # the kernel stores bf16 rows: attend to what it stores
    v_cache[:, :, pos] = v.to(v_cache.dtype)
    keys = k_cache[:, :, :pos + 1].double().repeat_interleave(HEADS // KV_HEADS, dim=1)   # [b, 32, n, 64]
    values = v_cache[:, :, :pos + 1].double().repeat_interleave(HEADS // KV_HEADS, dim=1)
    q = q.to(x.dtype).double()  # the kernel hands q on in bf16
    p = torch.softmax(torch.einsum("bhd,bhnd->bhn", q, keys) / HEAD_DIM ** 0.5, dim=-1)
    o = torch.einsum("bhn,bhnd->bhd", p, values).reshape(b, HEADS * HEAD_DIM).to(x.dtype).double()
    y = (x if residual is None else residual).double() + o @ wo.double().t()
    return y, k_cache, v_cache


def verify_reference(inputs: dict, facts: dict) -> dict:
    y, k_cache, v_cache = decode_block(inputs["qkv.x"], inputs["qkv.wqkv"], inputs["qkv.inv_freq"],
                                       inputs["qkv.k_cache"], inputs["qkv.v_cache"], inputs["oproj.wo"], facts["L"],
                                       inputs.get("res.h"))
    return {"oproj.y": y, "qkv.k_cache": k_cache, "qkv.v_cache": v_cache}

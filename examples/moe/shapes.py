"""The MoE shapes of issue 13 and their inputs: routing that looks like a trained router's (not
uniform), and a skewed case in which some experts get no tokens."""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path

from pipelink.demo import packaged_spec

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


# --- the linked kernel: packages and a spec per shape -------------------------------------------

HERE = Path(__file__).resolve().parent
COMPONENTS = HERE.parent.parent / "components" / "moe"
# (component, closed): the permute ships closed, as a vendor's would.
PARTS = [("moe_router", False), ("moe_permute", True), ("moe_mainloop", False), ("moe_epilogue", False),
         ("moe_combine", False)]
TILE_M, TILE_N = 128, 256
L2_BYTES = 50 * 2**20  # the H200's L2 (GPU.md)
BAND = 8  # m-tiles per band where bands pay (measured: moe-gpu-20261202T012310.json)


def default_band(model: str) -> int:
    """The permute's tile order for ``model`` (its fact ``band``). m-tile major (0) while one
    expert's gate/up weights fit in L2 (Qwen3-30B-A3B: 6 MB), so each m-tile's walk over them hits
    L2; bands of BAND m-tiles walked n-tile by n-tile once they do not (Mixtral: 235 MB), so the
    blocks in flight share each weight tile instead of streaming all of W1 again per m-tile.
    Measured on the H200: Mixtral at 16384 tokens 22.03 -> 19.23 ms with bands of 8; Qwen3-30B-A3B
    at 16384 tokens 3.142 -> 3.182 ms (bench/NOTES.md)."""
    hidden, inter, _, _ = MODELS[model]
    return BAND if 2 * inter * hidden * 2 > L2_BYTES else 0


def pack(folder: Path, progress=None, *, sources: bool = False) -> Path:
    """The five components into ``folder``/packages (the permute with --closed: no source inside;
    with ``sources``, every package keeps its source, as the monolithic control needs)."""
    import pipelink
    packages = folder / "packages"
    for name, closed in PARTS:
        pipelink.pack(COMPONENTS / f"{name}.cu", COMPONENTS / f"{name}.toml", packages / f"{name}.plc",
                      closed=closed and not sources, progress=progress, variants=VARIANTS.get(name))
    return packages


# W1 as the examples interleave it (every 8 rows), or as transformers keeps it (gate_up_proj: each expert's gate rows,
# then its up rows), gathered by the mainloop per tile (b_halves; pipelink.integrations.transformers).
HALVES = {"b_halves": 1, "gate_group": 128}
VARIANTS = {"moe_mainloop": [{"b_halves": 0, "gate_group": 8}, HALVES],
            "moe_epilogue": [{"gate_group": 8}, {"gate_group": 128}]}


def tile_bound(hidden: int, inter: int, experts: int, k: int, tokens: int) -> int:
    """Most tiles the permute's table can list: every expert padded to whole 128-row tiles. The link
    takes this from the permute's guarantee (tiles_max); this is the host's own sum (the symbol
    control passes it, as a hand-written host would, and the tests check the link against it)."""
    rows = -(-(tokens * k + experts * (TILE_M - 1)) // TILE_M) * TILE_M
    return rows // TILE_M * (2 * inter // TILE_N + hidden // TILE_N)


def write_spec(folder: Path, packages: Path, model: str | tuple[int, int, int, int], tokens: int,
               facts: dict | None = None) -> Path:
    """link.toml for ``model`` (a name of MODELS, or its (hidden, intermediate, experts, top-k)) at ``tokens``
    tokens in ``folder`` (packages from ``packages``), with reference.py beside it. ``facts`` adds or replaces
    link-time facts."""
    hidden, inter, experts, k = MODELS[model] if isinstance(model, str) else model
    table = {"T": tokens, "H": hidden, "I": inter, "E": experts, "topk": k, "stages": 3, **(facts or {})}
    text = (HERE / "link.toml").read_text()
    lines = "".join(f"{name} = {value}\n" for name, value in table.items() if value is not None)
    text = re.sub(r"\[facts\]\n(.*?\n)\n", lambda _: f"[facts]\n{lines}\n", text, count=1, flags=re.S)
    for name, scale in (("wr", hidden), ("w1", hidden), ("w2", inter)):
        text = re.sub(rf'("\w+\.{name}" = "normal \* )[0-9.]+', rf"\g<1>{1 / math.sqrt(scale):.5f}", text)
    text = packaged_spec(text, packages)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "link.toml").write_text(text)
    shutil.copyfile(HERE / "reference.py", folder / "reference.py")
    return folder / "link.toml"

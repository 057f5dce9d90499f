"""The decode block's configurations (issue 14): batch x context x attention component, each a
link spec over packages packed from components/llama."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from pipelink.demo import packaged_spec

HERE = Path(__file__).resolve().parent
COMPONENTS = HERE.parent.parent / "components" / "llama"
BATCHES = (1, 8, 64)
CONTEXTS = (16, 512, 4096)
# long_wt: attn_long with whole tiles per warp (each warp its own ring slots and online softmax)
ATTENTION = {"short": "attn_short", "long": "attn_long", "long_wt": "attn_long_wt"}
PARTS = ["llama_qkv_rope", *ATTENTION.values(), "llama_oproj_residual", "llama_residual"]
# In a model (pipelink.integrations.transformers) the residual add takes the layer's input before its norm, not the
# projections' normed x: llama_residual names it as an operand of its own (`res.h`) and hands it to the o-projection.
RESIDUAL_INSTANCE = '[[instance]]\nname = "res"\nsource = "../../components/llama/llama_residual.cu"\n' \
                    'roles = { work = "producer" }\n\n'
QKV_RESIDUAL = '[[connect]]\nfrom = "qkv.residual"\nto = "oproj.residual"\n'



def pack(folder: Path, progress=None) -> Path:
    """Every component into ``folder``/packages."""
    import pipelink
    packages = folder / "packages"
    for name in PARTS:
        pipelink.pack(COMPONENTS / f"{name}.cu", COMPONENTS / f"{name}.toml", packages / f"{name}.plc",
                      progress=progress)
    return packages


def cache_rows(context: int) -> int:
    """Cache rows for a step at ``context`` cached tokens: room for the new one, in 64-row steps."""
    return -(-(context + 1) // 64) * 64


# The components' choices this example links with (bench/NOTES.md, sixteenth session):
# - gemv_split = 1: no group is split across blocks (no cross-block fix-up). Faster than stream-K
#   (gemv_split = 8) at both shapes measured, 18.1 vs 21.7 us at B = 1 and 38.6 vs 40.9 us at B = 64,
#   L = 16 (graph replay, llama_phases-gpu-20261202T121349.json); 2 and 4 lie between.
# - gemv_rows = 32, and 16 for the o-projection: each block projects a part of a group (two bands of
#   rows), so the qkv projection's 48 groups busy 96 blocks and o-proj's 32 busy 128. At B = 64, L = 16
#   the block went 37.4 -> 32.4 us (32 everywhere) -> 31.7 us (o-proj 16), at 64:4096 167.7 -> 161.2
#   -> 160.0 us; at B = 1 and 8 within 0.2 us (flushed L2, llama_phases-gpu-20261204T184858,
#   ...T185924, ...T185957). 16 rows for the qkv projection (192 units over 132 blocks) was slower.
# - gemv_stages left at 4 and no staged activation (gemv_act_smem = 0) at B <= 8: the ring's 128 KB as 8 and 16
#   stages of the parts' chunks and the activation staged in smem (seventeenth session) measured slower, 1:16 19.4
#   vs 18.2 us, 8:16 22.8 vs 22.2 (flushed L2, llama_phases-gpu-20261205T042654.json; bench/NOTES.md, nineteenth).
# - gemv_core = 1 above B = 8 (WGMMA_ABOVE): both projections on the wgmma core, 4 stages of weights and activation
#   slabs. At 64:16 the block 33.1 -> 28.5 us, at 64:4096 161.4 -> 155.6; at 8:16 it loses, 22.7 -> 27.9
#   (llama_phases-gpu-20261205T042507.json). Its clusters of two (cluster_ctas = 2) were slower still; not chosen.
CHOICES = {"gemv_split": 1, "gemv_rows": 32, "oproj.gemv_rows": 16}
WGMMA_ABOVE = 8  # the batches past it link the wgmma core
WGMMA = {"gemv_core": 1, "gemv_stages": 4, "oproj.gemv_stages": 4}
SPREAD = ("gemv_split", "gemv_rows")  # the facts that say how a projection spreads over the blocks
PER_UNIT = ("gemv_rows", "gemv_stages", "gemv_core")  # the choices that go with the parts (a ring's stages hold a
# unit's chunks; the wgmma core takes parts only)


def chosen_facts(extra_facts: dict[str, int] | None = None, batch: int | None = None) -> dict[str, int]:
    """CHOICES (and, for a ``batch`` above WGMMA_ABOVE, the wgmma core) with ``extra_facts`` over them. Asking
    for a spread of one's own (gemv_split or gemv_rows, for the whole block or one instance) drops the example's
    gemv_rows, gemv_stages and gemv_core choices, so that ``gemv_split = 2`` alone means whole groups split over two blocks (a
    group is not both cut into parts and split, and 4 stages of whole groups fill the ring: the contracts' limits)."""
    extra = {name: int(value) for name, value in (extra_facts or {}).items()}
    chosen = dict(CHOICES)
    if batch is not None and batch > WGMMA_ABOVE:
        chosen.update(WGMMA)
    if any(name.split(".")[-1] in SPREAD for name in extra):
        chosen = {name: value for name, value in chosen.items() if name.split(".")[-1] not in PER_UNIT}
    return {**chosen, **extra}


def write_spec(folder: Path, packages: Path, batch: int, context: int, attention: str = "short",
               extra_facts: dict[str, int] | None = None, launch: bool = False, rows: int | None = None,
               residual: bool = False) -> Path:
    """link.toml for one configuration in ``folder`` (packages from ``packages``), reference.py beside it;
    its [facts] are the shape's and chosen_facts(extra_facts): CHOICES with ``extra_facts`` over them
    (gemv_split = 8 for stream-K). A name ``instance.fact`` is that instance's own (its [[instance]]
    facts: ``oproj.gemv_split = 4`` spreads the o-projection alone). ``cluster_ctas`` is the [launch]
    cluster (2: the wgmma core's blocks share each activation chunk in pairs). With ``launch`` the position L is
    given at launch ([link] launch_facts): the kernel serves every step from 0 to ``context`` on caches of ``rows``
    rows (default: cache_rows(context)), as a model's decode loop needs. With ``residual`` the o-projection adds
    an operand of its own, `res.h` (a decoder layer's input before its norm), instead of qkv's x."""
    text = (HERE / "link.toml").read_text()
    merged = chosen_facts(extra_facts, batch)
    cluster = merged.pop("cluster_ctas", 1)  # not a [facts] entry: the link's [launch] cluster sets it
    facts = f"B = {batch}\nD = 2048\nL = {context}\nLmax = {rows or cache_rows(context)}\n"
    facts += "".join(f"{name} = {value}\n" for name, value in sorted(merged.items()) if "." not in name)
    text = re.sub(r"\[facts\]\n(.*?\n)\n", lambda _: f"[facts]\n{facts}\n", text, count=1, flags=re.S)
    own: dict[str, dict[str, int]] = {}
    for name, value in merged.items():
        if "." in name:
            instance, fact = name.split(".", 1)
            own.setdefault(instance, {})[fact] = int(value)
    for instance, values in own.items():
        line = f'name = "{instance}"\n'
        if line not in text:
            raise ValueError(f"no instance '{instance}' in the decode block's spec (qkv, attn, oproj)")
        pins = ", ".join(f"{k} = {v}" for k, v in sorted(values.items()))
        text = text.replace(line, line + f"facts = {{ {pins} }}\n", 1)
    if launch:
        text = text.replace("[link]\n", '[link]\nlaunch_facts = ["L"]\n', 1)
    if residual:
        assert QKV_RESIDUAL in text and "[[instance]]\n" in text
        text = text.replace(QKV_RESIDUAL, QKV_RESIDUAL.replace("qkv.residual", "res.residual"), 1)
        text = text.replace("[[instance]]\n", RESIDUAL_INSTANCE + "[[instance]]\n", 1)
    if cluster > 1:  # the wgmma core's blocks in clusters (the projections' fact cluster_ctas, from [launch])
        text = text.replace("[launch]\ngrid = 132\n", f"[launch]\ngrid = 132\ncluster = {cluster}\n", 1)
    text = packaged_spec(text, packages).replace(f'package = "{packages}/attn_short.plc"',
                                                 f'package = "{packages}/{ATTENTION[attention]}.plc"')
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "link.toml").write_text(text)
    shutil.copyfile(HERE / "reference.py", folder / "reference.py")
    return folder / "link.toml"


def prefix_spec(spec: Path, keep: tuple[str, ...]) -> Path:
    """The spec with only the instances in ``keep`` (and the connections between them), no [verify]: the
    block cut short after a phase, so a phase's cost inside the one kernel is a difference of two times."""
    text = re.sub(r"\n\[verify\].*", "\n", spec.read_text(), flags=re.S)
    blocks = re.split(r"(?=\n\[\[instance\]\]|\n\[\[connect\]\]|\n# No tile loop)", text)
    out = []
    for block in blocks:
        name = re.search(r'^\s*\[\[instance\]\]\s*\nname = "(\w+)"', block)
        if name and name.group(1) not in keep:
            continue
        ends = re.findall(r'(?:from|to) = "(\w+)\.', block)
        if block.lstrip().startswith("[[connect]]") and any(e not in keep for e in ends):
            continue
        out.append(block)
    path = spec.with_name("_".join(keep) + ".toml")
    path.write_text("".join(out))
    return path

"""The decode block's configurations (issue 14): batch x context x attention component, each a
link spec over packages packed from components/llama."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
COMPONENTS = HERE.parent.parent / "components" / "llama"
BATCHES = (1, 8, 64)
CONTEXTS = (16, 512, 4096)
# long_wt: attn_long with whole tiles per warp (each warp its own ring slots and online softmax)
ATTENTION = {"short": "attn_short", "long": "attn_long", "long_wt": "attn_long_wt"}
PARTS = ["llama_qkv_rope", *ATTENTION.values(), "llama_oproj_residual"]


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


def write_spec(folder: Path, packages: Path, batch: int, context: int, attention: str = "short",
               extra_facts: dict[str, int] | None = None) -> Path:
    """link.toml for one configuration in ``folder`` (packages from ``packages``), reference.py beside it;
    ``extra_facts`` adds facts (the components' choices, e.g. gemv_whole_groups = 1) to its [facts]."""
    text = (HERE / "link.toml").read_text()
    facts = f"B = {batch}\nD = 2048\nL = {context}\nLmax = {cache_rows(context)}\n"
    facts += "".join(f"{name} = {int(value)}\n" for name, value in sorted((extra_facts or {}).items()))
    text = re.sub(r"\[facts\]\n(.*?\n)\n", lambda _: f"[facts]\n{facts}\n", text, count=1, flags=re.S)
    text = text.replace('package = "packages/attn_short.plc"', f'package = "packages/{ATTENTION[attention]}.plc"')
    text = text.replace('package = "packages/', f'package = "{packages}/')
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "link.toml").write_text(text)
    shutil.copyfile(HERE / "reference.py", folder / "reference.py")
    return folder / "link.toml"

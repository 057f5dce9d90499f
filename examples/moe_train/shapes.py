"""The MoE training step's links per shape (issue 51): the training forward (forward.toml: examples/moe's five
components, its epilogue keeping the pre-activations, the saved tensors kept as outputs) and the backward
(backward.toml: components/moe_train, its gather^T shipped closed), at the MoE bench's models and token counts."""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

from pipelink.demo import packaged_spec

HERE = Path(__file__).resolve().parent
COMPONENTS = HERE.parent.parent / "components" / "moe_train"
_spec = importlib.util.spec_from_file_location("moe_shapes", HERE.parent / "moe" / "shapes.py")
forward_shapes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(forward_shapes)
MODELS, TOKENS, inputs = forward_shapes.MODELS, forward_shapes.TOKENS, forward_shapes.inputs

# (component, closed): the plan (the tile table's writer, whose guarantees the others read: the perturbation study
# changes them, bench/perturb.py) and the gather^T ship closed, as a vendor's would.
PARTS = [("moe_bwd_combine", False), ("moe_bwd_plan", True), ("moe_bwd_mainloop", False),
         ("moe_bwd_epilogue", False), ("moe_bwd_gather", True)]


def pack_backward(folder: Path, progress=None, *, sources: bool = False) -> Path:
    """The backward's five packages alone into ``folder``/packages (the plan and the gather --closed unless
    ``sources``)."""
    import pipelink
    packages = folder / "packages"
    for name, closed in PARTS:
        pipelink.pack(COMPONENTS / f"{name}.cu", COMPONENTS / f"{name}.toml", packages / f"{name}.plc",
                      closed=closed and not sources, progress=progress)
    return packages


def pack(folder: Path, progress=None, *, sources: bool = False) -> Path:
    """The forward's five packages (epilogue with both save_pre variants) and the backward's five into
    ``folder``/packages; with ``sources`` every package keeps its source (the monolithic control needs them)."""
    import pipelink
    packages = forward_shapes.pack(folder, progress, sources=sources)
    pipelink.pack(forward_shapes.COMPONENTS / "moe_epilogue.cu", forward_shapes.COMPONENTS / "moe_epilogue.toml",
                  packages / "moe_epilogue.plc", progress=progress,
                  variants=[{"gate_group": 8, "save_pre": 1}, {"gate_group": 8, "save_pre": 0}])
    pack_backward(folder, progress, sources=sources)
    return packages


def _facts(text: str, table: dict) -> str:
    lines = "".join(f"{name} = {value}\n" for name, value in table.items() if value is not None)
    return re.sub(r"\[facts\]\n(.*?\n)\n", lambda _: f"[facts]\n{lines}\n", text, count=1, flags=re.S)


def write_specs(folder: Path, packages: Path, model: str | tuple[int, int, int, int], tokens: int,
                facts: dict | None = None) -> tuple[Path, Path]:
    """(forward.toml, backward.toml) for ``model`` at ``tokens`` tokens in ``folder``, naming the packages in
    ``packages``, with the references beside them; ``facts`` adds link-time facts to the backward's."""
    hidden, inter, experts, k = MODELS[model] if isinstance(model, str) else model
    table = {"T": tokens, "H": hidden, "I": inter, "E": experts, "topk": k, "stages": 3}
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in ("forward", "backward"):
        text = _facts((HERE / f"{name}.toml").read_text(), {**table, **(facts or {})} if name == "backward" else table)
        text = text.replace('"../moe/reference.py:', '"moe_reference.py:')
        for operand, scale in (("wr", hidden), ("w1", hidden), ("w2", inter)):
            text = re.sub(rf'("\w+\.{operand}" = "normal \* )[0-9.]+', rf"\g<1>{scale ** -0.5:.5f}", text)
        (folder / f"{name}.toml").write_text(packaged_spec(text, packages))
        paths.append(folder / f"{name}.toml")
    shutil.copyfile(HERE / "reference.py", folder / "reference.py")
    shutil.copyfile(HERE.parent / "moe" / "reference.py", folder / "moe_reference.py")
    return paths[0], paths[1]

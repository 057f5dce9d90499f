"""Small links for the glue's tests (tests/link/test_glue_model.py, tests/link/test_glue_golden.py): real contracts in
packages that carry a placeholder instead of LTO-IR, which planning and glue generation never read."""

from __future__ import annotations

from pathlib import Path

from conftest import ROOT
from pipelink.contract import parse_contract_text
from pipelink.link import glue
from pipelink.link.pipeline import plan_link
from pipelink.package import Package, Variant

KSUM = ROOT / "tests" / "components"


def package(folder: Path, name: str, text: str) -> None:
    contract = parse_contract_text(text, f"{name}.toml")
    Package(contract=contract, contract_text=text, variants=[Variant({}, b"planning reads no code")],
            toolchain={"nvcc": "13.0.88"}, compile_options=[]).save(folder / f"{name}.plc")


def planning_packages(folder: Path, components) -> Path:
    """Packages of real contracts, each with its variants' compile-time facts (the contract's defaults where a
    variant sets none) and a placeholder for the code: what planning reads, so that a link refused before any
    code is generated needs no nvcc. ``components``: (source, contract, variants), as examples' shapes.py list
    them."""
    folder.mkdir(parents=True, exist_ok=True)
    for source, contract_path, variants in components:
        text = Path(contract_path).read_text()
        contract = parse_contract_text(text, Path(contract_path).name)
        defaults = {n: contract.facts.requires[n].default for n in contract.compile_facts()}
        Package(contract=contract, contract_text=text,
                variants=[Variant({**defaults, **v}, b"planning reads no code") for v in variants],
                toolchain={"nvcc": "13.0.88"}, compile_options=[]).save(folder / f"{Path(source).stem}.plc")
    return folder


def make_plan(folder: Path, packages: dict[str, str], spec: str):
    """The spec's plan over these contracts, with its glue."""
    for name, text in packages.items():
        package(folder, name, text)
    (folder / "link.toml").write_text(spec)
    made = plan_link(folder / "link.toml")
    made.glue = glue.generate(glue.GlueInputs.of(made))
    return made


# --- contracts ------------------------------------------------------------------------------------

def worker(end_phase: bool, block_tiles: str = "") -> str:
    """One role of 4 warps, one call per tile; with ``end_phase`` a whole-block phase after the loops."""
    text = ["[component]", 'name = "worker"', 'version = "1"', "", "[roles.work]", "warps = 4", "",
            "[[entry]]", 'symbol = "worker_tile"', 'role = "work"', 'phase = "tile"', ""]
    if end_phase:
        text += ["[[entry]]", 'symbol = "worker_end"', 'role = "work"', 'phase = "end"', 'scope = "block"', ""]
    return "\n".join(text + [block_tiles])


# Registers -> smem in one role: the producer's fragment (thread t holds row t, values v = columns) stored
# to the consumer's smem tile.
PRODUCER = """
[component]
name = "producer"
version = "1"

[roles.r]
warps = 4

[[entry]]
symbol = "producer_tile"
role = "r"
phase = "mma"
ports = ["acc"]

[[port]]
name = "acc"
direction = "out"
space = "registers"
dtype = "fp32"
shape = { row = 128, col = 4 }
values = 4
fragment = { row = "t", col = "v" }
protocol = "registers"
"""

CONSUMER = """
[component]
name = "consumer"
version = "1"

[roles.r]
warps = 4

[[entry]]
symbol = "consumer_tile"
role = "r"
phase = "store"

[[smem]]
name = "tile"
bytes = 2048
align = 16

[[port]]
name = "tile"
direction = "in"
space = "smem"
dtype = "fp32"
shape = { row = 128, col = 4 }
buffer = "tile"
offset = "row * 4 + col"
protocol = "barrier"
"""


def hand(name: str, direction: str, layout: str, scratch: bool) -> str:
    """A barrier hand-over of a 32 x 32 smem tile in one role; ``scratch``: a buffer of its phase only,
    which the allocator may lay over the other side's (memory shared across phases)."""
    text = f"""
[component]
name = "{name}"
version = "1"

[roles.r]
warps = 4

[[entry]]
symbol = "{name}_tile"
role = "r"
phase = "{name}_phase"

[[smem]]
name = "hand"
bytes = 4096
live = ["{name}_phase"]

[[port]]
name = "hand"
direction = "{direction}"
space = "smem"
dtype = "fp32"
shape = {{ i = "32", j = "32" }}
buffer = "hand"
offset = "{layout}"
protocol = "barrier"
"""
    if scratch:
        text += f'\n[[smem]]\nname = "scratch"\nbytes = 8192\nlive = ["{name}_phase"]\n'
    return text


def schedule(tiles: list[int], order: str, group: int, grid: int | None, cluster: int = 1, extra: str = "") -> str:
    lines = ["[schedule]", f"tiles = {tiles}", f'order = "{order}"', f"group = {group}", extra, "", "[launch]",
             f"cluster = {cluster}"]
    if grid is not None:
        lines.append(f"grid = {grid}")
    return "\n".join(lines) + "\n"


def instances(*names: str) -> str:
    return "".join(f'[[instance]]\nname = "{n}"\npackage = "{n}.plc"\n\n' for n in names)


def ksum_packages(folder: Path) -> Path:
    for name, path in (("ksum", KSUM / "ksum" / "ksum.toml"), ("acc_sink", KSUM / "acc_sink.toml")):
        package(folder, name, path.read_text())
    return folder


def ksum_spec(split: str, m: int, kt: int, grid: int, end: str = "") -> str:
    return (f'[link]\nname = "ksum"\n\n[facts]\nM = {m}\nKT = {kt}\n\n'
            '[[instance]]\nname = "mainloop"\npackage = "ksum.plc"\n\n'
            '[[instance]]\nname = "sink"\npackage = "acc_sink.plc"\n\n'
            '[[connect]]\nfrom = "mainloop.acc"\nto = "sink.acc"\n\n'
            f'[schedule]\ntiles = ["M / 128"]\nsplit = "{split}"\n\n[launch]\ngrid = {grid}\n' + end)


def ksum_plan(folder: Path, split: str, m: int, kt: int, grid: int):
    (folder / f"link-{split}-{m}-{kt}-{grid}.toml").write_text(ksum_spec(split, m, kt, grid))
    plan = plan_link(folder / f"link-{split}-{m}-{kt}-{grid}.toml")
    plan.glue = glue.generate(glue.GlueInputs.of(plan))
    return plan


def handover_plan(folder: Path, transpose: bool, scratch: bool = False):
    spec = ('[link]\nname = "hand"\n\n' + instances("a", "b") + '[[connect]]\nfrom = "a.hand"\nto = "b.hand"\n\n'
            + schedule([7], "row_major", 0, 3))
    return make_plan(folder, {"a": hand("a", "out", "i * 32 + j", scratch),
                          "b": hand("b", "in", "j * 32 + i" if transpose else "i * 32 + j", scratch)}, spec)


def store_plan(folder: Path):
    spec = ('[link]\nname = "store"\n\n' + instances("producer", "consumer")
            + '[[connect]]\nfrom = "producer.acc"\nto = "consumer.tile"\n\n' + schedule([9], "row_major", 0, 4))
    return make_plan(folder, {"producer": PRODUCER, "consumer": CONSUMER}, spec)


def grid_plan(folder: Path, order: str = "column_major", group: int = 0, end_phase: bool = True):
    spec = "[link]\nname = \"grid\"\n\n" + instances("worker") + schedule([6, 4], order, group, 5)
    return make_plan(folder, {"worker": worker(end_phase)}, spec)

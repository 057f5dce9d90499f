"""`pipelink new`: starting points that work unchanged.

``new component NAME`` writes a one-role elementwise component (y = 2 * x in bf16: NAME.cu, its contract
NAME.toml), a link spec that names it by source (link.toml: the link packs it), its torch reference
(reference.py) and a README with the commands to run. Packed, linked and, on a GPU, verified as written: the
tests do exactly that. ``new link NAME SOURCE_OR_PACKAGE...`` writes a link spec naming each component given,
with the facts their contracts require and do not default listed for the user to set, the first contract's
tile grid, and a reference stub naming every operand.

Nothing is overwritten: every file is checked first, and none is written if one exists.
"""

from __future__ import annotations

from pathlib import Path

from .errors import UsageError
from .fsutil import write_atomic
from .schema import identifier_problem

COMPONENT_CU = """\
// {name}: y = 2 * x, elementwise, in bf16. pipelink calls {name}_tile once for each tile the schedule gives this
// block, in every thread of the role "work" (the contract's [roles.work]: 4 warps). ctx.tile is the tile,
// ctx.thread this thread (0 .. 127). b holds what the contract names: the operands as global pointers (b.x, b.y)
// and the facts it requires (b.N, b.tile); pl_facts::work_threads is the role's thread count.
// Change the arithmetic in the loop, keep the loop: the last tile is partial when N is not a multiple of tile.
#include <cuda_bf16.h>

extern "C" __device__ void {name}_tile(pl_ctx ctx, pl_bind_{name} b) {{
  const long long first = static_cast<long long>(ctx.tile) * b.tile;
  for (int i = ctx.thread; i < b.tile; i += pl_facts::work_threads) {{
    const long long at = first + i;
    if (at < b.N) b.y[at] = __float2bfloat16(2.0f * __bfloat162float(b.x[at]));
  }}
}}
"""

COMPONENT_TOML = """\
# Contract of {name}: what pipelink must know to link it beside other components (docs/guide.md, section 2).
[component]
name = "{name}"
version = "0.1.0"
summary = "y = 2 * x, elementwise (bf16)"

# Facts: named integers the link resolves. N comes from the link spec; tile has a default the spec may change.
[facts.requires]
N = {{ range = [1, 1073741824], doc = "elements of x and y" }}
tile = {{ set = [256, 512, 1024, 2048], default = 1024, doc = "elements per tile (one call of {name}_tile)" }}

# One role: 4 warps (128 threads), running {name}_tile once per tile.
[roles.work]
warps = 4

[[entry]]
symbol = "{name}_tile"
role = "work"
phase = "run"

# Plain global operands: the kernel's parameters, handed to the code as b.x and b.y.
[[operand]]
name = "x"
dtype = "bf16"
shape = ["N"]
access = "read"

[[operand]]
name = "y"
dtype = "bf16"
shape = ["N"]
access = "write"

# The tiles it covers: tile t is elements t * tile .. (t + 1) * tile - 1.
[schedule]
tiles = ["ceil_div(N, tile)"]
"""

LINK_TOML = """\
# A link of one component, {name}, named by its source: the link packs it with {name}.toml (docs/guide.md, section 4).
[link]
name = "{name}_kernel"

[facts]
N = 1000000   # not a multiple of the tile: the last tile is partial

[[instance]]
name = "op"
source = "{name}.cu"

[schedule]
tiles = ["ceil_div(N, tile)"]

# `pipelink verify link.toml`: on a GPU, runs the kernel on random inputs and compares op.y with reference.py.
[verify]
reference = "reference.py:{name}"
"""

REFERENCE_PY = """\
\"\"\"What the linked kernel must compute, in torch: from the inputs verify makes (by instance.operand), the
outputs it checks (by instance.operand).\"\"\"


def {name}(inputs, facts):
    return {{"op.y": 2 * inputs["op.x"]}}
"""

README_MD = """\
# {name}

Written by `pipelink new component {name}`: a one-role elementwise component (y = 2 * x in bf16) and a link of it.

| file | what it is |
| --- | --- |
| `{name}.cu` | the component's device code: one `extern "C" __device__` entry, called once per tile |
| `{name}.toml` | its contract: facts, role, entry, operands, tile grid |
| `link.toml` | a link spec naming the component by source (the link packs it) |
| `reference.py` | what the kernel must compute, in torch |

```bash
pipelink link link.toml        # pack + link: the report, out/{name}_kernel.cubin
pipelink verify link.toml      # on a GPU: run, compare with reference.py, time, roofline
pipelink pack {name}.cu -o {name}.plc   # a package to ship (the contract is {name}.toml beside it)
```

Next: docs/tutorial.md (a producer/consumer pair through shared memory), docs/guide.md (every field).
"""


def _check_name(name: str, what: str) -> None:
    problem = identifier_problem(name)
    if problem:
        raise UsageError(f"{what} name {problem}", field="NAME",
                         hint="a C identifier: letters, digits and _, starting with a letter (it names the "
                              "entry symbol and the bindings' struct)")


def _write_all(files: dict[Path, str]) -> list[Path]:
    """Every file, or none: an existing one (the user's) refuses the whole set before anything is written."""
    there = [p for p in files if p.exists() or p.is_symlink()]
    if there:
        raise UsageError(f"{there[0].name} exists; pipelink new overwrites nothing", file=str(there[0]),
                         hint="choose another NAME or folder (-o), or move the file away")
    for path, text in files.items():
        write_atomic(path, text)
    return list(files)


def derived_names(name: str) -> list[str]:
    """The names a new component NAME writes into its files: its own, its entry's and its link's."""
    return [name, f"{name}_tile", f"{name}_kernel"]


def new_component(name: str, folder: str | Path | None = None) -> list[Path]:
    """The files of a new component NAME in ``folder`` (default: ./NAME); returns their paths."""
    _check_name(name, "component")
    for derived in derived_names(name)[1:]:  # "_" is an identifier, "__kernel" a reserved one
        if identifier_problem(derived):
            raise UsageError(f"component name {name!r} makes the name {identifier_problem(derived)}", field="NAME",
                             hint="a name of letters, digits and _ that starts with a letter, at most 57 characters")
    out = Path(folder) if folder is not None else Path(name)
    fill = {"name": name}
    return _write_all({out / f"{name}.cu": COMPONENT_CU.format(**fill), out / f"{name}.toml": COMPONENT_TOML.format(**fill),
                       out / "link.toml": LINK_TOML.format(**fill), out / "reference.py": REFERENCE_PY.format(**fill),
                       out / "README.md": README_MD.format(**fill)})


def new_link(name: str, components: list[str | Path], output: str | Path | None = None) -> list[Path]:
    """A link spec ``output`` (default ./link.toml) named ``name`` with one instance per component (a .cu source,
    its contract beside it, or a .plc package), and reference.py beside it; returns their paths."""
    from .contract import parse_contract_text
    from .fsutil import read_text_bounded
    from .package import TEXT_LIMIT, load_package
    _check_name(name, "link")
    if not components:
        raise UsageError("no component given", field="COMPONENT", hint="name one or more .cu sources or .plc packages")
    spec = Path(output) if output is not None else Path("link.toml")
    contracts, names, instances = [], [], []
    for given in map(Path, components):
        if given.suffix == ".plc":
            contract, key = load_package(given).contract, "package"
        elif given.suffix == ".cu":
            toml = given.with_suffix(".toml")
            if not toml.is_file():
                raise UsageError(f"{given}: no contract beside it ({toml})", file=str(given), field="COMPONENT",
                                 hint="write NAME.toml beside NAME.cu (`pipelink new component` shows one)")
            contract, key = parse_contract_text(read_text_bounded(toml, TEXT_LIMIT, "contract"), str(toml)), "source"
        else:
            raise UsageError(f"{given} is neither a .cu source nor a .plc package", file=str(given), field="COMPONENT",
                             hint="name sources (with their contract beside them) or packages")
        contracts.append(contract)
        rel = Path(_relative(given, spec.parent)).as_posix()
        names.append(_instance_name(given.stem, names))
        instances.append(f'[[instance]]\nname = "{names[-1]}"\n{key} = "{rel}"\n')
    return _write_all({spec: _spec_text(name, contracts, instances),
                       spec.parent / "reference.py": _reference_stub(name, contracts, names)})


def _relative(path: Path, base: Path) -> str:
    """``path`` as the spec at ``base`` names it (relative where it can be), refused where TOML text would need
    more than plain characters (a quote, a backslash, a control character)."""
    import os
    rel = os.path.relpath(path.resolve(), base.resolve())
    if any(ch in rel for ch in '"\\') or not rel.isprintable():
        raise UsageError(f"{path}: the path holds a quote, a backslash or a control character", file=str(path),
                         field="COMPONENT", hint="rename the file or its folder")
    return rel


def _instance_name(stem: str, taken: list[str]) -> str:
    """The component's file name where it is an identifier no other instance has, else c<n>."""
    name = stem if identifier_problem(stem) is None else f"c{len(taken)}"
    return name if name not in taken else f"{name}_{len(taken)}"


def _comment(text: str) -> str:
    """Text from a contract made safe for one comment line: control characters and line breaks become spaces."""
    return " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())[:160]


def _spec_text(name: str, contracts: list, instances: list[str]) -> str:
    import json
    facts = []
    for contract in contracts:
        for fact, req in contract.facts.requires.items():
            if req.default is None and not any(fact in line for line in facts):
                domain = (f"one of {req.set}" if req.set else f"range {req.range}" if req.range else "any int")
                facts.append(f"# {fact} = ?   # required by {contract.name}: {domain}"
                             + (f"; {_comment(req.doc)}" if req.doc else ""))
    tiles = next((c.schedule.tiles for c in contracts if c.schedule.tiles), None)
    grid = ", ".join(json.dumps(t.text) for t in tiles) if tiles else '"1"'
    ports = [f"{c.name}.{p.name} ({p.direction})" for c in contracts for p in c.port]
    return "\n".join([
        "# Written by `pipelink new link`: set the facts below (uncomment each with its value), connect the ports,",
        "# check the tile grid, then `pipelink link link.toml` (docs/guide.md, section 4).",
        "[link]", f'name = "{name}"', "", "[facts]", *facts, "", *instances,
        *([f"# [[connect]] each out-port to an in-port (from = \"instance.port\", to = ...): {', '.join(ports)}", ""]
          if ports else []),
        "[schedule]", f"tiles = [{grid}]   # " + ("the first contract's tile grid" if tiles else "one tile: set yours"),
        "", "[verify]", f'reference = "reference.py:{name}"', ""])


def _reference_stub(name: str, contracts: list, inst_names: list[str]) -> str:
    import json
    reads = [f"{i}.{o.name}" for i, c in zip(inst_names, contracts) for o in c.operand if o.access != "write"]
    writes = [f"{i}.{o.name}" for i, c in zip(inst_names, contracts) for o in c.operand if o.access != "read"]
    outputs = "\n".join(f"        {json.dumps(w)}: None,  # TODO" for w in writes)
    return (f'"""What {name} must compute, in torch. inputs: {", ".join(reads) or "none"} (tensors, by '
            f'instance.operand); facts: the link\'s facts by name."""\n\n\n'
            f"def {name}(inputs, facts):\n    return {{\n{outputs}\n    }}\n")

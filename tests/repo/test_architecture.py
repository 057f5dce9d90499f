"""The shape of src/pipelink, read with ``ast`` (no imports run): the modules import each other without
a cycle, function-level imports included; no import runs up the layers (LAYER_OF, BELOW); and no
function is longer than 80 lines.

An import edge is what a statement names: ``from . import x`` is an edge to the module ``x`` when
there is one, else to the package (``from .. import name`` reads the package's ``__init__``).
Importing ``a.b`` also runs ``a/__init__``; that implicit edge is left out, as every import tool
does. Imports under ``if TYPE_CHECKING:`` never run and are left out too.

The layers, bottom up (issue 53): the inputs (specs, contracts, expressions, and the leaf modules of
the types everything shares: findings, ``Ref``, the kernel's ABI, the stream-K arithmetic, the words
of [verify]) < packing (the package format) < the link stages < the front (the command line, the
public functions, making a package: ``pack`` links the new package alone, its probe, so it sits
above the link). The backend (CUDA tools) and the runtime (launching a linked kernel) stand apart
on the inputs; verify stands apart above the link and the runtime. Inside link/ the stages are
layers of their own in the pipeline's order (STAGE_ORDER, checked against link/pipeline.py): a
stage may import an earlier stage's module, never a later one's; the plan and the queries every
stage asks lie below them all, and the audit and the report read the plan alone.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = "pipelink"
MAX_LINES = 80

# The link stages in the order the pipeline runs them (link/pipeline.py; the ABI is laid out before
# the glue, which declares it, though the pipeline asks for it again at the end).
STAGE_ORDER = ("facts", "check", "alloc", "abi", "glue", "build", "postlink")

# layer -> the layers directly below it. A module may import one of its own layer or of a layer below
# its own, directly or through another (the relation is transitive), and nothing else.
BELOW: dict[str, tuple[str, ...]] = {
    "inputs": (),
    "backend": ("inputs",),
    "packing": ("backend",),
    "runtime": ("inputs",),
    "link.record": ("packing",),
    "link.shared": ("link.record",),
    **{f"link.{stage}": (f"link.{earlier}",) for earlier, stage in zip(("shared",) + STAGE_ORDER, STAGE_ORDER)},
    "link.audit": ("link.shared",),     # independent of the stages it checks
    "link.report": ("link.record",),    # a view of the plan
    "link.pipeline": (f"link.{STAGE_ORDER[-1]}", "link.audit", "link.report"),
    "verify": ("link.pipeline", "runtime"),
    "front": ("verify",),
}

_P = PACKAGE + "."
LAYER_OF: dict[str, str] = {
    # inputs: what the user writes, read and checked, and the leaf modules of the shared types
    **{_P + m: "inputs" for m in ("_version", "errors", "fsutil", "expr", "schema", "contract", "spec", "bindgen",
                                  "findings", "refs", "abi", "stream_k", "verify_terms")},
    **{_P + m: "backend" for m in ("backend", "backend.cache", "backend.inspect", "backend.nvcc",
                                   "backend.nvjitlink", "backend.toolchain")},
    _P + "package": "packing", _P + "lock": "packing",
    _P + "runtime": "runtime", _P + "torch_ops": "runtime", _P + "autograd": "runtime",
    _P + "link": "link.record", _P + "link.plan": "link.record", _P + "link.solve": "link.record",
    _P + "link.options": "link.shared", _P + "link.layout": "link.shared", _P + "link.queries": "link.shared",
    _P + "link.glue_ir": "link.shared",  # the glue's statements: built by the glue stage, read by the audit
    _P + "link.glue_model": "link.audit",  # what the statements mean, run by the audit
    **{f"{_P}link.{stage}": f"link.{stage}" for stage in STAGE_ORDER},
    _P + "link.conform": "link.postlink",
    _P + "link.tmem": "link.alloc",  # tensor memory's allocation, beside the shared memory's
    _P + "link.audit": "link.audit", _P + "link.report": "link.report", _P + "link.pipeline": "link.pipeline",
    **{_P + m: "verify" for m in ("verify", "verify.callables", "verify.child", "verify.dsl_dumps", "verify.metrics",
                                  "verify.options", "verify.pykernel", "verify.results", "verify.roofline",
                                  "verify.rungs", "verify.runner", "verify.timing", "verify.tools", "verify.trace",
                                  "verify.watch")},
    **{m: "front" for m in (PACKAGE, _P + "__main__", _P + "cli", _P + "cli_json", _P + "demo", _P + "mcp_server", _P + "new", _P + "packer",
                            _P + "probe", _P + "shape_op", _P + "tune", _P + "tune.cache", _P + "tune.child",
                            _P + "tune.distributed", _P + "tune.outcomes", _P + "tune.search",
                            _P + "tune.space", _P + "integrations", _P + "integrations.transformers")},
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_package(name: str, modules: dict[str, Path]) -> bool:
    return modules[name].name == "__init__.py"


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:``."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return skip


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    skip = _type_checking_only(tree)
    here = name if _is_package(name, modules) else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == PACKAGE}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")[:len(here.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != PACKAGE:
                continue
            subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules]
            found |= set(subs)
            if len(subs) < len(node.names):  # names that are not modules come from ``target`` itself
                found.add(target)
    return {m for m in found if m in modules and m != name}


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def allowed_layers(below: dict[str, tuple[str, ...]] = BELOW) -> dict[str, set[str]]:
    """layer -> the layers its modules may import: its own and every one below it."""
    def reach(layer: str, seen: tuple[str, ...] = ()) -> set[str]:
        assert layer not in seen, "the layers form a cycle: " + " -> ".join((*seen, layer))
        return {layer}.union(*(reach(b, (*seen, layer)) for b in below[layer]))
    return {layer: reach(layer) for layer in below}


def unassigned(graph: dict[str, set[str]], layer_of: dict[str, str] = LAYER_OF) -> list[str]:
    """Modules of the tree that no layer holds, and layers named that do not exist."""
    return sorted([m for m in graph if m not in layer_of] + [f"{m}: no layer {x!r}" for m, x in layer_of.items()
                                                             if x not in BELOW])


def layer_violations(graph: dict[str, set[str]], layer_of: dict[str, str] = LAYER_OF,
                     below: dict[str, tuple[str, ...]] = BELOW) -> list[str]:
    """Every import of a module its layer may not import, as "a (layer) imports b (layer)"."""
    allowed = allowed_layers(below)
    return [f"{a} ({layer_of[a]}) imports {b} ({layer_of[b]})" for a in sorted(graph) for b in sorted(graph[a])
            if a in layer_of and b in layer_of and layer_of[b] not in allowed[layer_of[a]]]


def pipeline_stage_calls() -> list[str]:
    """The stage modules link/pipeline.py calls, in the order of their first call (``facts.load(...)``,
    ``check.check(...)``, ...), the audit left out (it checks, it decides nothing)."""
    tree = ast.parse((SRC / PACKAGE / "link" / "pipeline.py").read_text())
    calls = sorted((n.lineno, n.col_offset, n.func.value.id) for n in ast.walk(tree)
                   if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                   and isinstance(n.func.value, ast.Name) and n.func.value.id in STAGE_ORDER)
    return list(dict.fromkeys(name for _, _, name in calls))


def long_functions(limit: int = MAX_LINES) -> list[str]:
    out = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    out.append(f"{path.relative_to(SRC)}:{node.lineno} {node.name}: {lines} lines")
    return out


def test_the_checker_sees_what_runs():
    """The checker itself: a function-level import is an edge (the CLI imports the packer in a
    command), an import under TYPE_CHECKING is none (the plan names the stage results it holds)."""
    graph = import_graph()
    assert "pipelink.packer" in graph["pipelink.cli"]
    assert "pipelink.link.build" not in graph["pipelink.link.plan"]
    assert "pipelink.link.plan" in graph["pipelink.link.build"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_layer_checker_sees_a_violation():
    """The checker itself: an input that imports a link stage, a stage that imports a later one, the
    audit that imports a stage, are each a violation; a stage that imports an earlier one is none."""
    bad = {"pipelink.spec": {"pipelink.link.plan"}, "pipelink.link.facts": {"pipelink.link.check"},
           "pipelink.link.audit": {"pipelink.link.alloc"}, "pipelink.link.glue": {"pipelink.link.check"}}
    assert layer_violations(bad) == [
        "pipelink.link.audit (link.audit) imports pipelink.link.alloc (link.alloc)",
        "pipelink.link.facts (link.facts) imports pipelink.link.check (link.check)",
        "pipelink.spec (inputs) imports pipelink.link.plan (link.record)"]
    assert allowed_layers()["inputs"] == {"inputs"}
    assert "link.check" in allowed_layers()["link.glue"] and "verify" not in allowed_layers()["link.pipeline"]


def test_a_module_without_a_layer_fails():
    graph = {**import_graph(), "pipelink.new_thing": set()}
    assert unassigned(graph) == ["pipelink.new_thing"]
    assert unassigned(import_graph(), {**LAYER_OF, "pipelink.spec": "middle"}) == ["pipelink.spec: no layer 'middle'"]


def test_every_module_has_a_layer():
    graph = import_graph()
    assert unassigned(graph) == [], "give each module a layer in LAYER_OF (tests/repo/test_architecture.py)"
    assert set(LAYER_OF) <= set(graph), f"LAYER_OF names modules that are gone: {sorted(set(LAYER_OF) - set(graph))}"


def test_no_import_runs_up_the_layers():
    violations = layer_violations(import_graph())
    assert violations == [], "imports against the layers:\n  " + "\n  ".join(violations)


def test_the_stage_layers_follow_the_pipeline():
    """The stages' layers are in the order link/pipeline.py runs them (the ABI, which the glue lays
    out first, aside): reorder the pipeline and this asks for STAGE_ORDER to follow."""
    assert pipeline_stage_calls() == [s for s in STAGE_ORDER if s != "abi"]
    assert STAGE_ORDER.index("abi") < STAGE_ORDER.index("glue")


def test_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_function_over_80_lines():
    assert long_functions() == []

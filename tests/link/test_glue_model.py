"""The model of what the glue means (link/glue_model.py) and the glue's statements (link/glue_ir.py).

Plans are made from real contracts in packages that carry a placeholder instead of LTO-IR (planning
and glue generation read no code; the toolchain is exercised by the example links): tile grids in
either order, with bands, clusters and whole-block phases; split schedules over the toy k-sum
mainloop of tests/components/ksum; hand-overs inside one role (registers to smem, an aliased buffer,
a copy with a new layout) and buffers that share memory across phases. Every plan's glue must pass
the model; each of the model's checks is shown to fail on glue statements edited the way a one-line
bug in the generator would write them.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from glue_cases import (grid_plan, handover_plan, instances, ksum_packages, ksum_plan, make_plan, schedule,
                        store_plan, worker)
from pipelink.errors import PipelinkError
from pipelink.link import audit, glue_model
from pipelink.link.glue_ir import (Bin, BlockIter, ContributorLoop, GlueIRError, KRange, Lit, Par, Sync, TileCtx,
                                   TileLoop, Var, c_text, evaluate, lit)
SETTINGS = dict(max_examples=40, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])


# --- every plan's glue passes the model ---------------------------------------------------------

@st.composite
def grid_case(draw):
    rows, cols = draw(st.integers(1, 24)), draw(st.integers(1, 24))
    order = draw(st.sampled_from(["row_major", "column_major"]))
    fast = cols if order == "row_major" else rows
    group = draw(st.sampled_from([0] + [g for g in (2, 3, 4) if fast % g == 0]))
    grid = draw(st.one_of(st.none(), st.integers(1, rows * cols + 5)))
    cluster = draw(st.sampled_from([1, 1, 2]))
    return rows, cols, order, group, grid, cluster, draw(st.booleans())


@settings(**SETTINGS)
@given(grid_case())
def test_every_tile_grid_order_band_and_phase_runs_each_tile_once_where_the_schedule_says(case):
    rows, cols, order, group, grid, cluster, end_phase = case
    spec = "[link]\nname = \"grid\"\n\n" + instances("worker") + schedule([rows, cols], order, group, grid, cluster)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            plan = make_plan(Path(tmp), {"worker": worker(end_phase)}, spec)
        except PipelinkError:
            return  # a cluster the grid cannot step together, a band the check refuses: tests/link/test_check_refusals.py
        findings, checked = glue_model.check(plan)
        assert not findings and checked > 0
        assert audit.check_glue(plan).ok


@pytest.fixture(scope="module")
def ksum_folder(tmp_path_factory):
    return ksum_packages(tmp_path_factory.mktemp("ksum_placeholders"))


@settings(**SETTINGS)
@given(split=st.sampled_from(["tiles", "stream_k", "hybrid"]), tiles=st.integers(1, 60), kt=st.integers(1, 12),
       grid=st.integers(1, 40))
def test_every_split_sums_each_contributor_once_and_streams_the_ring_in_order(ksum_folder, split, tiles, kt, grid):
    try:
        plan = ksum_plan(ksum_folder, split, 128 * tiles, kt, grid)
    except PipelinkError:
        return
    findings, checked = glue_model.check(plan)
    assert not findings and checked > 0
    assert audit.check_glue(plan).ok


@pytest.mark.parametrize("kind", ["alias", "copy", "copy+scratch", "registers"])
def test_hand_overs_in_one_role_are_ordered_both_ways(tmp_path, kind):
    plan = store_plan(tmp_path) if kind == "registers" else \
        handover_plan(tmp_path, transpose=kind != "alias", scratch="scratch" in kind)
    assert {t.kind for t in plan.transfers} == {"reg_to_smem" if kind == "registers" else kind.split("+")[0]
                                                .replace("copy", "smem_to_smem")}
    findings, checked = glue_model.check(plan)
    assert not findings and checked > 0


# --- each check fails on the glue a one-line generator bug writes ---------------------------------

def _edited(plan, pick, edit):
    """The plan with the glue's statements edited: ``pick`` selects statements, ``edit`` maps one to its
    replacement (None: removed)."""
    stmts = []
    for s in plan.glue.statements:
        if pick(s):
            s = edit(s)
            if s is None:
                continue
        stmts.append(s)
    plan.glue = dataclasses.replace(plan.glue, statements=tuple(stmts))
    return plan


def _invariants(plan) -> set[str]:
    return {i for i, _ in glue_model.check(plan)[0]}


def test_coordinates_out_of_the_schedules_order_are_found(tmp_path):
    plan = grid_plan(tmp_path)
    assert not _invariants(plan)
    # the column-major row divided by the column count instead of the row count
    _edited(plan, lambda s: isinstance(s, TileCtx),
            lambda s: dataclasses.replace(s, row=Bin("%", Var("pl_tile"), Lit(4)), col=Bin("/", Var("pl_tile"), Lit(4))))
    assert "model.tile_coords" in _invariants(plan)


def test_a_tile_loop_that_skips_or_repeats_tiles_is_found(tmp_path):
    for start, wanted in ((Bin("+", Var("blockIdx.x"), Lit(1)), "model.tiles"), (Lit(0), "model.tiles")):
        plan = grid_plan(tmp_path / str(wanted) / c_text(start).replace(" ", ""))
        _edited(plan, lambda s: isinstance(s, TileLoop), lambda s, x=start: dataclasses.replace(s, start=x))
        found = _invariants(plan)
        assert wanted in found and "model.coverage" in found


def test_a_whole_block_phase_told_another_count_is_found(tmp_path):
    plan = grid_plan(tmp_path)
    _edited(plan, lambda s: isinstance(s, BlockIter), lambda s: dataclasses.replace(s, value=Bin("-", s.value, Lit(1))))
    assert "model.block_iter" in _invariants(plan)


def test_ctx_last_on_another_tile_is_found(tmp_path):
    plan = grid_plan(tmp_path)
    _edited(plan, lambda s: isinstance(s, TileCtx), lambda s: dataclasses.replace(s, last=Lit(0)))
    assert "model.last" in _invariants(plan)


def test_a_fix_up_that_leaves_out_the_last_contributor_is_found(ksum_folder):
    plan = ksum_plan(ksum_folder, "stream_k", 128 * 20, 7, 8)
    assert not _invariants(plan)
    _edited(plan, lambda s: isinstance(s, ContributorLoop), lambda s: dataclasses.replace(s, cmp="<"))
    assert "model.fixup" in _invariants(plan)


def test_a_ring_position_that_forgets_earlier_units_is_found(ksum_folder):
    plan = ksum_plan(ksum_folder, "hybrid", 128 * 20, 5, 6)
    assert not _invariants(plan)
    _edited(plan, lambda s: isinstance(s, KRange) and isinstance(s.stage_base, Var),
            lambda s: dataclasses.replace(s, stage_base=Lit(0)))
    assert "model.stage_base" in _invariants(plan)


@pytest.mark.parametrize("kind, comment", [
    ("registers", "consumer is done with the previous tile"),  # write-after-read: the next tile's stores
    ("registers", "tile visible to the consumer"),             # read-after-write
    ("alias", "consumer done with the buffer"),
    ("alias", "producer's writes visible"),
    ("copy", "copy visible to the consumer"),
    ("copy", "producer's writes visible, consumer done with the last tile"),
])
def test_a_missing_sync_around_a_hand_over_is_found(tmp_path, kind, comment):
    plan = store_plan(tmp_path) if kind == "registers" else handover_plan(tmp_path, transpose=kind == "copy")
    assert not _invariants(plan)
    _edited(plan, lambda s: isinstance(s, Sync) and s.comment.endswith(comment), lambda s: None)
    assert "model.barriers" in _invariants(plan)


def test_a_sync_of_fewer_threads_than_the_role_orders_nothing(tmp_path):
    plan = store_plan(tmp_path)
    _edited(plan, lambda s: isinstance(s, Sync) and s.comment == "tile visible to the consumer",
            lambda s: dataclasses.replace(s, threads=s.threads - 32))
    assert "model.barriers" in _invariants(plan)


# --- expressions: the text C compiles is the tree the model evaluates -------------------------------

_leaf = st.one_of(st.integers(0, 50).map(lit), st.sampled_from(["x", "y"]).map(Var))


def _tree(children):
    return st.one_of(st.builds(lambda op, a, b: Bin(op, a, b), st.sampled_from(["+", "-", "*"]), children, children),
                     st.builds(lambda op, a, d: Bin(op, a, lit(d)), st.sampled_from(["/", "%"]), children,
                               st.integers(1, 9)),
                     children.map(Par))


def _c_value(text: str, env: dict) -> int:
    """The text read by Python's parser (which groups + - * / % as C does), computed as C computes:
    / and % truncate toward zero."""
    import ast

    def walk(n):
        if isinstance(n, ast.Expression):
            return walk(n.body)
        if isinstance(n, ast.Constant):
            return n.value
        if isinstance(n, ast.Name):
            return env[n.id]
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -walk(n.operand)
        a, b = walk(n.left), walk(n.right)
        if isinstance(n.op, (ast.Div, ast.Mod)):
            q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
            return q if isinstance(n.op, ast.Div) else a - q * b
        return {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}[type(n.op)]

    return walk(ast.parse(text, mode="eval"))


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.recursive(_leaf, _tree, max_leaves=12), st.integers(0, 100), st.integers(0, 100))
def test_printed_expressions_mean_their_tree(e, x, y):
    try:
        text = c_text(e)
    except GlueIRError:
        return  # the printer refuses a tree C would group otherwise
    assert evaluate(e, {"x": x, "y": y}) == _c_value(text, {"x": x, "y": y}), text


def test_the_printer_refuses_a_tree_c_would_group_otherwise():
    with pytest.raises(GlueIRError):
        c_text(Bin("*", Bin("+", Var("a"), Var("b")), Var("c")))  # would print a + b * c
    with pytest.raises(GlueIRError):
        c_text(Bin("-", Var("a"), Bin("-", Var("b"), Var("c"))))  # would print a - b - c
    assert c_text(Bin("*", Par(Bin("+", Var("a"), Var("b"))), Var("c"))) == "(a + b) * c"


def test_division_truncates_toward_zero_as_in_c():
    assert evaluate(Bin("/", Lit(-7), Lit(2)), {}) == -3
    assert evaluate(Bin("%", Lit(-7), Lit(2)), {}) == -1

"""Issue 53 item 6: every refusal of the link stages has a negative test. Each test here gives one refusal of
link/check.py, link/facts.py, link/solve.py or link/alloc.py the smallest input that breaks exactly its rule
(real nvcc packs; nothing mocked), next to a control where one is cheap, and asserts the typed error, its
field and the names its message must carry (both sides of a conflict). tests/mutation/mutants.py seeds a
one-line bug into each of these refusals ("every refusal has a negative test"); each is killed here.

Refusals covered elsewhere (the table of the issue 53 item 6 report):
  check.py  whole-block phase register ports, setmaxnreg before an end phase   test_whole_block.py,
            test_start_phase.py; tiles_from workspace / bytes / writer / count_max / bound
            test_dynamic_tiles.py, test_new_inputs_bad.py; tile grid test_tile_grid.py; split with a cluster,
            persistent = false, no k_tiles, reduce, epilogue order test_split.py; TMA boxes, ring layouts,
            mbarriers, registers, smem -> registers, hand-over across roles, unconnected in-port
            test_negative_checks.py; shape, dtype, tile order test_errors.py; global dtype and size
            test_global_ports_bad_input.py
  facts.py  pinned package hash test_pins.py
  solve.py  conflicts, domains, limits, no value, no solution, ambiguity test_solve.py, test_errors.py,
            test_stage_behaviour.py
  alloc.py  coresidency test_dynamic_tiles.py; split table and k-tile count test_split.py, test_qwen.py;
            cluster fast dimension and shared operand test_qwen.py; smem limit, barrier IDs test_errors.py;
            pinned barrier IDs test_pipeline.py
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

import pipelink
from pipelink import errors
from pipelink.contract import FactRequirement
from pipelink.expr import Expr
from pipelink.link import facts
from pipelink.link.pipeline import plan_link
from pipelink.refs import Ref
from pipelink.link.solve import COMBINATION_LIMIT, Equality, Party, Problem, solve

from conftest import ROOT, edit, inline_link
from contracts import component, register_port, smem_tile
from test_dynamic_tiles import CONTRACT as HALFWAY, SOURCE as HALFWAY_SOURCE, SPEC as HALFWAY_SPEC

KSUM = ROOT / "tests" / "components" / "ksum"


# --- small components, packed once per module ------------------------------------------------------

def global_port(direction: str) -> str:
    body = '[[workspace]]\nname = "w"\nbytes = 2048\n\n' if direction == "out" else ""
    buffer = 'buffer = "w"\n' if direction == "out" else ""
    return f"""
{body}[[port]]
name = "g"
direction = "{direction}"
space = "global"
{buffer}dtype = "fp32"
shape = {{ row = 16, col = 32 }}
"""


@pytest.fixture(scope="module")
def part(empty_part):
    """part(name, contract text, variants=None) -> the path of a real package whose entries are empty
    (conftest's empty_part: these refusals come before any code is generated)."""
    return empty_part


def spec(tmp_path: Path, instances, connects=(), facts_: dict | None = None, schedule: str = 'tiles = ["N / 128"]',
         launch: str = "") -> Path:
    """A link spec: instances are (name, package, extra TOML lines); connects are (from, to)."""
    text = ['[link]\nname = "refusals"\n',
            "[facts]\n" + "".join(f"{k} = {v}\n" for k, v in {"N": 1024, **(facts_ or {})}.items())]
    text += [f'[[instance]]\nname = "{n}"\npackage = "{p}"\n{extra}\n' for n, p, extra in instances]
    text += [f'[[connect]]\nfrom = "{a}"\nto = "{b}"\n' for a, b in connects]
    text.append(f"[schedule]\n{schedule}\n")
    if launch:
        text.append(f"[launch]\n{launch}\n")
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "link.toml"
    path.write_text("\n".join(text))
    return path


def refused(path: Path, kind: type, field: str | None, **options) -> errors.PipelinkError:
    with pytest.raises(kind) as info:
        plan_link(path, **options)
    err = info.value
    assert type(err) is kind, err  # the class itself, not a relative
    if field is not None:
        assert err.field == field, err
    return err


def cli_link(path: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "pipelink.cli", "link", str(path), "-o", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and not out.exists()
    return proc


# --- check.py: port connections ------------------------------------------------------------------------

def reg_pair(tmp_path, part, producer: str, consumer: str) -> Path:
    a = part("ra", component("ra", register_port(producer), ports='["acc"]'))
    b = part("rb", component("rb", register_port(consumer), ports='["acc"]'))
    return spec(tmp_path, [("ra", a, ""), ("rb", b, "")], [("ra.acc", "rb.acc")])


@pytest.mark.slow
@pytest.mark.parametrize("producer, consumer", [("out", "in"), ("out", "out"), ("in", "in"), ("in", "out")])
def test_a_connection_must_run_from_an_out_port_to_an_in_port(tmp_path, part, producer, consumer):
    """Both ends are checked: an out-port to an out-port (two writers, no reader) and an in-port to an in-port
    (two readers, no writer) are refused, as is a connection written backwards."""
    path = reg_pair(tmp_path, part, producer, consumer)
    if (producer, consumer) == ("out", "in"):  # the control: one array passed by reference
        assert [(t.kind, t.src, t.dst) for t in plan_link(path).transfers] == \
            [("reg_to_reg", Ref("ra", "acc"), Ref("rb", "acc"))]
        return
    err = refused(path, errors.PortMismatch, "connect[0]")
    assert err.message == f"ra.acc -> rb.acc: 'ra.acc' is an {producer}-port and 'rb.acc' an {consumer}-port"
    assert err.component == "ra -> rb" and err.file == str(path)
    assert err.hint == "connect an out-port (from) to an in-port (to)"


def test_an_out_port_to_an_out_port_exits_2_at_the_cli(tmp_path, part):
    proc = cli_link(reg_pair(tmp_path, part, "out", "out"), tmp_path)
    assert "(PortMismatch)" in proc.stderr and "connect[0]" in proc.stderr
    assert "'ra.acc' is an out-port and 'rb.acc' an out-port" in proc.stderr


def test_a_port_the_component_does_not_have_is_refused(demo_dir):
    path = edit(demo_dir / "link.toml", 'to = "store.tile"', 'to = "store.tiles"')
    err = refused(path, errors.SpecError, "connect[1].to")
    assert err.message == "component 'tile_store' (instance 'store') has no port 'tiles'"
    assert err.hint == "its ports: tile" and err.file == str(path)


@pytest.mark.slow
@pytest.mark.parametrize("producer, consumer", [("global", "smem"), ("smem", "global")])
def test_a_global_port_connects_only_to_a_global_port(tmp_path, part, producer, consumer):
    ports = {("global", "out"): global_port("out"), ("global", "in"): global_port("in"),
             ("smem", "out"): smem_tile("out"), ("smem", "in"): smem_tile("in")}
    name = {"global": "g", "smem": "tile"}
    a = part("pa", component("pa", ports[producer, "out"]))
    b = part("pb", component("pb", ports[consumer, "in"]))
    path = spec(tmp_path, [("pa", a, ""), ("pb", b, "")], [(f"pa.{name[producer]}", f"pb.{name[consumer]}")])
    err = refused(path, errors.PortMismatch, "connect[0]")
    assert f"a {producer} out-port (pa) cannot feed a {consumer} in-port (pb)" in err.message
    assert err.component == "pa -> pb" and err.hint == "global ports connect only to global ports"


# --- check.py: split schedules -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ksum(tmp_path_factory) -> dict[str, Path]:
    """tests/components' additive mainloop (ksum, [schedule] k_tiles = "KT", a reduce = "sum" out-port) and
    the register sink it feeds (test_split.py's link)."""
    out = tmp_path_factory.mktemp("ksum")
    comps = ROOT / "tests" / "components"
    return {"ksum": pipelink.pack(KSUM / "ksum.cu", KSUM / "ksum.toml", out / "ksum.plc").path,
            "sink": pipelink.pack(comps / "acc_sink.cu", comps / "acc_sink.toml", out / "acc_sink.plc").path}


def split_spec(tmp_path: Path, ksum: dict, second: str | None) -> Path:
    """mainloop -> sink split stream_k, and (second is not None) a second ksum instance with ``second``."""
    instances = [("mainloop", ksum["ksum"], ""), ("sink", ksum["sink"], "")]
    if second is not None:
        instances.insert(1, ("other", ksum["ksum"], second))
    return spec(tmp_path, instances, [("mainloop.acc", "sink.acc")], {"M": 2560, "KT": 7},
                schedule='tiles = ["M / 128"]\nsplit = "stream_k"', launch="grid = 8")


@pytest.mark.slow
def test_a_split_control_with_one_mainloop_plans(tmp_path, ksum):
    check = next(c for c in plan_link(split_spec(tmp_path, ksum, None)).all_checks() if c.name == "split")
    assert "mainloop.mma cut along k (7 k-tiles a tile)" in check.detail


def test_a_split_whose_mainloops_disagree_on_k_tiles_is_refused_naming_both(tmp_path, ksum):
    path = split_spec(tmp_path, ksum, "facts = { KT = 5 }")
    err = refused(path, errors.ScheduleMismatch, "schedule.split")
    assert err.message == "split = 'stream_k': the instances that cut k disagree on k_tiles (mainloop 7, other 5)"
    assert err.file == str(path) and err.hint == "link mainloops with the same K and k-tile"


def test_a_split_with_two_summed_entries_is_refused_naming_both(tmp_path, ksum):
    err = refused(split_spec(tmp_path, ksum, ""), errors.ContractError, "schedule.split")
    assert err.message.startswith("split = 'stream_k' needs exactly one entry with reduce = \"sum\" out-ports")
    assert err.message.endswith("found mainloop.mma, other.mma")


def test_a_split_of_a_tile_count_read_in_the_kernel_is_refused(tmp_path):
    # test_dynamic_tiles.py's link, whose tile count a start phase writes, with a split schedule
    path = inline_link(tmp_path, "halfway", HALFWAY, HALFWAY_SOURCE,
                       HALFWAY_SPEC.replace('tiles_from = "h.count"', 'tiles_from = "h.count"\nsplit = "hybrid"'))
    err = refused(path, errors.SpecError, "schedule.split")
    assert err.message == ("split = 'hybrid' cannot be used with [schedule] tiles_from: the tile count is known only "
                           "in the kernel")
    assert err.hint == 'use split = "tiles"'


# --- facts.py ---------------------------------------------------------------------------------------------

def test_a_role_the_component_does_not_have_is_refused(demo_dir):
    path = edit(demo_dir / "link.toml", 'roles = { store = "consumer" }', 'roles = { consumer = "consumer" }')
    err = refused(path, errors.SpecError, "instance[2].roles")
    assert err.message == "instance 'store' maps role 'consumer', which component 'tile_store' does not have"
    assert err.hint == "roles of tile_store: store" and err.file == str(path)


def test_symbol_linking_refuses_a_fact_nothing_gives(tmp_path, part):
    # x has no default (symbol linking takes a component's defaults, as its design had them) and no spec value
    taker = part("taker", component("taker", requires="x = { range = [1, 1024] }"))
    path = spec(tmp_path, [("t", taker, "")])
    err = refused(path, errors.MissingFact, "facts.requires", mode="symbol")
    assert err.message == "symbol linking: instance 't' has no value for x" and err.component == "taker"
    assert err.hint == f"set them under [facts] in {path}"


GIVER = component("giver", requires="n = { range = [1, 64], default = 8 }", guarantees='x = "64 / (n - 4)"')


def test_a_guarantee_that_cannot_be_computed_is_refused_naming_its_field(tmp_path, part):
    giver = part("giver", GIVER)
    path = spec(tmp_path, [("g", giver, "")], facts_={"n": 4})
    err = refused(path, errors.ContractError, "facts.guarantees.x")
    assert err.message == "division by zero in '64 / (n - 4)'" and err.component == "giver"
    assert err.file.endswith("giver.plc")
    assert plan_link(spec(tmp_path, [("g", giver, "")], facts_={"n": 8})).instance("g").facts["x"] == 16  # the control


@pytest.mark.slow
def test_guarantees_that_wait_on_each_other_are_a_missing_fact(tmp_path, part):
    """p guarantees x = y + 1 and requires y; q guarantees y = x + 1 and requires x: neither value can be
    computed first, and nothing else gives one."""
    p = part("gp", component("gp", requires="y = { range = [1, 1024] }", guarantees='x = "y + 1"'))
    q = part("gq", component("gq", requires="x = { range = [1, 1024] }", guarantees='y = "x + 1"'))
    path = spec(tmp_path, [("p", p, ""), ("q", q, "")])
    err = refused(path, errors.MissingFact, "facts.requires.y")
    assert err.message == "instance 'p' requires fact 'y', but nothing in the link gives it a value"
    assert err.component == "gp" and err.file.endswith("gp.plc")


def test_the_variant_check_after_solving_refuses_a_variant_the_package_lacks(tmp_path, part):
    """facts._select_variant checks the solved compile facts again (no link reaches it: the solver's own variant
    constraint refuses first, test_solver_refuses_a_variant_the_package_lacks); given values no variant was
    built for, it refuses naming the instance, the values and the variants there are."""
    body = "tn = { set = [64, 128], default = 64, compile = true }"
    k = part("kv", component("kv", requires=body), variants=[{"tn": 64}])
    inst = plan_link(spec(tmp_path, [("k", k, "")], facts_={"tn": 64})).instance("k")
    assert facts._select_variant(inst, dict(inst.facts)) == 0  # the control
    with pytest.raises(errors.VariantMissing) as info:
        facts._select_variant(inst, {**inst.facts, "tn": 128})
    err = info.value
    assert err.message == "instance 'k' needs compile-time facts tn=128, but the package holds only variants [tn=64]"
    assert err.component == "kv" and err.field == "facts.requires" and "--variant tn=128" in err.hint


# --- solve.py ---------------------------------------------------------------------------------------------

def party(name: str, requires: dict, variants=()) -> Party:
    return Party(name, name, f"{name}.plc", requires, {}, tuple(variants), {}, {}, ())


def test_solver_refuses_a_variant_the_package_lacks():
    k = party("k", {"tn": FactRequirement(set=[64, 128], compile=True), "g": FactRequirement(set=[0, 1], compile=True)},
              [{"tn": 64, "g": 0}, {"tn": 128, "g": 0}])
    assert solve(Problem((k,), {"tn": 128, "g": 0}, "link.toml")).values["k"]["tn"] == 128  # the control
    with pytest.raises(errors.VariantMissing) as info:
        solve(Problem((k,), {"tn": 128, "g": 1}, "link.toml"))
    err = info.value
    assert err.message == ("instance 'k' needs compile-time facts tn=128,g=1, but the package holds only variants "
                           "[tn=64, g=0; tn=128, g=0]")
    assert err.component == "k" and err.field == "facts.requires" and err.file == "k.plc"


def test_solver_refuses_too_many_combinations_naming_each_fact():
    """Two facts of 300 values each, tied by a port: 90000 combinations, over the limit of 65536."""
    a, b = party("a", {"x": FactRequirement(range=[1, 300])}), party("b", {"y": FactRequirement(range=[1, 300])})
    tie = Equality(("a", Expr.parse("x")), ("b", Expr.parse("y")), "a.p -> b.p: shape.row", "connect[0]")
    with pytest.raises(errors.AmbiguousFact) as info:
        solve(Problem((a, b), {}, "link.toml", (tie,)))
    err = info.value
    assert err.message == (f"facts x (300 values), y (300 values) are tied together and have 90000 combinations, "
                           f"over the limit of {COMBINATION_LIMIT} by {90000 - COMBINATION_LIMIT}")
    assert err.field == "facts.requires.x" and err.component == "a" and "link.toml" in err.hint
    # one of them fixed: one value each
    assert solve(Problem((a, b), {"x": 7}, "link.toml", (tie,))).values["b"]["y"] == 7


# --- alloc.py ---------------------------------------------------------------------------------------------

PLAIN = component("plain")


@pytest.mark.parametrize("tiles, order, group, banded", [
    ("[4, 6]", "row_major", 3, None), ("[4, 6]", "row_major", 4, 6), ("[4, 6]", "column_major", 3, 4),
    ("[24]", "row_major", 4, 24),
], ids=["control", "row-major", "column-major", "one-dimension"])
def test_bands_must_divide_the_fast_tile_dimension(tmp_path, part, tiles, order, group, banded):
    path = spec(tmp_path, [("a", part("plain", PLAIN), "")], schedule=f'tiles = {tiles}\norder = "{order}"\ngroup = {group}')
    if banded is None:
        assert plan_link(path).spec.schedule.group == group
        return
    err = refused(path, errors.SpecError, "schedule.group")
    assert err.message.startswith(f"schedule.group = {group} must divide the banded tile dimension ({banded} tiles, ")
    assert err.message.endswith(f"grid {tiles}, {order})") and err.file == str(path)


@pytest.mark.parametrize("schedule, launch, trace, problem", [
    ("tiles = [4, 4]", "cluster = 2", False, None),
    ("tiles = [4, 4]", "cluster = 2\ngrid = 3", False, "the grid (3 blocks) is not a multiple of it"),
    ("tiles = [4, 4]\ngroup = 2", "cluster = 4", False, "schedule.group (2) is not a multiple of it"),
    ("tiles = [4, 4]", "cluster = 2", True, "tracing does not support clusters yet"),
], ids=["control", "grid", "group", "trace"])
def test_a_cluster_is_refused_where_its_blocks_would_not_step_together(tmp_path, part, schedule, launch, trace,
                                                                        problem):
    path = spec(tmp_path, [("a", part("plain", PLAIN), "")], schedule=schedule, launch=launch)
    if problem is None:
        assert plan_link(path, trace=trace).spec.launch.cluster == 2
        return
    err = refused(path, errors.SpecError, "launch.cluster", trace=trace)
    assert err.message == f"[launch] cluster = {launch.split()[2]}: {problem}" and err.file == str(path)


@pytest.mark.slow
@pytest.mark.parametrize("consumer_offset", [0, 4096])
def test_a_hand_over_buffer_pinned_at_two_offsets_is_refused_naming_both(tmp_path, part, consumer_offset):
    s = part("s", component("s", smem_tile("out", 0)))
    t = part("t", component("t", smem_tile("in", consumer_offset)))
    path = spec(tmp_path, [("s", s, ""), ("t", t, "")], [("s.tile", "t.tile")])
    if consumer_offset == 0:  # the control: both sides pin the one buffer at one offset
        assert [(x.offset, x.pinned) for x in plan_link(path).smem if x.name == "s.tile"] == [(0, True)]
        return
    err = refused(path, errors.PinnedCollision, None)
    assert err.message == f"s.tile and t.tile share one buffer, pinned at 0 by s ({s}) and at 4096 by t ({t})"
    assert err.component == "s, t"


@pytest.mark.slow
@pytest.mark.parametrize("second", [2048, 1024])
def test_pinned_buffers_that_overlap_are_refused_naming_both(tmp_path, part, second):
    u = part("u", component("u", '[[smem]]\nname = "buf"\nbytes = 2048\noffset = 0\n'))
    v = part("v", component("v", f'[[smem]]\nname = "buf"\nbytes = 1024\noffset = {second}\n'))
    path = spec(tmp_path, [("u", u, ""), ("v", v, "")])
    if second == 2048:  # the control: side by side
        assert {x.name: x.offset for x in plan_link(path).smem if x.pinned} == {"u.buf": 0, "v.buf": 2048}
        return
    err = refused(path, errors.PinnedCollision, None)
    assert err.message == f"pinned smem [1024, 2048) of v.buf by v ({v}) overlaps pinned [0, 2048) of u.buf by u ({u})"
    assert err.component == "v.buf, u.buf"


@pytest.mark.parametrize("threads, mode, words", [
    ("128", "pipelink", None),
    ("256", "pipelink", "counts 256 threads; it must be a multiple of 32 between 32 and the block's 128"),
    ("256", "symbol", "counts 256 threads; it must be a multiple of 32 between 32 and the block's 128"),
    ('"nt"', "symbol", "counts 48 threads; it must be a multiple of 32 between 32 and the block's 128"),
], ids=["control", "over-the-block", "over-the-block-symbol", "not-whole-warps-symbol"])
def test_a_named_barrier_must_count_whole_warps_of_the_block(tmp_path, part, threads, mode, words):
    """A barrier over more threads than the block has never completes. Whole warps the contract's own bounds
    check at load and link; symbol linking checks no contract, so a fact it takes from the spec (48) reaches
    the allocator's check."""
    nb = part("nb", component("nb", f'[[named_barrier]]\nname = "sync"\nthreads = {threads}\n',
                              requires="nt = { range = [32, 1024] }"))
    path = spec(tmp_path, [("b", nb, "")], facts_={"nt": 48})
    if words is None:
        assert [b.threads for b in plan_link(path, mode=mode).barriers] == [128]
        return
    err = refused(path, errors.WarpLayoutError, "named_barrier.sync.threads", mode=mode)
    assert err.message == f"named barrier 'sync' {words}" and err.component == "nb" and err.file.endswith("nb.plc")


# --- through the CLI: exit status 2, the typed error, nothing written ---------------------------------

@pytest.mark.slow
def test_refusals_of_each_stage_exit_2_at_the_cli(tmp_path, part):
    cases = {
        "facts": (spec(tmp_path / "facts", [("t", part("taker", component("taker", requires="x = { range = [1, 1024] }")),
                                                'roles = { other = "math" }')]),
                  "(SpecError)", "maps role 'other', which component 'taker' does not have"),
        "alloc": (spec(tmp_path / "alloc", [("a", part("plain", PLAIN), "")], schedule="tiles = [4, 6]\ngroup = 4"),
                  "(SpecError)", "schedule.group = 4 must divide"),
    }
    for stage, (path, kind, words) in cases.items():
        proc = cli_link(path, path.parent)
        assert kind in proc.stderr and words in proc.stderr, (stage, proc.stderr)


@pytest.mark.slow
@pytest.mark.parametrize("pin, align", [(0, 1024), (2048, 1024), (16, 1024), (1040, 128), (48, 32)])
def test_a_pinned_hand_over_buffer_must_meet_the_strictest_alignment_of_its_sides(tmp_path, part, pin, align):
    """A buffer aliased through a port takes the strictest alignment of all its sides (a 128B-swizzled TMA or
    WGMMA tile needs 1024); a side's pin that the other side's alignment does not divide is a typed refusal
    naming both, not a misaligned buffer."""
    s = part("s", component("s", smem_tile("out", pin)))
    t = part("t", component("t", smem_tile("in").replace("bytes = 2048\n", f"bytes = 2048\nalign = {align}\n")))
    path = spec(tmp_path, [("s", s, ""), ("t", t, "")], [("s.tile", "t.tile")])
    if pin % align == 0:  # the control: the pin meets both sides
        assert [(x.offset, x.pinned) for x in plan_link(path).smem if x.name == "s.tile"] == [(pin, True)]
        return
    err = refused(path, errors.PinnedCollision, None)
    assert err.message == (f"s.tile and t.tile share one buffer: s ({s}) pins it at {pin}, but t.tile needs it "
                           f"aligned to {align} bytes ({pin} is {pin % align} bytes past a multiple)")
    assert err.component == "s, t"


# Issue 56 item 2, as a property: a buffer aliased through ports (a chain of 2-3 sides handing it on within one
# role), each side with its own size and alignment, next to other buffers placed before it. One package per kind
# of side; the sizes, alignments and pin are instance facts, so an example plans a link and packs nothing.
ALIGNS = (16, 32, 64, 128, 256, 512, 1024)
SIDE_FACTS = (f"AL = {{ set = {list(ALIGNS)} }}\nBY = {{ range = [2048, 65536] }}\n"
              f"SAL = {{ set = {list(ALIGNS)} }}\nSBY = {{ range = [1, 65536] }}\n")


def hand_over_port(name: str, direction: str) -> str:
    return (f'[[port]]\nname = "{name}"\ndirection = "{direction}"\nspace = "smem"\ndtype = "fp32"\n'
            f'shape = {{ row = 16, col = 32 }}\nbuffer = "tile"\noffset = "row * 32 + col"\nprotocol = "barrier"\n\n')


def aliased_side(name: str, first: bool, pinned: bool) -> str:
    """A side of the chain: its buffer ``tile`` (BY bytes aligned to AL, pinned at PIN if ``pinned``) live in its
    own phase, handed on through port ``on`` (and, unless ``first``, received through port ``tile``), and a
    scratch buffer (SBY bytes aligned to SAL) live in its own phase only."""
    pin = 'offset = "PIN"\n' if pinned else ""
    body = (f'[[smem]]\nname = "tile"\nbytes = "BY"\nalign = "AL"\nlive = ["{name}"]\n{pin}\n'
            f'[[smem]]\nname = "scratch"\nbytes = "SBY"\nalign = "SAL"\nlive = ["{name}"]\n\n'
            + ("" if first else hand_over_port("tile", "in")) + hand_over_port("on", "out"))
    return component(name, body, requires=SIDE_FACTS + ("PIN = { range = [0, 65536] }" if pinned else ""))


def filler(name: str, pinned: bool) -> str:
    """A buffer ``buf`` of FBY bytes aligned to FAL, live the whole kernel (pinned at 0 if ``pinned``)."""
    pin = "offset = 0\n" if pinned else ""
    return component(name, f'[[smem]]\nname = "buf"\nbytes = "FBY"\nalign = "FAL"\n{pin}',
                     requires=f"FAL = {{ set = {list(ALIGNS)} }}\nFBY = {{ range = [1, 65536] }}")


@pytest.fixture(scope="module")
def packages(part) -> dict:
    """The packages of the chain's sides by (first, pinned), and of the fillers ("fixed": pinned at 0)."""
    names = {(True, False): "head", (True, True): "headpin", (False, False): "link", (False, True): "linkpin"}
    made = {key: part(name, aliased_side(name, *key)) for key, name in names.items()}
    return {**made, "filler": part("filler", filler("filler", False)), "fixed": part("fixed", filler("fixed", True))}


@st.composite
def aliased_chains(draw):
    """(sides, fillers, pinned side or None, pin, connections in reverse order): each side (align, bytes,
    scratch align, scratch bytes), each filler (align, bytes, pinned at 0); a pin is a multiple of its side's
    alignment. Where no side pins the buffer, a filler pinned at 0 mostly keeps it off offset 0."""
    sides = [(draw(st.sampled_from(ALIGNS)), draw(st.integers(2048, 6144)), draw(st.sampled_from(ALIGNS)),
              draw(st.integers(1, 4096))) for _ in range(draw(st.integers(2, 3)))]
    pinned = draw(st.sampled_from([None, None] + list(range(len(sides)))))
    pin = None if pinned is None else sides[pinned][0] * draw(st.integers(0, 16))
    fixed = pinned is None and draw(st.integers(0, 3)) > 0
    fillers = [(draw(st.sampled_from(ALIGNS)), draw(st.integers(1, 6000)), fixed and i == 0)
               for i in range(draw(st.integers(1, 3)))]
    return sides, fillers, pinned, pin, draw(st.booleans())


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chain=aliased_chains())
# a 1024-aligned consumer behind a 16-aligned producer, next to a buffer pinned at 0
@example(chain=([(16, 2048, 16, 16), (1024, 4096, 16, 16)], [(16, 100, True)], None, None, False))
# the pin misses the first side's alignment, and the chain's last hand-over (s1 -> s2) finds it
@example(chain=([(1024, 2048, 16, 16), (16, 2048, 16, 16), (16, 2048, 16, 16)], [(16, 100, False)], 2, 512, False))
def test_an_aliased_buffer_meets_every_sides_alignment_and_size(tmp_path, packages, chain):
    """Issue 56 item 2, relocatable and pinned: the one buffer of a hand-over chain sits at a multiple of every
    side's alignment (a 1024-aligned consumer behind a 16-aligned producer, or the other way round), holds every
    side's bytes, and overlaps no buffer live at the same time (its own lifetime is all its sides'). A pin that
    some side's alignment does not divide is a PinnedCollision naming the pinning side and that side. Fillers of
    all sizes and alignments are placed first, so the buffer rarely lands at offset 0."""
    sides, fillers, pinned, pin, backwards = chain
    instances = [(f"f{i}", packages["fixed" if fixed else "filler"], f"facts = {{ FAL = {al}, FBY = {by} }}")
                 for i, (al, by, fixed) in enumerate(fillers)]
    for i, (al, by, sal, sby) in enumerate(sides):
        facts_ = f"AL = {al}, BY = {by}, SAL = {sal}, SBY = {sby}" + (f", PIN = {pin}" if i == pinned else "")
        instances.append((f"s{i}", packages[i == 0, i == pinned], f"facts = {{ {facts_} }}"))
    connects = [(f"s{i}.on", f"s{i + 1}.tile") for i in range(len(sides) - 1)]
    path = spec(tmp_path, instances, connects[::-1] if backwards else connects)
    if pin is not None and any(pin % al for al, *_ in sides):
        err = refused(path, errors.PinnedCollision, None)
        named = re.match(r"s(\d)\.on and s(\d)\.tile share one buffer: s(\d) \(.*\) pins it at (\d+), but "
                         r"s(\d)\.tile needs it aligned to (\d+) bytes", err.message)
        assert named, err
        src, dst, pinner, at, strict, align = map(int, named.groups())
        assert (dst, pinner, at) == (src + 1, pinned, pin), err
        assert align == sides[strict][0] and pin % align, err  # the side whose alignment the pin misses
        return
    plan = plan_link(path)
    tiles = [Ref(f"s{i}", "tile") for i in range(len(sides))]
    buffer = next(x for x in plan.smem if tiles[0] in x.users)
    assert sorted(buffer.users, key=str) == tiles
    assert all(buffer.offset % al == 0 and buffer.bytes >= by for al, by, *_ in sides), (buffer, sides)
    assert pin is None or buffer.offset == pin
    assert all(plan.instance(f"s{i}").bind["tile"] == buffer.offset for i in range(len(sides)))
    # lifetimes as the sides declare them: fillers always, the hand-over in every side's phase, scratch in its own
    live = {**{Ref(f"f{i}", "buf"): None for i in range(len(fillers))}, **{t: set(range(len(sides))) for t in tiles},
            **{Ref(f"s{i}", "scratch"): {i} for i in range(len(sides))}}
    assert sorted((u for x in plan.smem for u in x.users), key=str) == sorted(live, key=str)

    def lifetime(x):  # the phases (side numbers) buffer x is live in; None: the whole kernel
        spans = [live[u] for u in x.users]
        return None if None in spans else set().union(*spans)

    for i, x in enumerate(plan.smem):
        assert x.offset % x.align == 0, x
        for y in plan.smem[i + 1:]:
            if lifetime(x) is None or lifetime(y) is None or lifetime(x) & lifetime(y):
                assert x.offset + x.bytes <= y.offset or y.offset + y.bytes <= x.offset, (x, y)


def test_a_hand_over_stays_live_through_the_phases_between_its_sides(tmp_path, packages, part):
    """Phases of one role run one after another on each tile: s0 hands its tile to s1, and m runs in between. m's
    buffer, live only in m's phase, must not share the tile's memory: m would overwrite the hand-over before s1
    reads it (before the fix both landed at offset 0 and the audit passed)."""
    m = part("between", component("between", '[[smem]]\nname = "buf"\nbytes = 4096\nlive = ["between"]\n'))
    sizes = "facts = { AL = 16, BY = 4096, SAL = 16, SBY = 16 }"
    plan = plan_link(spec(tmp_path, [("s0", packages[True, False], sizes), ("m", m, ""),
                                     ("s1", packages[False, False], sizes)], [("s0.on", "s1.tile")]))
    tile = next(x for x in plan.smem if Ref("s0", "tile") in x.users)
    buf = next(x for x in plan.smem if Ref("m", "buf") in x.users)
    assert tile.offset + tile.bytes <= buf.offset or buf.offset + buf.bytes <= tile.offset, (tile, buf)
    assert {(r.instance, r.phase) for r in tile.live} == {("s0", "head"), ("m", "between"), ("s1", "link")}


@pytest.mark.parametrize("side, offset, words", [
    (None, "row * 32 + col", None),
    ("t", "row * 33 + col", "port 'tile' of t ({t}) lays its 16x32 fp32 tile up to byte 2108, but its buffer 'tile' "
                            "holds 2048 bytes (over by 60)"),
    ("s", "row * 32 + col + 1", "port 'tile' of s ({s}) lays its 16x32 fp32 tile up to byte 2052, but its buffer "
                                "'tile' holds 2048 bytes (over by 4)"),
    ("t", "row * 32 + col - 4", "port 'tile' of t ({t}) lays its 16x32 fp32 tile at element offset -4, before the "
                                "start of its buffer 'tile'"),
], ids=["control", "padded-rows-past-the-end", "one-past-the-end", "before-the-start"])
@pytest.mark.parametrize("mode", ["pipelink", "symbol"])
def test_an_smem_ports_layout_must_lie_inside_its_buffer(tmp_path, part, side, offset, words, mode):
    """Issue 48 item 1: a port's layout is a bound on what the glue writes: its copies write the consumer's layout
    into the consumer's buffer (and read the producer's from its own), and conformance looks at the components'
    code only. A layout reaching past the buffer (a padded row stride, an off-by-one) is refused naming the port,
    the buffer, both byte counts and the overrun; symbol linking only warns."""
    tiles = {n: smem_tile("out" if n == "s" else "in") for n in "st"}
    if side:
        tiles[side] = tiles[side].replace('offset = "row * 32 + col"', f'offset = "{offset}"')
    s, t = (part(n, component(n, tiles[n])) for n in "st")
    path = spec(tmp_path, [("s", s, ""), ("t", t, "")], [("s.tile", "t.tile")])
    if words is None:
        plan_link(path, mode=mode)
        return
    words = words.format(s=s, t=t)
    if mode == "symbol":
        assert any(words in w for w in plan_link(path, mode=mode).all_warnings())
        return
    err = refused(path, errors.PortMismatch, "connect[0]")
    assert err.message == f"s.tile -> t.tile: {words}" and err.component == "s -> t"

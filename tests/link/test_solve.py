"""Issue 19: fact resolution solves shared facts across components (link/solve.py).

Unit tests on the solver's own problem type (parties with domains, variants, guarantees, port
equalities), property-based tests against a brute-force oracle over every value, and the link-level
cases on real packages: a fact nothing fixes is chosen from what every component accepts, the plan
says where each value came from, and the audit notices instances that disagree on a shared fact.
"""

from __future__ import annotations

import copy
import importlib.util
import re
import shutil
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pipelink
from pipelink.contract import FactLimit, FactRequirement
from pipelink.errors import AmbiguousFact, FactConflict, FactDomainError, MissingFact
from pipelink.expr import Expr
from pipelink.link import audit
from pipelink.link.pipeline import plan_link
from pipelink.link.solve import Equality, FactSource, Party, Problem, solve

from conftest import ROOT, edit, gpu_ok

_spec = importlib.util.spec_from_file_location("qwen_shapes", ROOT / "examples" / "qwen_mlp" / "shapes.py")
shapes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(shapes)
PROPERTIES = dict(deadline=None, database=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def req(**kw) -> FactRequirement:
    return FactRequirement(**kw)


def party(name, requires, *, guarantees=None, variants=(), pins=None, component=None, limits=()) -> Party:
    return Party(name, component or name, f"{name}.plc", requires,
                 {k: Expr.parse(v) for k, v in (guarantees or {}).items()}, tuple(variants), {}, pins or {},
                 tuple(limits))


def limit(expr, **bounds) -> FactLimit:
    return FactLimit(expr=Expr.parse(expr), doc="row L inside the cache", **bounds)


def problem(*parties, spec=None, equalities=()) -> Problem:
    return Problem(tuple(parties), spec or {}, "link.toml", tuple(equalities))


def eq(a, ea, b, eb) -> Equality:
    return Equality((a, Expr.parse(ea)), (b, Expr.parse(eb)), f"{a}.p -> {b}.p: shape.col", "connect[0]")


# --- the solver, case by case ---------------------------------------------------------------------

def test_the_issue_case_propagates_the_closed_components_value():
    """The mainloop carries variants 128 and 256 (default 256); the repacked epilogue only 128."""
    mainloop = party("mainloop", {"tile_n": req(set=[128, 256], default=256, compile=True)},
                     variants=[{"tile_n": 128}, {"tile_n": 256}], component="gemm_mainloop")
    epilogue = party("epilogue", {"tile_n": req(set=[128], default=128, compile=True)},
                     variants=[{"tile_n": 128}], component="swiglu_store")
    s = solve(problem(mainloop, epilogue))
    assert s.values["mainloop"]["tile_n"] == s.values["epilogue"]["tile_n"] == 128
    (c,) = s.choices
    assert (c.name, c.value, c.how, c.candidates, c.forced_by) == ("tile_n", 128, "domain", (128,), ("swiglu_store",))
    assert c.preferences == {"mainloop (gemm_mainloop)": 256, "epilogue (swiglu_store)": 128}
    src = s.sources["mainloop"]["tile_n"]
    assert src.kind == "domain" and src.forced_by == ("swiglu_store",) and "swiglu_store" in str(src)


def test_several_solutions_and_defaults_that_disagree_are_ambiguous():
    a = party("a", {"tile_n": req(set=[128, 256], default=256)})
    b = party("b", {"tile_n": req(set=[64, 128, 256], default=128)})
    with pytest.raises(AmbiguousFact) as info:
        solve(problem(a, b))
    msg = str(info.value)
    assert "'tile_n' could be 128 or 256" in msg and "a (a) prefers 256" in msg and "b (b) prefers 128" in msg
    assert "[facts] in link.toml" in msg and "tile_n = 128" in msg and info.value.field == "facts.tile_n"


def test_defaults_that_agree_decide():
    a = party("a", {"stages": req(range=[2, 8], default=4)})
    b = party("b", {"stages": req(range=[1, 16], default=4)})
    s = solve(problem(a, b))
    (c,) = s.choices
    assert (c.value, c.how, c.solutions) == (4, "default", tuple(range(2, 9)))
    assert str(s.sources["b"]["stages"]) == "the contract's default"


def test_one_default_among_requirers_without_one_decides():
    s = solve(problem(party("a", {"n": req(set=[1, 2, 3])}), party("b", {"n": req(set=[2, 3], default=3)})))
    assert s.values["a"]["n"] == 3 and s.choices[0].how == "default"


def test_disjoint_domains_name_the_fact_and_both_components():
    a = party("a", {"tile_n": req(set=[128, 256])}, component="gemm_mainloop")
    b = party("b", {"tile_n": req(set=[64])}, component="swiglu_store")
    with pytest.raises(FactConflict) as info:
        solve(problem(a, b))
    msg = str(info.value)
    assert "no value of fact 'tile_n'" in msg and "gemm_mainloop" in msg and "swiglu_store" in msg
    assert "[128, 256]" in msg and "[64]" in msg


def test_a_port_equality_ties_facts_of_different_names():
    a = party("a", {"tile_n": req(set=[128, 256], default=256)})
    b = party("b", {"cols": req(set=[64, 128], default=64)})
    s = solve(problem(a, b, equalities=[eq("a", "tile_n", "b", "cols")]))
    assert (s.values["a"]["tile_n"], s.values["b"]["cols"]) == (128, 128)
    by_name = {c.name: c for c in s.choices}
    assert by_name["tile_n"].how == "tied" and by_name["tile_n"].candidates == (128, 256)
    assert "a.p -> b.p: shape.col" in by_name["tile_n"].detail
    assert by_name["cols"].how == "tied"


def test_a_port_equality_no_value_satisfies():
    a = party("a", {"tile_n": req(set=[128, 256])})
    b = party("b", {"cols": req(set=[64])})
    with pytest.raises(FactConflict) as info:
        solve(problem(a, b, equalities=[eq("a", "tile_n", "b", "cols")]))
    assert "with cols=64, tile_n=128" in str(info.value) and "differs from" in str(info.value)


def test_variants_are_chosen_as_tuples():
    """Compile facts of one package come together: (128, 0) and (256, 1) only, and the spec fixes gated."""
    b = party("b", {"tile_n": req(set=[128, 256], compile=True), "gated": req(set=[0, 1], compile=True)},
              variants=[{"tile_n": 128, "gated": 0}, {"tile_n": 256, "gated": 1}])
    a = party("a", {"tile_n": req(set=[128, 256], default=128)})
    s = solve(problem(a, b, spec={"gated": 1}))
    assert s.values["a"]["tile_n"] == 256 and s.choices[0].how == "tied"


def test_a_guarantee_computed_from_an_unknown_must_fit_its_taker():
    a = party("a", {"tile": req(set=[64, 128, 256], default=64)}, guarantees={"box": "tile * 2"})
    b = party("b", {"box": req(set=[256])})
    s = solve(problem(a, b))
    assert s.values["a"]["tile"] == 128 and s.values["b"]["box"] == 256
    assert s.sources["b"]["box"].kind == "guarantee"


def test_fixed_values_keep_their_errors():
    """The spec's value outside a domain is refused as before, naming the package and both values."""
    a = party("a", {"tile_n": req(set=[128])}, component="swiglu_store")
    with pytest.raises(FactDomainError) as info:
        solve(problem(a, spec={"tile_n": 256}))
    assert "tile_n=256" in str(info.value) and "[128]" in str(info.value) and info.value.file == "a.plc"


def test_an_instance_pin_is_not_shared():
    a = party("a", {"n": req(set=[1, 2], default=1)},
              pins={"n": ((2, FactSource("instance", "[[instance]] 'a'")),)})
    b = party("b", {"n": req(set=[1, 2], default=1)})
    s = solve(problem(a, b))
    assert (s.values["a"]["n"], s.values["b"]["n"]) == (2, 1)


def test_a_long_range_offers_only_defaults():
    big = req(range=[128, 1 << 30], multiple_of=128)
    with pytest.raises(MissingFact):
        solve(problem(party("a", {"M": big})))
    s = solve(problem(party("a", {"M": req(range=[128, 1 << 30], multiple_of=128, default=4096)})))
    assert s.values["a"]["M"] == 4096


def test_a_limit_refuses_fixed_values_naming_each_fact_and_its_source():
    """[[facts.limit]]: Lmax - L >= 1. The spec's L = Lmax = 64 is refused with both values and where each came from."""
    a = party("qkv", {"L": req(range=[0, 65535]), "Lmax": req(range=[1, 65536])}, component="llama_qkv_rope",
              limits=[limit("Lmax - L", min=1)])
    with pytest.raises(FactDomainError) as info:
        solve(problem(a, spec={"L": 64, "Lmax": 64}))
    e = info.value
    assert e.field == "facts.limit[0]" and e.file == "qkv.plc" and e.component == "llama_qkv_rope"
    assert "L = 64 (from the link spec (link.toml) [facts])" in e.message and "Lmax = 64" in e.message
    assert "Lmax - L = 0, below its least allowed value 1 by 1" in e.message and "row L inside the cache" in e.hint
    assert solve(problem(a, spec={"L": 63, "Lmax": 64})).values["qkv"]["L"] == 63
    over = party("b", {"n": req(set=[1, 2, 3])}, limits=[limit("2 * n", max=4)])
    with pytest.raises(FactDomainError, match="above its greatest allowed value 4 by 2"):
        solve(problem(over, spec={"n": 3}))


def test_a_fact_left_to_the_linker_is_chosen_inside_the_limits():
    """Only stages = 4 leaves room for the ring and the staging tile (4 * 48 + 32 <= 227): the linker takes it."""
    a = party("a", {"stages": req(set=[2, 3, 4, 5, 6], default=6)}, limits=[limit("stages * 48 + 32", max=227)])
    b = party("b", {"stages": req(set=[4, 5, 6])})
    s = solve(problem(a, b))
    assert s.values["a"]["stages"] == s.values["b"]["stages"] == 4


# --- properties: the solver against every value, tried by brute force ---------------------------

UNIVERSE = range(0, 41)


@st.composite
def requirement(draw, compile_ok=True):
    kind = draw(st.sampled_from(["set", "range", "variants"] if compile_ok else ["set", "range"]))
    if kind == "range":
        lo = draw(st.integers(0, 30))
        domain = dict(range=[lo, draw(st.integers(lo, 40))], multiple_of=draw(st.sampled_from([None, 1, 2, 4])))
    else:
        domain = dict(set=sorted(draw(st.sets(st.integers(0, 40), min_size=1, max_size=6))))
    accepted = [v for v in UNIVERSE if not FactRequirement(**domain).problems(v)]
    variants = ()
    if kind == "variants":
        variants = [{"f": v} for v in draw(st.lists(st.sampled_from(domain["set"]), min_size=1, unique=True))]
        accepted = sorted({v["f"] for v in variants})
        domain["compile"] = True
    default = draw(st.one_of(st.none(), st.sampled_from(accepted))) if accepted else None
    return FactRequirement(**domain, default=default), variants, accepted


def _expected(reqs) -> list[int]:
    return sorted(set.intersection(*(set(acc) for _, _, acc in reqs)))


@pytest.mark.slow
@settings(max_examples=400, **PROPERTIES)
@given(st.lists(requirement(), min_size=1, max_size=4))
def test_one_shared_fact_matches_the_oracle(reqs):
    parties = [party(f"p{i}", {"f": r}, variants=v) for i, (r, v, _) in enumerate(reqs)]
    ok = _expected(reqs)
    prefs = {r.default for r, _, _ in reqs if r.default is not None}
    try:
        s = solve(problem(*parties))
    except FactConflict as exc:
        assert not ok, f"refused although {ok} satisfy everyone: {exc}"
        assert "'f'" in str(exc)
        return
    except AmbiguousFact as exc:
        assert len(ok) > 1 and not (len(prefs) == 1 and prefs <= set(ok)), exc
        assert all(str(v) in str(exc) for v in ok)  # the candidates are listed
        return
    value = s.values["p0"]["f"]
    assert all(s.values[p.name]["f"] == value for p in parties)
    assert value in ok  # inside every domain and every package's variants
    assert len(ok) == 1 or prefs == {value}


@pytest.mark.slow
@settings(max_examples=300, **PROPERTIES)
@given(requirement(compile_ok=False), requirement(compile_ok=False), st.integers(1, 3), st.integers(0, 4))
def test_two_facts_tied_by_a_port_match_the_oracle(ra, rb, mul, add):
    """a.f * mul + add == b.g: the solution, when the linker takes one, is one the oracle finds."""
    a, b = party("a", {"f": ra[0]}), party("b", {"g": rb[0]})
    pairs = [(f, g) for f in ra[2] for g in rb[2] if f * mul + add == g]
    try:
        s = solve(problem(a, b, equalities=[eq("a", f"f * {mul} + {add}", "b", "g")]))
    except FactConflict:
        assert not pairs
        return
    except AmbiguousFact:
        assert len(pairs) > 1
        return
    assert (s.values["a"]["f"], s.values["b"]["g"]) in pairs
    if len(pairs) == 1:
        assert s.choices[0].solutions == (pairs[0][0],)


@pytest.mark.slow
@settings(max_examples=300, **PROPERTIES)
@given(requirement(compile_ok=False), requirement(compile_ok=False), st.integers(-8, 8), st.booleans())
def test_two_facts_under_a_limit_match_the_oracle(ra, rb, bound, below):
    """g - f >= bound (or <= bound) in one component: a value the linker takes holds it; it refuses only when no pair does."""
    edge = dict(min=bound) if not below else dict(max=bound)
    a = party("a", {"f": ra[0], "g": rb[0]}, limits=[limit("g - f", **edge)])
    pairs = [(f, g) for f in ra[2] for g in rb[2] if (g - f >= bound if not below else g - f <= bound)]
    try:
        s = solve(problem(a))
    except (FactConflict, FactDomainError):
        assert not pairs
        return
    except (AmbiguousFact, MissingFact):
        assert pairs
        return
    assert (s.values["a"]["f"], s.values["a"]["g"]) in pairs


# --- on real packages -----------------------------------------------------------------------------

def test_the_demo_without_tile_cols_takes_the_only_packaged_value(demo_dir):
    """ring_reduce is packaged with 64 columns only; tile_store accepts any multiple of 8."""
    edit(demo_dir / "link.toml", "tile_cols = 64\n", "")
    plan = plan_link(demo_dir / "link.toml")
    (choice,) = plan.resolved.choices
    assert (choice.name, choice.value, choice.how, choice.forced_by) == ("tile_cols", 64, "domain", ("ring_reduce",))
    assert plan.to_json()["fact_choices"][0]["fact"] == "tile_cols"
    assert plan.to_json()["instances"][2]["fact_kinds"]["tile_cols"] == "domain"
    assert audit.check_plan(plan).ok
    broken = copy.deepcopy(plan)
    broken.instance("store").facts["tile_cols"] = 32  # a stage that let two instances disagree
    assert "facts.shared" in {v.invariant for v in audit.check_plan(broken).violations}


def test_the_demo_without_tile_rows_is_ambiguous(demo_dir):
    """ring_reduce prefers 32 rows, tile_store 128; both carry both: the user must choose."""
    edit(demo_dir / "link.toml", "tile_rows = 32\n", "")
    with pytest.raises(AmbiguousFact) as info:
        plan_link(demo_dir / "link.toml")
    msg = str(info.value)
    assert "'tile_rows' could be" in msg and "ring_reduce) prefers 32" in msg and "tile_store) prefers 128" in msg
    proc = subprocess.run([sys.executable, "-m", "pipelink.cli", "link", "link.toml"], cwd=demo_dir,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "AmbiguousFact" in proc.stderr and "Traceback" not in proc.stderr
    assert not (demo_dir / "link.cubin").exists() and not list(demo_dir.glob("*.cubin"))


@pytest.fixture(scope="module")
def qwen_packages(tmp_path_factory):
    return shapes.pack(tmp_path_factory.mktemp("qwen19"))


@pytest.fixture(scope="module")
def qwen_perturbed(qwen_packages, tmp_path_factory):
    """The Qwen packages, with the epilogue repacked closed supporting only tile_n = 128."""
    folder = tmp_path_factory.mktemp("qwen19_perturbed")
    packages = folder / "packages"
    shutil.copytree(qwen_packages, packages)
    contract = folder / "swiglu_store.toml"
    shutil.copyfile(ROOT / "components/raw/swiglu_store.toml", contract)
    shipped = re.search(r"tile_n = \{ set = \[[\d, ]+\], default = \d+", contract.read_text()).group(0)
    edit(contract, shipped, "tile_n = { set = [128], default = 128")
    pipelink.pack(ROOT / "components/raw/swiglu_store.cu", contract, packages / "swiglu_store.plc",
                  variants=[{"tile_n": 128, "gated": 1}], closed=True)
    return folder, packages


def _qwen_spec(folder, packages, tile_n):
    return shapes.write_spec(folder / f"spec_{tile_n}", packages, shapes.SHAPES["qwen_gate_up_4096"],
                             (256, 4, "column_major", 0, 1), facts={"tile_n": tile_n})


@pytest.mark.slow
def test_qwen_closed_epilogue_repacked_for_128(qwen_perturbed):
    folder, packages = qwen_perturbed
    kernel = pipelink.link(_qwen_spec(folder, packages, None))
    plan = kernel.plan
    for name in ("mainloop", "epilogue"):
        inst = plan.instance(name)
        assert inst.facts["tile_n"] == 128 and inst.package.variants[inst.variant].facts["tile_n"] == 128
        assert inst.fact_sources["tile_n"].forced_by == ("swiglu_store",)
    assert plan.tiles == [32, 400] and plan.facts["tile_n"] == 128
    # The user's spec fixing 256: refused, naming the package, the field and both values.
    with pytest.raises(FactDomainError) as info:
        pipelink.link(_qwen_spec(folder, packages, 256))
    err = info.value
    assert err.file.endswith("swiglu_store.plc") and err.field == "facts.requires.tile_n"
    assert "tile_n=256" in err.message and "[128]" in err.message
    # Symbol linking keeps each package's own value and links anyway, saying what it let through.
    sym = pipelink.link(_qwen_spec(folder, packages, None), mode="symbol")
    assert sym.plan.instance("mainloop").facts["tile_n"] == 256 and sym.plan.instance("epilogue").facts["tile_n"] == 128
    assert any("shape [128, 256] (gemm_mainloop) differs from [128, 128]" in w for w in sym.plan.all_warnings())


@pytest.mark.slow
def test_qwen_symbol_mode_uses_the_packaged_positions(qwen_packages, tmp_path):
    """Unperturbed, symbol linking puts every buffer where the design put it: no overlap, no warning."""
    spec = shapes.write_spec(tmp_path / "spec", qwen_packages, shapes.SHAPES["qwen_gate_up_4096"],
                             (256, 4, "column_major", 0, 1))
    plan = pipelink.link(spec, mode="symbol").plan
    where = {str(u): s.offset for s in plan.smem for u in s.users}
    assert where == {"mainloop.a_ring": 0, "mainloop.b_ring": 65536, "epilogue.staging": 196608}
    assert [m.offset for m in plan.mbarriers] == [229376, 229440]
    assert not [w for w in plan.all_warnings() if "unchecked" in w]


# --- on the GPU: the propagated link verifies; the symbol-linked control shows what it let through -----

SMALL = (512, 1024, 4096, 1)  # M, K, N, gated: seconds on the H200, the same tiles and schedule as the model shape


def _verify(spec, tmp_path, mode):
    from rich.console import Console
    return pipelink.verify(spec, mode=mode, out_dir=tmp_path / mode, bench=False, seeds=1, timeout=60,
                           console=Console(file=open("/dev/null", "w")))


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
def test_unperturbed_qwen_verifies_in_symbol_mode_too(qwen_packages, tmp_path):
    """The control is faithful: linked by symbols at the packaged positions, the unperturbed kernel is right."""
    spec = shapes.write_spec(tmp_path / "spec", qwen_packages, SMALL, (256, 4, "column_major", 2, 1),
                             facts={"tile_n": None})
    for mode in ("symbol", "pipelink"):
        result = _verify(spec, tmp_path, mode)
        assert result.passed, (mode, [(r.name, r.status, r.detail) for r in result.rungs])


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
def test_perturbed_qwen_relinks_and_verifies_where_symbols_fail(qwen_perturbed, tmp_path):
    folder, packages = qwen_perturbed
    spec = shapes.write_spec(tmp_path / "spec", packages, SMALL, (256, 4, "column_major", 2, 1),
                             facts={"tile_n": None})
    linked = _verify(spec, tmp_path, "pipelink")
    assert linked.passed, [(r.name, r.status, r.detail) for r in linked.rungs]
    symbol = _verify(spec, tmp_path, "symbol")
    run, corr = symbol.rung("run"), symbol.rung("correctness")
    assert not symbol.passed and (run.status in ("hang", "crash") or corr.status == "FAILED"), \
        [(r.name, r.status, r.detail) for r in symbol.rungs]

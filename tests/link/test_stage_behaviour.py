"""What each early link stage decides, asserted as plan values and typed refusals (class, component,
field), on small components written here: fact resolution (order, conflicts, domains, variant
selection, facts reaching the bindings), port checks (shape, dtype, ring mbarriers, smem layouts,
register fragments), named-barrier IDs up to 15, and contract / spec / expression validation.

Every component is packed by the real nvcc (empty entry bodies: these tests look at the plan, not at
the code). tests/mutation/mutants.py seeds a one-line bug for each of these; each test here kills one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import pipelink
from pipelink import errors
from pipelink.contract import DTYPES, load_contract
from pipelink.expr import Expr
from pipelink.link import glue
from pipelink.link.options import LinkOptions
from pipelink.link.pipeline import plan_link
from pipelink.package import check_fact_domain
from pipelink.refs import Ref
from pipelink.spec import load_spec


# --- helpers ------------------------------------------------------------------------------------

def pack(tmp: Path, name: str, contract: str, variants: list[dict] | None = None) -> Path:
    """Pack a component whose entries do nothing (their signatures follow the contract)."""
    src = tmp / "src"
    src.mkdir(exist_ok=True)
    toml = src / f"{name}.toml"
    toml.write_text(contract)
    c = load_contract(toml)
    lines = []
    for e in c.entry:
        args = ["pl_ctx ctx", f"pl_bind_{name} b"]
        for p in map(c.port_by_name, e.ports):
            args.append(f"{DTYPES[p.dtype][0]} (&{p.name})[{p.values.eval({})}]")
        lines.append(f'extern "C" __device__ void {e.symbol}({", ".join(args)}) {{}}')
    (src / f"{name}.cu").write_text("\n".join(lines) + "\n")
    out = tmp / "packages" / f"{name}.plc"
    pipelink.pack(src / f"{name}.cu", toml, out, variants=variants, check=False)
    return out


def link_spec(tmp: Path, instances: list[str], facts: dict | None = None, connect: list[tuple[str, str]] = (),
              name: str = "spec.toml") -> Path:
    """instances: 'name' (package packages/name.plc) or a full [[instance]] body."""
    parts = ['[link]\nname = "t"\n']
    if facts:
        parts.append("[facts]\n" + "".join(f"{k} = {v}\n" for k, v in facts.items()))
    for inst in instances:
        body = inst if "\n" in inst else f'name = "{inst}"\npackage = "packages/{inst}.plc"\n'
        parts.append("[[instance]]\n" + body)
    for src, dst in connect:
        parts.append(f'[[connect]]\nfrom = "{src}"\nto = "{dst}"\n')
    parts.append("[schedule]\ntiles = [8]\n")
    path = tmp / name
    path.write_text("\n".join(parts))
    return path


def contract(name: str, body: str, role: str = "w", warps: int = 4) -> str:
    return (f'[component]\nname = "{name}"\nversion = "1"\n\n[roles.{role}]\nwarps = {warps}\n\n'
            f'[[entry]]\nsymbol = "{name}_run"\nrole = "{role}"\nphase = "{name}"\n\n{body}')


def refused(kind, spec: Path):
    with pytest.raises(kind) as info:
        plan_link(spec)
    return info.value


# --- facts ----------------------------------------------------------------------------------------

# "g" guarantees n = 8; "r" requires n (range 1..256, multiple of 8) and "s" requires it too.
GIVER = contract("g", '[facts.guarantees]\nn = "8"\n')
TAKER = contract("r", '[facts.requires]\nn = { range = [1, 256], multiple_of = 8 }\n')
OTHER = contract("s", '[facts.requires]\nn = { range = [1, 256] }\n', role="v")


@pytest.mark.slow
def test_spec_fact_against_a_guarantee_is_a_conflict(tmp_path):
    pack(tmp_path, "g", GIVER)
    pack(tmp_path, "r", TAKER)
    err = refused(errors.FactConflict, link_spec(tmp_path, ["g", "r"], {"n": 16}))
    assert err.component == "r" and err.field == "facts.requires.n"
    assert "16" in err.message and "8" in err.message and "g.plc" in err.message  # both sides, with the file
    # The same value from both sides is no conflict.
    assert plan_link(link_spec(tmp_path, ["g", "r"], {"n": 8})).instance("r").facts["n"] == 8


@pytest.mark.slow
def test_instance_fact_overrides_the_spec(tmp_path):
    pack(tmp_path, "r", TAKER)
    pack(tmp_path, "s", OTHER)
    own = 'name = "r"\npackage = "packages/r.plc"\nfacts = { n = 32 }\n'
    plan = plan_link(link_spec(tmp_path, [own, "s"], {"n": 16}))
    assert plan.instance("r").facts["n"] == 32 and plan.instance("s").facts["n"] == 16
    assert "[[instance]] 'r'" in str(plan.instance("r").fact_sources["n"])


@pytest.mark.slow
def test_guaranteed_value_outside_the_domain_is_refused(tmp_path):
    pack(tmp_path, "g", GIVER)
    pack(tmp_path, "r", contract("r", '[facts.requires]\nn = { range = [1, 4] }\n'))
    err = refused(errors.FactDomainError, link_spec(tmp_path, ["g", "r"]))
    assert err.component == "r" and err.field == "facts.requires.n" and "n=8" in err.message


def test_fact_domain_bounds_are_inclusive(tmp_path):
    pack(tmp_path, "r", TAKER)
    for n in (8, 16, 128, 256):  # both ends of the range, and multiples of 8 inside it
        assert plan_link(link_spec(tmp_path, ["r"], {"n": n})).instance("r").facts["n"] == n
    for n in (0, 12, 100, 264):
        err = refused(errors.FactDomainError, link_spec(tmp_path, ["r"], {"n": n}))
        assert err.component == "r" and err.field == "facts.requires.n"
    taker = load_contract(tmp_path / "src" / "r.toml")
    check_fact_domain(taker, "n", 256, file=None, source="test")
    with pytest.raises(errors.FactDomainError):
        check_fact_domain(taker, "n", 257, file=None, source="test")


@pytest.mark.slow
def test_variant_matching_every_compile_fact_is_selected(tmp_path):
    body = ("[facts.requires]\na = { set = [1, 2], default = 1, compile = true }\n"
            "b = { set = [1, 2], default = 1, compile = true }\n")
    pack(tmp_path, "k", contract("k", body), variants=[{"a": 1, "b": 1}, {"a": 1, "b": 2}, {"a": 2, "b": 2}])
    for (a, b), index in {(1, 1): 0, (1, 2): 1, (2, 2): 2}.items():
        plan = plan_link(link_spec(tmp_path, ["k"], {"a": a, "b": b}))
        k = plan.instance("k")
        assert k.variant == index and k.to_json()["variant"] == {"a": a, "b": b}
    err = refused(errors.VariantMissing, link_spec(tmp_path, ["k"], {"a": 2, "b": 1}))
    assert err.component == "k" and err.field == "facts.requires"


def test_resolved_facts_reach_the_bindings(tmp_path):
    """A fact changed in the spec reaches the component as a literal binding, not its default."""
    pack(tmp_path, "d", contract("d", '[facts.requires]\nn = { range = [1, 64], default = 4 }\n\n'
                                       '[[smem]]\nname = "buf"\nbytes = "n * 128"\n'))
    for n in (4, 16):
        plan = plan_link(link_spec(tmp_path, ["d"], {"n": n}))
        d = plan.instance("d")
        assert d.facts["n"] == n and d.bind["n"] == n
        assert next(s for s in plan.smem if s.name == "d.buf").bytes == n * 128
        assert f"d_run(ctx, pl_bind_d{{{n}, {d.bind['buf']}u}});" in glue.generate(glue.GlueInputs.of(plan)).text


# --- ports ------------------------------------------------------------------------------------------

def ring(name: str, direction: str, role: str, warps: int, *, count="stages", arrivals="1", tx="1024",
         mbar="full", offset="s * 256 + i") -> str:
    return contract(name, f"""[facts.requires]
stages = {{ range = [1, 8], default = 2 }}

[[smem]]
name = "ring"
bytes = "stages * 1024"

[[mbarrier]]
name = "{mbar}"
count = "{count}"
arrivals = "{arrivals}"
tx_bytes = "{tx}"

[[port]]
name = "ring"
direction = "{direction}"
space = "smem"
dtype = "fp32"
shape = {{ s = "stages", i = 256 }}
buffer = "ring"
offset = "{offset}"
mbarriers = ["{mbar}"]
protocol = "mbarrier_ring"
""", role=role, warps=warps)


def ring_link(tmp: Path, **consumer) -> Path:
    pack(tmp, "p", ring("p", "out", "prod", 1))
    pack(tmp, "c", ring("c", "in", "cons", 4, **consumer))
    return link_spec(tmp, ["p", "c"], {"stages": 3}, [("p.ring", "c.ring")])


@pytest.mark.slow
def test_ring_hand_over_is_one_buffer_and_one_mbarrier_array(tmp_path):
    plan = plan_link(ring_link(tmp_path))
    (t,) = plan.transfers
    assert t.kind == "alias"
    buf = next(s for s in plan.smem if Ref("p", "ring") in s.users)
    assert sorted(buf.users) == [Ref("c", "ring"), Ref("p", "ring")] and buf.bytes == 3 * 1024
    (m,) = plan.mbarriers
    assert (m.count, m.arrivals, m.tx_bytes) == (3, 1, 1024) and sorted(m.users) == [Ref("c", "full"), Ref("p", "full")]
    assert plan.instance("p").bind["full"] == plan.instance("c").bind["full"] == m.offset
    # plan.json writes each reference as the "instance.name" it always was.
    record = plan.to_json()
    assert [(x["src"], x["dst"]) for x in record["transfers"]] == [("p.ring", "c.ring")]
    assert [sorted(b["users"]) for b in record["smem"]["buffers"] if b["name"] == buf.name] == [["c.ring", "p.ring"]]
    assert [sorted(x["users"]) for x in record["mbarriers"]] == [["c.full", "p.full"]]


def test_references_are_typed_and_print_as_the_spec_writes_them():
    ref = Ref.parse("mainloop.acc")
    assert ref == Ref("mainloop", "acc") and str(ref) == "mainloop.acc" and ref.c_name == "mainloop_acc"


@pytest.mark.slow
@pytest.mark.parametrize("key, value", [("count", "stages + 1"), ("arrivals", "4"), ("tx", "512")],
                         ids=["count", "arrivals", "tx_bytes"])
def test_ring_mbarrier_counts_must_agree(tmp_path, key, value):
    err = refused(errors.PortMismatch, ring_link(tmp_path, **{key: value}))
    assert err.field == "connect[0]" and err.component == "p -> c"
    field = {"tx": "tx_bytes"}.get(key, key)
    assert f"mbarrier 'full' {field}" in err.message


@pytest.mark.slow
def test_ring_mbarrier_names_must_agree(tmp_path):
    err = refused(errors.PortMismatch, ring_link(tmp_path, mbar="ready"))
    assert err.field == "connect[0]" and "['full']" in err.message and "['ready']" in err.message


@pytest.mark.slow
def test_ring_layouts_must_agree(tmp_path):
    err = refused(errors.PortMismatch, ring_link(tmp_path, offset="i * stages + s"))
    assert err.field == "connect[0]" and err.component == "p -> c"


def smem_in(name: str, rows: str = "rows", dtype: str = "fp32", offset: str = "r * 32 + c") -> str:
    return contract(name, f"""[facts.requires]
rows = {{ range = [1, 64], default = 16 }}
c_rows = {{ range = [1, 64], default = 16 }}

[[smem]]
name = "buf"
bytes = 8192

[[port]]
name = "tile"
direction = "in"
space = "smem"
dtype = "{dtype}"
shape = {{ r = "{rows}", c = 32 }}
buffer = "buf"
offset = "{offset}"
""")


def regs(name: str, direction: str, fragment_r: str = "t // 8") -> str:
    return contract(name, f"""[facts.requires]
rows = {{ range = [1, 64], default = 16 }}

[[port]]
name = "acc"
direction = "{direction}"
space = "registers"
dtype = "fp32"
shape = {{ r = "rows", c = 32 }}
values = 4
fragment = {{ r = "{fragment_r}", c = "(t % 8) * 4 + v" }}
protocol = "registers"
""").replace('phase = "' + name + '"\n', 'phase = "' + name + '"\nports = ["acc"]\n')


@pytest.mark.slow
def test_port_shapes_must_agree(tmp_path):
    pack(tmp_path, "a", regs("a", "out"))
    pack(tmp_path, "m", smem_in("m", rows="c_rows"))
    spec = lambda c_rows: link_spec(tmp_path, ["a", "m"], {"rows": 16, "c_rows": c_rows}, [("a.acc", "m.tile")])
    (t,) = plan_link(spec(16)).transfers
    assert t.kind == "reg_to_smem" and t.role == "w"
    err = refused(errors.PortMismatch, spec(8))
    assert err.field == "connect[0]" and "[16, 32]" in err.message and "[8, 32]" in err.message


@pytest.mark.slow
@pytest.mark.parametrize("dtype, ok", [("bf16", True), ("fp16", True), ("int32", False), ("int8", False)])
def test_port_dtype_must_convert(tmp_path, dtype, ok):
    pack(tmp_path, "a", regs("a", "out"))
    pack(tmp_path, "m", smem_in("m", dtype=dtype))
    spec = link_spec(tmp_path, ["a", "m"], {"rows": 16}, [("a.acc", "m.tile")])
    if ok:
        (t,) = plan_link(spec).transfers
        assert t.kind == "reg_to_smem"
    else:
        err = refused(errors.PortMismatch, spec)
        assert err.field == "connect[0]" and err.component == "a -> m"


@pytest.mark.slow
def test_register_fragments_must_agree(tmp_path):
    pack(tmp_path, "a", regs("a", "out"))
    pack(tmp_path, "same", regs("same", "in"))
    pack(tmp_path, "other", regs("other", "in", fragment_r="(t + 1) % 16"))
    (t,) = plan_link(link_spec(tmp_path, ["a", "same"], {"rows": 16}, [("a.acc", "same.acc")])).transfers
    assert t.kind == "reg_to_reg"
    err = refused(errors.PortMismatch, link_spec(tmp_path, ["a", "other"], {"rows": 16}, [("a.acc", "other.acc")]))
    assert err.field == "connect[0]" and "thread 0 value 0" in err.message


# --- named barriers ---------------------------------------------------------------------------------

def test_every_free_barrier_id_up_to_15_is_used(tmp_path):
    """IDs 1..7 reserved (as CUTLASS does) leave exactly 8..15 for eight relocatable barriers; a ninth
    is refused."""
    def comp(n: int) -> str:
        bars = "".join(f'[[named_barrier]]\nname = "b{i}"\nthreads = 128\n\n' for i in range(n))
        return contract("nb", "[reserve]\nnamed_barriers = [1, 2, 3, 4, 5, 6, 7]\n\n" + bars)
    pack(tmp_path, "nb", comp(8))
    plan = plan_link(link_spec(tmp_path, ["nb"]))
    assert sorted(b.id for b in plan.barriers if not b.pinned) == list(range(8, 16))
    assert all(b.threads == 128 for b in plan.barriers if not b.pinned)
    assert [plan.instance("nb").bind[f"b{i}"] for i in range(8)] == list(range(8, 16))
    pack(tmp_path, "nb", comp(9))
    err = refused(errors.BarrierExhausted, link_spec(tmp_path, ["nb"]))
    assert "9 relocatable" in err.message


# --- contract, spec and expression validation ------------------------------------------------------

def test_contract_refuses_barrier_id_0(tmp_path):
    path = tmp_path / "c.toml"
    for bid, ok in ((0, False), (1, True), (15, True), (16, False)):
        path.write_text(contract("c", f'[[named_barrier]]\nname = "x"\nthreads = 128\nid = {bid}\n'))
        if ok:
            assert load_contract(path).named_barrier[0].id == bid
        else:
            with pytest.raises(errors.ContractError) as info:
                load_contract(path)
            assert info.value.field == "named_barrier[0].id" and info.value.component == "c"
    path.write_text(contract("c", "[reserve]\nnamed_barriers = [0]\n"))
    with pytest.raises(errors.ContractError) as info:
        load_contract(path)
    assert info.value.field == "reserve.named_barriers"


def test_contract_refuses_partial_warpgroups(tmp_path):
    path = tmp_path / "c.toml"
    for warps, ok in ((4, True), (8, True), (2, False), (6, False)):
        path.write_text(contract("c", "").replace("warps = 4\n", f"warps = {warps}\nwarpgroup_aligned = true\n"))
        if ok:
            assert load_contract(path).roles["w"].warps == warps
        else:
            with pytest.raises(errors.ContractError) as info:
                load_contract(path)
            assert info.value.field == "roles.w.warps"


def test_spec_refuses_duplicate_instances_and_unknown_ports(tmp_path):
    dup = link_spec(tmp_path, ["a", "a"], name="dup.toml")
    with pytest.raises(errors.SpecError) as info:
        load_spec(dup)
    assert info.value.field in ("instance[0].name", "instance[1].name")
    ghost = link_spec(tmp_path, ["a"], connect=[("a.out", "ghost.in")], name="ghost.toml")
    with pytest.raises(errors.SpecError) as info:
        load_spec(ghost)
    assert info.value.field == "connect[0].to"
    assert len(load_spec(link_spec(tmp_path, ["a", "b"], connect=[("a.out", "b.in")], name="ok.toml")).connect) == 1


def test_expression_functions_on_exact_quotients():
    cases = {"ceil_div(8, 4)": 2, "ceil_div(9, 4)": 3, "ceil_div(1, 4)": 1, "align_up(256, 128)": 256,
             "align_up(257, 128)": 384, "align_up(0, 1024)": 0}
    for text, value in cases.items():
        assert Expr.parse(text).eval({}) == value, text
    # The C the glue is generated with computes what the linker computed (non-negative operands).
    for text in ("ceil_div(a, b)", "align_up(a, b)", "ceil_div(a * 4, b) + a % b"):
        e = Expr.parse(text)
        c = e.to_c()
        for a in range(0, 40):
            for b in (1, 2, 4, 7, 8):
                py = c.replace("/", "//").replace("a", str(a)).replace("b", str(b))
                assert eval(py) == e.eval({"a": a, "b": b}), (text, c, a, b)


def test_the_options_are_fixed_when_the_plan_is_made(tmp_path):
    """The stages read the options the plan was made with (issue 53): symbol mode's sanitize is off from the
    start, and the options cannot be swapped once a stage may have read them."""
    pack(tmp_path, "d", contract("d", '[[smem]]\nname = "buf"\nbytes = 128\n'))
    plan = plan_link(link_spec(tmp_path, ["d"], {}), mode="symbol", sanitize=True, trace=True)
    assert plan.options.mode == plan.mode == "symbol" and plan.options.trace and not plan.options.sanitize
    with pytest.raises(AttributeError, match="fixed when it is made"):
        plan.options = LinkOptions()
    made = glue.generate(glue.GlueInputs.of(plan))
    assert made.text == glue.generate(glue.GlueInputs.of(plan)).text and made.sanitize_sites == ()

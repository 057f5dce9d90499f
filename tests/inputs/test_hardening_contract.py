"""Bad contracts are refused on load with a typed error naming the file, the component and the field.

One test per kind of bad input (issue 10): names that would reach generated C++, text that would
reach a comment, values out of the range the hardware or the glue takes, expressions that cannot be
evaluated at the default facts or are too deep or long to parse, broken files. A few go through
`pipelink pack` as a user would (exit 2, no traceback, no package), and a package carrying a bad
contract is refused on load. A hypothesis test feeds the loader mutated contracts
(tests/fuzz/cases.py; tests/fuzz/run.py runs 10 000+ of them with crash and hang detection).
"""

from __future__ import annotations

import copy
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelink import bindgen
from pipelink.contract import load_contract, parse_contract_text
from pipelink.errors import ContractError, ExpressionError, PipelinkError
from pipelink.expr import Expr
from pipelink.package import Package, Variant, load_package

from conftest import RAW, ROOT, edit
from fuzz.cases import CONTRACT, Raw, case, dumps

DELETE = object()


def edited(*edits) -> dict:
    """The base contract with (path, value) edits; a path is a tuple of keys and indices."""
    doc = copy.deepcopy(CONTRACT)
    for path, value in edits:
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        if value is DELETE:
            del parent[path[-1]]
        else:
            parent[path[-1]] = value
    return doc


def renamed(table: tuple, old: str, new: str) -> dict:
    doc = copy.deepcopy(CONTRACT)
    parent = doc
    for k in table:
        parent = parent[k]
    parent[new] = parent.pop(old)
    return doc


def refused(tmp_path: Path, doc: dict | bytes) -> ContractError:
    path = tmp_path / "bad.toml"
    path.write_bytes(doc if isinstance(doc, bytes) else dumps(doc).encode())
    with pytest.raises(ContractError) as info:
        load_contract(path)
    err = info.value
    assert err.file == str(path), err.format()
    return err


CODE = "x\n#include <cstdlib>\nint pwned = (std::abort(), 0);"

# (kind, contract, field named, words in the message)
CASES = [
    # names that reach generated C++
    ("port-name-newline-code", edited((("port", 1, "name"), "acc" + CODE)), "port[1].name", "not a C identifier"),
    ("role-name-space", renamed(("roles",), "loader", "load er"), "roles", "'load er' is not a C identifier"),
    ("phase-name-dotdot", edited((("entry", 1, "phase"), "../load")), "entry[1].phase", "not a C identifier"),
    ("port-name-nul", edited((("port", 0, "name"), "ri\0ng")), "port[0].name", "not a C identifier"),
    ("fact-name-newline", renamed(("facts", "requires"), "K", "K\nint x;"), "facts.requires", "not a C identifier"),
    ("dimension-name-unicode", renamed(("port", 0, "shape"), "s", "é"), "port[0].shape", "not a C identifier"),
    ("smem-name-keyword", edited((("smem", 0, "name"), "class")), "smem[0].name", "C++ keyword"),
    ("barrier-name-reserved", edited((("named_barrier", 0, "name"), "pl_smem")), "named_barrier[0].name",
     "reserved prefix"),
    ("mbarrier-name-reserved", edited((("mbarrier", 0, "name"), "__full")), "mbarrier[0].name", "reserved prefix"),
    ("operand-name-10000", edited((("operand", 0, "name"), "x" * 10_000)), "operand[0].name",
     "10000 characters long, over the limit of 64 by 9936"),
    ("component-name-10000", edited((("component", "name"), "c" * 10_000)), "component.name",
     "over the limit of 64 by 9936"),
    ("entry-symbol-not-identifier", edited((("entry", 0, "symbol"), "fold-tile")), "entry[0].symbol",
     "not a C identifier"),
    ("entry-symbol-glue-local", edited((("entry", 0, "symbol"), "ctx")), "entry[0].symbol", "glue's kernel declares"),
    ("entry-scope-unknown", edited((("entry", 0, "scope"), "warp")), "entry[0].scope", "warp"),
    # text that reaches comments in generated code
    ("version-newline", edited((("component", "version"), "1.0\n#define float int")), "component.version",
     "control character"),
    ("fact-doc-newline", edited((("facts", "requires", "K", "doc"), "cols\r\nx")), "facts.requires.K.doc",
     "control character"),
    # ranges and types
    ("smem-bytes-2**70", edited((("smem", 0, "bytes"), 2 ** 70)), "smem[0].bytes", "outside the 32-bit range"),
    ("smem-bytes-over", edited((("smem", 0, "bytes"), "stages * 1000000")), "smem[0].bytes",
     "'stages * 1000000' = 4000000 is over the limit 1048576 by 2951424 (with stages=4)"),
    ("smem-bytes-negative", edited((("smem", 1, "bytes"), -256)), "smem[1].bytes", "below the minimum 1"),
    ("smem-bytes-zero", edited((("smem", 0, "bytes"), "tile_rows - 128")), "smem[0].bytes",
     "0 is below the minimum 1 by 1"),
    ("align-zero", edited((("smem", 0, "align"), 0)), "smem[0].align", "0 is not one of 1, 2, 4"),
    ("align-negative", edited((("smem", 0, "align"), -128)), "smem[0].align", "is not one of"),
    ("align-not-power-of-two", edited((("smem", 0, "align"), 48)), "smem[0].align", "48 is not one of"),
    ("offset-negative", edited((("smem", 1, "offset"), -16)), "smem[1].offset", "below the minimum 0"),
    ("offset-unaligned", edited((("smem", 1, "offset"), 8)), "smem[1].offset", "not a multiple of the buffer's"),
    ("mbarrier-count-zero", edited((("mbarrier", 0, "count"), 0)), "mbarrier[0].count", "below the minimum 1"),
    ("arrivals-negative", edited((("mbarrier", 0, "arrivals"), -1)), "mbarrier[0].arrivals", "below the minimum 1"),
    ("arrivals-2**70", edited((("mbarrier", 0, "arrivals"), 2 ** 70)), "mbarrier[0].arrivals",
     "outside the 32-bit range"),
    ("arrivals-over-ptx", edited((("mbarrier", 0, "arrivals"), 2 ** 20)), "mbarrier[0].arrivals",
     "over the limit 1048575 by 1"),
    ("tx-bytes-negative", edited((("mbarrier", 1, "tx_bytes"), -4)), "mbarrier[1].tx_bytes", "below the minimum 0"),
    ("barrier-threads-not-warps", edited((("named_barrier", 1, "threads"), 48)), "named_barrier[1].threads",
     "not a multiple of 32"),
    ("barrier-threads-zero", edited((("named_barrier", 1, "threads"), 0)), "named_barrier[1].threads",
     "below the minimum 32"),
    ("barrier-threads-over-block", edited((("named_barrier", 1, "threads"), 2048)), "named_barrier[1].threads",
     "over the limit 1024"),
    ("fact-set-empty", edited((("facts", "requires", "tile_rows", "set"), [])), "facts.requires.tile_rows.set",
     "empty"),
    ("fact-default-outside-set", edited((("facts", "requires", "tile_rows", "default"), 96)),
     "facts.requires.tile_rows.default", "default 96 is not in the allowed set [64, 128]"),
    ("fact-default-not-multiple", edited((("facts", "requires", "tile_cols", "set"), [32, 48]),
                                         (("facts", "requires", "tile_cols", "default"), 48)),
     "facts.requires.tile_cols.default", "not a multiple of 32"),
    ("fact-value-over-int", edited((("facts", "requires", "K", "range"), [1, 2 ** 40])), "facts.requires.K.range[1]",
     "over the limit 2147483647"),
    ("guarantee-over-int", edited((("facts", "guarantees", "box_rows"), "tile_rows * 100000000")),
     "facts.guarantees.box_rows", "over the limit 2147483647"),
    ("fact-name-function", renamed(("facts", "requires"), "K", "min"), "facts.requires.min", "expression function"),
    ("pinned-barrier-twice", edited((("named_barrier", 1, "id"), 9)), "named_barrier[1].id", "both pinned at ID 9"),
    ("barrier-id-16", edited((("named_barrier", 0, "id"), 16)), "named_barrier[0].id", "outside 1..15"),
    ("pinned-smem-overlap", edited((("smem", 0, "offset"), 0)), "smem[1].offset", "overlap [0, 131072)"),
    ("register-values-over", edited((("port", 1, "values"), 256)), "port[1].values", "over the limit 255"),
    ("tma-box-over", edited((("operand", 0, "tma", "box", 1), 512)), "operand[0].tma.box[1]", "over the limit 256"),
    ("tma-partial-no-such-dimension", edited((("operand", 0, "tma", "partial"), [2])), "operand[0].tma.partial[0]",
     "dimension 2 is not one of the operand's 2"),
    ("tma-partial-twice", edited((("operand", 0, "tma", "partial"), [0, 0])), "operand[0].tma.partial[1]",
     "named twice"),
    ("tma-partial-not-a-list", edited((("operand", 0, "tma", "partial"), 0)), "operand[0].tma.partial",
     "expected an array"),
    ("cluster-shares-by-unknown-fact", edited((("schedule", "cluster_shares_by"),
                                               {"fact": "share", "values": ["tile_col", "tile_row"]})),
     "schedule.cluster_shares_by.fact", "'share' is not a required fact"),
    ("cluster-shares-by-value-without-entry", edited((("schedule", "cluster_shares_by"),
                                                      {"fact": "tile_rows", "values": ["tile_col", "tile_row"]})),
     "schedule.cluster_shares_by.values", "may be 64, which picks no entry of the 2 values"),
    ("cluster-shares-by-unbounded-fact", edited((("schedule", "cluster_shares_by"), {"fact": "K", "values": ["none"]})),
     "schedule.cluster_shares_by.fact", "no small set of values"),
    ("cluster-shares-twice", edited((("schedule", "cluster_shares"), "tile_col"),
                                    (("schedule", "cluster_shares_by"), {"fact": "stages", "values": ["none"] * 17})),
     "schedule.cluster_shares_by", "both cluster_shares ('tile_col') and cluster_shares_by"),
    ("cluster-shares-by-bad-value", edited((("schedule", "cluster_shares_by"), {"fact": "stages", "values": ["rows"]})),
     "schedule.cluster_shares_by.values[0]", "'rows' is not one of"),
    ("dtype-unknown", edited((("operand", 1, "dtype"), "fp64")), "operand[1].dtype", "'fp64' is not one of fp32"),
    ("port-name-twice", edited((("port", 1, "name"), "ring"), (("entry", 0, "ports"), ["ring"])), "entry[0].ports",
     "not a register port"),
    ("no-entry", edited((("entry",), [])), "entry", "at least one [[entry]]"),
    ("component-not-a-table", edited((("component",), "fold")), "component", "expected a table"),
    ("wrong-type", edited((("roles", "loader", "warps"), 1.5)), "roles.loader.warps", "expected an integer"),
    # expressions at the default facts
    ("division-by-zero", edited((("smem", 0, "bytes"), "stages // (tile_rows - 128)")), "smem[0].bytes",
     "division by zero"),
    ("division-not-exact", edited((("port", 1, "values"), "tile_rows * tile_cols / 3")), "port[1].values",
     "does not divide exactly"),
    ("call-divides-by-zero", edited((("mbarrier", 0, "tx_bytes"), "ceil_div(4, tile_rows - 128)")),
     "mbarrier[0].tx_bytes", "division by zero"),
    ("call-with-one-argument", edited((("smem", 0, "bytes"), "max(stages)")), "smem[0].bytes",
     "max() with 1 argument(s)"),
    # guarantees: each computable from the required facts (issue 48)
    ("guarantee-names-itself", edited((("facts", "guarantees", "ring_arrivals"), "ring_arrivals + 1")),
     "facts.guarantees.ring_arrivals", "guarantee 'ring_arrivals' is computed from itself: "
     "ring_arrivals = 'ring_arrivals + 1'"),
    ("guarantees-need-each-other", edited((("facts", "guarantees", "ring_arrivals"), "box_rows + 1"),
                                          (("facts", "guarantees", "box_rows"), "ring_arrivals")),
     "facts.guarantees.ring_arrivals", "guarantee 'ring_arrivals' is computed from itself through box_rows: "
     "ring_arrivals = 'box_rows + 1', box_rows = 'ring_arrivals'"),
    ("guarantees-in-a-cycle-of-three", edited((("facts", "guarantees", "lead"), "box_rows * 2"),
                                              (("facts", "guarantees", "box_rows"), "wide"),
                                              (("facts", "guarantees", "wide"), "max(ring_arrivals, stages)"),
                                              (("facts", "guarantees", "ring_arrivals"), "box_rows // 2")),
     "facts.guarantees.ring_arrivals", "computed from itself through box_rows, wide: ring_arrivals = "
     "'box_rows // 2', box_rows = 'wide', wide = 'max(ring_arrivals, stages)'"),
    ("expression-20000-deep", edited((("smem", 0, "bytes"), "(" * 20_000 + "1" + ")" * 20_000)), "smem[0].bytes",
     "over the limit of 1000"),
    ("expression-900-deep", edited((("smem", 0, "bytes"), "-" * 899 + "1")), "smem[0].bytes",
     "nests 900 deep, over the limit of 64"),
    ("expression-1MB", edited((("smem", 0, "bytes"), "1 + " * 250_000 + "1")), "smem[0].bytes",
     "1000001 characters long, over the limit of 1000 by 999001"),
    ("expression-newline", edited((("smem", 0, "bytes"), "(stages\n* 4)")), "smem[0].bytes", "'\\n' is not allowed"),
    ("expression-literal-over-int", edited((("smem", 0, "bytes"), "4294967296 - 4294967040")), "smem[0].bytes",
     "over the 32-bit limit"),
]


@pytest.mark.parametrize("doc, field, words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_contract_is_refused_naming_file_and_field(tmp_path, doc, field, words):
    err = refused(tmp_path, doc)
    assert err.field == field, err.format()
    assert words in err.message, err.format()
    if not field.startswith("component"):  # otherwise the component has no usable name
        assert err.component == "fold"
    assert "\n" not in err.message.replace("\n  hint", ""), "a hostile name is quoted, not pasted"


def test_a_guarantee_may_still_use_a_guarantee_declared_after_it(tmp_path):
    """The control for the cycles above: an order between guarantees is not a cycle."""
    path = tmp_path / "ok.toml"
    path.write_text(dumps(edited((("facts", "guarantees", "ring_arrivals"), "box_rows // 2"))))
    assert load_contract(path).facts.guarantees["ring_arrivals"].text == "box_rows // 2"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False))
def test_guarantees_computed_from_themselves_are_refused(rng: random.Random):
    """A valid contract whose guarantees are made to need themselves, through up to five of them, with or
    without another guarantee leading in (tests/fuzz/cases.py): refused, naming one on the cycle."""
    text = case("broken-contract", rng).decode()
    with pytest.raises(ContractError) as info:
        parse_contract_text(text, "fuzz.toml")
    on_cycle = text.partition("\n")[0].partition(": ")[2].split(" -> ")
    assert info.value.field in {f"facts.guarantees.{n}" for n in on_cycle}, (text.partition("\n")[0], info.value)
    assert "computed from itself" in info.value.message and info.value.hint


def test_invalid_utf8_names_the_file(tmp_path):
    text = dumps(CONTRACT).encode()
    err = refused(tmp_path, text[:40] + b"\xff\xfe" + text[40:])
    assert "not valid UTF-8" in err.message and "offset 40" in err.message


@pytest.mark.parametrize("raw, words", [("[" * 20_000 + "]" * 20_000, "nested too deeply"),
                                        ("{a = " * 5_000 + "1" + "}" * 5_000, "nested too deeply"),
                                        ("9" * 5_000, "malformed TOML")])
def test_unparseable_values_are_typed(tmp_path, raw, words):
    err = refused(tmp_path, edited((("schedule", "order"), Raw(raw))))
    assert words in err.message


def test_expression_limits_raise_expression_error_before_recursing():
    for text, words in [("(" * 20_000 + "1" + ")" * 20_000, "characters long"), ("1 + " * 250_000 + "1", "characters"),
                        ("-" * 999 + "1", "nests 1000 deep"), ("a +\\\n b", "not allowed"), (2 ** 70, "32-bit")]:
        with pytest.raises(ExpressionError, match=words):
            Expr.parse(text, where="f")
    assert Expr.parse("-" * 62 + "1").eval({}) == 1  # the limits leave room for any real expression


def test_a_valid_contract_still_loads(tmp_path):
    path = tmp_path / "ok.toml"
    path.write_text(dumps(CONTRACT))
    c = load_contract(path)
    assert c.smem[1].offset.eval({}) == 0 and c.mbarrier[1].arrivals.eval(c.role_env()) == 8


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "pipelink.cli", *args], capture_output=True, text=True)


@pytest.mark.parametrize("kind", ["port-name-newline-code", "smem-bytes-2**70", "arrivals-2**70", "no-entry",
                                  "expression-20000-deep", "component-not-a-table", "pinned-smem-overlap"])
def test_pack_refuses_with_exit_2_and_writes_nothing(tmp_path, kind):
    doc, field, words = next(c[1:] for c in CASES if c[0] == kind)
    contract, out = tmp_path / "bad.toml", tmp_path / "out" / "bad.plc"
    contract.write_text(dumps(doc))
    proc = run_cli("pack", str(RAW / "tile_store.cu"), "--contract", str(contract), "-o", str(out))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and str(contract) in proc.stderr and field in proc.stderr
    assert not out.exists() and not out.parent.exists()


def test_pack_refuses_invalid_utf8(tmp_path):
    contract = tmp_path / "bad.toml"
    contract.write_bytes(b"\xff" + dumps(CONTRACT).encode())
    proc = run_cli("pack", str(RAW / "tile_store.cu"), "--contract", str(contract), "-o", str(tmp_path / "b.plc"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert str(contract) in proc.stderr and "UTF-8" in proc.stderr
    assert not (tmp_path / "b.plc").exists()


def test_package_carrying_a_bad_contract_is_refused_on_load(tmp_path):
    good = tmp_path / "good.toml"
    good.write_text(dumps(CONTRACT))
    bad_text = dumps(edited((("port", 1, "name"), "acc" + CODE)))
    path = Package(contract=load_contract(good), contract_text=bad_text, variants=[Variant({}, b"no code needed")],
                   toolchain={"nvcc": "13.0.88"}, compile_options=[]).save(tmp_path / "bad.plc")
    with pytest.raises(PipelinkError) as info:
        load_package(path)
    assert str(path) in info.value.file and info.value.field.endswith("port[1].name"), info.value.format()


# Every line the bindings and facts headers may hold: a pasted newline would add a line of another shape.
_HEADER_LINE = re.compile("|".join([
    r"// Generated by pipelink from the contract of '\w+' [^\x00-\x1f\x7f]*\. Do not edit\.",
    r"// Compile-time facts of '\w+' for this package variant\. Generated by pipelink\.",
    r"#ifndef PIPELINK_BIND_\w+_H", r"#define PIPELINK_BIND_\w+_H", r"#endif  // PIPELINK_BIND_\w+_H",
    r"#include <[\w/.]+>", r"struct pl_bind_\w+ \{", r"\};", r"namespace pl_facts \{", r"\}",
    r"  (const )?\w+( \w+)?\*? \w+;  // [A-Za-z ]+",
    r"\[\[maybe_unused\]\] constexpr int \w+ = -?\d+;(  // role size)?"]), re.ASCII)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False))
def test_mutated_contracts_load_or_raise_a_typed_error(rng: random.Random):
    """Whatever the mutation, loading gives a contract or a located PipelinkError, nothing else; and
    the C++ generated from an accepted contract holds only lines of the shapes the generator writes."""
    text = case("contract", rng)
    try:
        c = parse_contract_text(text.decode("utf-8"), "fuzz.toml")
    except UnicodeDecodeError:
        return  # load_contract's part (test_invalid_utf8_names_the_file); this test parses text
    except PipelinkError as exc:
        assert exc.file == "fuzz.toml"
        return
    defaults = {n: c.facts.requires[n].default for n in c.compile_facts()}
    for line in (bindgen.bind_header(c) + bindgen.facts_header(c, defaults)).splitlines():
        assert not line or _HEADER_LINE.fullmatch(line), line


@pytest.mark.slow
def test_limits_are_checked_again_with_the_facts_a_link_resolves(tmp_path):
    """An arrival count driven by a fact with no default cannot be checked on load; the link checks
    it with the value it resolved (N = 16896: 16896 * 64 arrivals, over the 2**20 - 1 an mbarrier
    counts) and refuses, naming the contract field and the fact, before any code is generated."""
    import pipelink
    from contracts import violation_link
    spec = violation_link(tmp_path, "benign", {}, False)
    contract = tmp_path / "v.toml"
    contract.write_text(contract.read_text().replace("arrivals = 128", 'arrivals = "N * 64"'))
    pipelink.pack(ROOT / "tests" / "violations" / "benign.cu", contract, tmp_path / "packages" / "v.plc", check=False)
    with pytest.raises(ContractError) as info:
        pipelink.link(spec)
    assert info.value.field.startswith("mbarrier") and info.value.component == "v"
    assert "N=16896" in str(info.value) and "1081344" in str(info.value)
    edit(spec, "N = 16896", "N = 128")  # 8192 arrivals: within the limit, links
    assert pipelink.link(spec).plan.mbarriers[0].arrivals == 8192

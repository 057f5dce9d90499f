"""Issue 18, part 3: every check has an input that must make it fail, so that none can pass vacuously.

Each test gives one check real input that breaks exactly its rule (real nvcc, nvJitLink and nvdisasm;
nothing mocked) and asserts what the check decided: the typed error and its field, or the post-link
or conformance finding, next to a control that passes. The post-link checks also run on a real
linked kernel whose *plan* is changed (a barrier ID or buffer offset the code never uses), the way
a wrong plan or a blind check would show.

Inventory: check -> the test that makes it fail (tests in other files are named with their file).

post-link (link/postlink.py post_link_checks)
  barrier IDs as immediates         test_postlink_barrier_id_not_in_the_sass
  smem buffers addressed            test_postlink_smem_buffer_never_addressed (a warning)
  barrier IDs from registers        test_postlink_barrier_id_from_a_register
  remaining CALL.REL                test_postlink_call_left_in_the_kernel (and CALL.ABS only warns:
                                    test_postlink_call_to_a_system_routine_is_only_a_warning)
  local memory / spills             test_postlink_local_memory
  static + dynamic smem > limit     test_postlink_static_plus_dynamic_smem_over_the_limit,
                                    test_postlink_smem_limit_boundary
conformance (link/conform.py)
  barrier 0 in a multi-role block   test_conform.py::test_seeded_violation_is_found[syncthreads],
                                    test_whole_block.py::test_the_same_code_in_a_tile_phase_is_refused
  symbol mode reports, not refuses  test_conformance_in_symbol_mode_reports_what_it_lets_through
  unallocated barrier ID            test_conform.py::...[bar_undeclared], [bar_arrive_undeclared],
                                    [pinned_wrong_id], [others_barrier]
  barrier ID from a register        test_postlink_barrier_id_from_a_register (a warning)
  barrier thread count              test_conform.py::...[bar_threads]
  setmaxnreg values                 test_conform.py::...[setmaxnreg]
  mbarrier outside own slots        test_conform.py::...[mbar_outside] (no one's slot),
                                    test_conformance_mbarrier_of_another_instance (a neighbour's slot)
  mbarrier.init                     test_conform.py::...[mbar_init]
  expect_tx bytes                   test_conform.py::...[expect_tx]
  static smem offset past a buffer  test_conform.py::...[smem_beyond], [smem_past_buffer],
                                    [smem_past_buffer_warp], test_conformance_smem_overrun_at_every_position,
                                    test_conformance_static_shared_array_is_not_flagged
  local memory                      test_conform.py::...[spills] (a warning)
  calls                             test_conform.py::...[not_inlined]
ports and schedule (link/check.py)
  direction                         test_port_direction
  shape                             test_errors.py::test_port_shape_mismatch
  dtype (not convertible)           test_errors.py::test_port_dtype_mismatch
  ring layout                       test_ring_layouts_differ
  mbarrier names                    test_ring_mbarrier_names_differ
  mbarrier count/arrivals/tx_bytes  test_ring_mbarrier_numbers_differ[count|arrivals|tx_bytes],
                                    test_errors.py::test_mbarrier_arrival_mismatch_is_caught
  fragment maps                     test_register_fragment_values_differ, test_pipeline.py::
                                    test_registers_with_another_fragment_layout_are_refused,
                                    test_qwen.py::test_fragment_mismatch_names_thread_and_value
  register dtype                    test_register_dtypes_differ
  register role                     test_registers_to_another_role
  smem -> registers                 test_smem_port_cannot_feed_registers
  barrier hand-over across roles    test_barrier_handover_across_roles
  unconnected in-port               test_unconnected_in_port
  schedule order                    test_errors.py::test_schedule_mismatch
  TMA box rules                     test_tma_box_rules[extent|pitch|divide|swizzle],
                                    test_qwen.py::test_tma_box_over_the_swizzle_span_is_refused_at_link
"""

from __future__ import annotations

import copy
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import pipelink
from pipelink.backend.cache import Cache
from pipelink.backend.inspect import inspect_cubin, opcode
from pipelink.errors import ContractError, PortMismatch, SpecError
from pipelink.findings import ConformanceError
from pipelink.link.postlink import post_link_checks
from pipelink.link.abi import kernel_abi
from pipelink.link.plan import WHOLE_KERNEL, BarrierAlloc, ComponentBarrier, SmemAlloc
from pipelink.link.pipeline import plan_link
from pipelink.refs import Ref

from conftest import ROOT, edit
from contracts import VIOLATIONS, component, register_port, smem_tile, violation_link

BIG_BUFFER = '\n[[smem]]\nname = "big"\nbytes = 196608\n'  # 192 KB of dynamic smem, inside the device limit


# --- post-link checks ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """A real link of a clean one-component kernel (tests/violations/benign.cu): plan and parsed SASS."""
    tmp = tmp_path_factory.mktemp("clean")
    kernel = pipelink.link(violation_link(tmp, "benign", {}, False), cache=Cache(root=tmp / "cache"))
    info, _ = inspect_cubin(kernel.cubin, kernel.plan.entry)
    return kernel.plan, info


def rerun(plan, info, change=None):
    """The post-link checks again, on the same SASS, for a copy of the plan changed by ``change``:
    their result (a PostLink without conformance)."""
    plan = copy.deepcopy(plan)
    if change:
        change(plan)
    return post_link_checks(plan, info)


def with_allocation(**changes):
    """A ``change`` for rerun: the plan's (frozen) allocation replaced by one with ``changes``, each a
    function of the plan."""
    def change(p):
        p.allocation = replace(p.allocation, **{k: f(p) for k, f in changes.items()})
    return change


def postlink_ok(result) -> bool:
    """The post-link check's verdict in a post-link stage result (plan.postlink, or rerun's)."""
    return next(c for c in result.checks if c.name == "post-link").ok


def linked(tmp_path, kind, tweaks=None, second_role=False):
    kernel = pipelink.link(violation_link(tmp_path, kind, tweaks or {}, second_role), strict=False)
    return kernel, inspect_cubin(kernel.cubin, kernel.plan.entry)[0]


@pytest.mark.slow
def test_postlink_control_has_no_findings(clean):
    plan, info = clean
    result = rerun(plan, info)
    assert result.findings == () and postlink_ok(result)
    sync = next(b for b in plan.barriers if b.name == "v.sync")
    assert result.folded[f"barrier v.sync = {sync.id}"] is True


def test_postlink_barrier_id_not_in_the_sass(clean):
    plan, info = clean
    in_sass = {int(b[1], 16) for b in info.barriers if b[1].startswith("0x")}
    unused = next(i for i in range(1, 16) if i not in in_sass)

    def move_sync(p):  # the plan says v.sync is `unused`; the code syncs on the ID it was really given
        next(b for b in p.barriers if b.name == "v.sync").id = unused
    out = rerun(plan, info, move_sync)
    assert out.folded[f"barrier v.sync = {unused}"] is False
    assert list(out.findings) == [f"named barrier v.sync (ID {unused}) does not appear as an immediate BAR "
                                  "operand"]
    assert not postlink_ok(out)
    # An extra barrier the code never uses is found too; the real one is still seen.
    extra = rerun(plan, info, with_allocation(barriers=lambda p: (*p.barriers, BarrierAlloc(ComponentBarrier("v", "ghost"), unused, 128, False))))
    assert extra.folded[f"barrier v.ghost = {unused}"] is False
    assert any(k.startswith("barrier v.sync") and v for k, v in extra.folded.items())


def test_postlink_smem_buffer_never_addressed(clean):
    plan, info = clean
    imms = info.immediates()
    offset = 4096
    while any(offset <= x < offset + 64 for x in imms):
        offset += 4096
    ghost = SmemAlloc("v.ghost", offset, 64, 16, False, WHOLE_KERNEL, [Ref("v", "ghost")])
    out = rerun(plan, info, with_allocation(smem=lambda p: (*p.smem, ghost)))
    assert out.folded[f"smem v.ghost @ {offset}"] is False
    # Declared but unused is legal (CUB's WarpReduce TempStorage): reported as a warning, the link passes.
    assert list(out.warnings) == [f"smem buffer v.ghost at offset {offset} is never addressed by an immediate in "
                                  f"[{offset}, {offset + 64}): unused, or its offset is not folded"]
    assert out.findings == () and postlink_ok(out)
    assert rerun(plan, info).warnings == ()
    placed = [s for s in plan.smem if s.offset]
    assert placed and all(out.folded[f"smem {s.name} @ {s.offset}"] for s in placed)


@pytest.mark.slow
def test_postlink_barrier_id_from_a_register(tmp_path, clean):
    assert not [b for b in clean[1].barriers if not b[1].startswith("0x")]  # the control has none
    kernel, info = linked(tmp_path, "more/bar_from_register")
    from_registers = [b for b in info.barriers if b[1].startswith("R")]
    assert from_registers
    assert list(kernel.plan.postlink.findings) == [f"{len(from_registers)} barrier instruction(s) take the ID "
                                                   "from a register: a binding was not folded (an ID chosen at "
                                                   "run time, `wg ? b.wg1 : b.wg0`: branch instead, one call "
                                                   "per barrier)"]
    assert not postlink_ok(kernel.plan.postlink)
    # Conformance cannot check such a barrier: it says so (a warning), for the component that did it.
    conf = kernel.plan.postlink.conformance
    assert conf and all(f.severity == "warning" and f.field == "named_barrier" and f.instance == "v"
                        and "barrier ID comes from a register" in f.message for f in conf)


@pytest.mark.slow
def test_postlink_call_left_in_the_kernel(tmp_path):
    kernel, info = linked(tmp_path, "not_inlined")
    relative = [c for c in info.calls if opcode(c).startswith("CALL.REL")]
    assert relative
    found = [f for f in kernel.plan.postlink.findings if "call(s) remain" in f]
    assert found == [f"{len(relative)} call(s) remain: a component was not inlined ({relative[0]})"]
    assert kernel.plan.backend.resources.calls == len(info.calls)
    assert not postlink_ok(kernel.plan.postlink)


@pytest.mark.slow
def test_postlink_call_to_a_system_routine_is_only_a_warning(tmp_path):
    """The other side of the CALL.REL rule: assert's CALL.ABS (__assertfail) is no un-inlined component."""
    kernel, info = linked(tmp_path, "more/device_assert")
    absolute = [c for c in info.calls if opcode(c).startswith("CALL.ABS")]
    assert absolute and len(absolute) == len(info.calls)
    assert kernel.plan.postlink.findings == () and postlink_ok(kernel.plan.postlink)
    warnings = kernel.plan.postlink.warnings
    assert any(w.startswith(f"{len(absolute)} call(s) to system routines remain") for w in warnings)


@pytest.mark.slow
def test_postlink_local_memory(tmp_path):
    kernel, info = linked(tmp_path, "spills")
    assert info.spill_insns > 0
    found = [f for f in kernel.plan.postlink.findings if "local memory" in f]
    assert found == [f"local memory in use ({info.local} bytes, {info.spill_insns} LDL/STL): register spills"]
    assert not postlink_ok(kernel.plan.postlink)


@pytest.mark.slow
def test_postlink_static_plus_dynamic_smem_over_the_limit(tmp_path):
    """40 KB of undeclared static smem beside 192 KB of declared buffers: the allocator accepts the
    declared part, the cubin shows the rest."""
    kernel, info = linked(tmp_path, "more/static_smem", {"reserve": BIG_BUFFER})
    plan = kernel.plan
    limit, static = plan.device["smem_optin_bytes"], info.static_smem - plan.device["smem_reserved_bytes"]
    assert static == 40960 and plan.smem_bytes <= limit < static + plan.smem_bytes
    assert list(plan.postlink.findings) == [f"static ({static}) + dynamic ({plan.smem_bytes}) smem exceed {limit} "
                                            f"bytes by {static + plan.smem_bytes - limit}"]
    assert not postlink_ok(plan.postlink)


def test_postlink_smem_limit_boundary(clean):
    plan, info = clean
    static = max(0, info.static_smem - plan.device["smem_reserved_bytes"])
    room = plan.device["smem_optin_bytes"] - static

    def dynamic(n):
        return with_allocation(smem_bytes=lambda p: n)
    assert rerun(plan, info, dynamic(room)).findings == ()
    over = rerun(plan, info, dynamic(room + 1))
    assert list(over.findings) == [f"static ({static}) + dynamic ({room + 1}) smem exceed "
                                   f"{plan.device['smem_optin_bytes']} bytes by 1"]


# --- conformance --------------------------------------------------------------------------------

@pytest.mark.slow
def test_conformance_mbarrier_of_another_instance(tmp_path):
    """Slot 1 of v's one-slot mbarrier array is where the neighbour's mbarrier lies: not v's."""
    spec = violation_link(tmp_path, "more/others_mbarrier", {}, True)
    plan = plan_link(spec)
    mine, theirs = (next(m for m in plan.mbarriers if m.name == n) for n in ("v.bar", "neighbour.bar"))
    assert theirs.offset == mine.offset + 8, "the seeded slot must be the neighbour's"
    with pytest.raises(ConformanceError) as info:
        pipelink.link(spec)
    assert info.value.component == "v" and info.value.field == "mbarrier"
    found = pipelink.link(spec, strict=False).plan.postlink.conformance
    assert [(f.instance, f.severity, f.field) for f in found if "mbarrier at smem" in f.message] == \
        [("v", "error", "mbarrier")]
    assert any(f"smem offset {theirs.offset}, outside this instance's mbarrier slots" in f.message for f in found)


@pytest.mark.slow
def test_conformance_own_second_mbarrier_slot_is_legal(tmp_path):
    """The same code as above, with v's array declared two slots long: slot 1 is v's own, no finding
    (slot ranges are in bytes, 8 per mbarrier; counting them in slots would flag this legal use)."""
    spec = violation_link(tmp_path, "more/others_mbarrier", {}, False)
    contract = tmp_path / "v.toml"
    contract.write_text(contract.read_text().replace("arrivals = 128", "arrivals = 128\ncount = 2"))
    pipelink.pack(ROOT / "tests" / "violations" / "more" / "others_mbarrier.cu", contract,
                  tmp_path / "packages" / "v.plc")  # packs clean: the pack-time conformance check agrees
    kernel = pipelink.link(spec)
    assert next(m for m in kernel.plan.mbarriers if m.name == "v.bar").count == 2
    assert kernel.plan.postlink.conformance == ()


LOW_BUFFER = '\n[[smem]]\nname = "lo"\nbytes = 1024\noffset = 0\n'
# Where v.buf sits among the block's buffers (v.buf, v.lo, neighbour.buf, all pinned), and what the
# word after its end holds.
POSITIONS = {"first": (0, 1024, "", "buffer neighbour.buf"),
             "middle": (1024, 2048, LOW_BUFFER, "buffer neighbour.buf"),
             "last": (2048, 1024, LOW_BUFFER, "mbarrier v.bar")}


@pytest.mark.slow
@pytest.mark.parametrize("position", sorted(POSITIONS))
@pytest.mark.parametrize("kind", ["smem_past_buffer", "smem_past_buffer_warp"])
def test_conformance_smem_overrun_at_every_position(tmp_path, kind, position):
    """A write 4 bytes past v.buf is found wherever the buffer lies in the block, with a static index
    or with a run-time (per-warp) one, and the finding names what it hits."""
    buf_at, theirs_at, low, into = POSITIONS[position]
    spec = violation_link(tmp_path, kind, {"reserve": low}, True)
    for contract, source, package, offset in (("v.toml", f"{kind}.cu", "v.plc", buf_at),
                                              ("other.toml", "neighbour.cu", "other.plc", theirs_at)):
        edit(tmp_path / contract, 'name = "buf"\nbytes = 1024\n', f'name = "buf"\nbytes = 1024\noffset = {offset}\n')
        pipelink.pack(VIOLATIONS / source, tmp_path / contract, tmp_path / "packages" / package, check=False)
    layout = {s.name: s.offset for s in plan_link(spec).smem}
    assert layout["v.buf"] == buf_at and layout["neighbour.buf"] == theirs_at
    assert sorted(layout, key=layout.get).index("v.buf") == ["first", "middle", "last"].index(position)
    with pytest.raises(ConformanceError) as info:
        pipelink.link(spec)
    assert info.value.field == "smem.buf" and Path(info.value.file) == (tmp_path / "packages" / "v.plc").resolve()
    found = pipelink.link(spec, strict=False).plan.postlink.conformance
    assert [(f.instance, f.severity, f.field) for f in found] == [("v", "error", "smem.buf")], found
    assert f"ending 4 bytes past its buffer 'buf' [{buf_at}, {buf_at + 1024}): into {into}" in found[0].message


@pytest.mark.slow
def test_conformance_static_shared_array_is_not_flagged(tmp_path):
    """A static __shared__ array lies below pl_smem: a static index past the dynamic allocation there is
    no overrun (the benign control of the static smem check)."""
    kernel, info = linked(tmp_path, "more/static_shared")
    assert info.static_smem > kernel.plan.device["smem_reserved_bytes"] + 4000 * 4  # the array is in the kernel
    assert any("+0x3e80]" in i for i in info.instructions)  # table[4000], a static offset past the 1040 bytes
    assert kernel.plan.smem_bytes < 4000 * 4
    assert kernel.plan.postlink.conformance == ()


@pytest.mark.slow
def test_conformance_in_symbol_mode_reports_what_it_lets_through(tmp_path):
    """The symbol-linking control runs the same check and reports its findings, without refusing."""
    spec = violation_link(tmp_path, "syncthreads", {}, True)
    with pytest.raises(ConformanceError):
        pipelink.link(spec)
    linked_errors = [(f.instance, f.field, f.message) for f in
                     pipelink.link(spec, strict=False).plan.postlink.conformance if f.severity == "error"]
    symbol = pipelink.link(spec, mode="symbol").plan  # strict, yet it links
    assert linked_errors and [(f.instance, f.field, f.message) for f in symbol.postlink.conformance
                              if f.severity == "error"] == linked_errors
    check = next(c for c in symbol.all_checks() if c.name == "conformance")  # reported, not enforced: the control links
    assert check.ok and check.detail == f"symbol linking lets through {len(linked_errors)} error(s), 0 warning(s) " \
                                        "(listed under warnings)"
    assert sum(w.startswith("unchecked by symbol linking: error: v (v) syncthreads.cu:")
               for w in symbol.postlink.warnings) == len(linked_errors)


@pytest.mark.slow
def test_conformance_error_names_the_package_and_says_each_fix_once(tmp_path):
    spec = violation_link(tmp_path, "smem_past_buffer", {}, False)
    with pytest.raises(ConformanceError) as info:
        pipelink.link(spec)
    err = info.value
    assert Path(err.file) == (tmp_path / "packages" / "v.plc").resolve() and err.component == "v"
    assert str(err).startswith(f"{err.file}, component 'v', field 'smem.buf': 1 violation(s)")
    fix = pipelink.link(spec, strict=False).plan.postlink.conformance[0].hint
    assert str(err).count(fix) == 1 and fix not in err.hint


# --- ports, transfers and TMA operands ------------------------------------------------------------

def ring(direction, *, offset="s * 256 + i", mbarriers='["full", "empty"]', count=2, arrivals=4, tx_bytes=1024):
    return f"""
[[smem]]
name = "ring"
bytes = 2048

[[mbarrier]]
name = "full"
count = {count}
arrivals = 1
tx_bytes = {tx_bytes}

[[mbarrier]]
name = "empty"
count = 2
arrivals = {arrivals}

[[port]]
name = "ring"
direction = "{direction}"
space = "smem"
dtype = "fp32"
shape = {{ s = 2, i = 256 }}
buffer = "ring"
offset = "{offset}"
mbarriers = {mbarriers}
protocol = "mbarrier_ring"
"""


TMA = """
[[operand]]
name = "a"
dtype = "bf16"
shape = ["M", "K"]
access = "read"
tma = { box = ["bm", "bk"], swizzle = 128 }
"""
TMA_FACTS = "\n".join(f"{n} = {{ range = [1, 1073741824] }}" for n in ("M", "K", "bm", "bk"))


@pytest.fixture(scope="module")
def part(empty_part):
    """part(name, body, role=, ports=, facts=) -> a real package of the contract component(name, body, ...)
    (tests/contracts.py), its entry empty: these checks run before any code is generated."""
    def make_part(name, body, role="math", ports="[]", facts=""):
        return empty_part(name, component(name, body, role=role, ports=ports, requires=facts))
    return make_part


def spec(tmp_path, instances, connects=(), facts=None) -> Path:
    """A link spec: instances are (name, package, extra TOML lines); connects are (from, to)."""
    text = ['[link]\nname = "ports"\n', "[facts]\n" + "".join(f"{k} = {v}\n" for k, v in {"N": 1024, **(facts or {})}.items())]
    text += [f'[[instance]]\nname = "{n}"\npackage = "{p}"\n{extra}\n' for n, p, extra in instances]
    text += [f'[[connect]]\nfrom = "{a}"\nto = "{b}"\n' for a, b in connects]
    text.append('[schedule]\ntiles = ["N / 128"]\n')
    path = tmp_path / "link.toml"
    path.write_text("\n".join(text))
    return path


def ring_pair(tmp_path, part, **consumer):
    p = part("p", ring("out"), role="load")
    c = part("c", ring("in", **consumer), role="math")
    return spec(tmp_path, [("p", p, ""), ("c", c, "")], [("p.ring", "c.ring")])


def refused(spec_path, kind=PortMismatch, field="connect[0]"):
    with pytest.raises(kind) as info:
        plan_link(spec_path)
    assert info.value.field == field, info.value
    return info.value


@pytest.mark.slow
def test_ring_control_plans(tmp_path, part):
    plan = plan_link(ring_pair(tmp_path, part))
    assert [(t.kind, t.src, t.dst) for t in plan.transfers] == [("alias", Ref("p", "ring"), Ref("c", "ring"))]


def test_ring_layouts_differ(tmp_path, part):
    err = refused(ring_pair(tmp_path, part, offset="s * 256 + (i % 16) * 16 + i // 16"))
    assert "a ring hand-over needs one layout on both sides" in err.message and err.component == "p -> c"


@pytest.mark.parametrize("offset, words", [
    ("s * 256 + i + 2147483647 * 2147483647 * 2147483647", "2147483647 * 2147483647 = 4611686014132420609 is over "
                                                           "the C int limit 2147483647"),
    ("s * 256 + i * 2147483647 * 2147483647 * 4", "is over the C int limit 2147483647"),  # wrapped in int64
    ("s * 256 + i + ceil_div(0, s)", "division by zero"),
    ("s * 256 + align_up(i, s - s)", "division by zero"),
], ids=["huge-constant", "huge-product", "ceil-div-by-zero", "align-up-by-zero"])
def test_a_layout_the_glue_cannot_compute_is_refused_naming_the_port(tmp_path, part, offset, words):
    """A port offset is evaluated at every index at once (numpy arrays): as in the glue's C int, a partial
    result outside C int, or a zero divisor of ceil_div or align_up, is refused as `0 // s` is, never
    wrapped or computed as 0; the error names the package, the component and the port."""
    err = refused(ring_pair(tmp_path, part, offset=offset), ContractError, "port.ring.offset")
    assert words in err.message and err.component == "c" and err.file.endswith("c.plc") and err.hint


@pytest.mark.slow
@pytest.mark.parametrize("row", ["t // 32 + 4 * v + ceil_div(0, t - t)", "t // 32 + 4 * v + t * 65536 * 65536"])
def test_a_fragment_the_glue_cannot_compute_is_refused_naming_the_port(tmp_path, part, row):
    err = refused(reg_pair(tmp_path, part, {"row": row}), ContractError, "port.acc.fragment.row")
    assert err.component == "rc" and err.file.endswith("rc.plc")


def test_a_layout_the_glue_cannot_compute_exits_2_at_the_cli(tmp_path, part):
    path = ring_pair(tmp_path, part, offset="s * 256 + i + ceil_div(0, s)")
    proc = subprocess.run([sys.executable, "-m", "pipelink", "link", str(path), "-o", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "(ContractError)" in proc.stderr and "c.plc" in proc.stderr and "port.ring.offset" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_ring_mbarrier_names_differ(tmp_path, part):
    err = refused(ring_pair(tmp_path, part, mbarriers='["full"]'))
    assert "p synchronizes on mbarriers ['full', 'empty'] but c on ['full']" in err.message


@pytest.mark.parametrize("key,name,producer,consumer", [("count", "full", 2, 3), ("arrivals", "empty", 4, 8),
                                                        ("tx_bytes", "full", 1024, 512)])
def test_ring_mbarrier_numbers_differ(tmp_path, part, key, name, producer, consumer):
    err = refused(ring_pair(tmp_path, part, **{key: consumer}))
    assert f"mbarrier '{name}' {key}: p (" in err.message
    assert f"expects {producer} but c (" in err.message and f"declares {consumer}" in err.message


def reg_pair(tmp_path, part, consumer=None, extra=""):
    rp = part("rp", register_port("out"), ports='["acc"]')
    rc = part("rc", register_port("in", **(consumer or {})), ports='["acc"]')
    return spec(tmp_path, [("rp", rp, ""), ("rc", rc, extra)], [("rp.acc", "rc.acc")])


def test_register_control_plans(tmp_path, part):
    plan = plan_link(reg_pair(tmp_path, part))
    assert [(t.kind, t.role) for t in plan.transfers] == [("reg_to_reg", "math")]


def test_register_fragment_values_differ(tmp_path, part):
    err = refused(reg_pair(tmp_path, part, {"values": 8, "row": "t // 32 + 4 * (v % 4)"}))
    # 128 threads x 4 values against 128 x 8
    assert "holds 512 values per role and rc (" in err.message and "expects 1024" in err.message


def test_register_dtypes_differ(tmp_path, part):
    # fp32 -> bf16 is a convertible pair, but not in place in registers.
    err = refused(reg_pair(tmp_path, part, {"dtype": "bf16"}))
    assert "register fragments differ in dtype (rp: fp32, rc: bf16)" in err.message


def test_registers_to_another_role(tmp_path, part):
    err = refused(reg_pair(tmp_path, part, extra='roles = { math = "other" }'))
    assert "registers held by role 'math' cannot reach role 'other'" in err.message


def test_port_direction(tmp_path, part):
    rp = part("rp", register_port("out"), ports='["acc"]')
    rc = part("rc", register_port("in"), ports='["acc"]')
    err = refused(spec(tmp_path, [("rp", rp, ""), ("rc", rc, "")], [("rc.acc", "rp.acc")]))
    assert "'rc.acc' is an in-port and 'rp.acc' an out-port" in err.message


def test_unconnected_in_port(tmp_path, part):
    rp = part("rp", register_port("out"), ports='["acc"]')
    rc = part("rc", register_port("in"), ports='["acc"]')
    err = refused(spec(tmp_path, [("rp", rp, ""), ("rc", rc, "")]), SpecError, "connect")
    assert "in-port 'rc.acc' of rc is not connected" in err.message


def test_smem_port_cannot_feed_registers(tmp_path, part):
    s = part("s", smem_tile("out"))
    rc = part("rc", register_port("in"), ports='["acc"]')
    err = refused(spec(tmp_path, [("s", s, ""), ("rc", rc, "")], [("s.tile", "rc.acc")]))
    assert "an smem out-port cannot feed a register in-port" in err.message


@pytest.mark.parametrize("role", ["math", "other"])
def test_barrier_handover_across_roles(tmp_path, part, role):
    s = part("s", smem_tile("out"))
    t = part("t", smem_tile("in"))
    path = spec(tmp_path, [("s", s, ""), ("t", t, f'roles = {{ math = "{role}" }}')], [("s.tile", "t.tile")])
    if role == "math":  # the control: one role, same layout -> one buffer
        assert [(x.kind, x.role) for x in plan_link(path).transfers] == [("alias", "math")]
        return
    err = refused(path)
    assert "a barrier-protocol smem hand-over must stay within one kernel role" in err.message


@pytest.mark.parametrize("facts,problem", [
    ({"M": 256, "K": 64, "bm": 64, "bk": 64}, None),
    ({"M": 1024, "K": 64, "bm": 512, "bk": 64}, "'bm' = 512 is over the limit 256 by 256 (with bm=512)"),
    ({"M": 256, "K": 12, "bm": 64, "bk": 4}, "rows are 24 bytes; TMA needs row pitches in multiples of 16"),
    ({"M": 200, "K": 64, "bm": 64, "bk": 64}, "box 64 does not divide dimension 0 (200): the last box would read past the tensor"),
    ({"M": 256, "K": 256, "bm": 64, "bk": 128}, "the inner box is 256 bytes, over the 128-byte swizzle span by 128"),
], ids=["control", "extent", "pitch", "divide", "swizzle"])
def test_tma_box_rules(tmp_path, part, facts, problem):
    a = part("a", TMA, facts=TMA_FACTS)
    path = spec(tmp_path, [("a", a, "")], facts=facts)
    if problem is None:
        check = next(c for c in plan_link(path).all_checks() if c.name == "tma")
        assert check.ok and "a.a box [64, 64]" in check.detail
        return
    if facts["bm"] > 256:  # the box field's own limit, checked with the resolved facts before the TMA rules
        err = refused(path, ContractError, "operand[0].tma.box[0]")
        assert err.component == "a" and problem in err.message
        return
    err = refused(path, SpecError, "operand[0].tma.box")
    # exactly the one rule broken
    box = [facts["bm"], facts["bk"]]
    assert err.component == "a" and err.message == f"TMA operand a.a {[facts['M'], facts['K']]} with box {box}: {problem}"


@pytest.mark.parametrize("M,K,problem", [
    (200, 64, None),
    (256, 96, "box 64 does not divide dimension 1 (96): the last box would read past the tensor"),
], ids=["partial-rows", "columns-still-whole"])
@pytest.mark.slow
def test_a_partial_box_is_allowed_only_along_the_dimensions_the_contract_names(tmp_path, part, M, K, problem):
    # `partial = [0]`: the code expects a last row box past the tensor (TMA fills zeros); the columns still divide.
    a = part("ap", TMA.replace("swizzle = 128 }", "swizzle = 128, partial = [0] }"), facts=TMA_FACTS)
    path = spec(tmp_path, [("ap", a, "")], facts={"M": M, "K": K, "bm": 64, "bk": 64})
    if problem is None:
        check = next(c for c in plan_link(path).all_checks() if c.name == "tma")
        assert check.ok and "ap.a box [64, 64]" in check.detail
        return
    err = refused(path, SpecError, "operand[0].tma.box")
    assert err.message == f"TMA operand ap.a [{M}, {K}] with box [64, 64]: {problem}"


@pytest.mark.parametrize("sw,bk,problem", [
    (0, 64, None), (1, 32, None),
    (1, 64, "the inner box is 128 bytes, over the 64-byte swizzle span by 64"),
    (3, 32, "'64 * sw' = 192 is not one of 0, 32, 64, 128 (with sw=3)"),
], ids=["none", "64", "box-over-the-span", "not-a-span"])
@pytest.mark.slow
def test_tma_swizzle_is_an_expression_over_facts(tmp_path, part, sw, bk, problem):
    """A fact may pick the component's smem layout, so the swizzle span is an expression like the box: its value is
    held to the spans TMA has, the box rules use the value, and the kernel's tensor map gets the value."""
    a = part("a", TMA.replace("swizzle = 128", 'swizzle = "64 * sw"'), facts=TMA_FACTS + "\nsw = { range = [0, 3] }")
    path = spec(tmp_path, [("a", a, "")], facts={"M": 256, "K": 64, "bm": 64, "bk": bk, "sw": sw})
    if problem is None:
        param = next(p for p in kernel_abi(plan_link(path)).params if str(p.ref) == "a.a")
        assert param.tma == {"box": [64, bk], "swizzle": 64 * sw}
        return
    if sw == 3:
        err = refused(path, ContractError, "operand[0].tma.swizzle")
    else:
        err = refused(path, SpecError, "operand[0].tma.box")
    assert err.component == "a" and problem in err.message

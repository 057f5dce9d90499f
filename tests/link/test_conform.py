"""Component code against its contract: every seeded violation (tests/violations) is found, with the
component, the instruction, the contract field and a fix; the project's own components produce no
finding. Real nvcc, nvJitLink and nvdisasm; no GPU needed."""

import re
import shutil

import pytest

import pipelink
from pipelink.demo import packaged_spec
from pipelink.findings import ConformanceError

from conftest import COLLIDE, ROOT
from contracts import VIOLATIONS, violation_contract, violation_link

# kind -> (severity, contract field, words in the message, contract tweaks, needs a second role)
CASES = {
    "bar_undeclared": ("error", "named_barrier", "uses named barrier 5", {}, False),
    "bar_threads": ("error", "named_barrier.sync.threads", "syncs 64 threads on barrier 1", {}, False),
    "bar_arrive_undeclared": ("error", "named_barrier", "uses named barrier 9", {}, False),
    "syncthreads": ("error", "named_barrier", "barrier 0 (__syncthreads)", {}, True),
    "setmaxnreg": ("error", "roles.internal_setmaxnreg", "to 240", {"registers": "registers = 232"}, False),
    "mbar_init": ("error", "mbarrier", "initializes an mbarrier", {}, False),
    "mbar_outside": ("error", "mbarrier", "outside this instance's mbarrier slots", {}, False),
    "mbar_outside_cpasync": ("error", "mbarrier", "outside this instance's mbarrier slots", {}, False),
    "smem_beyond": ("error", "smem.buf", "into memory beyond the block's", {}, False),
    "smem_past_buffer": ("error", "smem.buf", "writes 4 bytes at smem offset 1024, ending 4 bytes past its buffer "
                         "'buf' [0, 1024): into mbarrier v.bar", {}, False),
    "smem_past_buffer_warp": ("error", "smem.buf", "(plus a run-time index), ending 4 bytes past its buffer 'buf'",
                              {}, False),
    "smem_past_buffer_cpasync": ("error", "smem.buf", "writes 16 bytes at smem offset 1024, ending 16 bytes past its "
                                 "buffer 'buf' [0, 1024): into mbarrier v.bar", {}, False),
    "spills": ("warning", "roles.w.registers", "local memory", {}, False),
    "pinned_wrong_id": ("error", "named_barrier", "uses named barrier 4", {"barrier_id": "id = 3"}, False),
    "not_inlined": ("error", "entry", "not inlined", {}, False),
    "expect_tx": ("error", "mbarrier.bar.tx_bytes", "announces 4096 transaction bytes", {}, False),
    "others_barrier": ("error", "named_barrier", "uses named barrier 2", {}, True),
}


def test_every_kind_is_seeded():
    assert {p.stem for p in VIOLATIONS.glob("*.cu")} - {"benign", "neighbour"} == set(CASES)  # dynamic/ aside
    assert len(CASES) >= 10


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(CASES))
def test_seeded_violation_is_found(kind, tmp_path):
    severity, field, words, tweaks, second_role = CASES[kind]
    spec = violation_link(tmp_path, kind, tweaks, second_role)
    if severity == "error":
        with pytest.raises(ConformanceError) as info:
            pipelink.link(spec)
        assert info.value.component == "v" and words in str(info.value)
    kernel = pipelink.link(spec, strict=False)
    found = [f for f in kernel.plan.postlink.conformance if f.instance == "v"]
    assert any(f.severity == severity and f.field == field and words in f.message for f in found), found
    hit = next(f for f in found if words in f.message)
    assert hit.instruction and hit.hint and hit.location.startswith(f"{kind}.cu:"), hit
    assert not any(f.instance == "neighbour" for f in kernel.plan.postlink.conformance)


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(k for k, c in CASES.items() if c[0] == "error" and not c[4]))
def test_pack_time_probe_refuses_the_violation(kind, tmp_path):
    """Single-role kinds are caught when the component is packaged (the two-role ones need a
    neighbour and are caught at link time)."""
    _, field, words, tweaks, _ = CASES[kind]
    contract = tmp_path / "v.toml"
    contract.write_text(violation_contract(**tweaks))
    with pytest.raises(ConformanceError) as info:
        pipelink.pack(VIOLATIONS / f"{kind}.cu", contract, tmp_path / "v.plc")
    assert words in str(info.value) and "--no-check" in str(info.value)
    assert not (tmp_path / "v.plc").exists()


@pytest.mark.slow
def test_pack_time_probe_records_warnings_and_passes_clean_code(tmp_path):
    contract = tmp_path / "v.toml"
    contract.write_text(violation_contract())
    spilling = pipelink.pack(VIOLATIONS / "spills.cu", contract, tmp_path / "s.plc")
    assert spilling.conformance["checked"] and spilling.conformance["findings"][0]["severity"] == "warning"
    clean = pipelink.pack(VIOLATIONS / "benign.cu", contract, tmp_path / "b.plc")
    assert clean.conformance == {"checked": True, "findings": [], "reason": ""}
    from pipelink.package import load_package
    assert load_package(tmp_path / "b.plc").conformance == clean.conformance


@pytest.mark.slow
def test_benign_neighbour_pair_has_no_findings(tmp_path):
    spec = violation_link(tmp_path, "benign", {}, True)
    kernel = pipelink.link(spec)
    assert kernel.plan.postlink.conformance == ()


@pytest.mark.slow
def test_own_components_have_no_findings(demo_dir, tmp_path):
    kernels = [pipelink.link(demo_dir / "link.toml"), pipelink.link(demo_dir / "link.toml", mode="monolithic")]
    col = tmp_path / "collide"
    for op in ("sum", "max"):
        pipelink.pack(COLLIDE / f"block_{op}.cu", COLLIDE / f"block_{op}.toml", col / "packages" / f"block_{op}.plc")
    (col / "link.toml").write_text(packaged_spec((COLLIDE / "link.toml").read_text()))
    kernels.append(pipelink.link(col / "link.toml"))
    comps = ROOT / "tests" / "components"
    rel = tmp_path / "relayout"
    for name in ("tile_load", "tile_emit"):
        pipelink.pack(comps / f"{name}.cu", comps / f"{name}.toml", rel / "packages" / f"{name}.plc")
    shutil.copyfile(comps / "link.toml", rel / "link.toml")
    kernels.append(pipelink.link(rel / "link.toml"))
    for k in kernels:
        assert k.plan.postlink.conformance == (), (k.plan.spec.link.name, k.plan.postlink.conformance)
        assert next(c for c in k.plan.all_checks() if c.name == "conformance").ok


def test_attribution_covers_every_instance(demo_dir):
    from pipelink.backend.inspect import inspect_cubin
    from pipelink.link.conform import attribute
    kernel = pipelink.link(demo_dir / "link.toml")
    info, _ = inspect_cubin(kernel.cubin, kernel.plan.entry)
    owners = attribute(kernel.plan, info)
    assert {"load", "reduce", "store"} <= set(owners)
    # Every BAR.SYNC 0x1 belongs to the epilogue that pins barrier 1; 0x8 (the hand-over) to the glue.
    for insn, owner in zip(info.instructions, owners):
        if insn.startswith("BAR.SYNC.DEFER_BLOCKING 0x1,"):
            assert owner == "store"
        if insn.startswith("BAR.SYNC.DEFER_BLOCKING 0x8,"):
            assert owner is None


@pytest.mark.slow
def test_two_instances_of_one_package_are_told_apart(tmp_path):
    # One package linked twice: both copies inline the same header lines at the same lines of the same source, and only
    # the glue's call differs (a path view of its own per component cannot tell them apart). Each instruction is
    # attributed to its own instance, so each copy's stores and mbarrier operations are judged against its own buffer
    # and slots (relocated apart), and the link has no finding.
    from pipelink.backend.inspect import inspect_cubin
    from pipelink.link.conform import attribute
    (tmp_path / "v.toml").write_text(violation_contract())
    pipelink.pack(ROOT / "tests" / "components" / "twice" / "twice.cu", tmp_path / "v.toml", tmp_path / "v.plc")
    instances = "".join(f'[[instance]]\nname = "{n}"\npackage = "v.plc"\n\n' for n in ("a", "b"))
    (tmp_path / "link.toml").write_text(f'[link]\nname = "twice"\n\n[facts]\nN = 16896\n\n{instances}'
                                        '[schedule]\ntiles = ["N / 128"]\n')
    kernel = pipelink.link(tmp_path / "link.toml")
    plan = kernel.plan
    assert plan.postlink.conformance == ()
    mbar = {m.name.split(".")[0]: m.offset for m in plan.mbarriers}
    buf = {s.name.split(".")[0]: s.offset for s in plan.smem if s.name.endswith(".buf")}
    assert mbar["a"] != mbar["b"] and buf["a"] != buf["b"]
    info, _ = inspect_cubin(kernel.cubin, plan.entry)
    seen = set()
    for insn, owner in zip(info.instructions, attribute(plan, info)):
        imm = re.search(r"\+(0x[0-9a-f]+)\]", insn)
        if owner is None:
            continue
        if "SYNCS" in insn:  # arrive and wait: the instance's own slot
            assert int(imm.group(1), 16) == mbar[owner], (owner, insn)
            seen.add((owner, "mbarrier"))
        elif insn.startswith("STS"):  # the helper's store: the instance's own buffer (b's 0x400 past a's)
            assert (int(imm.group(1), 16) if imm else 0) == buf[owner], (owner, insn)
            seen.add((owner, "store"))
    assert seen == {(n, k) for n in "ab" for k in ("mbarrier", "store")}


def test_each_component_names_its_headers_by_paths_of_its_own(demo_dir):
    # PTX names an inlined call's site by (file, line, column) only: two components inlining one header's function
    # at one line gave ptxas two chains to choose from, and it gave one component's instructions the other's
    # (nvcc.component_view). So every component's line info names its source folder and include view its own way.
    from pipelink.backend.inspect import inspect_cubin
    from pipelink.link.conform import attribute
    kernel = pipelink.link(demo_dir / "link.toml")
    info, _ = inspect_cubin(kernel.cubin, kernel.plan.entry)
    headers: dict[str, set[str]] = {}
    for chain, owner in zip(info.locations, attribute(kernel.plan, info)):
        for path, _line in chain:
            if owner is not None and path.endswith("/pipelink/component.h"):
                headers.setdefault(owner, set()).add(path)
    assert len(headers) >= 2 and all(len(paths) == 1 for paths in headers.values())
    assert len({path for paths in headers.values() for path in paths}) == len(headers)
    sources = {path.rsplit("/", 2)[-2] for chain in info.locations for path, _ in chain if path.endswith(".cu")}
    assert {f"src_{inst.package.name}" for inst in kernel.plan.instances} <= sources


@pytest.mark.slow
def test_sanitize_mode_places_and_checks_canaries(tmp_path):
    """The dynamic overrun passes every static check; sanitize mode guards each buffer."""
    spec = violation_link(tmp_path, "dynamic/overrun", {}, False)
    assert pipelink.link(spec).plan.postlink.conformance == ()  # invisible statically
    kernel = pipelink.link(spec, sanitize=True)
    buf = next(b for b in kernel.plan.smem if b.name == "v.buf")
    assert buf.guard == buf.offset + buf.bytes
    assert all(b.guard is None or b.guard + 32 <= kernel.plan.smem_bytes for b in kernel.plan.smem)
    glue = kernel.plan.glue.text
    assert f"pl_smem + {buf.guard})[i] = 0xc0de0000u + i" in glue and "pl_sanitize_fail(p.pl_report, 1, 0, " in glue
    assert kernel.manifest["params"][-1]["name"] == "glue.report" and kernel.manifest["sanitize"]["sites"] == ["v.run"]
    assert not kernel.plan.postlink.findings  # still inlined, no spills
    plain = pipelink.link(spec)
    assert "pl_sanitize_fail" not in plain.plan.glue.text and plain.manifest["sanitize"] is None


SASS_PAST_EXIT = """\
        /*0000*/                   MOV R1, 0x400 ;
        /*0010*/                   S2R R2, SR_CgaCtaId ;
        /*0020*/                   LEA R3, R2, R1, 0x18 ;
        /*0030*/                   BRA.DIV UR4, `(.L_x_1) ;
        /*0040*/                   STS [R3], R0 ;
        /*0050*/               @P0 BRA `(.L_x_0) ;
        /*0060*/                   IADD3 R3, R3, 0x20000, RZ ;
.L_x_0:
        /*0070*/                   STS [R3+0x10], R0 ;
        /*0080*/                   IADD3 R3, R3, 0x30000, RZ ;
        /*0090*/                   STS [R3], R0 ;
        /*00a0*/                   EXIT ;
.L_x_1:
        /*00b0*/                   STS [R3+0x8], R0 ;
"""


def test_addresses_are_followed_along_forward_branches():
    # nvcc puts a __syncwarp's divergent path past EXIT (BRA.DIV to it): that block's registers are the
    # BRA.DIV's, not those of the code just above it. At a join, only what every way agrees on is known.
    from pipelink.backend.inspect import parse_disassembly
    from pipelink.link.conform import _Windows
    insns, _, labels = parse_disassembly(SASS_PAST_EXIT)
    assert labels == {".L_x_0": 7, ".L_x_1": 11} and len(insns) == 12
    windows, seen = _Windows(labels), {}
    for n, insn in enumerate(insns):
        windows.enter(n)
        if insn.startswith("STS"):
            window = windows.address(insn)
            seen[n] = None if window is None else window.constant
        windows.step(insn)
    assert seen == {4: 0x400, 7: None, 9: None, 11: 0x408}


# A ring's stage counter carried around a loop, as ptxas left it in the Llama wgmma core (cluster of two): the
# counter starts at -1, the slot address is taken from it at the loop head, and it is bumped further down.
SASS_LOOP_CARRIED = """\
        /*0000*/                   MOV R1, 0x400 ;
        /*0010*/                   S2R R2, SR_CgaCtaId ;
        /*0020*/                   LEA R17, R2, R1, 0x18 ;
        /*0030*/                   IMAD.MOV.U32 R46, RZ, RZ, -0x1 ;
        /*0040*/                   IMAD.MOV.U32 R9, RZ, RZ, 0x7 ;
.L_x_0:
        /*0050*/                   IMAD R11, R46, 0x8, R17 ;
        /*0060*/                   SYNCS.ARRIVE.TRANS64.A1T0 RZ, [R11+URZ+0x10], RZ ;
        /*0070*/                   STS [R17+0x20], R9 ;
        /*0080*/                   VIADD R46, R46, 0x1 ;
        /*0090*/                   ISETP.NE.AND P0, PT, R46, 0x4, PT ;
        /*00a0*/               @P0 BRA `(.L_x_0) ;
        /*00b0*/                   EXIT ;
"""


def test_a_value_carried_around_a_loop_is_not_its_first_value():
    """At a loop's head a register the loop body writes holds whatever the last trip left: the stage counter's
    -1 before the loop made the slot address look like an exact offset 8 bytes below the array, and a legal
    link was refused (the Llama wgmma core in clusters of two). A register the loop leaves alone keeps its
    value (the window base, the constant stored)."""
    from pipelink.backend.inspect import parse_disassembly
    from pipelink.link.conform import _Windows
    insns, _, labels = parse_disassembly(SASS_LOOP_CARRIED)
    windows, seen = _Windows(labels, insns), {}
    for n, insn in enumerate(insns):
        windows.enter(n)
        if insn.startswith(("SYNCS", "STS")):
            seen[insn.split()[0]] = windows.address(insn)
            seen["R9"] = windows.value("R9", "")
        windows.step(insn)
    arrive = seen["SYNCS.ARRIVE.TRANS64.A1T0"]
    assert arrive is not None and arrive.runtime and arrive.constant == 0x400 + 0x10  # a lower bound, not 0x408
    assert seen["STS"].constant == 0x420 and not seen["STS"].runtime and seen["R9"] == 7


# Three forms ptxas writes (each seen in a generated case's SASS): a uniform register written after the predicate
# R2UR also writes, a 32-bit constant built as two fp16 halves, and a predicate-and-register LOP3.
SASS_FORMS = """\
        /*0000*/                   UMOV UR4, 0x400 ;
        /*0010*/                   S2UR UR6, SR_CgaCtaId ;
        /*0020*/                   ULEA UR5, UR6, UR4, 0x18 ;
        /*0030*/                   R2UR P0, UR5, R6 ;
        /*0040*/                   SYNCS.ARRIVE.TRANS64.A1T0 RZ, [UR5+0xf48], RZ ;
        /*0050*/                   HFMA2.MMA R11, -RZ, RZ, 0, 0.00049591064453125 ;
        /*0060*/                   MOV R8, 0x40 ;
        /*0070*/                   LOP3.LUT P1, R8, R2, 0x3, RZ, 0xc0, !PT ;
        /*0080*/                   EXIT ;
"""


def test_registers_written_after_a_predicate_and_constants_built_from_halves():
    """R2UR P0, UR5, R6 writes UR5 (the window it held before is gone: a stale one judged a cp.async arrive on
    a run-time slot at a false exact offset); HFMA2.MMA R11, -RZ, RZ, 0, 0.000495... is 0x1010 (an expect_tx
    byte count written so went unchecked); LOP3.LUT P1, R8, ... writes R8."""
    from pipelink.backend.inspect import parse_disassembly
    from pipelink.link.conform import _Windows
    insns, _, labels = parse_disassembly(SASS_FORMS)
    windows = _Windows(labels, insns)
    for n, insn in enumerate(insns):
        windows.enter(n)
        if insn.startswith("SYNCS"):
            assert windows.address(insn) is None
        windows.step(insn)
    assert windows.value("R11", "") == 0x1010 and windows.value("R8", "") is None


def test_findings_of_two_instruction_kinds_on_one_line_are_both_kept():
    """One source line can hold an LDS.128 and an LDSM reading the same bytes (both past the buffer): the
    report keeps one finding per instruction kind, so neither hides the other."""
    from pipelink.findings import Finding
    from pipelink.link.conform import _dedupe
    words = ("error", "v", "v", "", "v.cu:7", "smem.buf", "reads 16 bytes at smem offset 1024", "fix")
    lds, ldsm, again = (Finding(*words[:3], insn, *words[4:]) for insn in
                        ("LDS.128 R4, [R2+0x400]", "LDSM.16.M88.4 R8, [R2+0x400]", "LDS.128 R12, [R2+0x400]"))
    assert _dedupe([lds, ldsm, again]) == [lds, ldsm]

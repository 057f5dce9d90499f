"""The perturbation study's cases (bench/perturb.py, issue 13 item 4, widened by issue 48): a closed
component (the MoE permute, epilogue or combine; the MoE training backward's plan; the Qwen link's SwiGLU
epilogue) repacked with one
change to its contract and linked against the unchanged packages of the others. On the CPU, for every
case: symbol linking accepts it (with nothing but warnings), and pipelink relinks it with the real
toolchain, carrying the changed fact to every component that reads it, or refuses it with a typed
error (a PipelinkError naming what conflicts), never with an untyped exception. The `gpu` test runs
the loop on the control and on every case pipelink relinks.

What each case is expected to do on the GPU (bench/perturb.py, `Case.expect`) is written beside it
below: "symbol" is the control's outcome, "pipelink" the relinked kernel's (ok) or the refusal."""

from __future__ import annotations

import importlib.util
import shutil
import sys

import pytest

import pipelink
from pipelink.errors import PipelinkError
from pipelink.link.pipeline import plan_link

from conftest import ROOT, gpu_ok

sys.path.insert(0, str(ROOT / "bench"))  # perturb.py imports its harness from there
_spec = importlib.util.spec_from_file_location("perturb", ROOT / "bench" / "perturb.py")
perturb = importlib.util.module_from_spec(_spec)
sys.modules["perturb"] = perturb  # its dataclasses look their module up
_spec.loader.exec_module(perturb)

MOE, QWEN, MOE_TRAIN = perturb.MOE, perturb.QWEN, perturb.MOE_TRAIN
STUDIES = {"moe": MOE, "qwen": QWEN, "moe_train": MOE_TRAIN}
TRAIN_ROWS, TRAIN_TILES = 49024, 22645  # the unperturbed plan's rows_max and tiles_max of the backward at 4096 tokens
DESIGN_ROWS, DESIGN_TILES = 49024, 5362  # the unperturbed permute's rows_max and tiles_max at 4096 tokens

# What the CPU link shows per case: pipelink's plan (keys below, see _value) or its typed refusal
# (error class, words of its message), and the warning the symbol link prints (None: no warning at all).
#   "inst.fact" a fact of an instance (a permute guarantee read by another instance must come from it),
#   "smem:inst.buf" a buffer's offset, "barrier:inst.name" a named barrier's ID, "num_tiles" the tile bound.
# `!x` means "anything but x".
CPU = {
    "moe": {
        # GPU: symbol ok, pipelink ok (the control: seen ok 2026-12-02).
        "unperturbed": ({"gemm.tiles_max": DESIGN_TILES, "num_tiles": DESIGN_TILES, "combine.rows_max": DESIGN_ROWS},
                        None),
        # GPU: symbol hang (seen 2026-12-02: the readers skip 4 header words too few); pipelink ok.
        "permute_table_header_8": ({"gemm.table_header": 8, "epilogue.table_header": 8},
                                   "permute.table -> gemm.table: shape"),
        # GPU: symbol crash (seen: 32-byte entries read 16 bytes apart); pipelink ok.
        "permute_tile_words_8": ({"gemm.tile_words": 8, "epilogue.tile_words": 8},
                                 "permute.table -> gemm.table: shape"),
        # GPU: symbol wrong (seen: the combine reads the row map token-major), with no warning; pipelink ok.
        "permute_slot_major": ({"combine.slot_major": 1}, None),
        # GPU: symbol crash (seen: rows past the host's buffers); pipelink ok (every row buffer grows).
        "permute_row_base_16384": ({"gemm.rows_max": 65408, "epilogue.rows_max": 65408, "combine.rows_max": 65408},
                                   "permute.row_token -> gemm.row_token: shape"),
        # The count outgrows the design's bound. GPU: symbol wrong (seen: 64-row tiles run as 128-row ones, cut at
        # the design's 5362); pipelink refused at link time (FactConflict: the GEMM and epilogue take 128).
        "permute_tile_m_64": (("FactConflict", "tile_m"), "3570 tile(s) would never run"),
        # GPU: symbol wrong (seen); pipelink refused (FactConflict: the GEMM takes 256 columns only).
        "permute_tile_n_128": (("FactConflict", "tile_n"), "5362 tile(s) would never run"),
        # A looser bound: the tile bound grows past the design's (5376 > 5362), the real count does not. GPU:
        # symbol ok (the host's 5362 still covers the count); pipelink ok, every reader and the schedule
        # sized by the new guarantee.
        "permute_whole_tile_padding": ({"gemm.tiles_max": 5376, "epilogue.tiles_max": 5376, "num_tiles": 5376,
                                        "gemm.rows_max": 49152, "combine.rows_max": 49152},
                                       "14 tile(s) would never run"),
        # GPU: symbol hang or wrong (the offsets written over the initialized mbarriers of the ring); pipelink ok
        # (the mbarriers placed past the pinned range).
        "permute_offsets_pinned": ({"smem:permute.offsets": 229376, "smem:glue.mbarriers": "!229376"},
                                   "smem permute.offsets [229376, 229892) overlaps gemm.full"),
        # GPU: symbol hang or wrong (bar.sync 1 for 128 producer and 256 consumer threads at once); pipelink ok
        # (rows_ready moved off the pinned ID).
        "epilogue_barrier_pinned_1": ({"barrier:epilogue.staged": 1, "barrier:gemm.rows_ready": "!1"},
                                      "named barrier ID 1 is used by gemm.rows_ready, epilogue.staged"),
        # GPU: symbol hang, wrong or crash (each tile reads its successor's entry; the down tiles' counters may
        # never fill); pipelink ok (the permute's guarantee, 4, over the epilogue's default 8).
        "epilogue_table_header_8": ({"epilogue.table_header": 4}, "permute.table -> epilogue.table: shape"),
        # GPU: symbol unwritten or wrong (a 256-column accumulator stored as 128 columns); pipelink refused.
        "epilogue_tile_n_128": (("FactConflict", "tile_n"), "gemm.acc -> epilogue.acc: shape [128, 256]"),
        # GPU: symbol ok (the new buffer at its packaged offset is never touched); pipelink ok.
        "epilogue_scales_smem": ({"smem:epilogue.scales": "!212992"}, "overlaps epilogue.scales"),
        # GPU: symbol wrong (the combine reads the token-major map slot-major), with no warning; pipelink ok.
        "combine_slot_major_default": ({"combine.slot_major": 0}, None),
    },
    "moe_train": {
        # The backward link with its plan closed. Symbol linking warns of the gather's scratch over the B ring in
        # every case (the gather runs after the tile loops: the design's overlap, harmless). GPU: ok, ok.
        "unperturbed": ({"gemm.tiles_max": TRAIN_TILES, "num_tiles": TRAIN_TILES, "combine.rows_max": TRAIN_ROWS},
                        "gemm.b_ring [0, 98304) overlaps gather.partial"),
        # GPU: symbol hang, crash or wrong (the readers 4 header words short); pipelink ok.
        "plan_table_header_8": ({"gemm.table_header": 8, "epilogue.table_header": 8}, "plan.table -> gemm.table: shape"),
        # GPU: symbol hang, crash or wrong (64-byte entries read 32 bytes apart); pipelink ok.
        "plan_tile_words_16": ({"gemm.tile_words": 16, "epilogue.tile_words": 16}, "plan.table -> gemm.table: shape"),
        # GPU: symbol ok (the host's bounds still cover the count); pipelink ok, every reader, the saved tensors' row
        # space and the schedule sized by the new guarantee.
        "plan_whole_tile_padding": ({"gemm.tiles_max": 22656, "num_tiles": 22656, "gemm.rows_max": 49152,
                                     "combine.rows_max": 49152}, "cuts the tile count read from plan.table"),
        # GPU: symbol wrong, unwritten, a crash or a hang; pipelink refused (the GEMM and epilogue take 128 rows).
        "plan_tile_m_64": (("FactConflict", "tile_m"), "cuts the tile count read from plan.table"),
        # GPU: symbol hang or wrong if the plan's offsets land on the initialized ring barriers; pipelink ok.
        "plan_starts_pinned": ({"smem:plan.starts": 229376, "smem:glue.mbarriers": "!229376"},
                               "smem plan.starts [229376, 229892) overlaps gemm.full"),
    },
    "qwen": {
        # GPU: symbol ok, pipelink ok (seen 2026-12-01).
        "unperturbed": ({"mainloop.tile_n": 256, "epilogue.tile_m": 128}, None),
        # GPU: symbol unwritten (seen 2026-12-01: half the output); pipelink ok (tile_n 128 for both).
        "epilogue_tile_n_128": ({"mainloop.tile_n": 128, "epilogue.tile_n": 128},
                                "mainloop.acc -> epilogue.acc: shape"),
        # GPU: symbol wrong (seen: staging on the A ring); pipelink ok.
        "epilogue_staging_at_0": ({"smem:epilogue.staging": "!0"}, "overlaps epilogue.staging [0, 32768)"),
        # GPU: symbol unwritten or wrong (64-row fragments of 128-row tiles); pipelink ok (tile_m 64 for both).
        "epilogue_tile_m_64": ({"mainloop.tile_m": 64, "epilogue.tile_m": 64, "num_tiles": 12800},
                               "mainloop.acc -> epilogue.acc: shape [128, 256]"),
        # GPU: symbol ok (the second staging never touched); pipelink refused (SmemOverflow: 4 stages and two
        # stagings need 262208 bytes).
        "epilogue_second_staging": (("SmemOverflow", "epilogue.staging_next"), "overlaps epilogue.staging_next"),
    },
}
# Symbol links built with the real toolchain too (the others are planned only): the control, and the
# cases whose register hand-over differs in size on the two sides (the glue passes one array to both).
SYMBOL_BUILT = {("moe", "unperturbed"), ("moe", "epilogue_tile_n_128"), ("qwen", "epilogue_tile_n_128"),
                ("qwen", "epilogue_tile_m_64")}
PERMUTE_GUARANTEES = {"table_header", "tile_words", "slot_major", "row_base", "rows_max", "tiles_max"}


def test_the_study_spans_kinds_components_and_links():
    cases = [(s, c) for s, study in STUDIES.items() for c in study.cases]
    changed = [(s, c) for s, c in cases if c.kind != "none"]
    assert len(changed) >= 10 and len({c.kind for _, c in changed}) >= 6
    assert {c.kind for _, c in cases} <= set(perturb.KINDS)
    assert len({MOE.component(c).name for c in MOE.cases}) >= 2 and any(s == "qwen" for s, _ in changed)
    assert {s: {c.name for c in study.cases} for s, study in STUDIES.items()} == {s: set(v) for s, v in CPU.items()}
    outcomes = {"ok", "refused", *perturb.FAILURES}
    for s, c in cases:
        assert all(set(e.split("/")) <= outcomes for e in c.expect), c.name
        assert (c.expect[1] == "refused") == isinstance(CPU[s][c.name][0], tuple), c.name
        perturb.edited_contract(STUDIES[s], c)  # every edit matches the shipped contract exactly once


def test_tokens_reach_the_shape_and_both_specs(tmp_path):
    study = perturb.with_tokens(MOE, 1024)
    assert study.shape == {"model": "qwen3_30b_a3b", "tokens": 1024} and MOE.shape["tokens"] == 4096
    symbol, spec = study.specs(tmp_path, tmp_path / "packages", study.shape)
    for path in (symbol, spec):
        assert "\nT = 1024\n" in path.read_text()
    assert "tiles_max = 2674" in symbol.read_text() and "tiles_max" not in spec.read_text().split("[[instance]]")[0]


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    """The unchanged packages of each study, packed once (the MoE layer's five, the Qwen mainloop)."""
    packed = {}

    def base(name):
        if name not in packed:
            packed[name] = perturb.base_packages(STUDIES[name], tmp_path_factory.mktemp(f"{name}_base"))
        return packed[name]
    return base


def _specs(study, case, base, tmp_path, tokens=None):
    packages = tmp_path / "packages"
    shutil.copytree(base, packages)
    perturb.closed_package(study, case, tmp_path, packages)
    return study.specs(tmp_path, packages, study.shape if tokens is None else {**study.shape, "tokens": tokens})


def _value(plan, key):
    if key == "num_tiles":
        return plan.num_tiles
    kind, _, ref = key.rpartition(":")
    if kind == "smem":
        return next(s.offset for s in plan.smem for u in s.users if str(u) == ref)
    if kind == "barrier":
        return next(b.id for b in plan.barriers if str(b.purpose) == ref)
    inst, fact = ref.split(".")
    return plan.instance(inst).facts[fact]


def _matches(got, want):
    return got != int(want[1:]) if isinstance(want, str) else got == want


CASES = [(s, c.name) for s, study in STUDIES.items() for c in study.cases]


@pytest.mark.slow
@pytest.mark.parametrize("study_name,name", CASES)
def test_symbol_links_and_pipelink_relinks_or_refuses_typed(bases, tmp_path, study_name, name):
    study = STUDIES[study_name]
    case = next(c for c in study.cases if c.name == name)
    symbol, spec = _specs(study, case, bases(study_name), tmp_path)
    want, warning = CPU[study_name][name]
    # pipelink, with the real toolchain: linked, or refused with a PipelinkError -- never anything else. The
    # training backward is planned only (its cases' facts and refusals are link-time; the GPU test builds them).
    try:
        plan = plan_link(spec) if study_name == "moe_train" else pipelink.link(spec).plan
    except PipelinkError as exc:
        assert isinstance(want, tuple), f"{name}: pipelink refused a case it should relink: {exc.format()}"
        assert type(exc).__name__ == want[0] and want[1] in exc.message, exc.format()
        if want[0] == "FactConflict":  # the fact, the closed component and a reader named
            assert f"fact '{want[1]}'" in exc.message and "gemm (moe_" in exc.message
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"{study_name}/{name}: untyped {type(exc).__name__} from pipelink.link: {exc}")
    else:
        assert isinstance(want, dict), f"{name}: pipelink linked a case it should refuse ({want})"
        for key, value in want.items():
            assert _matches(_value(plan, key), value), (key, _value(plan, key), value)
            inst, _, fact = key.partition(".")
            if fact in PERMUTE_GUARANTEES and inst != "permute":  # carried from the permute's guarantee
                assert plan.instance(inst).fact_sources[fact].kind == "guarantee", key
        assert not [w for w in plan.all_warnings() if "unchecked" in w]
    # Symbol linking accepts everything that compiles, and at most warns.
    if (study_name, name) in SYMBOL_BUILT:
        sym = pipelink.link(symbol, mode="symbol").plan
    else:
        sym = plan_link(symbol, mode="symbol")
    said = [w for w in sym.all_warnings() if "unchecked by symbol linking" in w]
    if warning is None:
        assert not said, said
    else:
        assert any(warning in w for w in said), said
    if study_name in ("moe", "moe_train"):  # the host's design bound, whatever the count producer now guarantees
        assert sym.num_tiles == (DESIGN_TILES if study_name == "moe" else TRAIN_TILES)


@pytest.mark.parametrize("name", ["unperturbed", "permute_whole_tile_padding"])
def test_the_count_producer_at_1024_tokens(bases, tmp_path, name):
    """The bound follows the permute's guarantee at any token count (1024: the design's bound is 2674)."""
    case = next(c for c in MOE.cases if c.name == name)
    symbol, spec = _specs(MOE, case, bases("moe"), tmp_path, tokens=1024)
    plan = plan_link(spec)
    assert plan.num_tiles == plan.instance("gemm").facts["tiles_max"] == (2674 if name == "unperturbed" else 2688)
    assert plan_link(symbol, mode="symbol").num_tiles == 2674


GPU_CASES = [("moe", "unperturbed", "symbol"), ("qwen", "unperturbed", "symbol")] + \
    [(s, n, "pipelink") for s, n in CASES if not isinstance(CPU[s][n][0], tuple)]


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
@pytest.mark.parametrize("study_name,name,mode", GPU_CASES)
def test_the_control_and_every_relinked_kernel_verify(bases, tmp_path, study_name, name, mode):
    from rich.console import Console
    study = STUDIES[study_name]
    symbol, spec = _specs(study, next(c for c in study.cases if c.name == name), bases(study_name), tmp_path)
    result = pipelink.verify(symbol if mode == "symbol" else spec, mode=mode, out_dir=tmp_path / "run", bench=False,
                             seeds=1, timeout=60, console=Console(file=open("/dev/null", "w")))
    assert result.passed, [(r.name, r.status, r.detail) for r in result.rungs]

"""The perturbation study: a closed component is repackaged with one change to its contract (the
same source; a vendor's update) and linked against the unchanged packages of the others, once by
symbols and once by pipelink. Every kernel goes through the verifiable loop on the GPU (watched
child, NaN-poisoned outputs).

    python bench/perturb.py [--link moe|moe_train|qwen] [--tokens N] [--out DIR] [--cases NAME ...] [--timeout S]
                            [--base DIR] [--list]

Three links: `moe` (default; examples/moe: the MoE layer at the Qwen3-30B-A3B shape, 4096 tokens
unless --tokens says otherwise; each case closes one of its components: the permute, the
epilogue or the combine), `moe_train` (examples/moe_train's backward link at the same shape: its plan closed, the
tile table's writer whose guarantees the mainloop and epilogue read) and `qwen` (examples/qwen_mlp: the CuTe
mainloop and the closed SwiGLU epilogue). The pipelink spec leaves every fact the components decide to the linker, as a user's
spec does. The symbol link gets what a hand-written host passes: the problem sizes, and for the MoE
layer the buffer sizes of the design (rows_max, tiles_max), computed once from the unperturbed
permute. First the unperturbed kernel is verified in both modes: symbol linking is a faithful
control only if it is right before anything changes.

Each case is one kind of change (KINDS), and every edit is one the component's code honours with
its source unchanged (the fact is read at run time from its bindings, or the package is rebuilt
for the new compile-time value, or the resource is one the code never touches): a pipelink "ok"
then means the relinked kernel is right, and a symbol failure is the change's, not the edit's.

Writes results/perturb-<gpu|cpu>-<stamp>.json with the link, its shape and a list `cases`, each with
`case`, `kind`, `closed` (the repacked component), `fact`, `change`, `expected` (per mode, what the
case predicts) and per mode `symbol` / `pipelink`: `link_accepted`, `outcome` (hang / crash /
unwritten / wrong / ok; refused when the link refused, with `error` and `error_type`; untyped when
it failed with an error that is not a PipelinkError), `unwritten`, the facts chosen and where each
came from, the tile bound (`num_tiles`) and grid.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import shutil
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import harness

import pipelink
from pipelink.errors import PipelinkError

ROOT = harness.ROOT
qwen_shapes = harness.example("qwen_mlp/shapes.py")
moe_shapes = harness.example("moe/shapes.py")

# The kinds of change a case makes (its `kind`).
KINDS = {
    "none": "nothing changed (the control)",
    "padding": "a padding or tile unit: rows or columns per tile, where the rows start",
    "specialization": "the compile-time values a package is built for (its variants)",
    "new_buffer": "a buffer the contract adds (shared memory or global workspace)",
    "element_width": "the width of an element or entry (int32 words per table entry)",
    "pinned": "a position fixed in the binary: a buffer's offset, a named barrier's ID",
    "layout_order": "the order of a layout (a row map token-major or slot-major)",
    "table_layout": "the header of a table the component writes or reads",
    "bound": "a guarantee's bound (the most rows, and so tiles, a count producer can list)",
}
# What a verify run can end in (`outcome`), and how a link ends without one.
FAILURES = ("hang", "crash", "unwritten", "wrong")


@dataclass(frozen=True)
class Case:
    name: str
    kind: str                                 # one of KINDS
    fact: str                                 # the constant or resource that changed
    change: str                               # what the vendor did, in words
    edits: tuple[tuple[str, str], ...]        # contract edits of the closed component (old text, new text)
    variants: tuple[dict, ...] = ()           # the compile-time variants it is repacked with (none: the default)
    closed: str = ""                          # the repacked component (beside the study's; "": the study's)
    expect: tuple[str, str] = ("ok", "ok")    # (symbol, pipelink) on the GPU: outcomes, "/" between alternatives


@dataclass(frozen=True)
class Study:
    link: str                                 # what is linked, in words
    closed: Path                              # the default closed component (source and contract, without suffix)
    pack: Callable[..., Path]                 # the unchanged packages into a folder (sources=True: none closed)
    specs: Callable[[Path, Path, dict], tuple[Path, Path]]  # (symbol spec, pipelink spec): folder, packages, shape
    shape: dict
    cases: list[Case]

    def component(self, case: Case) -> Path:
        """The case's closed component (source and contract, without suffix)."""
        return self.closed.parent / case.closed if case.closed else self.closed


# --- the Qwen gate/up link: the SwiGLU epilogue closed -----------------------------------------

QWEN_SHAPE = qwen_shapes.SHAPES["qwen_gate_up_4096"]
QWEN_CONFIG = (256, 4, "column_major", 0, 1)  # tile_n, stages, order, group, cluster (tile_m, tile_n left to the link)
CLOSED_VARIANTS = tuple({"tile_n": n, "gated": 1} for n in (128, 256))
# The epilogue contract's tile_n line as shipped (read, so the edit follows the widths it takes)
EPILOGUE_TILE_N = re.search(r"tile_n = \{ set = \[[\d, ]+\], default = \d+",
                            (ROOT / "components/raw/swiglu_store.toml").read_text()).group(0)
# A second staging buffer, inserted before the epilogue's named barrier.
SECOND_STAGING = """[[smem]]
name = "staging_next"
bytes = "tile_m * store_part * 2"
align = 1024
default_offset = 0  # its own test kernel's (symbol linking only)

# Guards staging"""


# The mainloop variants the cases can link: the shipped 128 x 256, and 128 x 128 and 64 x 256 for the epilogue's
# narrower tiles. The example's other widths are never chosen here, and each costs a CUTLASS compile.
QWEN_MAINLOOP_VARIANTS = ({"tile_m": 128, "tile_n": 256}, {"tile_m": 128, "tile_n": 128},
                          {"tile_m": 64, "tile_n": 256})


def _qwen_pack(folder: Path, *, sources: bool = True) -> Path:
    """The unchanged package: the mainloop, with its source either way (``sources``, as moe_shapes.pack
    takes it; the closed epilogue is packed per case)."""
    packages = folder / "packages"
    source, contract, _ = qwen_shapes.COMPONENTS[0]
    pipelink.pack(source, contract, packages / f"{source.stem}.plc", variants=list(QWEN_MAINLOOP_VARIANTS))
    return packages


def _qwen_specs(folder: Path, packages: Path, shape: dict) -> tuple[Path, Path]:
    spec = qwen_shapes.write_spec(folder, packages, tuple(shape[k] for k in ("M", "K", "N", "gated")), QWEN_CONFIG,
                                  facts={"tile_n": None, "tile_m": None})
    return spec, spec


QWEN = Study(
    "examples/qwen_mlp (gemm_mainloop + closed swiglu_store)", ROOT / "components" / "raw" / "swiglu_store",
    _qwen_pack, _qwen_specs, dict(zip(("M", "K", "N", "gated"), QWEN_SHAPE)), [
        Case("unperturbed", "none", "-", "the closed epilogue as shipped", (), CLOSED_VARIANTS),
        # Symbol: the mainloop runs its 256-column tiles, the epilogue stores 64 output columns of each
        # (seen 2026-12-01: half the output unwritten). Pipelink: tile_n 128 for both (the mainloop has the variant).
        Case("epilogue_tile_n_128", "specialization", "tile_n",
             "repacked supporting only 128-column accumulator tiles",
             ((EPILOGUE_TILE_N, "tile_n = { set = [128], default = 128"),), ({"tile_n": 128, "gated": 1},),
             expect=("unwritten/wrong", "ok")),
        # Symbol: staging over the mainloop's A ring (seen: wrong). Pipelink: placed after the ring.
        Case("epilogue_staging_at_0", "pinned", "smem.staging.default_offset",
             "repacked with its staging tile at offset 0 (the vendor's own test kernel had no mainloop)",
             (("default_offset = 196608", "default_offset = 0"),), CLOSED_VARIANTS, expect=("wrong/hang", "ok")),
        # Symbol: the mainloop's 128-row tiles, the epilogue's fragment of a 64-row one (half the values, the
        # warpgroups on column halves; stores 64 rows per tile row): rows unwritten, the rest wrong. Pipelink:
        # tile_m 64 for both (the mainloop's 64 x 256 variant; 4 stages of 64 + 256 rows fit).
        Case("epilogue_tile_m_64", "padding", "tile_m",
             "repacked for 64-row accumulator tiles only (less row padding at small M)",
             (("tile_m = { set = [64, 128], default = 128", "tile_m = { set = [64], default = 64"),),
             tuple({"tile_m": 64, "tile_n": n, "gated": 1} for n in (128, 256)), expect=("unwritten/wrong", "ok")),
        # A second staging part (double buffering, which this code does not use yet): 32 KB more shared memory.
        # Symbol: the buffer at its packaged offset, never touched: ok. Pipelink: the spec's 4 stages (192 KB)
        # plus two stagings no longer fit in 227 KB: refused (SmemOverflow) naming the buffers.
        Case("epilogue_second_staging", "new_buffer", "smem.staging_next",
             "repacked declaring a second 32 KB staging buffer (double-buffered stores)",
             (("# Guards staging", SECOND_STAGING),), CLOSED_VARIANTS, expect=("ok", "refused")),
    ])


# --- the MoE layer: the permute closed, and per case the epilogue or the combine -----------------

MOE_MODEL, MOE_TOKENS = "qwen3_30b_a3b", 4096
# A per-column scale row the epilogue declares (for an fp8 output to come), inserted before its named barrier.
EPILOGUE_SCALES = """[[smem]]
name = "scales"
bytes = "tile_n * 4"
align = 16
default_offset = 212992  # after the design's rings and staging (symbol linking only)

[[named_barrier]]"""


def _moe_specs(folder: Path, packages: Path, shape: dict) -> tuple[Path, Path]:
    """The symbol link's host passes the buffer sizes of the design it was written for (the
    unperturbed permute's rows_max and tiles_max); pipelink takes them from the permute's package."""
    model, tokens = shape["model"], shape["tokens"]
    hidden, inter, experts, k = moe_shapes.MODELS[model]
    rows = -(-(tokens * k + experts * 127) // 128) * 128
    host = {"rows_max": rows, "tiles_max": moe_shapes.tile_bound(hidden, inter, experts, k, tokens)}
    return (moe_shapes.write_spec(folder / "symbol", packages, model, tokens, facts=host),
            moe_shapes.write_spec(folder / "pipelink", packages, model, tokens))


MOE = Study(
    f"examples/moe (router, permute (closed), moe_mainloop, moe_epilogue, moe_combine; each case repacks one "
    f"of them closed), {MOE_MODEL}",
    ROOT / "components" / "moe" / "moe_permute", moe_shapes.pack, _moe_specs,
    {"model": MOE_MODEL, "tokens": MOE_TOKENS}, [
        Case("unperturbed", "none", "-", "the closed permute as shipped", ()),
        # -- the permute (the count producer: the tile table, the row maps) --
        # Symbol: the readers skip 4 words too few (seen 2026-12-02: hang). Pipelink: table_header 8 to both readers.
        Case("permute_table_header_8", "table_layout", "table_header",
             "the tile table's header grows from 4 to 8 int32 words (room for a version and flags)",
             (('table_header = "4"', 'table_header = "8"'),), expect=("hang/crash/wrong", "ok")),
        # Symbol: entries read 16 bytes apart, written 32 (seen: crash). Pipelink: tile_words 8 to both readers.
        Case("permute_tile_words_8", "element_width", "tile_words",
             "each tile table entry grows from 4 to 8 int32 words (32-byte entries)",
             (('tile_words = "4"', 'tile_words = "8"'),), expect=("crash/hang/wrong", "ok")),
        # Symbol: the combine reads a token-major map (seen: wrong). Pipelink: slot_major 1 to the combine.
        Case("permute_slot_major", "layout_order", "slot_major",
             "the row map is stored slot-major (token_row[k * T + t]) instead of token-major",
             (('slot_major = "0"', 'slot_major = "1"'),), expect=("wrong", "ok")),
        # Symbol: rows past the host's buffers (seen: crash). Pipelink: rows_max grows, every row buffer with it.
        Case("permute_row_base_16384", "padding", "row_base",
             "the permuted rows start at row 16384 (the first rows reserved), so the row space grows",
             (('row_base = "0"', 'row_base = "16384"'),), expect=("crash/wrong/ok", "ok")),
        # The count grows past the design's bound (twice the m-tiles). Symbol: the glue runs the design's bound
        # of 64-row tiles as 128-row ones (seen: wrong). Pipelink: refused, the GEMM and epilogue take tile_m 128.
        Case("permute_tile_m_64", "padding", "tile_m", "experts padded to 64-row tiles instead of 128",
             (("tile_m = { set = [64, 128], default = 128", "tile_m = { set = [64], default = 64"),),
             expect=("wrong/unwritten/crash", "refused")),
        # Symbol: 128-column tiles computed as 256 (seen: wrong). Pipelink: refused (the GEMM takes 256 only).
        Case("permute_tile_n_128", "padding", "tile_n", "the tile table steps 128 product columns instead of 256",
             (("tile_n = { set = [128, 256], default = 256", "tile_n = { set = [128], default = 128"),),
             expect=("wrong/unwritten/crash", "refused")),
        # The count producer's bound grows past the design's tile count (rows_max + 128, tiles_max + 14 at this
        # shape; the real count stays under both). Symbol: ok (its host bound still covers the count). Pipelink:
        # the new tiles_max reaches the schedule (the grid's tile bound), the table and every reader: ok.
        Case("permute_whole_tile_padding", "bound", "rows_max, tiles_max",
             "the permute's guarantee now reserves a whole tile of padding per expert (a looser, simpler bound)",
             (("align_up(T * topk + E * (tile_m - 1), tile_m)", "align_up(T * topk + E * tile_m, tile_m)"),),
             expect=("ok", "ok")),
        # The offsets table pinned where the design keeps the mainloop's mbarriers. Symbol: the permute writes
        # the offsets over the initialized mbarriers: the ring's waits see garbage (hang or wrong). Pipelink:
        # the mbarriers and every buffer live at the same time placed around the pinned range: ok.
        Case("permute_offsets_pinned", "pinned", "smem.offsets.offset",
             "the expert offsets are pinned at smem byte 229376 (its own test kernel's layout)",
             (("default_offset = 212992  # symbol linking only", "offset = 229376\ndefault_offset = 229376"),),
             expect=("hang/wrong/crash", "ok")),
        # -- the epilogue --
        # Its named barrier pinned to ID 1, the mainloop's rows_ready in the design. Symbol: one hardware
        # barrier for 128 producer and 256 consumer threads (hang or wrong). Pipelink: rows_ready moves.
        Case("epilogue_barrier_pinned_1", "pinned", "named_barrier.staged.id",
             "the epilogue's staging barrier is pinned to ID 1 (hard-coded in the new build)",
             (("default_id = 2", "id = 1\ndefault_id = 1"),), closed="moe_epilogue",
             expect=("hang/wrong", "ok")),
        # Built against a newer permute whose table header is 8 words (its default, what symbol linking runs).
        # Symbol: each tile reads its successor's entry (wrong stores; the down tiles' counters never fill:
        # hang). Pipelink: the permute's guarantee, 4, wins over the default: ok.
        Case("epilogue_table_header_8", "table_layout", "table_header (default)",
             "the epilogue is rebuilt expecting an 8-word table header by default",
             (("table_header = { range = [4, 64], multiple_of = 4, default = 4",
               "table_header = { range = [4, 64], multiple_of = 4, default = 8"),), closed="moe_epilogue",
             expect=("hang/wrong/crash", "ok")),
        # Repacked for 128-column tiles only. Symbol: the mainloop's 256-column accumulator read as 128 columns
        # (half of every tile unwritten or wrong). Pipelink: refused, the GEMM and the permute's table take 256.
        Case("epilogue_tile_n_128", "specialization", "tile_n", "the epilogue repacked for 128-column tiles only",
             (("tile_n = { set = [256], default = 256", "tile_n = { set = [128], default = 128"),),
             ({"tile_n": 128},), closed="moe_epilogue", expect=("unwritten/wrong/hang/crash", "refused")),
        # A 1 KB shared buffer the code does not use yet. Symbol: at its packaged offset, never touched: ok.
        # Pipelink: placed with the others (which may move): ok.
        Case("epilogue_scales_smem", "new_buffer", "smem.scales",
             "the epilogue declares a per-column scale row in shared memory (for an fp8 output to come)",
             (("[[named_barrier]]", EPILOGUE_SCALES),), closed="moe_epilogue", expect=("ok", "ok")),
        # -- the combine --
        # Rebuilt for a slot-major permute (its default). Symbol: reads the token-major map slot-major: wrong.
        # Pipelink: the permute's guarantee (0) wins over the default: ok.
        Case("combine_slot_major_default", "layout_order", "slot_major (default)",
             "the combine is rebuilt expecting a slot-major row map by default",
             (("slot_major = { set = [0, 1], default = 0", "slot_major = { set = [0, 1], default = 1"),),
             closed="moe_combine", expect=("wrong", "ok")),
    ])

# --- the MoE training step's backward: the plan closed (the tile table's writer) ------------------------------

moe_train_shapes = harness.example("moe_train/shapes.py")


def _moe_train_specs(folder: Path, packages: Path, shape: dict) -> tuple[Path, Path]:
    """The backward link; the symbol link's host passes the design's buffer sizes (the unperturbed plan's rows_max
    and tiles_max), pipelink takes them from the plan's package."""
    model, tokens = shape["model"], shape["tokens"]
    hidden, inter, experts, k = moe_shapes.MODELS[model]
    rows = -(-(tokens * k + experts * 127) // 128) * 128
    tiles = rows // 128 * (inter // 256 + hidden // 256) + experts * (hidden // 128 * (inter // 256)
                                                                     + 2 * inter // 128 * (hidden // 256))
    return (moe_train_shapes.write_specs(folder / "symbol", packages, model, tokens,
                                         facts={"rows_max": rows, "tiles_max": tiles})[1],
            moe_train_shapes.write_specs(folder / "pipelink", packages, model, tokens)[1])


def _moe_train_pack(folder: Path, *, sources: bool = False) -> Path:
    return moe_train_shapes.pack_backward(folder, sources=sources)


MOE_TRAIN = Study(
    f"examples/moe_train backward (combine^T, plan (closed), moe_bwd_mainloop, moe_bwd_epilogue, gather^T), "
    f"{MOE_MODEL}",
    ROOT / "components" / "moe_train" / "moe_bwd_plan", _moe_train_pack, _moe_train_specs,
    {"model": MOE_MODEL, "tokens": MOE_TOKENS}, [
        Case("unperturbed", "none", "-", "the closed plan as shipped", ()),
        # Symbol: the mainloop and epilogue read entries 4 words too early (wrong kinds and rows: hang, crash or
        # wrong). Pipelink: table_header 8 to both readers.
        Case("plan_table_header_8", "table_layout", "table_header",
             "the tile table's header grows from 4 to 8 int32 words", (('table_header = "4"', 'table_header = "8"'),),
             expect=("hang/crash/wrong", "ok")),
        # Symbol: 64-byte entries read 32 bytes apart. Pipelink: tile_words 16 to both readers.
        Case("plan_tile_words_16", "element_width", "tile_words",
             "each tile table entry grows from 8 to 16 int32 words (64-byte entries)",
             (('tile_words = "8"', 'tile_words = "16"'),), expect=("hang/crash/wrong", "ok")),
        # A looser row bound (a whole tile of padding per expert): rows_max 49152, tiles_max larger; the real
        # count stays under both. Symbol: ok (the host's bounds still cover it). Pipelink: every reader, the saved
        # tensors' row space and the schedule grow with the guarantee: ok.
        Case("plan_whole_tile_padding", "bound", "rows_max, tiles_max",
             "the plan's guarantee reserves a whole tile of padding per expert (a looser, simpler bound)",
             (("align_up(T * topk + E * (tile_m - 1), tile_m)", "align_up(T * topk + E * tile_m, tile_m)"),),
             expect=("ok", "ok")),
        # Experts padded to 64 rows. Symbol: the GEMM's 128-row tiles over 64-row steps (wrong, unwritten or a
        # crash). Pipelink: refused, the mainloop and epilogue take tile_m 128 only.
        Case("plan_tile_m_64", "padding", "tile_m", "the plan pads experts to 64-row tiles instead of 128",
             (("tile_m = { set = [128], default = 128", "tile_m = { set = [64], default = 64"),),
             expect=("wrong/unwritten/crash/hang", "refused")),
        # The plan's offsets scratch pinned where the design keeps the mainloop's mbarriers. Symbol: the plan writes
        # its offsets over the initialized ring barriers (hang or wrong). Pipelink: placed around the pinned range.
        Case("plan_starts_pinned", "pinned", "smem.starts.offset",
             "the plan's expert offsets are pinned at smem byte 229376 (its own test kernel's layout)",
             (("default_offset = 212992  # symbol linking only", "offset = 229376\ndefault_offset = 229376"),),
             expect=("hang/wrong/crash/ok", "ok")),
    ])

STUDIES = {"moe": MOE, "qwen": QWEN, "moe_train": MOE_TRAIN}
STUDIED_FACTS = ("tile_n", "tile_m", "table_header", "tile_words", "slot_major", "row_base", "rows_max", "tiles_max",
                 "block_threads")  # recorded per instance


def with_tokens(study: Study, tokens: int) -> Study:
    """The MoE study at another token count."""
    return dataclasses.replace(study, shape={**study.shape, "tokens": tokens})


def edited_contract(study: Study, case: Case) -> str:
    """The text of the case's closed contract after its edits (each must match the shipped text once)."""
    text = study.component(case).with_suffix(".toml").read_text()
    for old, new in case.edits:
        if text.count(old) != 1:
            raise ValueError(f"case {case.name}: {old!r} occurs {text.count(old)} times in "
                             f"{study.component(case).name}.toml, not once")
        text = text.replace(old, new)
    return text


def closed_package(study: Study, case: Case, folder: Path, packages: Path, *, closed: bool = True) -> Path:
    """The case's closed component with its contract edits, repacked --closed over its unchanged
    package (``closed=False``: with its source, as a monolithic control needs)."""
    component = study.component(case)
    contract = folder / component.with_suffix(".toml").name
    folder.mkdir(parents=True, exist_ok=True)
    contract.write_text(edited_contract(study, case))
    return pipelink.pack(component.with_suffix(".cu"), contract, packages / f"{component.name}.plc",
                         variants=list(case.variants) or None, closed=closed).path


def base_packages(study: Study, folder: Path) -> Path:
    """The unchanged packages in ``folder``/packages, packed unless a finished pack is there."""
    done = folder / "packed"
    if not done.exists():
        study.pack(folder)
        done.write_text(study.link + "\n")
    return folder / "packages"


def outcome(v) -> tuple[str, int | None]:
    """What the loop saw: hang / crash (the watched child), unwritten (NaN poison left), wrong, ok."""
    run, corr = v.rung("run"), v.rung("correctness")
    if run is not None and run.status in ("hang", "crash"):
        return run.status, None
    if corr is None or corr.status == "skipped":
        return "not run", None
    unwritten = sum(int(x) for k, x in corr.figures.items() if k.endswith(".unwritten"))
    if unwritten:
        return "unwritten", unwritten
    return ("ok" if corr.status == "ok" else "wrong"), 0


def link_mode(spec: Path, mode: str) -> tuple[object | None, dict]:
    """Link ``spec`` in ``mode``: the kernel and what the record keeps of the link, or None and the
    refusal (a PipelinkError: `refused`; any other exception is a bug: `untyped`)."""
    t0 = time.time()
    try:
        kernel = pipelink.link(spec, mode=mode)
    except PipelinkError as exc:
        return None, {"link_accepted": False, "outcome": "refused", "error": exc.format(),
                      "error_type": type(exc).__name__, "seconds": time.time() - t0}
    except Exception as exc:  # noqa: BLE001 - recorded, never hidden: pipelink must raise typed errors only
        return None, {"link_accepted": False, "outcome": "untyped", "error": "".join(
            traceback.format_exception_only(type(exc), exc)).strip(), "error_type": type(exc).__name__,
                      "traceback": traceback.format_exc()[-3000:], "seconds": time.time() - t0}
    plan = kernel.plan
    return kernel, {
        "link_accepted": True, "warnings": [w for w in plan.all_warnings() if "unchecked" in w],
        "facts": {i.name: {n: [i.facts[n], str(i.fact_sources[n])] for n in STUDIED_FACTS if n in i.facts}
                  for i in plan.instances},
        "fact_choices": [c.to_json() for c in plan.resolved.choices],
        "smem": {str(u): s.offset for s in plan.smem for u in s.users},
        "barriers": {str(b.purpose): b.id for b in plan.barriers},
        "num_tiles": plan.num_tiles, "grid": plan.grid, "block": plan.block, "seconds": time.time() - t0}


def run_mode(spec: Path, mode: str, out: Path, timeout: int) -> dict:
    t0 = time.time()
    kernel, record = link_mode(spec, mode)
    if kernel is None:
        return record
    v = pipelink.verify(spec, mode=mode, out_dir=out, bench=False, seeds=1, timeout=timeout,
                        console=harness.quiet_console())
    record["outcome"], record["unwritten"] = outcome(v)
    record["verify"] = harness.verify_record(v)
    record["seconds"] = time.time() - t0
    return record


def expected(case: Case) -> dict:
    return dict(zip(("symbol", "pipelink"), case.expect))


def _said(r: dict) -> str:
    if not r["link_accepted"]:
        return f"{r['outcome']} at link time ({r['error_type']}): " + r["error"].splitlines()[0]
    return "accepted, " + r["outcome"] + (f" ({r['unwritten']} elements)" if r.get("unwritten") else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--link", choices=sorted(STUDIES), default="moe", help="which link to perturb")
    ap.add_argument("--tokens", type=int, default=None, help=f"tokens of the MoE layer (default {MOE_TOKENS})")
    ap.add_argument("--out", type=Path, default=None, help="results folder (default bench/results)")
    ap.add_argument("--cases", nargs="*", default=None, help="case names (default: all of the link's)")
    ap.add_argument("--timeout", type=int, default=60, help="seconds before a kernel counts as hung")
    ap.add_argument("--base", type=Path, default=None,
                    help="folder of the unchanged packages, packed there once and reused by later runs "
                         "(default: a fresh temporary folder)")
    ap.add_argument("--list", action="store_true", help="print the cases and exit")
    args = ap.parse_args()
    study = STUDIES[args.link]
    if args.tokens is not None:
        if args.link not in ("moe", "moe_train"):
            ap.error("--tokens applies to --link moe and moe_train")
        study = with_tokens(study, args.tokens)
    names = [c.name for c in study.cases]
    unknown = sorted(set(args.cases or ()) - set(names))
    if unknown:
        ap.error(f"unknown case(s) {unknown} for --link {args.link}: {names}")
    if args.list:
        for c in study.cases:
            print(f"{c.name} | {c.closed or study.closed.name} | {c.kind} | {c.fact} | {c.change} | "
                  f"expected symbol {c.expect[0]}, pipelink {c.expect[1]}")
        return
    work = Path(tempfile.mkdtemp(prefix="pipelink-perturb-"))
    base = base_packages(study, args.base or work / "base")  # the unchanged packages (only the closed one is repacked)
    cases = []
    for case in [c for c in study.cases if args.cases is None or c.name in args.cases]:
        harness.log(f"{case.name} ({case.kind}, {study.component(case).name}): {case.change}")
        folder = work / case.name
        packages = folder / "packages"
        shutil.copytree(base, packages)
        closed_package(study, case, folder, packages)
        specs = dict(zip(("symbol", "pipelink"), study.specs(folder, packages, study.shape)))
        row = {"case": case.name, "kind": case.kind, "closed": study.component(case).name, "fact": case.fact,
               "change": case.change, "expected": expected(case)}
        for mode in ("symbol", "pipelink"):
            row[mode] = run_mode(specs[mode], mode, folder / f"verify-{mode}", args.timeout)
            harness.log(f"  {mode}: {row[mode]['outcome']}" + (f" ({row[mode]['unwritten']} unwritten)"
                                                             if row[mode].get("unwritten") else "")
                        + f" (expected {case.expect[mode == 'pipelink']}), {row[mode]['seconds']:.1f} s")
        cases.append(row)
    table = ["case | closed | kind | changed | symbol linking | pipelink | expected (symbol; pipelink)",
             "--- | --- | --- | --- | --- | --- | ---"]
    table += [f"{r['case']} | {r['closed']} | {r['kind']} | {r['fact']} | {_said(r['symbol'])} | "
              f"{_said(r['pipelink'])} | {r['expected']['symbol']}; {r['expected']['pipelink']}" for r in cases]
    print("\n".join(table))
    path = harness.write_result("perturb", {"link": study.link, "shape": study.shape, "timeout_s": args.timeout,
                                            "kinds": KINDS, "cases": cases, "table": table}, args.out)
    harness.log(f"wrote {path}")


if __name__ == "__main__":
    main()

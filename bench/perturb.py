"""The perturbation study: a closed component is repackaged with one changed constant and linked
against the unchanged packages of the others, once by symbols and once by pipelink. Every kernel
goes through the verifiable loop on the GPU (watched child, NaN-poisoned outputs).

    python bench/perturb.py [--link moe|qwen] [--out DIR] [--cases NAME ...] [--timeout S]

Two links: `moe` (default; examples/moe: the MoE layer, its permute packed --closed, at the
Qwen3-30B-A3B shape with 4096 tokens) and `qwen` (examples/qwen_mlp: the CuTe mainloop and the
closed SwiGLU epilogue). The pipelink spec leaves every fact the components decide to the linker,
as a user's spec does. The symbol link gets what a hand-written host passes: the problem sizes,
and for the MoE layer the buffer sizes of the design (rows_max, tiles_max), computed once from the
unperturbed permute. First the unperturbed kernel is verified in both modes: symbol linking is a
faithful control only if it is right before anything changes. Writes
results/perturb-<gpu|cpu>-<stamp>.json with a list `cases`, each with `fact`, `symbol`
(`link_accepted`, `outcome`: hang / crash / unwritten / wrong / ok, `unwritten`) and `pipelink`
(`outcome`: ok / refused / a failure, `error`, the facts it chose and where each came from).
"""

from __future__ import annotations

import argparse
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import harness

import pipelink
from pipelink.errors import PipelinkError

ROOT = harness.ROOT
qwen_shapes = harness.example("qwen_mlp/shapes.py")
moe_shapes = harness.example("moe/shapes.py")


@dataclass(frozen=True)
class Case:
    name: str
    fact: str                                 # the constant that changed
    change: str                               # what the vendor did, in words
    edits: tuple[tuple[str, str], ...]        # contract edits of the closed component
    variants: tuple[dict, ...] = ()           # the compile-time variants it is repacked with (none: the default)


@dataclass(frozen=True)
class Study:
    link: str                                 # what is linked, in words
    closed: Path                              # the closed component (source and contract, without suffix)
    pack: Callable[[Path], Path]              # the unchanged packages into a folder
    specs: Callable[[Path, Path], tuple[Path, Path]]  # (symbol spec, pipelink spec) over a packages folder
    shape: dict
    cases: list[Case]


# --- the Qwen gate/up link: the SwiGLU epilogue closed -----------------------------------------

QWEN_SHAPE = qwen_shapes.SHAPES["qwen_gate_up_4096"]
QWEN_CONFIG = (256, 4, "column_major", 0, 1)  # tile_n, stages, order, group, cluster (tile_n left to the link)
CLOSED_VARIANTS = tuple({"tile_n": n, "gated": 1} for n in (128, 256))
# The epilogue contract's tile_n line as shipped (read, so the edit follows the widths it takes)
EPILOGUE_TILE_N = re.search(r"tile_n = \{ set = \[[\d, ]+\], default = \d+",
                            (ROOT / "components/raw/swiglu_store.toml").read_text()).group(0)


def _qwen_specs(folder: Path, packages: Path) -> tuple[Path, Path]:
    spec = qwen_shapes.write_spec(folder, packages, QWEN_SHAPE, QWEN_CONFIG, facts={"tile_n": None})
    return spec, spec


QWEN = Study(
    "examples/qwen_mlp (gemm_mainloop + closed swiglu_store)", ROOT / "components" / "raw" / "swiglu_store",
    qwen_shapes.pack, _qwen_specs, dict(zip(("M", "K", "N", "gated"), QWEN_SHAPE)), [
        Case("unperturbed", "-", "the closed epilogue as shipped", (), CLOSED_VARIANTS),
        Case("epilogue_tile_n_128", "tile_n", "repacked supporting only 128-column accumulator tiles",
             ((EPILOGUE_TILE_N, "tile_n = { set = [128], default = 128"),),
             ({"tile_n": 128, "gated": 1},)),
        Case("epilogue_staging_at_0", "smem.staging.default_offset",
             "repacked with its staging tile at offset 0 (the vendor's own test kernel had no mainloop)",
             (("default_offset = 196608", "default_offset = 0"),), CLOSED_VARIANTS),
    ])


# --- the MoE layer: the permute closed ----------------------------------------------------------

MOE_MODEL, MOE_TOKENS = "qwen3_30b_a3b", 4096


def _moe_specs(folder: Path, packages: Path) -> tuple[Path, Path]:
    """The symbol link's host passes the buffer sizes of the design it was written for (the
    unperturbed permute's rows_max and tiles_max); pipelink takes them from the permute's package."""
    hidden, inter, experts, k = moe_shapes.MODELS[MOE_MODEL]
    rows = -(-(MOE_TOKENS * k + experts * 127) // 128) * 128
    host = {"rows_max": rows, "tiles_max": moe_shapes.tile_bound(hidden, inter, experts, k, MOE_TOKENS)}
    return (moe_shapes.write_spec(folder / "symbol", packages, MOE_MODEL, MOE_TOKENS, facts=host),
            moe_shapes.write_spec(folder / "pipelink", packages, MOE_MODEL, MOE_TOKENS))


MOE = Study(
    f"examples/moe (router, closed moe_permute, moe_mainloop, moe_epilogue, moe_combine), {MOE_MODEL}",
    ROOT / "components" / "moe" / "moe_permute", moe_shapes.pack, _moe_specs,
    {"model": MOE_MODEL, "tokens": MOE_TOKENS}, [
        Case("unperturbed", "-", "the closed permute as shipped", ()),
        Case("permute_table_header_8", "table_header",
             "the tile table's header grows from 4 to 8 int32 words (room for a version and flags)",
             (('table_header = "4"', 'table_header = "8"'),)),
        Case("permute_tile_words_8", "tile_words",
             "each tile table entry grows from 4 to 8 int32 words (32-byte entries)",
             (('tile_words = "4"', 'tile_words = "8"'),)),
        Case("permute_slot_major", "slot_major",
             "the row map is stored slot-major (token_row[k * T + t]) instead of token-major",
             (('slot_major = "0"', 'slot_major = "1"'),)),
        Case("permute_row_base_16384", "row_base",
             "the permuted rows start at row 16384 (the first rows reserved), so the row space grows",
             (('row_base = "0"', 'row_base = "16384"'),)),
        Case("permute_tile_m_64", "tile_m", "experts padded to 64-row tiles instead of 128",
             (("tile_m = { set = [64, 128], default = 128", "tile_m = { set = [64], default = 64"),)),
        Case("permute_tile_n_128", "tile_n", "the tile table steps 128 product columns instead of 256",
             (("tile_n = { set = [128, 256], default = 256", "tile_n = { set = [128], default = 128"),)),
    ])

STUDIES = {"moe": MOE, "qwen": QWEN}
STUDIED_FACTS = ("tile_n", "tile_m", "table_header", "tile_words", "slot_major", "row_base", "rows_max")  # recorded per instance


def closed_package(study: Study, case: Case, folder: Path, packages: Path, *, closed: bool = True) -> Path:
    """The closed component with the case's contract edits, repacked --closed over its unchanged
    package (``closed=False``: with its source, as a monolithic control needs)."""
    contract = folder / study.closed.with_suffix(".toml").name
    shutil.copyfile(study.closed.with_suffix(".toml"), contract)
    text = contract.read_text()
    for old, new in case.edits:
        assert old in text, (case.name, old)
        text = text.replace(old, new)
    contract.write_text(text)
    return pipelink.pack(study.closed.with_suffix(".cu"), contract, packages / f"{study.closed.name}.plc",
                         variants=list(case.variants) or None, closed=closed).path


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


def run_mode(spec: Path, mode: str, out: Path, timeout: int) -> dict:
    t0 = time.time()
    try:
        kernel = pipelink.link(spec, mode=mode)
    except PipelinkError as exc:
        return {"link_accepted": False, "outcome": "refused", "error": exc.format(), "seconds": time.time() - t0}
    record = {"link_accepted": True, "warnings": [w for w in kernel.plan.all_warnings() if "unchecked" in w],
              "facts": {i.name: {n: [i.facts[n], str(i.fact_sources[n])] for n in STUDIED_FACTS if n in i.facts}
                        for i in kernel.plan.instances},
              "fact_choices": [c.to_json() for c in kernel.plan.resolved.choices],
              "smem": {str(u): s.offset for s in kernel.plan.smem for u in s.users}}
    v = pipelink.verify(spec, mode=mode, out_dir=out, bench=False, seeds=1, timeout=timeout,
                        console=harness.quiet_console())
    record["outcome"], record["unwritten"] = outcome(v)
    record["verify"] = harness.verify_record(v)
    record["seconds"] = time.time() - t0
    return record


def _said(r: dict) -> str:
    if not r["link_accepted"]:
        return "refused at link time: " + r["error"].splitlines()[0]
    return "accepted, " + r["outcome"] + (f" ({r['unwritten']} elements)" if r.get("unwritten") else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--link", choices=sorted(STUDIES), default="moe", help="which link to perturb")
    ap.add_argument("--out", type=Path, default=None, help="results folder (default bench/results)")
    ap.add_argument("--cases", nargs="*", default=None, help="case names (default: all of the link's)")
    ap.add_argument("--timeout", type=int, default=60, help="seconds before a kernel counts as hung")
    args = ap.parse_args()
    study = STUDIES[args.link]
    names = [c.name for c in study.cases]
    unknown = sorted(set(args.cases or ()) - set(names))
    if unknown:
        ap.error(f"unknown case(s) {unknown} for --link {args.link}: {names}")
    work = Path(tempfile.mkdtemp(prefix="pipelink-perturb-"))
    base = study.pack(work / "base")  # the unchanged packages (only the closed one is repacked)
    cases = []
    for case in [c for c in study.cases if args.cases is None or c.name in args.cases]:
        harness.log(f"{case.name}: {case.change}")
        folder = work / case.name
        packages = folder / "packages"
        shutil.copytree(base, packages)
        closed_package(study, case, folder, packages)
        specs = dict(zip(("symbol", "pipelink"), study.specs(folder, packages)))
        row = {"case": case.name, "fact": case.fact, "change": case.change}
        for mode in ("symbol", "pipelink"):
            row[mode] = run_mode(specs[mode], mode, folder / f"verify-{mode}", args.timeout)
            harness.log(f"  {mode}: {row[mode]['outcome']}" + (f" ({row[mode]['unwritten']} unwritten)"
                                                             if row[mode].get("unwritten") else ""))
        cases.append(row)
    table = ["case | changed fact | symbol linking | pipelink", "--- | --- | --- | ---"]
    table += [f"{r['case']} | {r['fact']} | {_said(r['symbol'])} | {_said(r['pipelink'])}" for r in cases]
    print("\n".join(table))
    path = harness.write_result("perturb", {"link": study.link, "shape": study.shape, "timeout_s": args.timeout,
                                            "cases": cases, "table": table}, args.out)
    harness.log(f"wrote {path}")


if __name__ == "__main__":
    main()

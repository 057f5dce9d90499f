"""The perturbation study: a closed component is repackaged with one changed constant and linked
against the unchanged packages of the others, once by symbols and once by pipelink. Every kernel
goes through the verifiable loop on the GPU (watched child, NaN-poisoned outputs).

    python bench/perturb.py [--out DIR] [--cases NAME ...] [--timeout S]

Today's link is the Qwen gate/up kernel (examples/qwen_mlp: the CuTe mainloop and the SwiGLU
epilogue, packed --closed). Its spec leaves the tile facts to the linker, as a user's spec does
when the components decide them. First the unperturbed kernel is verified in both modes: symbol
linking is a faithful control only if it is right before anything changes. Writes
results/perturb-<gpu|cpu>-<stamp>.json with a list `cases`, each with `fact`, `symbol`
(`link_accepted`, `outcome`: hang / crash / unwritten / wrong / ok, `unwritten`) and `pipelink`
(`outcome`: ok / refused / a failure, `error`, the facts it chose and where each came from).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import harness

import pipelink
from pipelink.errors import PipelinkError

ROOT = harness.ROOT
shapes = harness.example("qwen_mlp/shapes.py")
EPILOGUE = ROOT / "components" / "raw" / "swiglu_store"
SHAPE = shapes.SHAPES["qwen_gate_up_4096"]
CONFIG = (256, 4, "column_major", 0, 1)  # tile_n, stages, order, group, cluster (tile_n left to the link)


@dataclass(frozen=True)
class Case:
    name: str
    fact: str                                 # the constant that changed
    change: str                               # what the vendor did, in words
    edits: tuple[tuple[str, str], ...]        # contract edits of the closed component
    variants: tuple[dict, ...]                # the compile-time variants it is repacked with


CLOSED_VARIANTS = tuple({"tile_n": n, "gated": 1} for n in (128, 256))
CASES = [
    Case("unperturbed", "-", "the closed epilogue as shipped", (), CLOSED_VARIANTS),
    Case("epilogue_tile_n_128", "tile_n", "repacked supporting only 128-column accumulator tiles",
         (("tile_n = { set = [128, 256], default = 256", "tile_n = { set = [128], default = 128"),),
         ({"tile_n": 128, "gated": 1},)),
    Case("epilogue_staging_at_0", "smem.staging.default_offset",
         "repacked with its staging tile at offset 0 (the vendor's own test kernel had no mainloop)",
         (("default_offset = 196608", "default_offset = 0"),), CLOSED_VARIANTS),
]


def closed_epilogue(case: Case, folder: Path, packages: Path) -> Path:
    contract = folder / "swiglu_store.toml"
    shutil.copyfile(EPILOGUE.with_suffix(".toml"), contract)
    text = contract.read_text()
    for old, new in case.edits:
        assert old in text, (case.name, old)
        text = text.replace(old, new)
    contract.write_text(text)
    return pipelink.pack(EPILOGUE.with_suffix(".cu"), contract, packages / "swiglu_store.plc",
                         variants=list(case.variants), closed=True).path


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
              "facts": {i.name: {n: [i.facts[n], str(i.fact_sources[n])] for n in ("tile_n",) if n in i.facts}
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
    ap.add_argument("--out", type=Path, default=None, help="results folder (default bench/results)")
    ap.add_argument("--cases", nargs="*", default=[c.name for c in CASES], choices=[c.name for c in CASES])
    ap.add_argument("--timeout", type=int, default=60, help="seconds before a kernel counts as hung")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pipelink-perturb-"))
    base = shapes.pack(work / "base")  # the unchanged packages (the mainloop is never repacked)
    cases = []
    for case in [c for c in CASES if c.name in args.cases]:
        harness.log(f"{case.name}: {case.change}")
        folder = work / case.name
        packages = folder / "packages"
        shutil.copytree(base, packages)
        closed_epilogue(case, folder, packages)
        spec = shapes.write_spec(folder, packages, SHAPE, CONFIG, facts={"tile_n": None})
        row = {"case": case.name, "fact": case.fact, "change": case.change}
        for mode in ("symbol", "pipelink"):
            row[mode] = run_mode(spec, mode, folder / f"verify-{mode}", args.timeout)
            harness.log(f"  {mode}: {row[mode]['outcome']}" + (f" ({row[mode]['unwritten']} unwritten)"
                                                             if row[mode].get("unwritten") else ""))
        cases.append(row)
    table = ["case | changed fact | symbol linking | pipelink", "--- | --- | --- | ---"]
    table += [f"{r['case']} | {r['fact']} | {_said(r['symbol'])} | {_said(r['pipelink'])}" for r in cases]
    print("\n".join(table))
    path = harness.write_result("perturb", {"link": "examples/qwen_mlp (gemm_mainloop + closed swiglu_store)",
                                            "shape": dict(zip(("M", "K", "N", "gated"), SHAPE)),
                                            "timeout_s": args.timeout, "cases": cases, "table": table}, args.out)
    harness.log(f"wrote {path}")


if __name__ == "__main__":
    main()

"""Every plot the docs cite, drawn again from the result JSON in bench/results. Plots are not kept in git
(.gitignore), except the one README.md shows; each benchmark's own ``plot`` function draws them, from the
summary JSON alone (no plot needs the per-launch times).

    python bench/plots.py                      # every plot of PLOTS, where the docs cite it (beside its JSON)
    python bench/plots.py --out DIR            # the same plots, into DIR
    python bench/plots.py RESULT.json[.gz] ... # the plot of any result, beside it (or into --out)
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from harness import RESULTS
from readme_results import load_summary

# The plots README.md, bench/NOTES.md and docs/ cite, each with the results it is drawn from (several: their
# shapes together, as `bench/moe.py --plot A B` draws them).
PLOTS = {
    "paper_table-gpu-20261203T112013.png": ("paper_table-gpu-20261203T112013.json.gz",),  # README.md, NOTES
    "moe-gpu-20261201T225045.png": ("moe-gpu-20261201T225045.json", "moe-gpu-20261201T225339.json"),  # NOTES
    "any_shape-gpu-20261207T002350.png": ("any_shape-gpu-20261207T002350.json",),  # docs/tuning.md
    "any_shape-gpu-20261207T061144.png": ("any_shape-gpu-20261207T061144.json.gz",),  # docs/tuning.md, NOTES
    "any_shape-gpu-20261207T081505.png": ("any_shape-gpu-20261207T081505.json.gz",),  # docs/tuning.md (shown)
}
# A result's "benchmark" -> the bench/ module whose plot(result, path) draws it.
DRAWN_BY = {"paper_table": "paper_table", "moe": "moe", "llama_decode": "llama_decode", "qwen_mlp": "qwen_mlp",
            "any_shape": "any_shape"}


def png_name(result: Path) -> str:
    return result.name.removesuffix(".gz").removesuffix(".json") + ".png"


def draw(results: list[Path], png: Path) -> Path | None:
    """The plot of ``results`` (one, or several runs of one benchmark, their shapes together) at ``png``;
    None where their benchmark draws none, they have no timed row, or matplotlib is missing."""
    records = [load_summary(r) for r in results]
    record = records[0] if len(records) == 1 else {
        **records[0], "shapes": {name: s for r in records for name, s in r["shapes"].items()}}
    module = DRAWN_BY.get(record.get("benchmark"))
    if module is None:
        return None
    png.parent.mkdir(parents=True, exist_ok=True)
    return importlib.import_module(module).plot(record, png)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="*", type=Path, help="result JSON to draw (default: every plot the docs cite)")
    ap.add_argument("--out", type=Path, help="folder for the plots (default: beside each JSON)")
    args = ap.parse_args(argv)
    jobs = ([([r], (args.out or r.parent) / png_name(r)) for r in args.results] if args.results else
            [([RESULTS / r for r in results], (args.out or RESULTS) / png) for png, results in PLOTS.items()])
    status = 0
    for results, png in jobs:
        drawn = draw(results, png)
        print(f"wrote {drawn}" if drawn else f"{results[0]}: no plot (no timed row, no plot for its benchmark, or no "
              "matplotlib)")
        status |= drawn is None
    return status


if __name__ == "__main__":
    sys.exit(main())

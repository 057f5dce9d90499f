"""The SASS instructions where a kernel's warps were sampled most, from Nsight Compute's source page.

    ncu --import REPORT.ncu-rep --page source --csv --print-source sass > sass.csv
    python bench/experiments/ncu_stalls.py sass.csv [--top 25]

Prints each instruction's share of all warp samples (the "Warp Stall Sampling (All Samples)"
column), largest first, until --top rows, with the running total: where the time goes, by
instruction, before any guess about why.
"""

from __future__ import annotations

import argparse
import csv
import io
from pathlib import Path

SAMPLES = "Warp Stall Sampling (All Samples)"


def rows(text: str) -> list[dict]:
    """The CSV rows of the source page (ncu may print lines before the header: skipped)."""
    start = next(i for i, line in enumerate(text.splitlines()) if SAMPLES in line)
    return list(csv.DictReader(io.StringIO("\n".join(text.splitlines()[start:]))))


def number(value: str) -> float:
    try:
        return float(value.replace(",", ""))
    except (ValueError, AttributeError):
        return 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", type=Path)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    table = rows(args.csv.read_text())
    total = sum(number(r.get(SAMPLES)) for r in table) or 1.0
    ranked = sorted(table, key=lambda r: -number(r.get(SAMPLES)))
    running = 0.0
    for r in ranked[:args.top]:
        share = number(r.get(SAMPLES)) / total
        running += share
        print(f"{100 * share:5.1f} % {100 * running:5.1f} %  {r.get('Address', '?'):>8}  {r.get('Source', '')[:100]}")
    print(f"{len(table)} instructions, {total:.0f} samples")


if __name__ == "__main__":
    main()

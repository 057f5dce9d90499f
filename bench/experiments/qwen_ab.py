"""Versions of the Qwen components against each other, on the H200, in one process.

Each variant is a folder holding replacement sources for some of the components (for example an
older `swiglu_store.cu` + `.toml`); what a folder lacks comes from components/. A variant may also
set link-time facts: `NAME=FOLDER@fact=value,fact=value`. Every variant is
linked with every configuration, checked against the fp32 reference (poisoned output, bf16
tolerance), and then all of them, cuBLAS + torch.compile'd SiLU*mul and cuBLAS alone are timed
together, interleaved launch by launch after a warm-up (the clock the comparison sees is the
sustained-load clock). JSON under --out. An experiment: its figures are not in the README, and a
variant folder outside git makes a result that no revision reproduces (say so where it is cited).

    PYTHONPATH=src python3 bench/experiments/qwen_ab.py --variant old=DIR --variant new=components \\
        --variant s3=components@stages=3 [--shapes qwen_gate_up_4096] [--configs "256,4,column_major,16,1;256,4,column_major,16,2"] [--reps 100]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import pipelink

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the harness and qwen_mlp
import qwen_mlp  # noqa: E402
from harness import RESULTS, TIMING, GpuSampler, check, example, log, time_interleaved, warm_up, write_result  # noqa: E402,E501
from qwen_mlp import SHAPES, Case, linked_launch, shapes  # noqa: E402


def pack_variant(folder: Path, out: Path) -> Path:
    """The components with `folder`'s source and contract files where it has them."""
    for source, contract, variants in shapes.COMPONENTS:
        src, toml = folder / source.name, folder / contract.name
        pipelink.pack(src if src.exists() else source, toml if toml.exists() else contract,
                      out / f"{source.stem}.plc", variants=variants)
    return out


def variant_packages(items: list[str], work: Path) -> dict:
    """`NAME=FOLDER@fact=value,...` -> {NAME: (packages folder, {fact: value})}; each folder packed once."""
    variants, packed = {}, {}
    for item in items:
        name, rest = item.split("=", 1)
        folder, _, facts = rest.partition("@")
        if folder not in packed:
            log(f"packing {folder}")
            packed[folder] = pack_variant(Path(folder), work / f"packages{len(packed)}")
        variants[name] = (packed[folder], dict(pair.split("=", 1) for pair in filter(None, facts.split(","))))
    return variants


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", action="append", required=True, help="NAME=FOLDER of replacement sources")
    ap.add_argument("--shapes", default="qwen_gate_up_4096")
    ap.add_argument("--configs", default="256,4,column_major,16,1",
                    help="tile_n,stages,order,group,cluster; several separated by ';'")
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    ref_mod = example("qwen_mlp/reference.py")
    configs = [qwen_mlp.parse_config(c) for c in args.configs.split(";")]
    work = Path(tempfile.mkdtemp(prefix="pl-qwen-ab-"))
    variants = variant_packages(args.variant, work)

    import torch
    result = {"variants": dict(v.split("=", 1) for v in args.variant), "configs": [list(c) for c in configs],
              "timing": TIMING, "shapes": {}}
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    for shape_name in args.shapes.split(","):
        shape = SHAPES[shape_name]
        case = Case(shape, ref_mod)
        record = {"checks": {}, "times": {}}
        fns = {}
        for name, (pkg, facts) in variants.items():
            for config in configs:
                label = f"{name} {shapes.candidate_dir(config)}"
                folder = work / name / shape_name / shapes.candidate_dir(config)
                spec_path = shapes.write_spec(folder, pkg, shape, config, facts)
                launch, y, _ = linked_launch(spec_path, "pipelink", case, case.cols)
                launch()
                torch.cuda.synchronize()
                record["checks"][label] = check(y, case.ref)
                log(f"{shape_name} {label}: check {'passed' if record['checks'][label]['passed'] else 'FAILED'} "
                    f"(rel L2 {record['checks'][label]['rel_l2']:.3g})")
                if record["checks"][label]["passed"]:
                    fns[label] = launch
        fns["cublas+compiled_swiglu"] = lambda: ref_mod.cublas_then_compiled_swiglu(case.inputs, case.facts)
        fns["cublas"] = lambda: ref_mod.cublas_alone(case.inputs, case.facts)
        for fn in fns.values():
            fn()
        warm_up(next(iter(fns.values())), seconds=1.0)
        with GpuSampler() as gpu:
            times = time_interleaved(fns, args.reps)
        record["times"], record["gpu_during_timing"] = times, gpu.summary()
        log(f"  GPU during timing: {record['gpu_during_timing']}")
        base = times["cublas+compiled_swiglu"]["median_ms"]
        record["speedup_vs_cublas_compiled_swiglu"] = {k_: base / v_["median_ms"] for k_, v_ in times.items()}
        for label, t in times.items():
            log(f"  {label}: {t['median_ms']:.4f} ms, {record['speedup_vs_cublas_compiled_swiglu'][label]:.4f}x")
        result["shapes"][shape_name] = record
        write_result("qwen_ab", result, args.out, stamp=stamp)


if __name__ == "__main__":
    main()

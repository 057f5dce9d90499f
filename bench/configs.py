"""The configurations of the paper's table (issue 16): every link of the case studies that exists,
each as (name, link spec), with open packages (sources inside) so that the monolithic control can
compile the same sources as one unit. bench/sass_compare.py compares their SASS on the CPU;
bench/paper_table.py verifies and times them on the GPU.

Families: the demo's tile shapes; the Qwen3-32B MLP's tile candidates and its GEMMs alone; the
bias+GELU epilogue's table; block_reduce; collide; the MoE layer (two models, three token counts,
two ring depths, both tile orders); the Llama decode block (three batches, three contexts, both
attention components); and the perturbations of a closed component that pipelink
relinks (the changed package, with its source, against the unchanged others). Each builder packs
into its own folder of ``work`` and returns the specs in a fixed order."""

from __future__ import annotations

import shutil
from pathlib import Path

from harness import ROOT, example

import pipelink
from pipelink.errors import PipelinkError
from pipelink.link.pipeline import plan_link

import demo_bw  # the demo's packages and its kernels table (bench/demo_bw.py)


def demo_configs(work: Path) -> list[tuple[str, Path]]:
    packages = demo_bw.pack_all(work)
    out = []
    for name, (source, facts, _, _) in demo_bw.KERNELS.items():
        spec = demo_bw.write_spec(work, name, source, facts)
        text = spec.read_text().replace('package = "packages/', f'package = "{packages}/')
        spec.write_text(text)
        out.append((f"demo/{name}", spec))
    return out


def qwen_configs(work: Path) -> list[tuple[str, Path]]:
    shapes = example("qwen_mlp/shapes.py")
    packages = shapes.pack(work)
    out = []
    for name, shape in shapes.SHAPES.items():
        for config in [c for c in shapes.CANDIDATES[name] if shapes.epilogue_takes(shape[3], c)]:
            folder = work / name / shapes.candidate_dir(config)
            out.append((f"qwen/{name}/{shapes.candidate_dir(config)}", shapes.write_spec(folder, packages, shape, config)))
        if shape[3]:  # the GEMM alone beside the fused gate/up (identity epilogue)
            m, k, n, _ = shape
            config = shapes.CANDIDATES[name][0]
            out.append((f"qwen/{name}/gemm_alone", shapes.write_spec(work / name / "alone", packages, (m, k, n, 0),
                                                                     config)))
    return out


def bias_gelu_configs(work: Path) -> list[tuple[str, Path]]:
    shapes = example("bias_gelu/shapes.py")
    packages = shapes.pack(work)
    return [(f"bias_gelu/{name}/{'_'.join(map(str, config))}",
             shapes.write_spec(work / name / "_".join(map(str, config)), packages, shapes.SHAPES[name], config))
            for name, configs in shapes.CANDIDATES.items() for config in configs]


def _example_spec(example_dir: Path, work: Path) -> Path:
    """An example's link.toml and the Python files it names (its reference) copied beside the packages."""
    for path in [example_dir / "link.toml", *example_dir.glob("*.py")]:
        shutil.copyfile(path, work / path.name)
    return work / "link.toml"


def block_reduce_configs(work: Path) -> list[tuple[str, Path]]:
    packages = work / "packages"
    pipelink.pack(ROOT / "components/raw/bulk_producer.cu", ROOT / "components/raw/bulk_producer.toml",
                  packages / "bulk_producer.plc")
    pipelink.pack(ROOT / "components/cub/cub_sum.cu", ROOT / "components/cub/cub_sum.toml", packages / "cub_sum.plc",
                  variants=[{"block_threads": 128}, {"block_threads": 160}])  # alone (the probe), with the producer
    return [("block_reduce", _example_spec(ROOT / "examples/block_reduce", work))]


def collide_configs(work: Path) -> list[tuple[str, Path]]:
    src = ROOT / "examples" / "collide"
    for name in ("block_sum", "block_max"):
        pipelink.pack(src / f"{name}.cu", src / f"{name}.toml", work / "packages" / f"{name}.plc")
    return [("collide", _example_spec(src, work))]


MOE_TOKENS = (1024, 4096, 16384)
MOE_STAGES = (3, 2)  # the ring depth: 3 fills the smem beside the epilogue's staging


def moe_configs(work: Path) -> list[tuple[str, Path]]:
    """Each model at three token counts and two ring depths in its own tile order
    (shapes.default_band), and the other order at 4096 and 16384 tokens."""
    shapes = example("moe/shapes.py")
    packages = shapes.pack(work, sources=True)
    out = []
    for model in shapes.MODELS:
        band = shapes.default_band(model)
        for tokens in MOE_TOKENS:
            for stages in MOE_STAGES:
                name = f"{model}_{tokens}" + ("" if stages == 3 else f"_stages{stages}")
                out.append((f"moe/{name}", shapes.write_spec(work / name, packages, model, tokens,
                                                            facts={"band": band, "stages": stages})))
            if tokens != MOE_TOKENS[0]:
                other = shapes.BAND if band == 0 else 0
                name = f"{model}_{tokens}_band{other}"
                out.append((f"moe/{name}", shapes.write_spec(work / name, packages, model, tokens,
                                                            facts={"band": other})))
    return out


def llama_configs(work: Path) -> list[tuple[str, Path]]:
    """The decode block at every batch and context of issue 14, with each attention component."""
    shapes = example("llama_decode/shapes.py")
    packages = shapes.pack(work)
    return [(f"llama/b{b}_l{c}_{a}", shapes.write_spec(work / f"b{b}_l{c}_{a}", packages, b, c, a))
            for b in shapes.BATCHES for c in shapes.CONTEXTS for a in sorted(shapes.ATTENTION)]


def perturb_configs(work: Path) -> list[tuple[str, Path]]:
    """The perturbation studies' cases that pipelink relinks (bench/perturb.py; the two it refuses
    are left out): the changed component packed with its source, the others unchanged."""
    import perturb
    out = []
    for link, study in perturb.STUDIES.items():
        base = study.pack(work / link / "base", sources=True)  # the monolithic control needs every source
        for case in study.cases:
            if case.name == "unperturbed":  # the plain link, already in its own family
                continue
            folder = work / link / case.name
            packages = folder / "packages"
            shutil.copytree(base, packages)
            perturb.closed_package(study, case, folder, packages, closed=False)
            spec = study.specs(folder, packages, study.shape)[1]
            try:
                plan_link(spec)
            except PipelinkError:
                continue
            out.append((f"perturb/{link}/{case.name}", spec))
    return out


BUILDERS = {"demo": demo_configs, "qwen": qwen_configs, "bias_gelu": bias_gelu_configs,
            "block_reduce": block_reduce_configs, "collide": collide_configs, "moe": moe_configs,
            "llama": llama_configs, "perturb": perturb_configs}
FAMILIES = tuple(BUILDERS)


def build(families, work: Path, progress=print) -> list[tuple[str, Path]]:
    """Every configuration of ``families``, packed under ``work``: [(name, spec)]."""
    out = []
    for family in families:
        progress(f"{family}: packing")
        out += BUILDERS[family](work / family)
    return out

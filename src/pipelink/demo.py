"""`pipelink demo`: pack the bundled components, link them, report; on a GPU also run and check.

The demo kernel (examples/demo/link.toml) computes Y[m, j] = bf16(sum_c X[m, c * 64 + j]) from
three separately compiled components: a TMA ring producer (one 2-D tensor copy per stage), a
two-warpgroup consumer, and a CUTLASS-style epilogue that pins named barriers 1..7. It is linked
twice: by pipelink, and as the monolithic control (all sources in one unit, same backend path), and
the two SASS listings are compared. On a GPU both are verified and timed, and the demo prints the
share of the streaming-read bandwidth each reached.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

from .backend.inspect import inspect_cubin, normalized_sass
from .errors import PipelinkError
from .fsutil import write_atomic
from .link.pipeline import link
from .packer import pack
from .verify import verify

COMPONENTS = ("ring_producer", "ring_reduce", "tile_store")


def repo_root() -> Path:
    """The checkout holding components/ and examples/ (pipelink is installed editable from it)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "components" / "raw").is_dir() and (parent / "examples" / "demo").is_dir():
            return parent
    raise PipelinkError("cannot find the bundled components/ and examples/ folders",
                        hint="run the demo from a checkout installed with `pip install -e .`")


_ORIGIN_LINE = re.compile(r'^(source|contract) = "(?:[^"\n]*/)?(\w+)\.(?:cu|toml)"$')


def packaged_spec(text: str, packages: str | Path = "packages") -> str:
    """A bundled example spec's text (examples/*/link*.toml, whose instances name sources) with each instance
    naming the package packed from its source instead: ``packages``/<stem>.plc, the stem the contract's where
    the instance names one, else the source's (`pipelink demo`, the tests and the bench scripts pack them
    there). The source instances' contract and variants lines go: a package holds both."""
    lines, source_at = [], None
    for line in text.splitlines(keepends=True):
        m = _ORIGIN_LINE.match(line.rstrip("\r\n"))
        if line.startswith("["):
            source_at = None
        if m and m.group(1) == "source":
            source_at = len(lines)
            lines.append(f'package = "{packages}/{m.group(2)}.plc"\n')
        elif m and source_at is not None:  # the contract names the package: block_sum.cu + block_sum_pinned.toml
            lines[source_at] = f'package = "{packages}/{m.group(2)}.plc"\n'
        elif not (source_at is not None and line.startswith("variants = ")):
            lines.append(line)
    return "".join(lines)


def run_demo(out_dir: str | Path, *, gpu: bool | None = None, console=None) -> dict:
    from rich.console import Console
    from rich.markup import escape  # paths (the user's --output) and progress lines shown as written
    con = console or Console()
    out = Path(out_dir)
    root = repo_root()
    summary: dict = {"out_dir": str(out)}
    (out / "packages").mkdir(parents=True, exist_ok=True)
    con.rule("[bold]1. pack[/] (nvcc -> LTO-IR, one package per component)")
    for name in COMPONENTS:
        t0 = time.perf_counter()
        pkg = pack(root / "components/raw" / f"{name}.cu", root / "components/raw" / f"{name}.toml",
                   out / "packages" / f"{name}.plc")
        con.print(escape(f"  {name:14s} -> {pkg.path}  ({len(pkg.variants[0].ltoir)} B LTO-IR, "
                         f"{time.perf_counter() - t0:.2f} s)"))
    spec = out / "link.toml"
    spec.write_text(packaged_spec((root / "examples/demo/link.toml").read_text()))
    shutil.copyfile(root / "examples/demo/reference.py", out / "reference.py")

    con.rule("[bold]2. link[/] (resolve facts, check, allocate, glue, nvJitLink -lto)")
    kernels = {}
    for mode in ("pipelink", "monolithic"):
        t0 = time.perf_counter()
        kernels[mode] = link(spec, mode=mode, progress=lambda m: con.print(f"  [dim]{escape(m)}[/]"))
        files = kernels[mode].save(out / mode)
        summary[f"{mode}_link_s"] = round(time.perf_counter() - t0, 3)
        summary[f"{mode}_files"] = {k: str(v) for k, v in files.items()}
        con.print(escape(f"  {mode}: {len(kernels[mode].cubin)} B cubin in {summary[f'{mode}_link_s']} s "
                         f"-> {out / mode}"))

    con.rule("[bold]3. report[/]")
    kernels["pipelink"].report(console=con)
    a = inspect_cubin(kernels["pipelink"].cubin, kernels["pipelink"].plan.entry)[0]
    b = inspect_cubin(kernels["monolithic"].cubin, kernels["monolithic"].plan.entry)[0]
    same = normalized_sass(a.instructions) == normalized_sass(b.instructions)
    summary["sass_identical_to_monolithic"] = same
    con.print(f"linked vs monolithic control: SASS {'identical' if same else 'DIFFERENT'} modulo symbol addresses "
              f"({len(a.instructions)} vs {len(b.instructions)} instructions, opcode histograms "
              f"{'equal' if a.opcode_histogram == b.opcode_histogram else 'differ'})")
    con.print(escape(f"outputs: {', '.join(str(p) for p in sorted((out / 'pipelink').iterdir()))}"))

    if gpu is not False:
        from .runtime import gpu_available
        ok, device = gpu_available()
        if ok:
            con.rule(f"[bold]4. verify + bench on {escape(str(device))}[/] (GPU rungs in a watched child process)")
            summary["gpu"] = {}
            for mode in ("pipelink", "monolithic"):
                result = verify(spec, mode=mode, out_dir=out / f"verify-{mode}", console=con)
                bench, roof = result.rung("bench"), result.rung("roofline")
                summary["gpu"][mode] = {"status": "pass" if result.passed else "fail",
                                        "median_ms": bench.figures.get("median_ms") if bench else None,
                                        "pct_of_read_bw": roof.figures.get("pct_of_read_bandwidth") if roof else None,
                                        "verify_json": str(out / f"verify-{mode}" / "verify.json")}
                if roof and roof.status == "ok":
                    con.print(_bandwidth_line(mode, bench.figures, roof.figures))
        else:
            con.print(f"[dim]no GPU run: {escape(str(device))}[/]")
            summary["gpu"] = {"skipped": device}
    write_atomic(out / "demo.json", json.dumps(summary, indent=2))
    return summary


def _bandwidth_line(mode: str, bench: dict, roof: dict) -> str:
    """How close the kernel came to the memory: its inputs' bytes over its median time, against the
    streaming-read bandwidth measured on this GPU (the roofline rung's peaks), and torch beside it."""
    peak = roof["peaks"]["read_bytes_per_s"]
    line = (f"[bold]{mode}: {bench['median_ms']:.4f} ms = {roof['pct_of_read_bandwidth']:.1f} % of the read "
            f"bandwidth[/] ({roof['read_bytes'] / 1e6:.0f} MB read; streaming read on this GPU {peak / 1e12:.2f} TB/s, "
            f"floor {roof['read_bytes'] / peak * 1e3:.4f} ms)")
    for name, ratio in bench.get("speedup_vs", {}).items():
        line += f"; speed-up over {name} {ratio:.2f}x"
    return line

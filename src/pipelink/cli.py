"""Command line: pipelink pack | link | inspect | demo | schema."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from .errors import PipelinkError

console = Console()
err_console = Console(stderr=True)


def _variant(text: str) -> dict[str, int]:
    out = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"'{item}' is not NAME=VALUE")
        try:
            out[key.strip()] = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{value}' in '{item}' is not an integer") from None
    return out


def cmd_pack(args) -> int:
    from .package import pack
    t0 = time.perf_counter()
    pkg = pack(args.source, args.contract, args.output, variants=args.variant or None, closed=args.closed,
               include_dirs=args.include, nvcc_flags=args.nvcc_flag, check=not args.no_check,
               progress=lambda m: console.print(f"[dim]{m}[/]"))
    sizes = ", ".join(f"{v.facts or 'default'}: {len(v.ltoir)} B" for v in pkg.variants)
    console.print(f"packed {pkg.name} {pkg.contract.component.version} -> {pkg.path} ({sizes}; nvcc "
                  f"{pkg.toolchain['nvcc']}; {time.perf_counter() - t0:.2f} s{'; closed' if pkg.closed else ''})")
    conf = pkg.conformance
    if conf and conf["checked"]:
        console.print(f"conformance: {len(conf['findings'])} finding(s)")
        for f in conf["findings"]:
            console.print(f"  [yellow]{f['severity']}[/]: {f['location']}: {f['message']}")
    elif conf:
        console.print(f"[yellow]conformance not checked[/]: {conf['reason']}")
    return 0


def cmd_link(args) -> int:
    from .backend.cache import Cache
    from .linked import link
    t0 = time.perf_counter()
    cache = Cache(enabled=not args.no_cache)
    kernel = link(args.spec, mode=args.mode, sanitize=args.sanitize, cache=cache,
                  progress=lambda m: console.print(f"[dim]{m}[/]"))
    elapsed = time.perf_counter() - t0
    out = Path(args.output or f"{kernel.plan.spec.link.name}-{args.mode}")
    files = kernel.save(out)
    if not args.quiet:
        kernel.report(console=console)
    console.print(f"linked in {elapsed:.2f} s; wrote " + ", ".join(str(p) for p in files.values()))
    failed = [c for c in kernel.plan.checks if not c.ok]
    return 1 if failed else 0


def cmd_inspect(args) -> int:
    path = Path(args.file)
    if not path.exists():
        raise PipelinkError("file not found", file=str(path))
    if path.suffix == ".plc":
        from .package import load_package
        pkg = load_package(path)
        console.print_json(json.dumps(pkg.manifest()))
        console.print(pkg.contract_text)
    elif path.suffix == ".cubin":
        from .backend.inspect import dump_sass
        console.print(dump_sass(path.read_bytes()))
    elif path.suffix == ".json":
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise PipelinkError(f"not JSON: {exc}", file=str(path)) from None
        console.print_json(json.dumps({k: v for k, v in data.items() if k != "glue"}))
        if "glue" in data:
            console.rule("generated glue")
            console.print(data["glue"], markup=False, highlight=False)
    else:
        raise PipelinkError(f"cannot inspect '{path.suffix}' files", file=str(path),
                            hint="give a package (.plc), a plan (.plan.json) or a cubin (.cubin)")
    return 0


def cmd_demo(args) -> int:
    from .demo import run_demo
    summary = run_demo(args.output, gpu=False if args.no_gpu else None, console=console)
    gpu = summary.get("gpu", {})
    return 1 if any(isinstance(r, dict) and r.get("status") == "fail" for r in gpu.values()) else 0


def cmd_verify(args) -> int:
    from .verify import verify
    tools = tuple(t for t in (args.compute_sanitizer or "").split(",") if t)
    result = verify(args.spec, mode=args.mode, seeds=args.seeds, bench=not args.no_bench or args.command == "bench",
                    trace=args.trace, profile=args.profile, sanitize=args.sanitize, sanitizers=tools,
                    timeout=args.timeout, reps=args.reps, out_dir=args.output, console=console)
    return 0 if result.passed else 1


def cmd_schema(args) -> int:
    from . import schema
    from .contract import Contract
    from .spec import LinkSpec
    cls, title = (Contract, "pipelink component contract") if args.kind == "contract" else (LinkSpec, "pipelink link spec")
    if args.markdown:
        print(schema.markdown_reference(cls, title[0].upper() + title[1:]))
    else:
        print(json.dumps(schema.json_schema(cls, title), indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pipelink", description="Contract-guided linker for GPU kernel components")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("pack", help="compile a component to LTO-IR and package it with its contract")
    s.add_argument("source", help="component CUDA source (.cu)")
    s.add_argument("--contract", required=True, help="contract TOML")
    s.add_argument("-o", "--output", required=True, help="package to write (.plc)")
    s.add_argument("--variant", action="append", type=_variant, metavar="NAME=V[,NAME=V]",
                   help="compile-time facts of one variant; repeat for several variants")
    s.add_argument("--closed", action="store_true", help="leave the source out (LTO-IR + contract only)")
    s.add_argument("-I", "--include", action="append", default=[], help="extra include directory")
    s.add_argument("--no-check", action="store_true",
                   help="skip the pack-time conformance probe (code against contract)")
    s.add_argument("--nvcc-flag", action="append", default=[], metavar="FLAG",
                   help="extra nvcc flag, e.g. --nvcc-flag=--expt-relaxed-constexpr (recorded in the package)")
    s.set_defaults(func=cmd_pack)

    s = sub.add_parser("link", help="link the packages a spec names into one cubin")
    s.add_argument("spec", help="link spec TOML")
    s.add_argument("-o", "--output", help="output directory (default: <name>-<mode>)")
    s.add_argument("--mode", choices=("pipelink", "monolithic", "symbol"), default="pipelink",
                   help="pipelink (contracts checked, resources allocated), monolithic (control: one unit), "
                        "symbol (control: packaged positions, nothing checked)")
    s.add_argument("--sanitize", action="store_true",
                   help="canaries after every smem buffer, checked after every component call")
    s.add_argument("--no-cache", action="store_true", help="rebuild everything")
    s.add_argument("-q", "--quiet", action="store_true", help="no report table")
    s.set_defaults(func=cmd_link)

    s = sub.add_parser("inspect", help="show a package, a plan JSON or a cubin's SASS")
    s.add_argument("file")
    s.set_defaults(func=cmd_inspect)

    s = sub.add_parser("demo", help="pack, link and report the bundled components (and run them on a GPU)")
    s.add_argument("-o", "--output", default="pipelink-demo", help="output directory (default: pipelink-demo)")
    s.add_argument("--no-gpu", action="store_true", help="do not run on a GPU even if one is present")
    s.set_defaults(func=cmd_demo)

    for name, text in (("verify", "check a linked kernel: pre-checks, link, dumps, run, correctness, bench, "
                                  "roofline (GPU rungs in a watched child process)"),
                       ("bench", "like verify, with the benchmark always on and more repeats")):
        s = sub.add_parser(name, help=text)
        s.add_argument("spec", help="link spec TOML (with a [verify] section)")
        s.add_argument("-o", "--output", help="run folder (default verify-<name>-<mode>)")
        s.add_argument("--mode", choices=("pipelink", "monolithic", "symbol"), default="pipelink")
        s.add_argument("--seeds", type=int, help="fresh random input sets (default: the spec's, 3)")
        s.add_argument("--reps", type=int, default=20 if name == "verify" else 100, help="timed launches")
        s.add_argument("--timeout", type=float, help="seconds before a GPU run counts as hung (default: spec, 60)")
        s.add_argument("--trace", action="store_true", help="also build a traced kernel: time per component")
        s.add_argument("--profile", action="store_true", help="also run Nsight Compute on one launch")
        s.add_argument("--no-bench", action="store_true", help="skip bench and roofline")
        s.add_argument("--sanitize", action="store_true",
                       help="link in sanitize mode: smem canaries checked after every component call")
        s.add_argument("--compute-sanitizer", metavar="TOOLS",
                       help="comma-separated compute-sanitizer tools run as rungs: memcheck,racecheck,synccheck")
        s.set_defaults(func=cmd_verify)

    s = sub.add_parser("schema", help="print the JSON Schema (or Markdown reference) of contracts or specs")
    s.add_argument("kind", choices=("contract", "spec"))
    s.add_argument("--markdown", action="store_true")
    s.set_defaults(func=cmd_schema)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except PipelinkError as exc:
        err_console.print(f"[bold red]error[/] ({type(exc).__name__}): {escape(exc.format())}", highlight=False)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""Command line: pipelink pack | link | inspect | demo | verify | bench | schema.

Exit statuses: 0 done (verify: the kernel ran and every rung passed), 1 a verify rung failed,
2 an error in what the user gave (a typed PipelinkError, printed; nothing written, nothing run),
3 verify linked and checked the kernel but could not run it (no GPU).

With --json (pack, link, inspect, verify, bench) stdout holds one JSON document and nothing else:
the command's result, or its error (cli_json.py; schema in docs/cli.schema.json, `pipelink schema
cli`); progress and reports go to stderr. The exit statuses stay the same.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from . import cli_json
from ._version import __version__
from .errors import OutputError, PipelinkError, PostLinkError, UsageError
from .fsutil import read_bounded, read_text_bounded
from .spec import FACT_OPTION, MAX_PATH, MAX_PATH_PART, fact_options, load_spec

console = Console(emoji=False)  # contract text like ":x:" is shown as written, never as an emoji
err_console = Console(stderr=True, emoji=False)


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


def _progress(message: str) -> None:
    console.print(f"[dim]{escape(message)}[/]")


def _err_progress(message: str) -> None:
    err_console.print(f"[dim]{escape(message)}[/]")


def _progress_for(args):
    """Progress lines: on stdout, or on stderr under --json (stdout holds the document only)."""
    return _err_progress if args.json else _progress


@contextlib.contextmanager
def _steps_bar(args, first: str = "packing"):
    """pack's and link's progress: on a terminal, the step running now with the elapsed time, a bar of the
    variants compiled while nvcc runs (a CuTe variant takes 15-60 s; a link packs its source instances), each
    step's line printed above it; elsewhere (a log, a pipe, --json) the plain lines."""
    if args.json or not console.is_terminal:
        yield _progress_for(args)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task(first, total=None)

        def hear(message: str) -> None:
            started = re.match(r"nvcc (\S+) -> LTO-IR: (\d+) variant", message)
            if started:
                bar.update(task, description=f"nvcc {started.group(1)} -> LTO-IR", total=int(started.group(2)))
            elif re.search(r"variant \d+/\d+ done", message):
                bar.advance(task)
            else:
                bar.update(task, description=message.split(":")[0])  # the variants' count stays in view
                bar.console.print(f"[dim]{escape(message)}[/]")
        yield hear


@contextlib.contextmanager
def _verify_bar(args, what: str, out=None):
    """verify's and bench's progress: on a terminal, the rung running now with the elapsed time, and each rung's
    outcome printed above it as it ends (a bench or a sanitizer runs for minutes); elsewhere nothing (the table
    at the end says it all)."""
    shown = out or console
    if args.json or not shown.is_terminal:
        yield
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from .verify.watch import rung_listener
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=shown,
                  transient=True) as bar:
        task = bar.add_task(f"{what}: starting the child", total=None)

        def hear(record: dict) -> None:
            if record["event"] == "start":
                bar.update(task, description=f"{what}: {record['rung']}")
            else:
                colour = {"ok": "green", "skipped": "yellow"}.get(record.get("status"), "red")
                bar.console.print(f"  {escape(record['rung'])} [{colour}]{escape(str(record.get('status')))}[/] "
                                  f"({float(record.get('seconds') or 0):.1f} s)")
        with rung_listener(hear):
            yield


def cmd_pack(args) -> int:
    from .packer import pack
    check_output(Path(args.output), folder=False)
    contract = args.contract or Path(args.source).with_suffix(".toml")  # the contract beside its source
    if not args.contract and not contract.is_file():
        raise UsageError(f"no --contract given and no {contract.name} beside {args.source}", field="--contract",
                         file=str(args.source), hint=f"pass --contract FILE.toml, or put the contract at {contract}")
    t0 = time.perf_counter()
    with _steps_bar(args) as progress:
        pkg = pack(args.source, contract, args.output, variants=args.variant or None, closed=args.closed,
                   include_dirs=args.include, nvcc_flags=args.nvcc_flag, check=not args.no_check, progress=progress)
    if args.json:
        args.json_result = cli_json.pack_result(pkg, time.perf_counter() - t0)
        return 0
    sizes = ", ".join(f"{v.facts or 'default'}: {len(v.ltoir)} B" for v in pkg.variants)
    console.print(escape(f"packed {pkg.name} {pkg.contract.component.version} -> {pkg.path} ({sizes}; nvcc "
                         f"{pkg.toolchain['nvcc']}; {time.perf_counter() - t0:.2f} s"
                         f"{'; closed' if pkg.closed else ''})"))
    conf = pkg.conformance
    if conf and conf["checked"]:
        console.print(f"conformance: {len(conf['findings'])} finding(s)")
        for f in conf["findings"]:
            where = escape(f"{f['location']}: {f['message']}")
            console.print(f"  [yellow]{escape(str(f['severity']))}[/]: {where}")
    elif conf:
        console.print(f"[yellow]conformance not checked[/]: {escape(str(conf['reason']))}")
    return 0


def cmd_link(args) -> int:
    from .backend.cache import Cache
    from .link.pipeline import link
    t0 = time.perf_counter()
    spec = load_spec(args.spec, fact_options(args.fact))
    out = Path(args.output or f"{spec.link.name}-{args.mode}")
    check_output(out, folder=True)
    cache = Cache(enabled=not args.no_cache)
    with _steps_bar(args, f"linking {spec.link.name}") as progress:
        kernel = link(spec, mode=args.mode, sanitize=args.sanitize, cache=cache, progress=progress)
    elapsed = time.perf_counter() - t0
    if not args.quiet and not args.json:
        kernel.report(console=console)
    failed = [c for c in kernel.plan.all_checks() if not c.ok]
    if failed:  # the cubin is not what the plan says: an error like any other, nothing written
        raise PostLinkError("the linked kernel fails its check: " + "; ".join(f"{c.name}: {c.detail}" for c in failed),
                            file=str(spec.path), field=failed[0].name,
                            hint="nothing was written. Make each component entry a plain extern \"C\" __device__ "
                                 "function LTO can inline (no __noinline__ helpers), pass bindings as literals, "
                                 "keep registers within budget; `pipelink verify` writes this kernel and its SASS "
                                 "for a look")
    files = kernel.save(out)
    if args.json:
        args.json_result = cli_json.link_result(kernel, files, elapsed)
        return 0
    console.print(escape(f"linked in {elapsed:.2f} s; wrote " + ", ".join(str(p) for p in files.values())),
                  soft_wrap=True)  # paths stay whole
    return 0


def cmd_tune(args) -> int:
    from .tune import tune
    if args.report:
        check_output(Path(args.report), folder=False)
    result = tune(args.spec, args.shape or [], args.fact or [], args.alt_spec or [], args.set or [], jobs=args.jobs,
                  link_only=args.link_only, reps=args.reps, timeout=args.timeout, progress=not args.quiet,
                  ray=args.ray)
    if result.rebuilt:
        err_console.print(escape(f"note: {result.rebuilt}"), soft_wrap=True)
    for b in result.buckets:
        shape = ", ".join(f"{k}={v}" for k, v in b.shape.items())
        linked = ", ".join(f"{k}={v}" for k, v in b.bucket.items())
        console.print(escape(f"{shape} (linked for {linked}):"), soft_wrap=True)
        for o in sorted(b.outcomes, key=lambda o: (o.median_ms is None, o.median_ms or 0)):
            mark = "*" if o is b.winner else " "
            figure = f"{o.median_ms:.4f} ms" if o.median_ms is not None else o.status
            console.print(escape(f" {mark} {o.config.spec.name} {o.config.label}: {figure}"
                                 + (f": {o.reason.splitlines()[0][:160]}" if o.reason else "")), soft_wrap=True)
    if args.report:
        from .fsutil import write_atomic
        write_atomic(args.report, json.dumps(result.to_json(), indent=2))
    where = "link only (no GPU here)" if result.link_only and not args.link_only else \
        "link only" if result.link_only else f"winners in {result.cache}"
    console.print(escape(f"tuned {len(result.buckets)} bucket(s) in {result.seconds:.1f} s: {where}"),
                  soft_wrap=True)
    return 0


def cmd_lock(args) -> int:
    from .lock import lock
    pins, wrote = lock(args.spec)
    for p in pins:
        state = "pinned" if p.before is None else "unchanged" if p.before == p.sha256 else f"was {p.before}"
        console.print(escape(f"{p.instance}: {p.package} sha256 {p.sha256} ({state})"), soft_wrap=True)
    console.print(escape(f"wrote {args.spec}" if wrote else f"{args.spec} already pins these packages; not rewritten"),
                  soft_wrap=True)
    return 0


def cmd_mcp(args) -> int:
    try:
        from .mcp_server import serve
        import mcp.server.mcpserver  # noqa: F401 -- the extra's SDK, checked before anything is served
    except ImportError:
        raise UsageError("pipelink mcp needs the MCP SDK, which is not installed", field="mcp",
                         hint="pip install 'pipelink[mcp]'") from None
    serve()
    return 0


def cmd_new(args) -> int:
    from .new import new_component, new_link
    files = (new_component(args.name, args.output) if args.kind == "component"
             else new_link(args.name, args.components, args.output))
    for f in files:
        console.print(escape(f"wrote {f}"), soft_wrap=True)
    if args.kind == "component":
        folder = files[0].parent
        console.print(escape(f"next: cd {folder} && pipelink link link.toml   (then, on a GPU: pipelink verify "
                             "link.toml)"), soft_wrap=True)
    else:
        console.print(escape(f"next: set the facts {files[0]} lists, then pipelink link {files[0]}"), soft_wrap=True)
    return 0


# Largest user file `inspect` reads: a package or cubin of a big fused kernel is a few MB.
MAX_INSPECT_BYTES = 256 << 20


def cmd_inspect(args) -> int:
    data = inspect_data(Path(args.file), grouped=not args.raw)
    if args.json:
        args.json_result = data
    elif data["kind"] == "package":
        _show_json(data["manifest"])
        _show_text(data["contract"])
    elif data["kind"] == "cubin":
        _show_cubin(data)
    else:
        _show_json(data["plan"])
        if data["glue"] is not None:
            if console.is_terminal:
                console.rule("generated glue")
            else:
                sys.stdout.write("// ---- generated glue ----\n")
            _show_text(data["glue"])
    return 0


def _show_cubin(data: dict) -> None:
    """The SASS by instance where the link's plan lies beside the cubin (a count per instance, then each one's
    instructions with their index in the kernel), else the disassembly as cuobjdump prints it."""
    grouped = data.get("by_instance") or {}
    if not grouped.get("instances"):
        if grouped.get("refused"):
            console.print(escape(f"not grouped by instance: {grouped['refused']} ({grouped['plan']})"))
        _show_text(data["sass"])
        return
    lines = [f"// {data['file']}: {grouped['instructions']} SASS instructions by instance ({grouped['plan']})"]
    for g in grouped["instances"]:
        share = 100 * g["count"] / max(1, grouped["instructions"])
        lines.append(f"//   {g['instance']:<16} {g['component'] or '':<20} {g['count']:6d}  ({share:.0f} %)")
    for g in grouped["instances"]:
        lines.append(f"\n// ---- {g['instance']} ({g['component']}): {g['count']} instructions ----")
        lines += [f"/*{r['index']:05d}*/ {r['sass']}" for r in g["instructions"]]
    _show_text("\n".join(lines) + "\n")


def inspect_data(path: Path, grouped: bool = True) -> dict:
    """What `inspect` shows of a package (manifest, contract), a plan JSON (plan less its glue, the
    glue) or a cubin (SASS), as the fields of one object: {"file", "kind", ...}."""
    if path.suffix == ".plc":
        from .package import load_package
        pkg = load_package(path)
        return {"file": str(path), "kind": "package", "manifest": pkg.manifest(), "contract": pkg.contract_text}
    if path.suffix == ".cubin":
        from .backend.inspect import dump_sass_file
        if not read_bounded(path, MAX_INSPECT_BYTES, "cubin").startswith(b"\x7fELF"):
            raise PipelinkError("not a cubin: it does not start with an ELF header", file=str(path),
                               hint="give a .cubin written by `pipelink link`")
        out = {"file": str(path), "kind": "cubin", "sass": dump_sass_file(path)}
        plan = path.with_name(path.name[:-len(".cubin")] + ".plan.json")
        if grouped and plan.is_file():  # written beside it by `pipelink link`: the SASS by the instance it was inlined from
            out["by_instance"] = sass_by_instance(path, plan)
        return out
    if path.suffix == ".json":
        data = _plan_json(path)
        return {"file": str(path), "kind": "plan", "plan": {k: v for k, v in data.items() if k != "glue"},
                "glue": str(data["glue"]) if "glue" in data else None}
    raise PipelinkError(f"cannot inspect '{path.suffix}' files", file=str(path),
                        hint="give a package (.plc), a plan (.plan.json) or a cubin (.cubin)")


def sass_by_instance(cubin_path: Path, plan_path: Path) -> dict:
    """The cubin's SASS grouped by the component instance each instruction was inlined from, read from the line
    table (nvdisasm -gi: every instruction's chain of inlined locations ends at a glue line) and the plan JSON's
    glue_sites (glue line -> instance); "glue" is the link's own code. The plan must be this cubin's (its
    backend.cubin_sha256), else nothing is attributed and "refused" says why."""
    import hashlib

    from .backend.inspect import inspect_cubin
    cubin = read_bounded(cubin_path, MAX_INSPECT_BYTES, "cubin")
    plan = _plan_json(plan_path)
    backend = plan.get("backend") if isinstance(plan.get("backend"), dict) else {}
    if backend.get("cubin_sha256") != hashlib.sha256(cubin).hexdigest():
        return {"plan": str(plan_path), "refused": "the plan beside it is another link's (its cubin_sha256 differs)"}
    sites = plan.get("glue_sites") if isinstance(plan.get("glue_sites"), dict) else {}
    glue_path, entry = backend.get("glue_path"), plan.get("entry")
    if not isinstance(entry, str) or not isinstance(glue_path, str):
        return {"plan": str(plan_path), "refused": "the plan names no entry or glue path"}
    info, _ = inspect_cubin(cubin, entry)
    components = {i.get("name"): i.get("component") for i in plan.get("instances", []) if isinstance(i, dict)}
    groups: dict[str, list[dict]] = {}
    for n, (insn, chain) in enumerate(zip(info.instructions, info.locations)):
        owner = "glue"
        for file, line in chain:
            if file == glue_path and str(line) in sites:
                owner = str(sites[str(line)])
        groups.setdefault(owner, []).append({"index": n, "sass": insn})
    return {"plan": str(plan_path), "instructions": len(info.instructions),
            "instances": [{"instance": name, "component": components.get(name, "glue" if name == "glue" else None),
                           "count": len(rows), "instructions": rows} for name, rows in groups.items()]}


def _show_text(text: str) -> None:
    """Text from a file (a contract, SASS, glue) exactly as it is: never read as rich markup (a TOML
    table header such as [facts.requires] would vanish), never wrapped. Piped or redirected, the
    bytes go out untouched, so `pipelink inspect X.cubin | grep` sees whole lines."""
    if not console.is_terminal:
        sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")
        sys.stdout.flush()
        return
    console.print(escape(text), highlight=False, soft_wrap=True, emoji=False)


def _show_json(data) -> None:
    """A JSON document: highlighted on a terminal, plain indented JSON (parseable) when piped."""
    text = json.dumps(data, indent=2)
    if console.is_terminal:
        console.print_json(text)
    else:
        _show_text(text)


def _plan_json(path: Path) -> dict:
    """A plan JSON as written by `pipelink link`: a JSON object of this pipelink's plan schema version."""
    text = read_text_bounded(path, MAX_INSPECT_BYTES, "plan JSON")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PipelinkError(f"not JSON: {exc}", file=str(path)) from None
    except RecursionError:
        raise PipelinkError("JSON nested too deeply to be a plan", file=str(path)) from None
    if not isinstance(data, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(data), "a number")
        raise PipelinkError(f"a plan JSON is an object, this is {kind}", file=str(path),
                            hint="give a .plan.json written by `pipelink link`")
    from .link.plan import check_schema_version
    check_schema_version(data, str(path))
    return data


def cmd_demo(args) -> int:
    from .demo import run_demo
    check_output(Path(args.output), folder=True)
    summary = run_demo(args.output, gpu=False if args.no_gpu else None, console=console)
    gpu = summary.get("gpu", {})
    return 1 if any(isinstance(r, dict) and r.get("status") == "fail" for r in gpu.values()) else 0


EXIT_NOT_RUN = 3  # no pass, and no failure either: linked and checked but not run, or run with nothing to check it


def cmd_verify(args) -> int:
    from .verify import rung, verify
    if args.spec.endswith(".py"):  # a kernel file: no link, so no link options
        for flag, given in (("--fact", args.fact), ("--trace", args.trace), ("--sanitize", args.sanitize),
                            ("--mode", args.mode != "pipelink")):
            if given:
                raise UsageError(f"{flag} applies to a link spec, not to a kernel file ({args.spec})", field=flag,
                                 hint="drop it, or verify a link spec (.toml)")
        from .verify.pykernel import load_kernel_file
        spec = args.spec
        name = load_kernel_file(spec).name  # a bad file is an input error (exit 2), as a bad spec is
        out = Path(args.output or f"verify-{name}-python")
    else:
        spec = load_spec(args.spec, fact_options(args.fact))
        out = Path(args.output or f"verify-{spec.link.name}-{args.mode}")
    check_output(out, folder=True)
    tools = tuple(t for t in (args.compute_sanitizer or "").split(",") if t)
    rungs = []
    for text in args.rung or ():
        name, sep, check = text.partition("=")
        if not sep:
            raise UsageError(f"--rung {text!r} is not NAME=FILE.py:FUNCTION", field="--rung",
                             hint="e.g. --rung symmetric=checks.py:output_is_symmetric")
        rungs.append(rung(name.strip(), check.strip()))
    with _verify_bar(args, f"{args.command} {Path(args.spec).name}"):
        result = verify(spec, mode=args.mode, seeds=args.seeds, bench=not args.no_bench or args.command == "bench",
                        trace=args.trace, profile=args.profile, sanitize=args.sanitize, sanitizers=tools,
                        rungs=rungs, timeout=args.timeout, reps=args.reps, out_dir=out,
                        console=err_console if args.json else console)
    if args.json:
        args.json_result = result.to_json()
    return verify_exit_status(result)


def verify_exit_status(result) -> int:
    """0 pass, 1 a rung failed, 3 neither: not run, or run with no reference to check it."""
    return {"pass": 0, "fail": 1, "not run": EXIT_NOT_RUN, "unchecked": EXIT_NOT_RUN}[result.status]


def cmd_schema(args) -> int:
    from . import schema
    from .contract import Contract
    from .spec import LinkSpec
    if args.kind == "cli":
        if args.markdown:
            raise UsageError("the --json output schema has no Markdown reference", field="--markdown",
                             hint="pipelink schema cli (JSON Schema), or docs/cli.schema.json")
        print(json.dumps(cli_json.cli_schema(), indent=2))
        return 0
    cls, title = (Contract, "pipelink component contract") if args.kind == "contract" else (LinkSpec, "pipelink link spec")
    if args.markdown:
        print(schema.markdown_reference(cls, title[0].upper() + title[1:]))
    else:
        print(json.dumps(schema.json_schema(cls, title), indent=2))
    return 0


def check_output(path: Path, *, folder: bool) -> None:
    """Refuse, before any work, an output the command could not write, so that nothing is written.
    A folder output (link, verify, demo) may exist: pipelink replaces its own files in it. A file
    output (pack) may replace an existing package (.plc), never any other file."""
    def refuse(message: str, hint: str) -> OutputError:
        return OutputError(message, file=str(path), field="-o/--output", hint=hint)

    absolute = Path(os.path.abspath(path))
    for part in absolute.parts:  # checked first: stat() itself fails on an over-long name
        size = len(os.fsencode(part))
        if size > MAX_PATH_PART:
            raise refuse(f"a name in the path is {size} bytes long, over the {MAX_PATH_PART}-byte limit by "
                         f"{size - MAX_PATH_PART}", "choose a shorter name")
    size = len(os.fsencode(str(absolute)))
    if size > MAX_PATH:
        raise refuse(f"the path is {size} bytes long, over the {MAX_PATH}-byte limit by {size - MAX_PATH}",
                     "choose a shorter path")
    if folder and absolute.exists() and not absolute.is_dir():
        raise refuse("this is an existing file, and the output is a folder", "give a folder (made if missing)")
    if not folder and absolute.is_dir():
        raise refuse("this is a folder, and the output is a package file", "give a file name, e.g. name.plc")
    if not folder and absolute.exists() and (absolute.suffix != ".plc" or not absolute.is_file()):
        raise refuse("this file exists and is not a package (.plc): pipelink replaces only its own packages",
                     "choose another name, or move the file away")
    base = absolute if folder else absolute.parent
    existing = next(p for p in (base, *base.parents) if p.exists())
    if not existing.is_dir():
        raise refuse(f"{existing} is a file, so no folder can be made in it", "give a path under a folder")
    try:  # os.access cannot tell: root passes it where sysfs or a read-only mount still refuse
        fd, probe = tempfile.mkstemp(dir=existing, prefix=".pipelink-probe-")
    except OSError as exc:
        raise refuse(f"cannot write in {existing}: {exc.strerror}", "choose a folder you can write to") from None
    os.close(fd)
    os.unlink(probe)


def _fact_argument(parser: argparse.ArgumentParser) -> None:
    # Parsed by the command (spec.fact_options), not by argparse: a malformed one is a typed error.
    parser.add_argument(FACT_OPTION, action="append", metavar="NAME=VALUE",
                        help="set or replace a [facts] entry of the spec, e.g. --fact M=4096 (repeatable; an "
                             "[[instance]]'s own facts still win for it)")


def _json_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print one JSON document on stdout, the result or the error (schema: pipelink schema "
                             "cli); progress and reports go to stderr")


class _Parser(argparse.ArgumentParser):
    """argparse, with its complaint about the command line raised as a UsageError: main() prints
    it as argparse would (usage and message, exit status 2), or under --json as an error document."""

    def error(self, message: str):
        exc = UsageError(message, hint=f"{self.prog} --help")
        exc.usage = self.format_usage()
        raise exc


def _inspect_parser(sub) -> None:
    s = sub.add_parser("inspect", help="show a package, a plan JSON or a cubin's SASS (by component instance where "
                                       "the link's plan JSON lies beside it)")
    s.add_argument("file")
    s.add_argument("--raw", action="store_true", help="a cubin's SASS as cuobjdump prints it, not grouped")
    _json_argument(s)
    s.set_defaults(func=cmd_inspect)


def _new_parser(sub) -> None:
    """`pipelink new component NAME` and `pipelink new link NAME COMPONENT...`."""
    s = sub.add_parser("new", help="write a working starting point: a component (and a link of it), or a link spec")
    kinds = s.add_subparsers(dest="kind", required=True)
    k = kinds.add_parser("component", help="a one-role elementwise component, its contract, a link spec naming it by "
                                           "source, its reference and a README, in ./NAME (or -o)")
    k.add_argument("name", metavar="NAME", help="the component's name (a C identifier)")
    k.add_argument("-o", "--output", help="folder to write into (default: ./NAME)")
    k.set_defaults(func=cmd_new)
    k = kinds.add_parser("link", help="a link spec naming each component given (sources or packages), the facts "
                                      "to set listed, and a reference stub beside it")
    k.add_argument("name", metavar="NAME", help="the linked kernel's name (a C identifier)")
    k.add_argument("components", nargs="+", metavar="COMPONENT", help="a .cu source (its contract beside it) or a .plc")
    k.add_argument("-o", "--output", help="spec to write (default: ./link.toml)")
    k.set_defaults(func=cmd_new)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="pipelink", description="Contract-guided linker for GPU kernel components")
    p.add_argument("--version", action="version", version=f"pipelink {__version__} (Python {sys.version.split()[0]})")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("pack", help="compile a component to LTO-IR and package it with its contract")
    s.add_argument("source", help="component CUDA source (.cu)")
    s.add_argument("--contract", help="contract TOML (default: the source's name with .toml, beside it)")
    s.add_argument("-o", "--output", required=True, help="package to write (.plc)")
    s.add_argument("--variant", action="append", type=_variant, metavar="NAME=V[,NAME=V]",
                   help="compile-time facts of one variant; repeat for several variants")
    s.add_argument("--closed", action="store_true", help="leave the source out (LTO-IR + contract only)")
    s.add_argument("-I", "--include", action="append", default=[], help="extra include directory")
    s.add_argument("--no-check", action="store_true",
                   help="skip the pack-time conformance probe (code against contract)")
    s.add_argument("--nvcc-flag", action="append", default=[], metavar="FLAG",
                   help="extra nvcc flag, e.g. --nvcc-flag=--expt-relaxed-constexpr (recorded in the package)")
    _json_argument(s)
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
    _fact_argument(s)
    s.add_argument("-q", "--quiet", action="store_true", help="no report table")
    _json_argument(s)
    s.set_defaults(func=cmd_link)

    s = sub.add_parser("lock", help="pin each [[instance]] of a spec to its package's SHA-256 (sha256 = \"...\"), "
                                    "so that a changed package is refused at link")
    s.add_argument("spec", help="link spec TOML, edited in place (only its sha256 lines)")
    s.set_defaults(func=cmd_lock)

    _new_parser(sub)

    _inspect_parser(sub)
    s = sub.add_parser("mcp", help="serve link, verify, bench and inspect to coding agents: a Model Context Protocol "
                                   "server on stdio (the `mcp` extra)")
    s.set_defaults(func=cmd_mcp)

    s = sub.add_parser("demo", help="pack, link and report the bundled components (and run them on a GPU)")
    s.add_argument("-o", "--output", default="pipelink-demo", help="output directory (default: pipelink-demo)")
    s.add_argument("--no-gpu", action="store_true", help="do not run on a GPU even if one is present")
    s.set_defaults(func=cmd_demo)

    for name, text in (("verify", "check a linked kernel: pre-checks, link, dumps, run, correctness, bench, "
                                  "roofline (GPU rungs in a watched child process)"),
                       ("bench", "like verify, with the benchmark always on and more repeats")):
        s = sub.add_parser(name, help=text)
        s.add_argument("spec", help="link spec TOML (with a [verify] section), or a kernel file KERNEL.py "
                                    "(inputs, outputs, kernel, reference: see the guide, §7)")
        s.add_argument("-o", "--output", help="run folder (default verify-<name>-<mode>)")
        s.add_argument("--mode", choices=("pipelink", "monolithic", "symbol"), default="pipelink")
        _fact_argument(s)
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
        s.add_argument("--rung", action="append", metavar="NAME=FILE.py:FUNCTION",
                       help="a check of your own, run as a rung after the built-in ones: f(ctx) returns a dict of "
                            "figures or raises (repeat for several)")
        _json_argument(s)
        s.set_defaults(func=cmd_verify)

    _tune_parser(sub)

    _schema_parser(sub)
    return p


def _schema_parser(sub) -> None:
    s = sub.add_parser("schema", help="print the JSON Schema (or Markdown reference) of contracts or specs, "
                                      "or the JSON Schema of --json output (cli)")
    s.add_argument("kind", choices=("contract", "spec", "cli"))
    s.add_argument("--markdown", action="store_true")
    s.set_defaults(func=cmd_schema)


def _tune_parser(sub) -> None:
    s = sub.add_parser("tune", help="search facts, schedule settings and alternative specs for the fastest verified "
                                    "configuration per shape bucket; pipelink.op serves the winners")
    s.add_argument("spec", help="link spec TOML (with a [verify] reference) whose shapes vary")
    s.add_argument("--shape", action="append", metavar="NAME=SIZE[,NAME=SIZE]",
                   help="a shape to tune for: the varying facts' sizes, e.g. --shape M=128 (repeatable)")
    s.add_argument("--fact", action="append", metavar="NAME=VALUES",
                   help="a fact to search: values and ranges, e.g. --fact tile_n=128,256 --fact stages=3..6")
    s.add_argument("--set", action="append", metavar="SECTION.FIELD=VALUES",
                   help="a [schedule] or [launch] field to search: e.g. --set schedule.split=tiles,stream_k "
                        "--set launch.cluster=1,2 (order, split, group; cluster, grid)")
    s.add_argument("--spec", dest="alt_spec", action="append", metavar="SPEC",
                   help="an alternative spec (another component set, the same operands) searched alongside")
    s.add_argument("-j", "--jobs", type=int, help="parallel link processes (default: the CPU count)")
    s.add_argument("--link-only", action="store_true", help="link the candidates, do not verify or time them")
    s.add_argument("--ray", metavar="ADDRESS", help="link on a Ray cluster instead of local processes: its address "
                                                    "(auto, ray://HOST:10001) or 'local' (pip install 'pipelink[ray]')")
    s.add_argument("--reps", type=int, default=30, help="timed launches per candidate (interleaved)")
    s.add_argument("--timeout", type=float, help="seconds before a GPU run counts as hung (default: spec, 60)")
    s.add_argument("--report", metavar="FILE.json", help="write every candidate's outcome here")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_tune)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings (a cache that falls back to none, ...) as one line for the user, not Python's
    file:line form."""
    err_console.print(f"[yellow]warning[/] ({category.__name__}): {escape(str(message))}", highlight=False,
                      soft_wrap=True)


@contextlib.contextmanager
def _stdout_on_stderr():
    """Under --json: whatever pipelink or a tool it runs prints goes to stderr (Python's sys.stdout
    and file descriptor 1 both), so that stdout holds the document alone."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
        os.dup2(2, 1)
    except OSError:  # no descriptor 1 or 2 to move: Python's stream alone
        saved = None
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        if saved is not None:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)


def _print_error(exc: PipelinkError) -> None:
    if isinstance(exc, UsageError) and hasattr(exc, "usage"):  # argparse's own form
        sys.stderr.write(f"{exc.usage}pipelink: error: {exc.message}\n")
        return
    # soft_wrap: the message keeps its lines (paths and names stay whole for grep and copy)
    err_console.print(f"[bold red]error[/] ({type(exc).__name__}): {escape(exc.format())}", highlight=False,
                      soft_wrap=True)


# The exit status of a command whose reader went away (`pipelink schema --markdown | head`): what a shell
# reports for a program ended by SIGPIPE (128 + 13).
BROKEN_PIPE = 141


def main(argv: list[str] | None = None) -> int:
    """The command line; a reader that closes the pipe early ends it quietly (BROKEN_PIPE, no traceback)."""
    try:
        status = _main(argv)
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        # Python's own flush at exit would fail again and print "Exception ignored": point stdout at nothing
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    as_json = bool(argv) and argv[0] in cli_json.COMMANDS and "--json" in argv
    warnings.showwarning = _show_warning
    status, result, error = 2, None, None
    try:
        args = build_parser().parse_args(argv)
        args.json = getattr(args, "json", False)
        with _stdout_on_stderr() if as_json else contextlib.nullcontext():
            status = args.func(args)
        result = getattr(args, "json_result", None)
    except PipelinkError as exc:
        if not as_json:
            _print_error(exc)
            return 2
        error = exc.to_json()
    if as_json:
        sys.stdout.write(cli_json.dumps(cli_json.document(argv[0], status, result=result, error=error)))
        sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())

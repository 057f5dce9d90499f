"""`pipelink mcp`: a Model Context Protocol server (stdio) for coding agents that write kernels.

Its tools are the command line's link, verify, bench and inspect. Each runs `pipelink <command> ... --json` in a
child process and returns the document that prints (docs/cli.schema.json): the same words a person gets, the
typed error of a refused input included (exit_status 2), and a crash or hang of the child reported, not fatal to
the server. The arguments are typed and turned into the command's own options only (a fact is `--fact NAME=VALUE`,
checked by the command as on the command line); no tool passes text through as a flag. Needs the `mcp` extra:
`pip install 'pipelink[mcp]'`.
"""

from __future__ import annotations

import json
import subprocess
import sys

TIMEOUT_S = 1800  # a verify with its benchmark, or a first pack of a CUTLASS component, takes minutes


def _run(argv: list[str], cwd: str | None) -> dict:
    """`pipelink COMMAND --json OPTIONS -- PATH` in a child (ARGV: the command, the path, then the options the tool
    made; the path after `--`, so a name that starts with '-' is a file name, never an option); its document, or
    one saying why there is none."""
    command = [sys.executable, "-m", "pipelink.cli", argv[0], "--json", *argv[2:], "--", argv[1]]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=cwd)
    except subprocess.TimeoutExpired:
        return {"command": argv[0], "exit_status": None, "error": {"message": f"no answer within {TIMEOUT_S} s"}}
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        return {"command": argv[0], "exit_status": proc.returncode,
                "error": {"message": "the command printed no JSON document", "stderr": proc.stderr[-4000:]}}


def _checked(command: str, build) -> dict:
    """The document of `pipelink COMMAND` with the argv ``build`` makes, or, where an argument is not what the tool
    takes, an error document of the command line's form (exit_status 2, a UsageError naming the argument)."""
    try:
        argv, cwd = build()
    except ValueError as exc:
        return {"format": 1, "command": command, "exit_status": 2,
                "error": {"type": "UsageError", "bases": ["PipelinkError"], "message": str(exc)}}
    return _run(argv, cwd)


def _fact_options(facts: dict[str, int] | None) -> list[str]:
    out = []
    for name, value in (facts or {}).items():
        if not isinstance(name, str) or not name.isidentifier() or isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"fact {name!r} = {value!r}: a fact is a name (an identifier) and an integer")
        out += ["--fact", f"{name}={value}"]
    return out


MODES = ("pipelink", "monolithic", "symbol")


def _mode(mode: str) -> list[str]:
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: one of {', '.join(MODES)}")
    return ["--mode", mode]


def build_server():
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("pipelink", instructions=(
        "Link separately compiled GPU kernel components into one fused kernel, guided by contracts, and check it: "
        "link (contracts checked, the report as JSON), verify (compile, run, correctness against the spec's "
        "reference, bench, roofline; on a machine with a Hopper GPU), bench, inspect (a package, a plan JSON or "
        "a cubin's SASS by component). Paths are relative to the working folder given (default: the server's)."))

    @server.tool()
    def link(spec: str, mode: str = "pipelink", facts: dict[str, int] | None = None, output: str | None = None,
             cwd: str | None = None) -> dict:
        """Link the spec's components into one cubin: `pipelink link SPEC --json` (its files under output)."""
        return _checked("link", lambda: (["link", spec, *_mode(mode), *_fact_options(facts),
                                          *(["-o", output] if output else [])], cwd))

    @server.tool()
    def verify(spec: str, mode: str = "pipelink", facts: dict[str, int] | None = None, bench: bool = False,
               seeds: int | None = None, output: str | None = None, cwd: str | None = None) -> dict:
        """The verifiable loop on a link spec or a kernel file (.py): `pipelink verify --json`. exit_status 0 pass,
        1 a rung failed, 3 linked and checked but not run (no GPU) or nothing to check the output against."""
        def argv():
            if seeds is not None and (isinstance(seeds, bool) or not 1 <= seeds <= 100):
                raise ValueError(f"seeds = {seeds!r}: 1 to 100")
            return (["verify", spec, *_mode(mode), *_fact_options(facts), *([] if bench else ["--no-bench"]),
                     *(["--seeds", str(seeds)] if seeds is not None else []), *(["-o", output] if output else [])], cwd)
        return _checked("verify", argv)

    @server.tool()
    def bench(spec: str, mode: str = "pipelink", facts: dict[str, int] | None = None, output: str | None = None,
              cwd: str | None = None) -> dict:
        """verify with the benchmark always on and more repeats: `pipelink bench --json`."""
        return _checked("bench", lambda: (["bench", spec, *_mode(mode), *_fact_options(facts),
                                           *(["-o", output] if output else [])], cwd))

    @server.tool()
    def inspect(file: str, cwd: str | None = None) -> dict:
        """A package (.plc: manifest and contract), a plan JSON, or a cubin (its SASS, by component instance where
        the link's plan JSON lies beside it): `pipelink inspect --json`."""
        return _checked("inspect", lambda: (["inspect", file], cwd))

    return server


def serve() -> None:
    build_server().run("stdio")

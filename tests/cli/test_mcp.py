"""`pipelink mcp` (issue 52 item 7): a Model Context Protocol server on stdio whose tools are link, verify, bench and
inspect, each returning the document `--json` prints. Driven here by the MCP SDK's own client (stdio_client and
ClientSession), as an agent's host would: the tools listed, a link of the demo spec, a refused fact (the typed
error's document, exit_status 2), verify without a GPU (exit_status 3: linked and checked, not run), inspect of a
cubin by instance, and a bad argument refused without running anything."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import pytest

pytest.importorskip("mcp.server.mcpserver")  # the extra: pipelink[mcp] (the test extra includes it)

from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

from conftest import ROOT, gpu_ok  # noqa: E402


def session_calls(calls: list[tuple[str, dict]], cwd) -> tuple[list[str], list]:
    """The server's tool names, and each call's result (its JSON document, or the error text)."""
    async def go():
        params = StdioServerParameters(command=sys.executable, args=["-m", "pipelink.cli", "mcp"], cwd=str(cwd),
                                       env={**os.environ})
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                names = [t.name for t in (await session.list_tools()).tools]
                out = []
                for name, arguments in calls:
                    result = await session.call_tool(name, arguments)
                    text = "".join(getattr(c, "text", "") for c in result.content)
                    out.append(("error", text) if result.is_error else json.loads(text))
                return names, out
    return asyncio.run(asyncio.wait_for(go(), 900))


def test_an_agent_links_inspects_and_verifies_through_the_sdk_client(demo_dir):
    (demo_dir / "reference.py").write_bytes((ROOT / "examples" / "demo" / "reference.py").read_bytes())
    names, (linked, refused, inspected, verified, bad, dashed) = session_calls([
        ("link", {"spec": "link.toml", "output": "out"}),
        ("link", {"spec": "link.toml", "facts": {"stages": 99}}),
        ("inspect", {"file": "out/tile_fold.cubin"}),
        ("verify", {"spec": "link.toml", "output": "run"}),
        ("link", {"spec": "link.toml", "mode": "--evil"}),
        ("inspect", {"file": "--help"}),
    ], demo_dir)
    assert sorted(names) == ["bench", "inspect", "link", "verify"]
    assert linked["command"] == "link" and linked["exit_status"] == 0 and linked["result"]["name"] == "tile_fold"
    assert refused["exit_status"] == 2 and refused["error"]["type"] == "FactDomainError"
    assert "stages" in refused["error"]["message"]
    groups = {g["instance"] for g in inspected["result"]["by_instance"]["instances"]}
    assert groups == {"glue", "load", "reduce", "store"}
    if not gpu_ok():
        assert verified["exit_status"] == 3, verified["error"] if "error" in verified else verified
    else:
        assert verified["exit_status"] == 0, verified
    assert bad["exit_status"] == 2 and bad["error"]["type"] == "UsageError" and "'--evil'" in bad["error"]["message"]
    assert not (demo_dir / "--evil").exists()
    assert dashed["exit_status"] == 2 and dashed["error"]["file"] == "--help"  # a file named so, not the option


def test_without_the_sdk_the_command_says_how_to_install_it(tmp_path):
    import subprocess
    blocker = tmp_path / "mcp"
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ImportError('not installed here')\n")
    proc = subprocess.run([sys.executable, "-m", "pipelink.cli", "mcp"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
    assert proc.returncode == 2 and "pip install 'pipelink[mcp]'" in proc.stderr and "Traceback" not in proc.stderr

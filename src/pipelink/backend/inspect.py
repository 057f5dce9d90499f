"""Reading a cubin with cuobjdump: resource usage and SASS, parsed into plain data."""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import InspectError
from .toolchain import find_tool, tool_env

_RES = re.compile(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)\s+LOCAL:(\d+)")
_INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;")
_BAR = re.compile(r"^BAR\.(\w+)(?:\.\w+)*\s+([^,\s]+)(?:,\s*(\S+))?")
_IMM = re.compile(r"(?<![\w\[.])(?:-?0x[0-9a-f]+)")


@dataclass
class CubinInfo:
    registers: int
    stack: int
    static_smem: int
    local: int
    instructions: list[str]
    calls: list[str] = field(default_factory=list)
    barriers: list[tuple[str, str, str | None]] = field(default_factory=list)  # (kind, id, threads operand)
    spill_insns: int = 0

    @property
    def opcode_histogram(self) -> dict[str, int]:
        return dict(Counter(i.split()[0] for i in self.instructions if i))

    def immediates(self) -> set[int]:
        found = set()
        for insn in self.instructions:
            for tok in _IMM.findall(insn):
                found.add(int(tok, 16))
        return found

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("instructions")
        d["instruction_count"] = len(self.instructions)
        d["opcodes"] = self.opcode_histogram
        return d


def _run(args: list[str]) -> str:
    proc = subprocess.run(args, capture_output=True, text=True, env=tool_env())
    if proc.returncode != 0:
        raise InspectError(f"{Path(args[0]).name} failed (exit {proc.returncode})", log=proc.stderr or proc.stdout)
    return proc.stdout


def dump_sass(cubin: bytes) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return _run([str(find_tool("cuobjdump")), "-sass", f.name])


def inspect_cubin(cubin: bytes, entry: str) -> tuple[CubinInfo, str]:
    """Resource usage of ``entry`` and its parsed SASS; returns (info, raw SASS text)."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        res = _run([str(find_tool("cuobjdump")), "-res-usage", f.name])
        sass = _run([str(find_tool("cuobjdump")), "-sass", f.name])
    m = None
    lines = res.splitlines()
    for i, line in enumerate(lines):
        if "Function" in line and entry in line:
            m = _RES.search(" ".join(lines[i:i + 2]))
            break
    if m is None:
        raise InspectError(f"cuobjdump shows no resource usage for kernel '{entry}'", log=res)
    insns = _INSN.findall(sass)
    info = CubinInfo(*(int(x) for x in m.groups()), instructions=insns)
    for insn in insns:
        op = insn.split()[0]
        if op.startswith("CALL"):
            info.calls.append(insn)
        if op in ("LDL", "STL") or op.startswith(("LDL.", "STL.")):
            info.spill_insns += 1
        bar = _BAR.match(insn)
        if bar:
            info.barriers.append(bar.groups())
    return info, sass


def normalized_sass(instructions: list[str]) -> list[str]:
    """SASS with symbol addresses (constant bank 4 offsets, relocations) blanked, for comparing
    a linked kernel with its monolithic control."""
    return [re.sub(r"c\[0x4\]\[0x[0-9a-f]+\]", "c[0x4][*]", i) for i in instructions]

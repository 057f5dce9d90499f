"""Reading a cubin with cuobjdump: resource usage and SASS, parsed into plain data."""

from __future__ import annotations

import hashlib
import re
import subprocess
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import InspectError
from .toolchain import find_tool, tool_env, tool_version

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
    # per instruction: its source locations, innermost first, ending at the glue's call line
    locations: list[list[tuple[str, int]]] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    barriers: list[tuple[str, str, str | None]] = field(default_factory=list)  # (kind, id, threads operand)
    # branch labels (".L_x_12", what BRA instructions name as their target) -> the instruction each marks
    labels: dict[str, int] = field(default_factory=dict)
    spill_insns: int = 0

    @property
    def opcode_histogram(self) -> dict[str, int]:
        return dict(Counter(opcode(i) for i in self.instructions if i))

    def immediates(self) -> set[int]:
        found = set()
        for insn in self.instructions:
            for tok in _IMM.findall(insn):
                found.add(int(tok, 16))
        return found

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("instructions")
        d.pop("locations")
        d.pop("labels")
        d["instruction_count"] = len(self.instructions)
        d["opcodes"] = self.opcode_histogram
        return d


def inspector_id() -> dict[str, str]:
    """What a cached inspection depends on besides the cubin: the disassemblers' releases and this
    parser's own code (a changed parser must not be served results of the old one)."""
    return {"cuobjdump": tool_version("cuobjdump"), "nvdisasm": tool_version("nvdisasm"),
            "parser": hashlib.sha256(Path(__file__).read_bytes()).hexdigest()}


def _run(args: list[str], file: Path | None = None) -> str:
    proc = subprocess.run(args, capture_output=True, text=True, env=tool_env())
    if proc.returncode != 0:
        raise InspectError(f"{Path(args[0]).name} failed (exit {proc.returncode})", file=file,
                           log=proc.stderr or proc.stdout)
    return proc.stdout


def dump_sass(cubin: bytes) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return _run([str(find_tool("cuobjdump")), "-sass", f.name])


def dump_sass_file(path: Path) -> str:
    """SASS of a cubin the user gave: cuobjdump reads it in place, so errors name that file."""
    return _run([str(find_tool("cuobjdump")), "-sass", str(path)], file=path)


def opcode(insn: str) -> str:
    """The opcode of a SASS instruction, without its predicate (``@!P0 BRA`` -> ``BRA``)."""
    parts = insn.split()
    return parts[1] if parts and parts[0].startswith("@") and len(parts) > 1 else (parts[0] if parts else "")


_LOC = re.compile(r'"([^"]+)", line (\d+)')
_LABEL = re.compile(r"^(\.L_x_\d+):")


def parse_disassembly(text: str) -> tuple[list[str], list[list[tuple[str, int]]], dict[str, int]]:
    """Instructions, their location chains and the branch labels from ``nvdisasm -gi``. nvdisasm
    prints location comments only when the location changes, one line per inlining level ("A",
    line 3 inlined at "B", line 9 / "B", line 9 inlined at "glue.cu", line 54 / "glue.cu", line 54):
    the group, in order and without repeats, is the chain from the innermost location to the glue.
    A label (``.L_x_12:``, on a line of its own) marks the instruction after it."""
    insns, locs, labels = [], [], {}
    chain: list[tuple[str, int]] = []
    in_group = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("//## File"):
            if not in_group:
                chain = []
            for f, n in _LOC.findall(stripped):
                if (f, int(n)) not in chain:
                    chain.append((f, int(n)))
            in_group = True
            continue
        in_group = False
        label = _LABEL.match(stripped)
        if label:
            labels[label.group(1)] = len(insns)
            continue
        m = _INSN.search(line)
        if m:
            insns.append(m.group(1))
            locs.append(chain)
    return insns, locs, labels


def inspect_cubin(cubin: bytes, entry: str) -> tuple[CubinInfo, str]:
    """Resource usage of ``entry`` and its parsed SASS with source locations; returns (info, raw
    disassembly). nvdisasm is what cuobjdump -sass runs internally, so this costs no extra pass."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        res = _run([str(find_tool("cuobjdump")), "-res-usage", f.name])
        sass = _run([str(find_tool("nvdisasm")), "-gi", "-c", f.name])
    m = None
    lines = res.splitlines()
    for i, line in enumerate(lines):
        if "Function" in line and entry in line:
            m = _RES.search(" ".join(lines[i:i + 2]))
            break
    if m is None:
        raise InspectError(f"cuobjdump shows no resource usage for kernel '{entry}'", log=res)
    insns, locs, labels = parse_disassembly(sass)
    info = CubinInfo(*(int(x) for x in m.groups()), instructions=insns, locations=locs, labels=labels)
    for insn in insns:
        op = opcode(insn)
        if op.startswith("CALL"):
            info.calls.append(insn)
        if op in ("LDL", "STL") or op.startswith(("LDL.", "STL.")):
            info.spill_insns += 1
        bar = _BAR.match(insn.split(" ", 1)[1] if insn.startswith("@") else insn)
        if bar:
            info.barriers.append(bar.groups())
    return info, sass


def normalized_sass(instructions: list[str]) -> list[str]:
    """SASS with symbol addresses (constant bank 4 offsets, relocations) blanked, for comparing
    a linked kernel with its monolithic control."""
    return [re.sub(r"c\[0x4\]\[0x[0-9a-f]+\]", "c[0x4][*]", i) for i in instructions]


# nvcc 13 guards tensor-memory instructions (sm_100a) with calls to trap routines it adds itself, taken only when the
# hardware rejects an operation (an allocation after the permit was given up, say): not a component left un-inlined.
_GUARDRAIL = re.compile(r"__cuda_sm10x_tcgen05_guardrail_trap_\w+")


def is_guardrail_call(insn: str) -> bool:
    """A call to one of nvcc's tcgen05 guardrail traps."""
    return bool(_GUARDRAIL.search(insn))

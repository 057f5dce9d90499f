"""The kernel's ABI: its one parameter, and the sanitize report it may write.

Defined here once, a leaf of the inputs layer (tests/repo/test_architecture.py), and used by the link
(link/abi.py lays it out for a plan, the glue declares the parameter struct from it, the manifest's
"params" and "param_bytes" list it) and by everything that launches a linked kernel: the runtime,
the torch operator, the verify child and the bench scripts read it back from a manifest with
``KernelABI.from_manifest`` (typed ``Param`` members, never the manifest's dicts).

The parameter is one ``__grid_constant__`` struct. Its members, in order:
  operands    one per operand, instance by instance in the contract's order: a pointer (8 bytes),
              or for a TMA-copied operand the 128-byte CUtensorMap the runtime encodes (64-byte aligned)
  trace       with tracing: a pointer to uint64 [grid][iters][slots][start, end] (%globaltimer, ns)
  report      in sanitize mode: a pointer to REPORT_WORDS uint32 in host-mapped memory, which the
              harness allocates and can still read after the kernel trapped
The struct's size is a multiple of its alignment (64 bytes once it holds a tensor map).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from .contract import DTYPES
from .refs import GLUE, Ref

POINTER_BYTES = 8
TENSOR_MAP_BYTES = 128
TENSOR_MAP_ALIGN = 64
TRACE = Ref(GLUE, "trace")
REPORT = Ref(GLUE, "report")
# A split schedule's workspaces (docs/design/stream_k.md): each block's two slots of partial sums, and
# each split tile's count of the k-tiles added so far (zeroed before each launch).
PARTIALS = Ref(GLUE, "partials")
TILE_COUNTS = Ref(GLUE, "tile_counts")
# C type and bytes of every element type: the contract's DTYPES, and those of the glue's own buffers.
_CTYPES = {**DTYPES, "int64": ("long long", 8), "uint64": ("unsigned long long", 8), "uint32": ("unsigned", 4), "uint8": ("unsigned char", 1)}


class ReportKind(IntEnum):
    """What a sanitize report says (its word 0)."""
    CANARY = 1   # the canary after a buffer was overwritten, seen after a component call
    STUCK = 2    # an mbarrier wait gave up (components rebuilt with PL_SANITIZE bound their waits)


REPORT_WORDS = 8   # uint32 words of the report
REPORT_CLAIM = 7   # the first thread to report sets this word (atomicCAS 0 -> 1), fills the others, traps
REPORT_LAYOUT = {ReportKind.CANARY: ("kind", "site", "buffer", "tile", "block", "word", "value"),
                 ReportKind.STUCK: ("kind", "warp", "offset", "parity", "block")}


def decode_report(words: list[int]) -> dict[str, int] | None:
    """The report's words by name (see REPORT_LAYOUT), or None when no thread wrote one. A kind this
    layout does not know gives only {"kind": k}."""
    if words[REPORT_CLAIM] != 1:
        return None
    names = REPORT_LAYOUT.get(words[0], ("kind",))
    return dict(zip(names, words))


@dataclass(frozen=True)
class Param:
    """One member of the parameter struct, as the manifest lists it."""
    ref: Ref                    # the instance's operand, or TRACE / REPORT for the glue's own buffers
    dtype: str
    shape: tuple[int, ...]
    access: str                 # read | write | readwrite
    offset: int                 # in the struct
    bytes: int                  # POINTER_BYTES, or TENSOR_MAP_BYTES for a tensor map
    tma: dict | None = None     # {"box": [...], "swizzle": bytes}: a CUtensorMap in place of the pointer
    host_mapped: bool = False   # the harness's own buffer (the report), not an argument of the caller
    note: str = ""              # the member's comment in the generated struct
    align: int | None = None    # bytes the component's accesses need (the operand's `align`), checked at launch
    # {"zero": bool[, "zero_once": bool]}: the link's own scratch, allocated by the runtime and cleared
    # before every launch (zero) or before the first (zero_once: the kernel leaves it as it found it)
    workspace: dict | None = None
    # {"low": int, "high": int}: a fact given at launch ([link] launch_facts), one int64 the kernel reads and
    # traps outside [low, high]
    fact: dict | None = None
    # [link] keep: the out-port ("instance.port") whose workspace this write operand is; the kernel writes what the
    # port holds (rows a dynamic count leaves unused may keep whatever they held: verify checks it through its reader)
    kept: str | None = None

    @property
    def name(self) -> str:
        """Its name in the manifest and for callers: "instance.operand", "glue.trace", "glue.report"."""
        return str(self.ref)

    @property
    def member(self) -> str:
        """The member's C name: "inst_operand", or "pl_trace" / "pl_report"."""
        return f"pl_{self.ref.name}" if self.ref in (TRACE, REPORT) else self.ref.c_name

    @property
    def element_bytes(self) -> int:
        return _CTYPES[self.dtype][1]

    def declaration(self) -> str:
        if self.tma is not None:
            ctype = "pl_tensor_map "
        else:
            const = "const " if self.access == "read" else ""
            ctype = f"{const}{_CTYPES[self.dtype][0]}* "
        return f"  {ctype}{self.member};" + (f"  // {self.note}" if self.note else "")

    def to_json(self) -> dict:
        out = {"name": self.name, "dtype": self.dtype, "shape": list(self.shape), "access": self.access,
               "element_bytes": self.element_bytes, "offset": self.offset, "bytes": self.bytes}
        if self.tma is not None:
            out["tma"] = self.tma
        if self.host_mapped:
            out["host_mapped"] = True
        if self.align is not None:
            out["align"] = self.align
        if self.workspace is not None:
            out["workspace"] = self.workspace
        if self.fact is not None:
            out["fact"] = self.fact
        if self.kept is not None:
            out["kept"] = self.kept
        return out

    @classmethod
    def from_json(cls, d: dict) -> Param:
        return cls(Ref.parse(d["name"]), d["dtype"], tuple(d["shape"]), d["access"], d["offset"], d["bytes"],
                   d.get("tma"), d.get("host_mapped", False), align=d.get("align"), workspace=d.get("workspace"),
                   fact=d.get("fact"), kept=d.get("kept"))


@dataclass(frozen=True)
class KernelABI:
    struct: str                 # the struct's C name
    params: tuple[Param, ...]   # its members, in order
    size: int                   # its size in bytes (the manifest's param_bytes)

    @property
    def operands(self) -> tuple[Param, ...]:
        """The arguments a caller passes (every member but the harness's host-mapped report and the
        workspaces the runtime owns)."""
        return tuple(p for p in self.params if not p.host_mapped and p.workspace is None)

    @property
    def launch_params(self) -> tuple[Param, ...]:
        """The members a launch is given, in order: every one but the workspaces, which the runtime
        owns (the sanitize report is among them: the harness passes its host-mapped buffer)."""
        return tuple(p for p in self.params if p.workspace is None)

    @property
    def workspaces(self) -> tuple[Param, ...]:
        """The members the runtime allocates (and clears where their ``workspace`` says so), in order."""
        return tuple(p for p in self.params if p.workspace is not None)

    @property
    def trace(self) -> Param | None:
        return next((p for p in self.params if p.ref == TRACE), None)

    @property
    def report(self) -> Param | None:
        return next((p for p in self.params if p.ref == REPORT), None)

    def declaration(self) -> str:
        """The struct in C, as the glue writes it."""
        return "\n".join([f"struct {self.struct} {{", *(p.declaration() for p in self.params), "};\n"])

    def arguments(self, tensors: dict, report=None) -> list:
        """What Runtime.launch_arrays takes, in member order: ``tensors`` by name, ``report`` for the
        report (workspaces are the runtime's own: not among them)."""
        return [report if p.host_mapped else tensors[p.name] for p in self.launch_params]

    @classmethod
    def from_manifest(cls, manifest: dict) -> KernelABI:
        """The ABI a manifest (``LinkedKernel.manifest``, ``*.manifest.json``) lists: its "params" as
        typed members, its "param_bytes" as the size."""
        return cls(f"pl_params_{manifest['kernel']}", tuple(Param.from_json(p) for p in manifest["params"]),
                   manifest["param_bytes"])

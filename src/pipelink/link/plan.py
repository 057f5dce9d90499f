"""The LinkPlan: the one object every link stage reads and extends.

load -> facts -> check -> allocate -> glue -> backend each fill their part; ``to_json`` shows
exactly what the linker decided and why (``pipelink inspect plan.json``, reports).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..contract import Contract
from ..errors import ContractError, ExpressionError
from ..expr import Expr
from ..package import Package
from ..spec import LinkSpec

MODES = ("pipelink", "monolithic", "symbol")


@dataclass
class InstancePlan:
    name: str
    package: Package
    roles: dict[str, str]                                        # component role -> kernel role
    user_facts: dict[str, int]                                   # [[instance]].facts
    facts: dict[str, int] = field(default_factory=dict)          # resolved, incl. guarantees and builtins
    fact_sources: dict[str, str] = field(default_factory=dict)   # fact -> where its value came from
    variant: int = 0                                             # index of the package variant used
    bind: dict[str, int] = field(default_factory=dict)           # bindings struct values (not operands)

    @property
    def contract(self) -> Contract:
        return self.package.contract

    def facts_eval(self, e: Expr, where: str, extra: dict[str, int] | None = None) -> int:
        """Evaluate one of this component's expressions; errors name the component and field."""
        try:
            return e.eval({**self.facts, **(extra or {})}, where=where)
        except ExpressionError as exc:
            raise ContractError(exc.message, file=self.file, component=self.contract.name, field=where,
                                hint=exc.hint) from None

    @property
    def file(self) -> str:
        return str(self.package.path) if self.package.path else self.name

    def to_json(self) -> dict:
        return {"name": self.name, "component": self.contract.name, "version": self.contract.component.version,
                "package": self.file, "package_hash": self.package.content_hash(), "closed": self.package.closed,
                "roles": self.roles, "variant": self.package.variants[self.variant].facts,
                "facts": self.facts, "fact_sources": self.fact_sources, "bind": self.bind}


@dataclass
class RoleAlloc:
    name: str
    warp_start: int
    warps: int                  # warps the role occupies (after warpgroup padding)
    used_warps: int             # warps the components declared
    registers: int | None       # setmaxnreg value, None = not set
    warpgroup_aligned: bool

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def used_threads(self) -> int:
        """Threads that run component code (padding warps only idle)."""
        return 32 * self.used_warps


@dataclass
class SmemAlloc:
    name: str                   # "instance.buffer" (or "glue.mbarriers")
    offset: int
    bytes: int
    align: int
    pinned: bool
    live: list[str]             # "role:instance.phase" entries; ["*"] = whole kernel
    users: list[str]            # every instance.buffer mapped here (aliased ports)
    guard: int | None = None    # sanitize mode: offset of the canary words after the buffer


@dataclass
class BarrierAlloc:
    name: str                   # "instance.barrier", "instance.reserved", "glue.xfer..."
    id: int
    threads: int | None
    pinned: bool


@dataclass
class MbarAlloc:
    name: str
    offset: int
    count: int
    arrivals: int
    tx_bytes: int
    users: list[str]


@dataclass
class Transfer:
    kind: str                   # alias | reg_to_reg | reg_to_smem | smem_to_smem
    src: str
    dst: str
    role: str | None = None
    barrier: int | None = None
    note: str = ""


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class LinkPlan:
    spec: LinkSpec
    mode: str
    entry: str
    device: dict
    instances: list[InstancePlan] = field(default_factory=list)
    facts: dict[str, int] = field(default_factory=dict)         # link-wide resolved facts
    checks: list[Check] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    roles: list[RoleAlloc] = field(default_factory=list)
    smem: list[SmemAlloc] = field(default_factory=list)
    smem_bytes: int = 0
    barriers: list[BarrierAlloc] = field(default_factory=list)
    mbarriers: list[MbarAlloc] = field(default_factory=list)
    transfers: list[Transfer] = field(default_factory=list)
    tiles: list[int] = field(default_factory=list)
    num_tiles: int = 0
    grid: int = 0
    block: int = 0
    glue: str = ""
    trace: bool = False                                          # glue records %globaltimer per call site
    trace_slots: list[dict] = field(default_factory=list)        # call sites: {"label", "role"}
    trace_iters: int = 0                                         # tile iterations per block (trace rows)
    backend: dict = field(default_factory=dict)
    mbar_of: dict = field(default_factory=dict, repr=False)
    backend_inputs: list = field(default_factory=list, repr=False)
    glue_sites: dict = field(default_factory=dict)   # glue line -> instance whose entry it calls
    strict_conformance: bool = True                  # a component code violation fails the link
    probe: bool = False                              # a pack-time probe: one component linked alone
    sanitize: bool = False                           # glue checks smem canaries after every component call
    sanitize_sites: list[str] = field(default_factory=list)  # call sites, indexed as in the sanitize report  # (name, LTO-IR) given to nvJitLink  # (instance, mbarrier name) -> MbarAlloc

    def instance(self, name: str) -> InstancePlan:
        return next(i for i in self.instances if i.name == name)

    def role(self, name: str) -> RoleAlloc:
        return next(r for r in self.roles if r.name == name)

    def to_json(self) -> dict:
        return {
            "spec": str(self.spec.path) if self.spec.path else None, "mode": self.mode, "entry": self.entry,
            "device": self.device, "facts": self.facts,
            "instances": [i.to_json() for i in self.instances],
            "checks": [asdict(c) for c in self.checks], "warnings": self.warnings,
            "roles": [asdict(r) for r in self.roles],
            "smem": {"bytes": self.smem_bytes, "buffers": [asdict(s) for s in self.smem]},
            "named_barriers": [asdict(b) for b in self.barriers],
            "mbarriers": [asdict(m) for m in self.mbarriers],
            "transfers": [asdict(t) for t in self.transfers],
            "schedule": {"tiles": self.tiles, "num_tiles": self.num_tiles, "order": self.spec.schedule.order,
                         "group": self.spec.schedule.group, "persistent": self.spec.schedule.persistent},
            "launch": {"grid": self.grid, "block": self.block, "dynamic_smem": self.smem_bytes},
            "glue": self.glue, "glue_sites": self.glue_sites, "trace": {"enabled": self.trace, "slots": self.trace_slots, "iters": self.trace_iters},
            "backend": self.backend,
        }


"""The LinkPlan: the record the link stages' results assemble.

load reads the instances (Loaded); facts, check, allocate, glue, backend and post-link each return their own
frozen result (Resolved, Checks, Allocation, Glue, Backend, PostLink). Each stage up to the glue takes the results
it needs and the option fields it reads as a frozen input of its own (facts.FactsInputs, check.CheckInputs,
alloc.AllocInputs, glue.GlueInputs), never the plan; an instance a stage gives more is a new InstancePlan in its
result (Resolved.instances with their facts, Allocation.instances with their bindings). The pipeline audits the
results before the glue (Planned) and assembles the LinkPlan from them, under the options fixed before the first
stage (``plan.options``, set when the plan is made and never replaced); ``to_json`` shows exactly what the
linker decided and why (``pipelink inspect plan.json``, reports). A decision is made once, in the result of the
stage that makes it (the split mainloop and the tile source: Checks), and later stages read it there.

Stages refer to each other's records by typed values, never by strings they would split again: a
port, buffer or mbarrier of an instance is a Ref(instance, name) (a transfer's endpoints, the users
of an smem allocation or mbarrier array; the spec's [[connect]] strings are parsed into Refs in one
place, ``LinkParts.connections``), a buffer's lifetime is a tuple of LiveRange(role, instance, phase), a
named barrier says what it is for (ComponentBarrier, ReservedBarriers, TransferFence, ReuseFence, SplitFence),
and the glue stage's result (Glue) carries its call sites and trace spans. plan.json writes each as
the string it always had.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from ..contract import Contract, Entry, Port
from ..errors import ContractError, ExpressionError, PlanVersionError, show
from ..expr import Expr
from ..package import Package
from ..refs import Ref, refs_json
from ..spec import LinkSpec
from .solve import Choice, FactSource

if TYPE_CHECKING:  # the stages' result types and the options (their modules import this one)
    from .build import Backend
    from .options import LinkOptions
    from .postlink import PostLink

MODES = ("pipelink", "monolithic", "symbol")

# plan.json's schema version (its "schema_version"): raise it when a field is added, removed or changes
# its meaning, and say what changed here. 1: the plans written before they carried a version (no field);
# 2: the same fields, and schema_version.
PLAN_SCHEMA_VERSION = 2


@dataclass(frozen=True)
class InstancePlan:
    """One instance as a stage leaves it: load gives its package and roles, the facts stage a new value with
    its facts (Resolved.instances), the allocation one with its bindings too (Allocation.instances)."""
    name: str
    package: Package
    roles: dict[str, str]                                        # component role -> kernel role
    user_facts: dict[str, int]                                   # [[instance]].facts
    facts: dict[str, int] = field(default_factory=dict)          # resolved, incl. guarantees and builtins
    fact_sources: dict[str, FactSource] = field(default_factory=dict)  # fact -> where its value came from
    variant: int = 0                                             # index of the package variant used
    bind: dict[str, int] = field(default_factory=dict)           # bindings struct values (not operands), from Allocation

    @property
    def contract(self) -> Contract:
        return self.package.contract

    def facts_eval(self, e: Expr, where: str, extra: dict[str, int] | None = None) -> int:
        """Evaluate one of this component's expressions; errors name the component and field."""
        return self._located(e.eval, where, extra)

    def facts_eval_array(self, e: Expr, where: str, extra: dict[str, np.ndarray]) -> np.ndarray:
        """``facts_eval`` at every index of the arrays in ``extra`` at once (``Expr.eval_array``)."""
        return self._located(e.eval_array, where, extra)

    def _located(self, evaluate, where: str, extra: dict | None):
        try:
            return evaluate({**self.facts, **(extra or {})}, where=where)
        except ExpressionError as exc:
            raise ContractError(exc.message, file=self.file, component=self.contract.name, field=where,
                                hint=exc.hint) from None

    @property
    def file(self) -> str:
        where = self.package.path or self.package.packed_from
        return str(where) if where else self.name

    def to_json(self, base: Path | None = None) -> dict:
        """``base``: the spec's folder; the package's path (or the source a source instance was packed from) is
        given relative to it (the plan JSON is the same bytes wherever the project lies)."""
        package = self.file
        where = self.package.path or self.package.packed_from
        if base is not None and where:
            package = os.path.relpath(os.path.abspath(where), os.path.abspath(base))
        origin = {"source": package, "package": None} if self.package.packed_from else {"package": package}
        return {"name": self.name, "component": self.contract.name, "version": self.contract.component.version,
                **origin, "package_hash": self.package.content_hash(), "closed": self.package.closed,
                "roles": self.roles, "variant": self.package.variants[self.variant].facts,
                "facts": self.facts, "fact_sources": {n: str(s) for n, s in self.fact_sources.items()},
                "fact_kinds": {n: s.kind for n, s in self.fact_sources.items()}, "bind": self.bind}


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


@dataclass(frozen=True, order=True)
class LiveRange:
    """A phase in which a buffer is live: a component phase of one instance, run by a kernel role.
    Phases of one role run one after the other; different roles run at the same time."""
    role: str                   # kernel role
    instance: str
    phase: str

    def __str__(self) -> str:
        return f"{self.role}:{self.instance}.{self.phase}"


WHOLE_KERNEL = None             # the lifetime of a buffer live from the kernel's start to its end


def live_json(live: tuple[LiveRange, ...] | None) -> list[str]:
    """A lifetime as plan.json writes it: "role:instance.phase" entries, ["*"] for the whole kernel."""
    return ["*"] if live is WHOLE_KERNEL else [str(r) for r in live]


@dataclass
class SmemAlloc:
    name: str                   # "instance.buffer" (or "glue.mbarriers")
    offset: int
    bytes: int
    align: int
    pinned: bool
    live: tuple[LiveRange, ...] | None  # phases it is live in, sorted; WHOLE_KERNEL (None) = always
    users: list[Ref]            # every instance's buffer mapped here (aliased ports)
    guard: int | None = None    # sanitize mode: offset of the canary words after the buffer

    def to_json(self) -> dict:
        return {**asdict(self), "live": live_json(self.live), "users": refs_json(self.users)}


@dataclass(frozen=True)
class ComponentBarrier:
    """A named barrier a component declares ([[named_barrier]])."""
    instance: str
    barrier: str                # its name in the contract

    @property
    def owner(self) -> str | None:  # the instance whose barrier it is (None: the glue's own)
        return self.instance

    def __str__(self) -> str:
        return f"{self.instance}.{self.barrier}"


@dataclass(frozen=True)
class ReservedBarriers(ComponentBarrier):
    """IDs an opaque component uses without declaring them as barriers (reserve.named_barriers)."""
    barrier: str = "reserved"


@dataclass(frozen=True)
class TransferFence:
    """The glue's barrier around an in-block transfer between two ports."""
    src: Ref
    dst: Ref
    owner = None

    def __str__(self) -> str:
        return f"glue.xfer:{self.src}->{self.dst}"


@dataclass(frozen=True)
class ReuseFence:
    """The glue's barrier across a kernel role between phases whose buffers share memory."""
    role: str
    owner = None

    def __str__(self) -> str:
        return f"glue.reuse:{self.role}"


@dataclass(frozen=True)
class SplitFence:
    """The glue's barrier in the role that sums a split tile's partials (split != "tiles"): the role's
    partial stores before its count, and the count's outcome to every thread of the role."""
    role: str
    owner = None

    def __str__(self) -> str:
        return f"glue.split:{self.role}"


BarrierPurpose = ComponentBarrier | ReservedBarriers | TransferFence | ReuseFence | SplitFence


@dataclass
class BarrierAlloc:
    purpose: BarrierPurpose     # what it is for; its name in plan.json is str(purpose)
    id: int
    threads: int | None
    pinned: bool

    @property
    def name(self) -> str:
        return str(self.purpose)

    def to_json(self) -> dict:
        return {"name": self.name, "id": self.id, "threads": self.threads, "pinned": self.pinned}


@dataclass
class MbarAlloc:
    name: str
    offset: int
    count: int
    arrivals: int
    tx_bytes: int
    users: list[Ref]            # every instance's mbarrier in this array (merged across a ring hand-over)

    def to_json(self) -> dict:
        return {**asdict(self), "users": refs_json(self.users)}


@dataclass
class Transfer:
    kind: str                   # alias | reg_to_reg | reg_to_smem | smem_to_smem | global | tmem
    src: Ref                    # the producing port
    dst: Ref                    # the consuming port
    role: str | None = None
    barrier: int | None = None
    note: str = ""

    def to_json(self) -> dict:
        return {**asdict(self), "src": str(self.src), "dst": str(self.dst)}


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


class LinkParts:
    """What a record of a link answers from its spec, device and instances: the plan, and each stage's
    inputs (link/facts.py FactsInputs, check.py CheckInputs, alloc.py AllocInputs), which hold the instances
    as the stage before left them."""
    spec: LinkSpec
    device: dict
    instances: Sequence[InstancePlan]

    @property
    def connections(self) -> tuple[tuple[Ref, Ref], ...]:
        """The spec's [[connect]] entries as (from, to) port references, in the spec's order."""
        return tuple((Ref.parse(c.src), Ref.parse(c.dst)) for c in self.spec.connect)

    def instance(self, name: str) -> InstancePlan:
        return next(i for i in self.instances if i.name == name)

    def in_tile_loop(self, r: LiveRange) -> bool:
        """Whether the phase runs in its role's tile loop (scope "role"); a whole-block phase runs
        between __syncthreads, so memory it shares with another phase needs no barrier of its own."""
        return any(e.phase == r.phase and e.scope == "role" for e in self.instance(r.instance).contract.entry)


@dataclass(frozen=True)
class Loaded(LinkParts):
    """What the load stage read: the spec, the kernel entry's name, the device's limits, and one InstancePlan
    per instance (its package and roles; no facts yet)."""
    spec: LinkSpec
    entry: str
    device: dict
    instances: tuple[InstancePlan, ...]


@dataclass(frozen=True)
class LaunchFact:
    """A fact the kernel takes at launch ([link] launch_facts): the values it serves, ``low`` (the least every
    taker's domain and limits allow, the others at their linked values) to ``high`` (the linked value)."""
    name: str
    low: int
    high: int
    takers: tuple[str, ...]     # the instances that require it

    def to_json(self) -> dict:
        return {"name": self.name, "low": self.low, "high": self.high, "takers": list(self.takers)}


@dataclass(frozen=True)
class Resolved:
    """What the facts stage decided: every instance with its facts (values: role sizes, required,
    guaranteed; where each came from; the package variant compiled with its compile-time values), the
    link-wide facts (the schedule's and the spec's), and the facts nothing fixed, with the value the
    linker chose for each."""
    instances: tuple[InstancePlan, ...]
    link_facts: Mapping[str, int]
    choices: tuple[Choice, ...] = ()
    warnings: tuple[str, ...] = ()
    launch: tuple[LaunchFact, ...] = ()       # the facts given at launch, with the values they may take


@dataclass(frozen=True)
class SplitMainloop:
    """What a split schedule (docs/design/stream_k.md) cuts and sums: the k-tiles of a tile, and the one
    entry whose register out-ports hold a tile's partial sums, in its role."""
    mode: str                 # the schedule's split: "stream_k" or "hybrid"
    k_tiles: int
    instance: InstancePlan
    entry: Entry              # the contract's entry that produces the summed ports
    role: str                 # the kernel role it runs in: the fix-up runs there
    ports: tuple[Port, ...]   # its out-ports (register, reduce = "sum")


@dataclass(frozen=True)
class KeptWorkspace:
    """A workspace the kernel hands its caller ([link] keep): a write operand of its out-port's dtype and shape."""
    workspace: Ref
    port: str
    dtype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class TileSource:
    """The tile loops' count read in the kernel ([schedule] tiles_from): the workspace whose first int32 a
    phase before the loops writes, and whether the link showed the count within the schedule's tiles (then
    the glue traps on a count above them; symbol linking checks nothing and does not trap)."""
    workspace: Ref
    bounded: bool


@dataclass(frozen=True)
class Checks:
    """What the check stage found: its checks, its warnings (symbol mode lets mismatches through), the
    transfer each [[connect]] needs (no barrier yet: the allocation gives fenced ones theirs), and the two
    decisions every later stage reads from here: the split mainloop (None under split = "tiles") and where
    the tile count comes from (None: the schedule's tiles)."""
    checks: tuple[Check, ...]
    warnings: tuple[str, ...]
    transfers: tuple[Transfer, ...]
    split: SplitMainloop | None = None
    tile_source: TileSource | None = None
    kept: tuple[KeptWorkspace, ...] = ()


@dataclass(frozen=True)
class Allocation:
    """What the allocation stage decided: warps and registers per role, the block's shared memory,
    named barriers and mbarrier arrays, the transfers with their barriers, and the launch geometry."""
    roles: tuple[RoleAlloc, ...]
    smem: tuple[SmemAlloc, ...]                 # by offset
    smem_bytes: int                             # the block's dynamic smem (16-byte multiple)
    barriers: tuple[BarrierAlloc, ...]
    mbarriers: tuple[MbarAlloc, ...]
    mbar_of: dict = field(repr=False, hash=False, compare=False)  # (instance, mbarrier name) -> MbarAlloc
    transfers: tuple[Transfer, ...] = ()
    tiles: tuple[int, ...] = ()
    num_tiles: int = 0
    grid: int = 0
    block: int = 0
    checks: tuple[Check, ...] = ()
    warnings: tuple[str, ...] = ()
    bindings: Mapping[str, Mapping[str, int]] = field(default_factory=dict, hash=False)  # instance -> struct field -> value
    instances: tuple[InstancePlan, ...] = ()    # each instance with its bindings (InstancePlan.bind)
    tmem: object = None                         # tmem.TmemAllocation, or None: no tensor memory

    def role(self, name: str) -> RoleAlloc:
        return next(r for r in self.roles if r.name == name)


@dataclass(frozen=True)
class CallSite:
    """A call of a component entry in the glue. SASS line info of the inlined component ends at
    ``line``, which attributes each instruction to the instance it came from."""
    line: int                   # 1-based line of the call in the glue text
    instance: str
    phase: str
    scope: str                  # "role" (in a role's tile loop) or "block" (whole-block phase, every warp)

    @property
    def label(self) -> str:
        return f"{self.instance}.{self.phase}"


@dataclass(frozen=True)
class TraceSlot:
    """A traced span of the glue: a component call or a glue transfer, timed by thread 0 of ``role``."""
    label: str                  # "instance.phase" or "glue: src -> dst"
    role: str

    def to_json(self) -> dict:
        return {"label": self.label, "role": self.role}


@dataclass(frozen=True)
class Glue:
    """What the glue stage produced: the CUDA text and the tables it wrote while generating it."""
    text: str
    sites: tuple[CallSite, ...]             # every component call, in the order of the text
    trace_slots: tuple[TraceSlot, ...] = ()  # with tracing: the spans each trace row records
    trace_iters: int = 0                     # with tracing: tile iterations per block (trace rows)
    sanitize_sites: tuple[CallSite, ...] = ()  # in sanitize mode: the sites its report's `site` indexes
    statements: tuple = ()                   # the statements the text prints (glue_ir.py), in order

    def site_at(self, line: int) -> CallSite | None:
        return self._by_line.get(line)

    @cached_property
    def _by_line(self) -> dict[int, CallSite]:
        return {s.line: s for s in self.sites}


class StageResults(LinkParts):
    """The results of the stages up to the allocation, read as the plan reads them: the plan, and the record
    the audit checks before the plan is assembled (Planned)."""
    mode: str
    resolved: Resolved | None
    checked: Checks | None
    allocation: Allocation | None

    @property
    def facts(self) -> dict[str, int]:
        """Link-wide facts (the spec's, every guarantee, every required fact): the schedule's names."""
        return dict(self.resolved.link_facts) if self.resolved else {}

    # What the allocation stage decided (None before that stage ran).
    roles = property(lambda self: self.allocation.roles)
    smem = property(lambda self: self.allocation.smem)
    smem_bytes = property(lambda self: self.allocation.smem_bytes)
    barriers = property(lambda self: self.allocation.barriers)
    mbarriers = property(lambda self: self.allocation.mbarriers)
    mbar_of = property(lambda self: self.allocation.mbar_of)
    tiles = property(lambda self: list(self.allocation.tiles))
    num_tiles = property(lambda self: self.allocation.num_tiles)
    grid = property(lambda self: self.allocation.grid)
    block = property(lambda self: self.allocation.block)

    @property
    def transfers(self) -> tuple[Transfer, ...]:
        """One per connection: the allocation's (with their barriers) once it ran, the check stage's before."""
        if self.allocation is not None:
            return self.allocation.transfers
        return self.checked.transfers if self.checked else ()

    def role(self, name: str) -> RoleAlloc:
        return next(r for r in self.roles if r.name == name)


@dataclass(frozen=True)
class Planned(StageResults):
    """The stages' results before any code exists (load, facts, check, allocation), which the plan audit
    reads (link/audit.py check_plan) and the pipeline assembles the LinkPlan from."""
    spec: LinkSpec
    device: dict
    mode: str
    instances: tuple[InstancePlan, ...]    # with their facts and bindings: Allocation.instances
    resolved: Resolved
    checked: Checks
    allocation: Allocation


@dataclass
class LinkPlan(StageResults):
    spec: LinkSpec
    options: LinkOptions                                         # fixed before the first stage; never replaced
    entry: str
    device: dict
    instances: list[InstancePlan] = field(default_factory=list)
    resolved: Resolved | None = None                             # the facts stage's result
    checks: list[Check] = field(default_factory=list)            # the pipeline's own (audits)
    warnings: list[str] = field(default_factory=list)            # load and facts stages
    checked: Checks | None = None                                # the check stage's result
    allocation: Allocation | None = None                         # the allocation stage's result
    glue: Glue | None = None                                     # the glue stage's result
    backend: Backend | None = None                               # the backend stage's result
    postlink: PostLink | None = None                             # the post-link stage's result

    def __setattr__(self, name: str, value) -> None:
        if name == "options" and "options" in self.__dict__:  # every stage must see the options the first one saw
            raise AttributeError("a plan's options are fixed when it is made (link/options.py for_stages)")
        super().__setattr__(name, value)

    @property
    def mode(self) -> str:
        return self.options.mode

    def all_checks(self) -> list[Check]:
        """Every stage's checks in stage order: check, allocation, the audits, post-link."""
        return [*(self.checked.checks if self.checked else ()), *(self.allocation.checks if self.allocation else ()),
                *self.checks, *(self.postlink.checks if self.postlink else ())]

    def all_warnings(self) -> list[str]:
        """Every stage's warnings in stage order: load and facts, check, allocation, backend, post-link."""
        return [*self.warnings, *(self.resolved.warnings if self.resolved else ()), *(self.checked.warnings if self.checked else ()),
                *(self.allocation.warnings if self.allocation else ()), *(self.backend.warnings if self.backend else ()),
                *(self.postlink.warnings if self.postlink else ())]

    def to_json(self) -> dict:
        return {
            "schema_version": PLAN_SCHEMA_VERSION,
            "spec": self.spec.path.name if self.spec.path else None, "mode": self.mode, "entry": self.entry,
            "device": self.device, "facts": self.facts,
            "fact_choices": [c.to_json() for c in (self.resolved.choices if self.resolved else ())],
            **({"launch_facts": [f.to_json() for f in self.resolved.launch]} if self.resolved and self.resolved.launch
               else {}),
            "instances": [i.to_json(self.spec.path.parent if self.spec.path else None) for i in self.instances],
            "checks": [asdict(c) for c in self.all_checks()], "warnings": self.all_warnings(),
            "roles": [asdict(r) for r in self.roles],
            "smem": {"bytes": self.smem_bytes, "buffers": [s.to_json() for s in self.smem]},
            **({"tmem": self.allocation.tmem.to_json()} if self.allocation and self.allocation.tmem else {}),
            "named_barriers": [b.to_json() for b in self.barriers],
            "mbarriers": [m.to_json() for m in self.mbarriers],
            "transfers": [t.to_json() for t in self.transfers],
            "schedule": {"tiles": self.tiles, "num_tiles": self.num_tiles, "order": self.spec.schedule.order,
                         "group": self.spec.schedule.group, "persistent": self.spec.schedule.persistent,
                         **({"tiles_from": self.spec.schedule.tiles_from} if self.spec.schedule.tiles_from else {})},
            "launch": {"grid": self.grid, "block": self.block, "dynamic_smem": self.smem_bytes},
            **self._glue_json(),
            "backend": {**(self.backend.to_json() if self.backend else {}),
                        **(self.postlink.to_json() if self.postlink else {})},
        }

    def _glue_json(self) -> dict:
        g = self.glue or Glue("", ())
        return {"glue": g.text, "glue_sites": {s.line: s.instance for s in g.sites},
                "trace": {"enabled": self.options.trace, "slots": [t.to_json() for t in g.trace_slots], "iters": g.trace_iters}}


def check_schema_version(data: dict, file: str) -> None:
    """Refuse a plan JSON (an object read back from ``file``) of another schema version than
    PLAN_SCHEMA_VERSION: a PlanVersionError naming the file, the version found and the one expected.
    A plan without the field is of version 1, written before plans carried one."""
    found = data.get("schema_version", 1)
    if type(found) is int and found == PLAN_SCHEMA_VERSION:
        return
    said = show(found) + ("" if "schema_version" in data else " (no schema_version: written before plans carried one)")
    raise PlanVersionError(f"plan schema version {said}; this pipelink reads version {PLAN_SCHEMA_VERSION}",
                           file=file, field="schema_version",
                           hint="link the spec again with this pipelink to write a plan it reads (pipelink link SPEC "
                                "-o OUT), or inspect it with the pipelink that wrote it")

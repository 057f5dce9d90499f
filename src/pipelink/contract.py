"""Component contracts: what a component requires, what it guarantees, what it occupies.

A contract is a TOML file next to the component source. The dataclasses below are its schema;
``load_contract`` parses and checks it on its own (names resolve, expressions parse, values in
range). Whether contracts agree with each other and the device is the linker's job (link/).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import schema
from .errors import ContractError
from .expr import Expr
from .schema import doc

DTYPES = {"fp32": ("float", 4), "fp16": ("__half", 2), "bf16": ("__nv_bfloat16", 2), "fp8e4m3": ("__nv_fp8_e4m3", 1),
          "fp8e5m2": ("__nv_fp8_e5m2", 1), "int32": ("int", 4), "int8": ("signed char", 1), "uint8": ("unsigned char", 1)}
MAX_NAMED_BARRIER_ID = 15
# Header libraries a component may name under [component] headers: where they come from.
HEADER_LIBRARIES = {"cutlass": "CUTLASS/CuTe headers of the nvidia-cutlass wheel (pip install nvidia-cutlass)"}
TMA_SWIZZLES = (0, 32, 64, 128)
SETMAXNREG_RANGE = (24, 256)


@dataclass(kw_only=True)
class Identity:
    """[component]: who the component is."""
    name: str = doc("Component name; a C identifier, unique within a link.")
    version: str = doc("Component version (free text, e.g. semantic version).")
    origin: str = doc("Library or team of origin, e.g. 'cutlass', 'raw', 'vendor'.", "raw")
    archs: list[str] = doc("Target architectures the LTO-IR is built for.", ["sm_90a"])
    summary: str = doc("One line saying what the component does.", "")
    headers: list[str] = doc("Header libraries the source includes, looked up on whichever machine compiles it "
                             f"(pack, and the monolithic control): {', '.join(HEADER_LIBRARIES)}.", [])


@dataclass(kw_only=True)
class FactRequirement:
    """[facts.requires.NAME]: a fact the component's code is specialized on, with its domain."""
    set: list[int] | None = doc("Allowed values.", None)
    range: list[int] | None = doc("Inclusive [low, high] bounds.", None)
    multiple_of: int | None = doc("The value must be a multiple of this.", None)
    default: int | None = doc("Value used when nothing else in the link sets the fact; also the value the "
                              "component was packaged with for symbol-only linking.", None)
    compile: bool = doc("Compile-time fact (template parameter, array shape): fixed when the package is "
                        "made; each package variant holds one value.", False)
    doc: str = doc("What the fact means.", "")


@dataclass(kw_only=True)
class Facts:
    """[facts]: required facts (with domains) and guaranteed facts (expressions)."""
    requires: dict[str, FactRequirement] = doc("Facts the component needs, by name. `cluster_ctas` is set by the "
                                               "link spec's [launch] cluster (blocks per thread-block cluster).", {})
    guarantees: dict[str, Expr] = doc("Facts the component produces, by name, as expressions over its "
                                      "required facts.", {})


@dataclass(kw_only=True)
class Role:
    """[roles.NAME]: a group of warps running one part of the component."""
    warps: int = doc("Warps the role needs.")
    registers: int | None = doc("Per-thread register budget requested with setmaxnreg (24..256, multiple "
                                "of 8); omit for no setmaxnreg.", None)
    warpgroup_aligned: bool = doc("The role issues WGMMA or setmaxnreg: its warps must form whole "
                                  "warpgroups starting at a warp index divisible by 4.", False)
    internal_setmaxnreg: list[int] = doc("setmaxnreg values the component's own code issues (a component that "
                                         "manages its warpgroups itself, as CUTLASS kernels do); any other "
                                         "setmaxnreg in its code is a conformance error.", [])


@dataclass(kw_only=True)
class Entry:
    """[[entry]]: one extern "C" __device__ function, called by the glue once per tile."""
    symbol: str = doc("Symbol name in the LTO-IR.")
    role: str = doc("Role whose warps call it.")
    phase: str = doc("Phase name; buffers list the phases they are live in.")
    ports: list[str] = doc("Register ports passed as arguments after the bindings, in order.", [])


@dataclass(kw_only=True)
class SmemBuffer:
    """[[smem]]: a shared-memory buffer."""
    name: str = doc("Buffer name; becomes a field of the bindings struct holding its byte offset.")
    bytes: Expr = doc("Size in bytes.")
    align: Expr = doc("Alignment in bytes (1024 for 128B-swizzled TMA tiles).", Expr.parse(16))
    live: list[str] = doc("Phases the buffer is live in; empty means the whole kernel. Buffers live only "
                          "in disjoint phases of one role may share memory.", [])
    offset: Expr | None = doc("Pinned byte offset (fixed inside an opaque binary); omit to let the linker "
                              "place it.", None)
    default_offset: Expr = doc("Offset the component was packaged with (used by symbol-only linking).", Expr.parse(0))


@dataclass(kw_only=True)
class NamedBarrier:
    """[[named_barrier]]: a bar.sync/bar.arrive barrier used by the component."""
    name: str = doc("Barrier name; becomes a field of the bindings struct holding its ID.")
    threads: Expr = doc("Threads taking part (a multiple of 32).")
    id: int | None = doc("Pinned ID (1..15); omit to let the linker choose.", None)
    default_id: int = doc("ID the component was packaged with (used by symbol-only linking).", 1)


@dataclass(kw_only=True)
class MBarrier:
    """[[mbarrier]]: an array of mbarriers in shared memory, initialized by the glue."""
    name: str = doc("Name; becomes a field of the bindings struct holding the byte offset of slot 0.")
    count: Expr = doc("Number of mbarriers in the array.", Expr.parse(1))
    arrivals: Expr = doc("Expected arrival count per phase.")
    tx_bytes: Expr = doc("Transaction bytes expected per phase (TMA / bulk copies), 0 if none.", Expr.parse(0))
    default_offset: Expr = doc("Offset the component was packaged with (used by symbol-only linking).", Expr.parse(0))


@dataclass(kw_only=True)
class Reserve:
    """[reserve]: resources the component's opaque code uses internally (always pinned)."""
    named_barriers: list[int] = doc("Named barrier IDs used inside the code that no other part may use "
                                    "(CUTLASS reserves 1..7, for example).", [])
    mbarriers_in: list[str] = doc("[[smem]] buffers in which the component places and initializes mbarriers "
                                  "of its own (CUTLASS pipelines keep theirs inside SharedStorage); mbarrier "
                                  "operations inside these buffers are its business.", [])


@dataclass(kw_only=True)
class TmaBox:
    """[operand.tma]: the component moves this operand with the TMA engine (cp.async.bulk.tensor). The
    runtime encodes the tensor map from the caller's array at launch (cuTensorMapEncodeTiled) and the
    kernel receives it as a __grid_constant__ parameter; the bindings field is a pointer to it."""
    box: list[Expr] = doc("Elements copied per TMA instruction in each dimension, row-major like `shape` "
                          "(each 1..256; the innermost box times the element size at most the swizzle span).")
    swizzle: int = doc(f"Shared-memory swizzle span in bytes, one of {', '.join(map(str, TMA_SWIZZLES))} "
                       "(128 for WGMMA's 128B-swizzled K-major tiles).", 128)


@dataclass(kw_only=True)
class Operand:
    """[[operand]]: a global-memory tensor the component reads or writes (a kernel parameter)."""
    name: str = doc("Operand name; becomes a pointer field of the bindings struct.")
    dtype: str = doc(f"Element type: {', '.join(DTYPES)}.")
    shape: list[Expr] = doc("Shape as expressions over facts (row-major, contiguous).")
    access: str = doc("'read', 'write' or 'readwrite'.", "read")
    tma: TmaBox | None = doc("Set when the component reads or writes it through a TMA tensor map.", None)


@dataclass(kw_only=True)
class Port:
    """[[port]]: a tensor handed to or taken from another component inside the block."""
    name: str = doc("Port name.")
    direction: str = doc("'out' (this component produces it) or 'in'.")
    space: str = doc("'smem' or 'registers'.")
    dtype: str = doc(f"Element type: {', '.join(DTYPES)}.")
    shape: dict[str, Expr] = doc("Named dimensions in order, e.g. { row = 'tile_rows', col = 'tile_cols' }.")
    buffer: str | None = doc("smem ports: the [[smem]] buffer that holds the tensor.", None)
    offset: Expr | None = doc("smem ports: element offset as an expression over the dimension names.", None)
    values: Expr | None = doc("register ports: values per thread (the array length).", None)
    fragment: dict[str, Expr] | None = doc("register ports: each dimension's index as an expression over "
                                          "t (thread in role) and v (value index).", None)
    mbarriers: list[str] = doc("smem ports: the component's mbarriers that synchronize the hand-over; "
                               "the peer must declare the same names with equal counts.", [])
    protocol: str = doc("'mbarrier_ring' (producer/consumer ring on the mbarriers), 'barrier' (glue "
                        "places named barriers around the transfer) or 'registers'.", "barrier")


@dataclass(kw_only=True)
class Schedule:
    """[schedule]: the tile order the component assumes."""
    order: str = doc("'row_major', 'column_major' or 'any'.", "any")


@dataclass(kw_only=True)
class Contract:
    """A component contract (one TOML file)."""
    component: Identity = doc("Identity of the component.")
    roles: dict[str, Role] = doc("Roles by name.")
    entry: list[Entry] = doc("Entry points, one per role and phase.")
    facts: Facts = doc("Facts required and guaranteed.", Facts())
    smem: list[SmemBuffer] = doc("Shared-memory buffers.", [])
    named_barrier: list[NamedBarrier] = doc("Named barriers.", [])
    mbarrier: list[MBarrier] = doc("mbarrier arrays.", [])
    reserve: Reserve = doc("Resources used internally and pinned.", Reserve())
    operand: list[Operand] = doc("Global-memory operands.", [])
    port: list[Port] = doc("Ports to other components.", [])
    schedule: Schedule = doc("Tile schedule assumptions.", Schedule())

    # --- derived views -------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.component.name

    def builtin_names(self) -> set[str]:
        """Names every expression may use besides facts: each role's warps and threads."""
        return {f"{r}_{k}" for r in self.roles for k in ("warps", "threads")}

    def fact_names(self) -> set[str]:
        return set(self.facts.requires) | set(self.facts.guarantees)

    def compile_facts(self) -> list[str]:
        return [n for n, r in self.facts.requires.items() if r.compile]

    def role_env(self) -> dict[str, int]:
        return {**{f"{r}_warps": v.warps for r, v in self.roles.items()},
                **{f"{r}_threads": 32 * v.warps for r, v in self.roles.items()}}

    def phases(self) -> dict[str, str]:
        """phase -> role."""
        return {e.phase: e.role for e in self.entry}

    def port_by_name(self, name: str) -> Port | None:
        return next((p for p in self.port if p.name == name), None)


def load_contract(path: str | Path) -> Contract:
    path = Path(path)
    data = schema.read_toml(path, ContractError)
    name = data.get("component", {}).get("name") if isinstance(data.get("component"), dict) else None
    contract = schema.load(Contract, data, file=str(path), path="", error=ContractError, component=name)
    validate(contract, str(path))
    return contract


def parse_contract_text(text: str, origin: str) -> Contract:
    """Load a contract stored inside a package (``origin`` names it in errors)."""
    import tomllib
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ContractError(f"malformed TOML: {exc}", file=origin) from None
    contract = schema.load(Contract, data, file=origin, path="", error=ContractError,
                           component=data.get("component", {}).get("name"))
    validate(contract, origin)
    return contract


def validate(c: Contract, file: str) -> None:
    """Checks that need only this contract: names, ranges, references, expression names."""

    def err(field: str, msg: str, hint: str | None = None) -> ContractError:
        return ContractError(msg, file=file, component=c.name, field=field, hint=hint)

    if not c.name.isidentifier():
        raise err("component.name", f"'{c.name}' is not a C identifier", "use letters, digits and underscores")
    if not c.roles:
        raise err("roles", "a component needs at least one role")
    for rname, role in c.roles.items():
        if role.warps < 1 or role.warps > 32:
            raise err(f"roles.{rname}.warps", f"{role.warps} warps is outside 1..32")
        if role.warpgroup_aligned and role.warps % 4:
            raise err(f"roles.{rname}.warps", f"role '{rname}' is warpgroup-aligned but has {role.warps} warps, "
                      "not a multiple of 4", "WGMMA and setmaxnreg work on whole warpgroups of 4 warps")
        if role.registers is not None:
            lo, hi = SETMAXNREG_RANGE
            if not lo <= role.registers <= hi or role.registers % 8:
                raise err(f"roles.{rname}.registers", f"setmaxnreg value {role.registers} must be in [{lo}, {hi}] "
                          "and a multiple of 8")

    # Field names of the generated bindings struct must be unique C identifiers.
    seen: dict[str, str] = {}
    fields = [(n, f"facts.requires.{n}") for n in c.facts.requires] + \
             [(n, f"facts.guarantees.{n}") for n in c.facts.guarantees] + \
             [(b.name, f"smem[{i}].name") for i, b in enumerate(c.smem)] + \
             [(b.name, f"named_barrier[{i}].name") for i, b in enumerate(c.named_barrier)] + \
             [(b.name, f"mbarrier[{i}].name") for i, b in enumerate(c.mbarrier)] + \
             [(o.name, f"operand[{i}].name") for i, o in enumerate(c.operand)]
    for name, where in fields:
        if not name.isidentifier():
            raise err(where, f"'{name}' is not a C identifier")
        if name in seen:
            raise err(where, f"name '{name}' is used twice (also {seen[name]})",
                      "facts, buffers, barriers and operands share one namespace (the bindings struct)")
        seen[name] = where
    for name, req in c.facts.requires.items():
        where = f"facts.requires.{name}"
        if req.range is not None and (len(req.range) != 2 or req.range[0] > req.range[1]):
            raise err(f"{where}.range", f"range must be [low, high], got {req.range}")
        if req.multiple_of is not None and req.multiple_of < 1:
            raise err(f"{where}.multiple_of", "must be >= 1")
        if req.compile and req.default is None:
            raise err(f"{where}.default", f"compile-time fact '{name}' needs a default (the value a plain pack uses)")

    known = c.fact_names() | c.builtin_names()
    phases = c.phases()

    def names_ok(e: Expr | None, where: str, extra: set[str] = frozenset()) -> None:
        if e is None:
            return
        unknown = e.names() - known - extra
        if unknown:
            raise err(where, f"expression {e.text!r} uses unknown name(s) {', '.join(sorted(unknown))}",
                      f"declare them under [facts.requires] or use one of: {', '.join(sorted(known))}")

    for name, g in c.facts.guarantees.items():
        names_ok(g, f"facts.guarantees.{name}")
    for i, e in enumerate(c.entry):
        if e.role not in c.roles:
            raise err(f"entry[{i}].role", f"unknown role '{e.role}'", f"roles: {', '.join(c.roles)}")
        for p in e.ports:
            port = c.port_by_name(p)
            if port is None or port.space != "registers":
                raise err(f"entry[{i}].ports", f"'{p}' is not a register port of this component")
    if len(set(phases)) != len(c.entry):
        raise err("entry", "two entries share one phase name")
    for i, b in enumerate(c.smem):
        names_ok(b.bytes, f"smem[{i}].bytes")
        names_ok(b.align, f"smem[{i}].align")
        names_ok(b.offset, f"smem[{i}].offset")
        for ph in b.live:
            if ph not in phases:
                raise err(f"smem[{i}].live", f"unknown phase '{ph}'", f"phases: {', '.join(phases)}")
    for i, nb in enumerate(c.named_barrier):
        names_ok(nb.threads, f"named_barrier[{i}].threads")
        for key, v in (("id", nb.id), ("default_id", nb.default_id)):
            if v is not None and not 1 <= v <= MAX_NAMED_BARRIER_ID:
                raise err(f"named_barrier[{i}].{key}", f"barrier ID {v} is outside 1..{MAX_NAMED_BARRIER_ID}",
                          "ID 0 is __syncthreads; the hardware has 16 IDs")
    pinned_ids: dict[int, str] = {}
    for i, nb in enumerate(c.named_barrier):
        if nb.id is not None and nb.id in pinned_ids:
            raise err(f"named_barrier[{i}].id", f"barriers '{pinned_ids[nb.id]}' and '{nb.name}' are both pinned at "
                      f"ID {nb.id}", "two barriers of one component need two IDs (or declare one barrier)")
        if nb.id is not None:
            pinned_ids[nb.id] = nb.name
    for name in c.reserve.mbarriers_in:
        if all(b.name != name for b in c.smem):
            raise err("reserve.mbarriers_in", f"'{name}' is not one of this component's [[smem]] buffers")
    for v in c.reserve.named_barriers:
        if not 1 <= v <= MAX_NAMED_BARRIER_ID:
            raise err("reserve.named_barriers", f"barrier ID {v} is outside 1..{MAX_NAMED_BARRIER_ID}")
    for i, m in enumerate(c.mbarrier):
        for key in ("count", "arrivals", "tx_bytes"):
            names_ok(getattr(m, key), f"mbarrier[{i}].{key}")
    for i, o in enumerate(c.operand):
        if o.dtype not in DTYPES:
            raise err(f"operand[{i}].dtype", f"unknown dtype '{o.dtype}'", f"one of {', '.join(DTYPES)}")
        if o.access not in ("read", "write", "readwrite"):
            raise err(f"operand[{i}].access", f"'{o.access}' is not read, write or readwrite")
        for j, s in enumerate(o.shape):
            names_ok(s, f"operand[{i}].shape[{j}]")
        if o.tma is not None:
            if len(o.tma.box) != len(o.shape) or not 1 <= len(o.shape) <= 5:
                raise err(f"operand[{i}].tma.box", f"box has {len(o.tma.box)} dimension(s) but the operand has "
                          f"{len(o.shape)}", "one box extent per shape dimension (TMA takes 1 to 5)")
            for j, s in enumerate(o.tma.box):
                names_ok(s, f"operand[{i}].tma.box[{j}]")
            if o.tma.swizzle not in TMA_SWIZZLES:
                raise err(f"operand[{i}].tma.swizzle", f"swizzle {o.tma.swizzle} is not one of {TMA_SWIZZLES}")
    for lib in c.component.headers:
        if lib not in HEADER_LIBRARIES:
            raise err("component.headers", f"unknown header library '{lib}'", f"known: {', '.join(HEADER_LIBRARIES)}")
    for i, p in enumerate(c.port):
        where = f"port[{i}]"
        if p.direction not in ("in", "out"):
            raise err(f"{where}.direction", f"'{p.direction}' is not 'in' or 'out'")
        if p.dtype not in DTYPES:
            raise err(f"{where}.dtype", f"unknown dtype '{p.dtype}'", f"one of {', '.join(DTYPES)}")
        for d, e in p.shape.items():
            names_ok(e, f"{where}.shape.{d}")
        if p.space == "smem":
            if p.buffer is None or all(b.name != p.buffer for b in c.smem):
                raise err(f"{where}.buffer", f"smem port '{p.name}' must name one of its [[smem]] buffers")
            if p.offset is None:
                raise err(f"{where}.offset", f"smem port '{p.name}' needs an offset (layout) expression")
            names_ok(p.offset, f"{where}.offset", set(p.shape))
            for m in p.mbarriers:
                if all(x.name != m for x in c.mbarrier):
                    raise err(f"{where}.mbarriers", f"unknown mbarrier '{m}'")
            if p.protocol not in ("mbarrier_ring", "barrier"):
                raise err(f"{where}.protocol", f"smem ports use 'mbarrier_ring' or 'barrier', not '{p.protocol}'")
        elif p.space == "registers":
            if p.values is None or p.fragment is None:
                raise err(where, f"register port '{p.name}' needs 'values' and 'fragment'")
            names_ok(p.values, f"{where}.values")
            if set(p.fragment) != set(p.shape):
                raise err(f"{where}.fragment", f"fragment dimensions {sorted(p.fragment)} must match shape "
                          f"dimensions {sorted(p.shape)}")
            for d, e in p.fragment.items():
                names_ok(e, f"{where}.fragment.{d}", {"t", "v"})
            if not any(p.name in e.ports for e in c.entry):
                raise err(where, f"register port '{p.name}' is not passed to any entry", "list it in an entry's ports")
        else:
            raise err(f"{where}.space", f"'{p.space}' is not 'smem' or 'registers'")
    if c.schedule.order not in ("row_major", "column_major", "any"):
        raise err("schedule.order", f"'{c.schedule.order}' is not row_major, column_major or any")

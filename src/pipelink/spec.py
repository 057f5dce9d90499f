"""Link specs (TOML): which packages, how they connect, the facts the user fixes, the schedule.

Paths inside a spec are relative to the spec file. A spec is validated completely on load (types,
ranges, names) by its schema's constraints and ``_validate`` (what relates fields to each other);
the tile grid, an expression over facts, once the facts are resolved (``tile_grid``).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from . import schema
from .errors import ExpressionError, SpecError, show
from .expr import MAX_LITERAL, Expr
from .schema import Bounds, Identifier, Name, OneOf, doc, identifier_problem
from .stream_k import SPLITS
from .verify_terms import TOLERANCES, name_problem

# Device profiles: the limits the checker enforces (sm_90a: H100/H200 SXM). On the H200 the
# driver reported opt-in 232448 B per block and 1024 B reserved per block; linked cubins show that
# reserved KB as static smem in cuobjdump, and 232448 B of dynamic smem were accepted beside it
# (bench/results/logs/h200-smem-probe-20261129T2207.log.gz).
_SM90 = {"arch": "sm_90a", "sms": 132, "smem_optin_bytes": 232448, "smem_reserved_bytes": 1024,
         "regs_per_block": 65536, "max_warps": 32, "named_barriers": 16}
# Blackwell (no GPU of these here: linked and checked on the CPU only). Per block: 227 KB opt-in smem on sm_100/103,
# 99 KB on sm_120, 1 KB reserved, 64 K registers, 32 warps, 16 named barriers: CUDA C++ Programming Guide,
# "Compute Capabilities", tables 29-32 (docs.nvidia.com/cuda/cuda-programming-guide/05-appendices/compute-
# capabilities.html); the reserved KB: Blackwell Tuning Guide 1.4.1.1 (docs.nvidia.com/cuda/blackwell-tuning-guide);
# the same opt-in figures in CUTLASS's include/cutlass/arch/arch.h (sm100_/sm120_smem_capacity_bytes) and CCCL's
# libcudacxx/include/cuda/__device/arch_traits.h; 16 barriers: PTX ISA, bar/barrier ("sixteen barriers numbered
# 0..15"). SM counts are in no NVIDIA datasheet found: B200 148 (CUTLASS's sm100 examples, third-party queries), B300
# "up to 160, varies by SKU" (NVIDIA's Blackwell Ultra post; HGX B300 parts measured 148: the profile takes 148, the
# fewer, since a link whose blocks wait on each other needs every block resident), RTX 5090 170 (its architecture
# whitepaper). A persistent grid sized for more SMs than the card has is slower, never wrong, except for such links.
# Tensor memory: 128 lanes x 512 columns of 32-bit cells per SM on sm_100a/sm_103a, allocated by tcgen05.alloc in
# powers of two from 32 columns (PTX ISA 9.0, "Tensor Memory" and tcgen05.alloc; CUTLASS's
# cute/arch/tmem_allocator_sm100.hpp: Sm100TmemCapacityColumns = 512). sm_120a has none (no tcgen05: PTX ISA, the
# tcgen05 instructions' target requirements); a profile without "tmem_columns" has none.
_SM100 = {**_SM90, "arch": "sm_100a", "sms": 148, "tmem_columns": 512}
DEVICES = {"h200": dict(_SM90), "h100": dict(_SM90), "b200": dict(_SM100), "b300": {**_SM100, "arch": "sm_103a"},
           "rtx5090": {**_SM90, "arch": "sm_120a", "sms": 170, "smem_optin_bytes": 101376}}

def device_for(archs: list[str]) -> str:
    """The first device profile (h200 first) whose target is one of ``archs``: where a package alone is linked."""
    return next((name for name, d in DEVICES.items() if d["arch"] in archs), "h200")


# The glue's tile loop counts in a 32-bit int and steps by the grid (`tile < tiles; tile += grid`):
# tiles and grid of at most 2**30 each keep tile + grid below 2**31 (CUDA's grid.x limit is 2**31 - 1).
MAX_TILES = MAX_GRID = 2 ** 30
TILE_COUNT = Bounds(1, MAX_TILES, "each dimension needs a tile; the glue's tile loop counts in a 32-bit int")
# Facts reach the glue as C int constants.
Fact = Annotated[int, Bounds(-MAX_LITERAL, MAX_LITERAL, "facts become C int constants in the glue")]
# Linux's limits on a file name and a whole path, in bytes.
MAX_PATH_PART, MAX_PATH = 255, 4096


@dataclass(frozen=True)
class FilePath:
    """A path as a spec gives it: one that the file system can take."""
    hint = "give a file path relative to the spec"

    def problem(self, value: str) -> str | None:
        if not value or "\0" in value:
            return f"{show(value)} is not a path"
        longest = max(len(os.fsencode(part)) for part in value.split("/"))
        if longest > MAX_PATH_PART:
            return f"a name in {show(value)} is {longest} bytes long, over the limit of {MAX_PATH_PART} by " \
                   f"{longest - MAX_PATH_PART}"
        size = len(os.fsencode(value))
        if size > MAX_PATH:
            return f"{show(value)} is {size} bytes long, over the limit of {MAX_PATH} by {size - MAX_PATH}"
        return None

    def json(self) -> dict:
        return {"minLength": 1, "maxLength": MAX_PATH}

    def label(self) -> str:
        return "path"


@dataclass(frozen=True)
class CallableRef:
    """'file.py:function' or 'module:function', what the verify child imports."""
    hint = "e.g. 'reference.py:my_reference'"

    def problem(self, value: str) -> str | None:
        where, _, name = value.rpartition(":")
        if not where or len(name) > MAX_PATH_PART or not all(part.isidentifier() for part in name.split(".")):
            return f"{show(value)} is not 'file.py:function' or 'module:function'"
        return FilePath().problem(where)

    def json(self) -> dict:
        return {"pattern": "^.+:[A-Za-z_][A-Za-z0-9_.]*$"}

    def label(self) -> str:
        return "'file.py:function'"


@dataclass(frozen=True)
class Sha256:
    """A SHA-256 digest as `sha256sum` prints it: 64 lowercase hex digits (one spelling, so that a pin
    compares as text and `pipelink lock` rewrites it to the same bytes)."""
    hint = "64 lowercase hex digits, as `sha256sum PACKAGE` prints them; `pipelink lock SPEC` writes them"

    def problem(self, value: str) -> str | None:
        if len(value) != 64:
            return f"{show(value)} is {len(value)} characters long; a SHA-256 is 64 hex digits"
        bad = next((ch for ch in value if ch not in "0123456789abcdef"), None)
        return None if bad is None else f"{show(value)} holds {bad!r}, which is not a lowercase hex digit"

    def json(self) -> dict:
        return {"pattern": "^[0-9a-f]{64}$"}

    def label(self) -> str:
        return "SHA-256, 64 lowercase hex digits"


@dataclass(kw_only=True)
class LinkSection:
    """[link]: the kernel being made."""
    name: Name = doc("Name of the linked kernel (a C identifier).")
    entry: Name | None = doc("Symbol of the generated __global__ entry (default pl_<name>).", None)
    device: Annotated[str, OneOf(tuple(DEVICES))] = doc(
        f"Device profile whose limits are checked: {', '.join(DEVICES)}.", "h200")
    launch_facts: list[Name] = doc(
        "Facts the kernel takes at launch instead of folding them (a decode step's position): each is a parameter "
        "`glue.fact_NAME`, an int64 in device memory read at the kernel's start, anywhere from the least value every "
        "component that requires it allows (its domain and limits) up to the linked value; outside, the kernel "
        "traps. Every component that requires the fact must declare it `launch`.", [])
    keep: list[str] = doc(
        "Out-ports ('instance.port') whose [[workspace]] the kernel hands its caller as an output instead of "
        "scratch: a training forward keeps what its backward reads (routing, activations). Each becomes a write "
        "operand named after its workspace, of the port's dtype and shape; a workspace the kernel needs cleared "
        "(`zero`, `zero_once`, `grid_sync`) cannot be kept.", [])


@dataclass(kw_only=True)
class Instance:
    """[[instance]]: one use of a component: its package, or its source and contract (packed by the link)."""
    name: Name = doc("Instance name (a C identifier); ports are addressed as instance.port.")
    package: Annotated[str, FilePath()] | None = doc(
        "Path of the .plc package, relative to the spec. Give this or `source`.", None)
    source: Annotated[str, FilePath()] | None = doc(
        "Path of the component's CUDA source, relative to the spec, in place of a package: the link packs it with "
        "its contract, as `pipelink pack` would (the same bytes; its compiles are kept in the build cache).", None)
    contract: Annotated[str, FilePath()] | None = doc(
        "The source's contract, relative to the spec (default: the source's path with .toml).", None)
    variants: list[dict[Name, Fact]] = doc(
        "The variants packed from `source`, each a table of compile-time facts (default: one, its compile-time "
        "facts taken from this instance's facts, then [facts], then the contract's defaults).", [])
    sha256: Annotated[str, Sha256()] | None = doc(
        "Pin: the SHA-256 of the package file's bytes (as `sha256sum` prints it). A package whose bytes differ "
        "is refused (PinMismatch), as a lockfile refuses an unexpected update; `pipelink lock SPEC` writes the "
        "pins. Left out: whatever package lies at that path is linked.", None)
    roles: dict[Name, Name] = doc("Component role -> kernel role (default: the same name).", {})
    facts: dict[Name, Fact] = doc("Facts fixed for this instance only (override [facts]).", {})


@dataclass(kw_only=True)
class Connection:
    """[[connect]]: a tensor handed from one instance's out-port to another's in-port."""
    src: str = doc("Producing port, 'instance.port'.", key="from")
    dst: str = doc("Consuming port, 'instance.port'.", key="to")


@dataclass(kw_only=True)
class ScheduleSection:
    """[schedule]: the tile schedule all components must agree on."""
    tiles: list[Annotated[Expr, TILE_COUNT]] = doc("Tile grid: [rows] or [rows, cols], expressions over facts.")
    order: Annotated[str, OneOf(("row_major", "column_major"))] = doc(
        "'row_major' or 'column_major' order of the linear tile index.", "row_major")
    persistent: bool = doc("Persistent kernel: grid = min(tiles, SMs) (with a split, SMs), each block loops over its "
                           "tiles or k-tiles.", True)
    group: Annotated[int, Bounds(0, MAX_TILES, "0 for no bands, or the tiles in a band")] = doc(
        "Walk the tile grid in bands of `group` tiles across the fast dimension (column_major: bands of `group` tile "
        "rows, each walked column by column), so the blocks in flight share one band of the operand that would not "
        "fit in L2 (CUTLASS's rasterization swizzle). 0: no bands.", 0)
    tiles_from: str | None = doc(
        "'instance.workspace': the tile count is decided in the kernel: the int32 at the start of that "
        "[[workspace]], written by a whole-block phase before the tile loops (when = \"start\"; across blocks "
        "through the component's own grid-wide barrier). `tiles` is then its upper bound, which sizes the grid; "
        "ctx.tile indexes the component's own tile table.", None)
    split: Annotated[str, OneOf(SPLITS)] = doc(
        "How tiles are shared among the blocks: 'tiles' (each tile whole, tile t in block t mod grid), "
        "'stream_k' (every block the same number of k-tiles, to within one: a tile may be cut between "
        "blocks, whose partial sums the glue adds up in block order) or 'hybrid' (every full wave of whole "
        "tiles, then the tiles left cut up to 8 ways, as stream_k over just enough blocks). A split needs one "
        "instance with [schedule] k_tiles whose out-ports are reduce = \"sum\" (docs/design/stream_k.md).", "tiles")


@dataclass(kw_only=True)
class LaunchSection:
    """[launch]: launch geometry overrides."""
    grid: Annotated[int, Bounds(1, MAX_GRID, "the glue's tile loop counts in a 32-bit int; leave grid out for "
                                             "the default")] | None = doc(
        "Number of blocks (default: from the schedule and the device's SM count).", None)
    cluster: Annotated[int, OneOf((1, 2, 4))] = doc(
        "Blocks per thread-block cluster along x (1, 2 or 4). The blocks of a cluster take consecutive tiles of the "
        "fast dimension together (so they may share operand loads by TMA multicast), and a component that needs a "
        "cluster says so with a fact the link must set equal.", 1)
    roles: list[Name] = doc("Order of kernel roles in the block's warps (default: order of first use).", [])


MAX_USER_RUNGS = 64


@dataclass(kw_only=True)
class UserRung:
    """[[verify.rung]]: a check of your own, run in the GPU child after the built-in rungs."""
    name: Name = doc("The rung's name in the results: an identifier no built-in rung has.")
    check: Annotated[str, CallableRef()] = doc(
        "'file.py:function' (relative to the spec) or 'module:function', called as f(ctx) with a RungContext "
        "(inputs(seed), outputs(), launch(tensors), reference, facts, out_dir): a dict of figures (or None) "
        "makes the rung ok, an exception makes it FAILED with the exception; later rungs still run.")


@dataclass(kw_only=True)
class VerifySection:
    """[verify]: how `pipelink verify` checks and measures the kernel."""
    reference: Annotated[str, CallableRef()] | None = doc(
        "Slow reference, 'file.py:function' (relative to the spec) or 'module:function'; called as "
        "f(inputs, facts) -> {operand: tensor}, inputs keyed 'instance.operand'.", None)
    prepare: Annotated[str, CallableRef()] | None = doc(
        "Inputs that must agree with each other (a backward's saved activations, made by its forward from the "
        "same drawn weights), 'file.py:function' or 'module:function'; called as f(inputs, facts) -> {operand: "
        "tensor} after the draw, its tensors (read operands, each of the operand's shape and dtype) replacing the "
        "drawn ones.", None)
    baselines: list[Annotated[str, CallableRef()]] = doc(
        "Callables timed in the same process for ratios (same form as reference).", [])
    inputs: dict[str, str] = doc("Input distribution per read operand: 'normal' (default), 'uniform' (in [-1, 1)) "
                                 "or 'ones', optionally scaled: 'normal * 0.014'.", {})
    precision: str | None = doc("Precision whose default tolerance applies: fp32, tf32, fp16, bf16, fp8e4m3, "
                                "fp8e5m2 (default: each output's dtype).", None)
    rel_l2_tol: float | None = doc("Override: largest accepted ||out - ref|| / ||ref||.", None)
    seeds: Annotated[int, Bounds(1, 1000)] = doc("Fresh random input sets checked.", 3)
    flops: Expr | None = doc("Floating-point operations of one launch (roofline), expression over facts.", None)
    bytes: Expr | None = doc("Fewest bytes one launch must move; default: every operand once.", None)
    timeout: Annotated[int, Bounds(1, 86400)] = doc("Seconds before a GPU run is declared hung.", 60)
    rung: list[UserRung] = doc(f"Checks of your own, run after the built-in rungs (at most {MAX_USER_RUNGS}).", [])


MAX_TUNE_SHAPES = 256
_TUNE_WORDS = re.compile(r"^\s*[A-Za-z_][A-Za-z0-9_]{0,63}(\s*,\s*[A-Za-z_][A-Za-z0-9_]{0,63})*\s*$")
_TUNE_VALUES = re.compile(r"^\s*[+-]?[0-9xXa-fA-FoObB_]+(\s*\.\.\s*[+-]?[0-9xXa-fA-FoObB_]+)?"
                         r"(\s*,\s*[+-]?[0-9xXa-fA-FoObB_]+(\s*\.\.\s*[+-]?[0-9xXa-fA-FoObB_]+)?)*\s*$")


# The [schedule] and [launch] fields a tune search may vary (`--set schedule.split=tiles,stream_k`): how tiles are
# walked and shared, and the cluster; each value is loaded into the spec and checked as the file's own would be.
TUNABLE = {"schedule": {"order": str, "split": str, "group": int}, "launch": {"cluster": int, "grid": int}}
MAX_TUNE_SEARCHES = 64


@dataclass(kw_only=True)
class TuneSearch:
    """[[tune.search]]: a search of its own, for a range of shapes: what a hand-written table of candidates per
    shape range says (small M: 64-row tiles and stream-K; large M: bands and clusters)."""
    shapes: list[dict[Name, Fact]] = doc(
        f"Shapes to tune for (at most {MAX_TUNE_SHAPES} in all searches), each the varying facts' sizes: "
        "[{ M = 128 }, { M = 1024 }].", [])
    facts: dict[Name, str] = doc("Facts to search, each as --fact takes its values: '128,208,256' or '3..6'.", {})
    schedule: dict[Name, str] = doc(
        "[schedule] fields to search, each as --set takes its values: { split = 'tiles,stream_k', group = '0,16' } "
        f"(fields: {', '.join(TUNABLE['schedule'])}).", {})
    launch: dict[Name, str] = doc(
        f"[launch] fields to search: {{ cluster = '1,2' }} (fields: {', '.join(TUNABLE['launch'])}).", {})
    specs: list[Annotated[str, FilePath()]] = doc(
        "Alternative specs (another component set with the same operands), relative to this spec.", [])


@dataclass(kw_only=True)
class TuneSection(TuneSearch):
    """[tune]: what `pipelink tune SPEC` searches where the command gives no --shape, --fact, --set or --spec: its
    own fields are one search, and each [[tune.search]] another (a shape's bucket in one search only)."""
    search: list[TuneSearch] = doc(f"Further searches, each for its own shapes (at most {MAX_TUNE_SEARCHES}).", [])

    def searches(self) -> list[TuneSearch]:
        """The section's own search (where it names shapes), then the [[tune.search]] ones."""
        return ([self] if self.shapes else []) + list(self.search)


@dataclass(kw_only=True)
class LinkSpec:
    """A link spec (one TOML file)."""
    link: LinkSection = doc("The kernel being made.")
    instance: list[Instance] = doc("Component instances.")
    schedule: ScheduleSection = doc("Tile schedule.")
    facts: dict[Name, Fact] = doc("Facts fixed by the user for every instance.", {})
    connect: list[Connection] = doc("Port connections.", [])
    launch: LaunchSection = doc("Launch geometry.", LaunchSection())
    verify: VerifySection = doc("Verification and benchmark settings.", VerifySection())
    tune: TuneSection = doc("What `pipelink tune` searches by default.", TuneSection())

    path: Path | None = None  # set by load_spec; not a TOML field
    command_line_facts: tuple[str, ...] = ()  # [facts] entries --fact set (load_spec); not a TOML field

    def package_path(self, inst: Instance) -> Path:
        """The package file a package instance names (a source instance has none: see source_paths)."""
        return (self.folder / inst.package).resolve()

    def source_paths(self, inst: Instance) -> tuple[Path, Path]:
        """A source instance's source and contract files (the contract defaults to the source's .toml)."""
        source = self.folder / inst.source
        return source, (self.folder / inst.contract) if inst.contract else source.with_suffix(".toml")

    @property
    def folder(self) -> Path:
        return self.path.parent if self.path else Path(".")


def load_spec(path: str | Path, facts: dict[str, int] | None = None, settings: dict | None = None) -> LinkSpec:
    """The link spec at ``path``, checked whole. ``facts`` (from ``--fact NAME=VALUE``, see
    ``fact_option``) set or replace entries of its [facts] table, as if the file said them; a
    fact an [[instance]] fixes for itself still wins for that instance. ``settings`` ({"schedule.split":
    "stream_k", "launch.cluster": 2}: a tune search's, of TUNABLE) set [schedule] and [launch] fields before
    the spec is checked, so a value is judged as the file's own would be."""
    path = Path(path)
    data = schema.read_toml(path, SpecError, "link spec")
    for key, value in (settings or {}).items():
        section, _, name = str(key).partition(".")
        if name not in TUNABLE.get(section, {}):
            raise SpecError(f"{show(key)} is not a field a tune search may set", file=str(path), field="--set",
                            hint="one of " + ", ".join(f"{s}.{f}" for s, fields in TUNABLE.items() for f in fields))
        if isinstance(data.get(section, {}), dict):  # anything else: the schema says what is wrong with it
            data[section] = {**data.get(section, {}), name: value}
    spec = schema.load(LinkSpec, data, file=str(path), path="", error=SpecError)
    spec.path = path
    for name, value in (facts or {}).items():
        _check_fact(name, value, None)
        spec.facts[name] = value
    spec.command_line_facts = tuple(facts or ())
    _validate(spec, str(path))
    return spec


FACT_OPTION = "--fact"


def fact_option(text: str) -> tuple[str, int]:
    """One ``--fact NAME=VALUE`` from the command line, checked as a [facts] entry of a spec is: an
    identifier and an integer (decimal, or 0x/0o/0b) within the bounds of a fact. A malformed one is
    a SpecError naming the option."""
    name, sep, value = (part.strip() for part in text.partition("="))
    if not sep:
        raise SpecError(f"{show(text)} is not NAME=VALUE", field=FACT_OPTION,
                        hint="e.g. --fact stages=8 (repeat the option for several facts)")
    try:
        number = _integer(value)
    except ValueError:
        if value.lstrip("+-").isdigit():  # Python parses at most 4300 digits
            raise SpecError(f"the value of {show(name)} has {len(value)} digits, far over the limit {MAX_LITERAL}",
                            field=FACT_OPTION, hint=Fact.__metadata__[0].hint) from None
        raise SpecError(f"the value of {show(name)} in {show(text)} is not an integer", field=FACT_OPTION,
                        hint="facts are integers, e.g. --fact stages=8") from None
    _check_fact(name, number, text)
    return name, number


def _integer(text: str) -> int:
    """Decimal (a leading 0 allowed, as in 08), or 0x/0o/0b as TOML writes them."""
    try:
        return int(text, 10)
    except ValueError:
        return int(text, 0)


def fact_options(texts: list[str] | None) -> dict[str, int]:
    """Every ``--fact`` of a command, in order: a name given twice takes its last value."""
    return dict(fact_option(t) for t in texts or ())


def _check_fact(name: str, value: int, text: str | None) -> None:
    """A fact set from outside the spec file (``text``: as the user typed it, if they did)."""
    given = show(text) if text is not None else f"{show(name)} = {show(value)}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"the value in {given} is not an integer", field=FACT_OPTION)
    problem = identifier_problem(name) if isinstance(name, str) else f"{show(name)} is not a name"
    if problem:
        raise SpecError(f"the name in {given}: {problem}", field=FACT_OPTION, hint=Identifier.hint)
    for bound in Fact.__metadata__:
        problem = bound.problem(value)
        if problem:
            raise SpecError(f"{given}: {problem}", field=FACT_OPTION, hint=bound.hint)


def _validate_tune(tune: TuneSection, err) -> None:
    """[tune] and its [[tune.search]]: bounded counts, values as --fact and --set take them, known fields."""
    if len(tune.search) > MAX_TUNE_SEARCHES:
        raise err("tune.search", f"{len(tune.search)} searches, over the limit {MAX_TUNE_SEARCHES} by "
                  f"{len(tune.search) - MAX_TUNE_SEARCHES}", "merge searches over neighbouring shapes")
    total = sum(len(s.shapes) for s in (tune, *tune.search))
    if total > MAX_TUNE_SHAPES:
        raise err("tune.shapes", f"{total} shapes, over the limit {MAX_TUNE_SHAPES} by {total - MAX_TUNE_SHAPES}",
                  "tune the sizes that matter; buckets cover the rest")
    for where, search in [("tune", tune)] + [(f"tune.search[{n}]", s) for n, s in enumerate(tune.search)]:
        if where != "tune" and not search.shapes:
            raise err(f"{where}.shapes", "a search names no shape", "give it shapes, e.g. shapes = [{ M = 128 }]")
        for n, shape in enumerate(search.shapes):
            if not shape or any(v < 1 for v in shape.values()):
                raise err(f"{where}.shapes[{n}]", f"shape {shape} is empty or has a size below 1",
                          "give each shape its varying facts' sizes, e.g. { M = 128 }")
        for name, values in search.facts.items():
            if len(values) > 200 or not _TUNE_VALUES.match(values):
                raise err(f"{where}.facts.{name}", f"{values[:60]!r} is not a list of values and ranges",
                          "e.g. '128,208,256' or '3..6'")
        for section in TUNABLE:
            for name, values in getattr(search, section).items():
                kind = TUNABLE[section].get(name)
                if kind is None:
                    raise err(f"{where}.{section}.{name}", f"{section}.{name} is not a field a search may vary",
                              f"one of {', '.join(TUNABLE[section])}")
                pattern = _TUNE_VALUES if kind is int else _TUNE_WORDS
                if len(values) > 200 or not pattern.match(values):
                    raise err(f"{where}.{section}.{name}", f"{values[:60]!r} is not a list of " +
                              ("values and ranges" if kind is int else "names"),
                              "e.g. '1,2' or '0..16'" if kind is int else "e.g. 'tiles,stream_k'")


def _validate(spec: LinkSpec, file: str) -> None:
    """What the field constraints cannot see: fields against each other."""
    def err(field: str, msg: str, hint: str | None = None) -> SpecError:
        return SpecError(msg, file=file, field=field, hint=hint)

    _validate_tune(spec.tune, err)
    if len(spec.verify.rung) > MAX_USER_RUNGS:
        raise err("verify.rung", f"{len(spec.verify.rung)} rungs, over the limit {MAX_USER_RUNGS} by "
                  f"{len(spec.verify.rung) - MAX_USER_RUNGS}", "fold checks together into fewer rungs")
    seen: set[str] = set()
    for n, r in enumerate(spec.verify.rung):
        problem = name_problem(r.name) or (f"'{r.name}' names two rungs" if r.name in seen else None)
        if problem:
            raise err(f"verify.rung[{n}].name", problem, "a name of letters, digits and _ that no other rung has")
        seen.add(r.name)
    names = [i.name for i in spec.instance]
    if not names:
        raise err("instance", "a link needs at least one [[instance]]")
    for i, inst in enumerate(spec.instance):
        if names.count(inst.name) > 1:
            raise err(f"instance[{i}].name", f"instance name '{inst.name}' is used twice")
        _validate_origin(inst, i, err)
    earlier: dict[tuple[str, str], int] = {}
    for i, c in enumerate(spec.connect):
        for key, ref in (("from", c.src), ("to", c.dst)):
            _instance_ref(ref, names, err, f"connect[{i}].{key}", "port")
        if (c.src, c.dst) in earlier:  # the glue would copy the tile twice, on a barrier of its own
            raise err(f"connect[{i}]", f"connects {show(c.src)} to {show(c.dst)}, as connect[{earlier[c.src, c.dst]}] "
                      "does already", "delete one of the two [[connect]] tables")
        earlier[c.src, c.dst] = i
    if spec.schedule.tiles_from is not None:
        _instance_ref(spec.schedule.tiles_from, names, err, "schedule.tiles_from", "workspace")
    for i, ref in enumerate(spec.link.keep):
        _instance_ref(ref, names, err, f"link.keep[{i}]", "port")
        if spec.link.keep.index(ref) != i:
            raise err(f"link.keep[{i}]", f"{show(ref)} is kept twice", "name each port once")
    if not 1 <= len(spec.schedule.tiles) <= 2:
        raise err("schedule.tiles", "give one or two tile-grid dimensions")
    if not any(e.names() for e in spec.schedule.tiles):  # constants: check now; expressions once facts resolve
        tile_grid(spec, {})
    if len(set(spec.launch.roles)) != len(spec.launch.roles):
        raise err("launch.roles", "a role is listed twice")
    for name, dist in spec.verify.inputs.items():
        _instance_ref(name, names, err, "verify.inputs", "operand")
        try:
            input_distribution(dist)
        except ValueError as exc:
            raise err(f"verify.inputs.{name}", str(exc),
                      "'normal', 'uniform' or 'ones', e.g. 'normal * 0.02'") from None
    if spec.verify.precision is not None and spec.verify.precision not in TOLERANCES:
        raise err("verify.precision", f"unknown precision {show(spec.verify.precision)}",
                  f"one of {', '.join(TOLERANCES)}")
    tol = spec.verify.rel_l2_tol
    if tol is not None and not 0 <= tol < math.inf:
        raise err("verify.rel_l2_tol", f"{tol} is not a finite tolerance >= 0")


MAX_SOURCE_VARIANTS = 64  # variants packed from one source instance: each is an nvcc run


def _validate_origin(inst: Instance, i: int, err) -> None:
    """An instance names a package, or a source (with its contract and variants): one of the two."""
    if (inst.package is None) == (inst.source is None):
        raise err(f"instance[{i}]", f"instance '{inst.name}' names " + ("both a package and a source" if inst.package
                                                                          else "neither a package nor a source"),
                  'give package = "x.plc" (a packed component) or source = "x.cu" (packed by the link)')
    if inst.package is not None:
        extra = [k for k, v in (("contract", inst.contract), ("variants", inst.variants)) if v]
        if extra:
            raise err(f"instance[{i}].{extra[0]}", f"instance '{inst.name}' sets {extra[0]}, which only a source "
                      "instance takes (a package holds its contract and variants)",
                      f"delete {extra[0]}, or name the source in place of the package")
        return
    if inst.sha256 is not None:
        raise err(f"instance[{i}].sha256", f"instance '{inst.name}' pins a package's bytes, but names a source",
                  f"pack it (`pipelink pack {inst.source}`), name the package and pin that, or delete sha256")
    if len(inst.variants) > MAX_SOURCE_VARIANTS:
        raise err(f"instance[{i}].variants", f"{len(inst.variants)} variants, over the limit of {MAX_SOURCE_VARIANTS} "
                  f"by {len(inst.variants) - MAX_SOURCE_VARIANTS}", "pack the component once with `pipelink pack`")


def _instance_ref(ref: str, names: list[str], err, field: str, what: str) -> None:
    """'instance.<what>' naming a declared instance."""
    inst, _, port = ref.partition(".")
    if not port or inst not in names:
        raise err(field, f"{show(ref)} is not 'instance.{what}' of a declared instance",
                  f"instances: {', '.join(names)}")
    problem = identifier_problem(port)
    if problem:
        raise err(field, f"the {what} in {show(ref)}: {problem}")


def tile_grid(spec: LinkSpec, facts: dict[str, int]) -> list[int]:
    """The schedule's tile counts over the resolved facts, within what the glue can loop over;
    errors name the spec file."""
    def err(field: str, msg: str, hint: str | None = None) -> SpecError:
        return SpecError(msg, file=str(spec.path), field=field, hint=hint)

    tiles = []
    for i, e in enumerate(spec.schedule.tiles):
        try:
            value = e.eval(facts, where=f"schedule.tiles[{i}]")
        except ExpressionError as exc:
            raise err(exc.field, exc.message, exc.hint) from None
        problem = TILE_COUNT.problem(value)
        if problem:
            raise err(f"schedule.tiles[{i}]", f"tile count {e.text!r}: {problem}", TILE_COUNT.hint)
        tiles.append(value)
    total = math.prod(tiles)
    if total > MAX_TILES:
        raise err("schedule.tiles", f"{' x '.join(map(str, tiles))} = {total} tiles, over the limit of {MAX_TILES} "
                                    f"by {total - MAX_TILES}", TILE_COUNT.hint)
    return tiles


INPUT_DISTRIBUTIONS = ("normal", "uniform", "ones")


def input_distribution(text: str) -> tuple[str, float]:
    """'normal', 'uniform' or 'ones', optionally '* scale' -> (name, scale)."""
    name, _, scale = (part.strip() for part in text.partition("*"))
    if name not in INPUT_DISTRIBUTIONS:
        raise ValueError(f"unknown input distribution {text!r}")
    try:
        return name, float(scale) if scale else 1.0
    except ValueError:
        raise ValueError(f"scale in {text!r} is not a number") from None

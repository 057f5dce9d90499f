"""Link specs (TOML): which packages, how they connect, the facts the user fixes, the schedule.

Paths inside a spec are relative to the spec file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import schema
from .errors import SpecError
from .expr import Expr
from .schema import doc

# Device profiles: the limits the checker enforces (sm_90a: H100/H200 SXM). On the H200 the
# driver reported opt-in 232448 B per block and 1024 B reserved per block; linked cubins show that
# reserved KB as static smem in cuobjdump, and 232448 B of dynamic smem were accepted beside it
# (bench/results/logs/h200-smem-probe-20261129T2207.log).
_SM90 = {"arch": "sm_90a", "sms": 132, "smem_optin_bytes": 232448, "smem_reserved_bytes": 1024,
         "regs_per_block": 65536, "max_warps": 32, "named_barriers": 16}
DEVICES = {"h200": dict(_SM90), "h100": dict(_SM90)}


@dataclass(kw_only=True)
class LinkSection:
    """[link]: the kernel being made."""
    name: str = doc("Name of the linked kernel (a C identifier).")
    entry: str | None = doc("Symbol of the generated __global__ entry (default pl_<name>).", None)
    device: str = doc(f"Device profile whose limits are checked: {', '.join(DEVICES)}.", "h200")


@dataclass(kw_only=True)
class Instance:
    """[[instance]]: one use of a component package."""
    name: str = doc("Instance name (a C identifier); ports are addressed as instance.port.")
    package: str = doc("Path of the .plc package, relative to the spec.")
    roles: dict[str, str] = doc("Component role -> kernel role (default: the same name).", {})
    facts: dict[str, int] = doc("Facts fixed for this instance only (override [facts]).", {})


@dataclass(kw_only=True)
class Connection:
    """[[connect]]: a tensor handed from one instance's out-port to another's in-port."""
    src: str = doc("Producing port, 'instance.port'.", key="from")
    dst: str = doc("Consuming port, 'instance.port'.", key="to")


@dataclass(kw_only=True)
class ScheduleSection:
    """[schedule]: the tile schedule all components must agree on."""
    tiles: list[Expr] = doc("Tile grid: [rows] or [rows, cols], expressions over facts.")
    order: str = doc("'row_major' or 'column_major' order of the linear tile index.", "row_major")
    persistent: bool = doc("Persistent kernel: grid = min(tiles, SMs), each block loops over tiles.", True)
    group: int = doc("Walk the tile grid in bands of `group` tiles across the fast dimension (column_major: bands "
                     "of `group` tile rows, each walked column by column), so the blocks in flight share one band "
                     "of the operand that would not fit in L2 (CUTLASS's rasterization swizzle). 0: no bands.", 0)


@dataclass(kw_only=True)
class LaunchSection:
    """[launch]: launch geometry overrides."""
    grid: int | None = doc("Number of blocks (default: from the schedule and the device's SM count).", None)
    cluster: int = doc("Blocks per thread-block cluster along x (1, 2 or 4). The blocks of a cluster take consecutive "
                       "tiles of the fast dimension together (so they may share operand loads by TMA multicast), "
                       "and a component that needs a cluster says so with a fact the link must set equal.", 1)
    roles: list[str] = doc("Order of kernel roles in the block's warps (default: order of first use).", [])


@dataclass(kw_only=True)
class VerifySection:
    """[verify]: how `pipelink verify` checks and measures the kernel."""
    reference: str | None = doc("Slow reference, 'file.py:function' (relative to the spec) or 'module:function'; "
                                "called as f(inputs, facts) -> {operand: tensor}, inputs keyed 'instance.operand'.",
                                None)
    baselines: list[str] = doc("Callables timed in the same process for ratios (same form as reference).", [])
    inputs: dict[str, str] = doc("Input distribution per read operand: 'normal' (default), 'uniform' (in [-1, 1)) "
                                 "or 'ones', optionally scaled: 'normal * 0.014'.", {})
    precision: str | None = doc("Precision whose default tolerance applies: fp32, tf32, fp16, bf16, fp8e4m3, "
                                "fp8e5m2 (default: each output's dtype).", None)
    rel_l2_tol: float | None = doc("Override: largest accepted ||out - ref|| / ||ref||.", None)
    seeds: int = doc("Fresh random input sets checked.", 3)
    flops: Expr | None = doc("Floating-point operations of one launch (roofline), expression over facts.", None)
    bytes: Expr | None = doc("Fewest bytes one launch must move; default: every operand once.", None)
    timeout: int = doc("Seconds before a GPU run is declared hung.", 60)


@dataclass(kw_only=True)
class LinkSpec:
    """A link spec (one TOML file)."""
    link: LinkSection = doc("The kernel being made.")
    instance: list[Instance] = doc("Component instances.")
    schedule: ScheduleSection = doc("Tile schedule.")
    facts: dict[str, int] = doc("Facts fixed by the user for every instance.", {})
    connect: list[Connection] = doc("Port connections.", [])
    launch: LaunchSection = doc("Launch geometry.", LaunchSection())
    verify: VerifySection = doc("Verification and benchmark settings.", VerifySection())

    path: Path | None = None  # set by load_spec; not a TOML field

    def package_path(self, inst: Instance) -> Path:
        base = self.path.parent if self.path else Path(".")
        return (base / inst.package).resolve()


def load_spec(path: str | Path) -> LinkSpec:
    path = Path(path)
    data = schema.read_toml(path, SpecError)
    spec = schema.load(LinkSpec, data, file=str(path), path="", error=SpecError)
    spec.path = path
    _validate(spec, str(path))
    return spec


def _validate(spec: LinkSpec, file: str) -> None:
    def err(field: str, msg: str, hint: str | None = None) -> SpecError:
        return SpecError(msg, file=file, field=field, hint=hint)

    if not spec.link.name.isidentifier():
        raise err("link.name", f"'{spec.link.name}' is not a C identifier")
    if spec.link.device not in DEVICES:
        raise err("link.device", f"unknown device '{spec.link.device}'", f"one of {', '.join(DEVICES)}")
    names = [i.name for i in spec.instance]
    if not names:
        raise err("instance", "a link needs at least one [[instance]]")
    for i, inst in enumerate(spec.instance):
        if not inst.name.isidentifier():
            raise err(f"instance[{i}].name", f"'{inst.name}' is not a C identifier")
        if names.count(inst.name) > 1:
            raise err(f"instance[{i}].name", f"instance name '{inst.name}' is used twice")
    for i, c in enumerate(spec.connect):
        for key, ref in (("from", c.src), ("to", c.dst)):
            inst, _, port = ref.partition(".")
            if not port or inst not in names:
                raise err(f"connect[{i}].{key}", f"'{ref}' is not 'instance.port' of a declared instance",
                          f"instances: {', '.join(names)}")
    if not 1 <= len(spec.schedule.tiles) <= 2:
        raise err("schedule.tiles", "give one or two tile-grid dimensions")
    for name, dist in spec.verify.inputs.items():
        try:
            input_distribution(dist)
        except ValueError as exc:
            raise err(f"verify.inputs.{name}", str(exc), "'normal', 'uniform' or 'ones', e.g. 'normal * 0.02'") from None
    if spec.schedule.order not in ("row_major", "column_major"):
        raise err("schedule.order", f"'{spec.schedule.order}' is not row_major or column_major")


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

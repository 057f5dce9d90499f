"""The block's warps: a contiguous warp range per kernel role (warpgroup-aligned where WGMMA or
setmaxnreg need it) and the register budgets, from the contracts' roles and the spec's [launch]
roles alone. No fact enters it (a role's warps are literal in its contract), so the fact stage can
offer the block's size to a component compiled for it (block_threads) before anything is
allocated, and the allocation stage takes the same layout.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import RegisterBudgetError, WarpLayoutError
from .plan import Check, InstancePlan, LinkParts, RoleAlloc
from .queries import block_phases


# The fact a component compiled for the block's size requires (a whole-block phase's CUB BLOCK_DIM_X).
BLOCK_THREADS = "block_threads"


@dataclass(frozen=True)
class WarpLayout:
    """Each kernel role's warps and registers, and the block's threads they add up to."""
    roles: tuple[RoleAlloc, ...]
    block: int
    checks: tuple[Check, ...]
    warnings: tuple[str, ...]


def warp_layout(link: LinkParts) -> WarpLayout:
    """The layout of ``link``'s instances' roles (errors name the role, both sides and the limit)."""
    draft = _Layout()
    _roles(link, draft)
    return WarpLayout(tuple(draft.roles), draft.block, tuple(draft.checks), tuple(draft.warnings))


@dataclass
class _Layout:
    """The layout while _roles builds it up (a role's padding grows when the next role is aligned)."""
    roles: list[RoleAlloc] = field(default_factory=list)
    block: int = 0
    checks: list[Check] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _roles(link: LinkParts, draft: _Layout) -> None:
    order = list(link.spec.launch.roles)
    members: dict[str, list[tuple[InstancePlan, str]]] = {}
    for inst in link.instances:
        for crole, krole in inst.roles.items():
            members.setdefault(krole, []).append((inst, crole))
            if krole not in order:
                order.append(krole)
    unknown = [r for r in order if r not in members]
    if unknown:
        raise WarpLayoutError(f"[launch] roles names {unknown}, which no instance uses", file=str(link.spec.path),
                              field="launch.roles", hint=f"kernel roles: {', '.join(members)}")
    use_setmaxnreg = any(inst.contract.roles[c].registers for ms in members.values() for inst, c in ms)
    cursor = 0
    for krole in order:
        ms = members[krole]
        first_inst, first_role = ms[0]
        warps = first_inst.contract.roles[first_role].warps
        for inst, crole in ms[1:]:
            other = inst.contract.roles[crole].warps
            if other != warps:
                raise WarpLayoutError(
                    f"kernel role '{krole}' is shared by {first_inst.name} ({first_inst.contract.name}, role "
                    f"'{first_role}', {warps} warps) and {inst.name} ({inst.contract.name}, role '{crole}', "
                    f"{other} warps)", file=inst.file, component=inst.contract.name, field=f"roles.{crole}.warps",
                    hint="components that run in the same warps must declare the same warp count")
        aligned = any(inst.contract.roles[c].warpgroup_aligned for inst, c in ms)
        regs = [inst.contract.roles[c].registers for inst, c in ms if inst.contract.roles[c].registers]
        padded = warps
        if use_setmaxnreg or aligned:
            if cursor % 4:
                draft.roles[-1].warps += 4 - cursor % 4  # previous role gets idle warps up to the boundary
                cursor += 4 - cursor % 4
            if use_setmaxnreg:
                padded = -(-warps // 4) * 4  # setmaxnreg acts on whole warpgroups
        draft.roles.append(RoleAlloc(krole, cursor, padded, warps, max(regs) if regs else None, aligned))
        cursor += padded
    if use_setmaxnreg and cursor % 4:
        draft.roles[-1].warps += 4 - cursor % 4
        cursor += 4 - cursor % 4
    max_warps = link.device["max_warps"]
    if cursor > max_warps:
        layout = ", ".join(f"{r.name}={r.warps}" for r in draft.roles)
        raise WarpLayoutError(f"the block needs {cursor} warps ({layout}), over the device limit of {max_warps} "
                              f"by {cursor - max_warps}", file=str(link.spec.path), field="roles",
                              hint="use fewer warps per role or fewer roles")
    draft.block = 32 * cursor
    for r in draft.roles:
        if r.warps != r.used_warps:
            draft.warnings.append(f"role '{r.name}' padded from {r.used_warps} to {r.warps} warps "
                                 f"({'setmaxnreg' if use_setmaxnreg else 'warpgroup alignment'}); the extra warps idle")
    if use_setmaxnreg:
        _check_registers(link, draft)
    draft.checks.append(Check("warps", True, ", ".join(f"{r.name}: warps {r.warp_start}..{r.warp_start + r.warps - 1}"
                                                      for r in draft.roles) + f" ({draft.block} threads)"))


def entry_register_cap(threads: int) -> int:
    """Registers per thread at kernel entry under __launch_bounds__(threads, 1)."""
    return min(255, (65536 // threads) // 8 * 8)


def _check_registers(link: LinkParts, draft: _Layout) -> None:
    cap = entry_register_cap(draft.block)
    limit = link.device["regs_per_block"]
    usage = [(r, r.threads * (r.registers or cap)) for r in draft.roles]
    total = sum(u for _, u in usage)
    detail = " + ".join(f"{r.name} {r.threads}x{r.registers or cap}" for r, _ in usage)
    if total > limit:
        raise RegisterBudgetError(f"register budgets need {total} registers ({detail}), over the {limit}-register "
                                  f"file by {total - limit}", file=str(link.spec.path), field="roles",
                                  hint="lower a role's `registers` (setmaxnreg) in its contract, or use fewer warps")
    at_end = [f"{i.name}.{e.phase}" for i, e in block_phases(link.instances, "end")]
    if at_end and cap % 8 and any(r.registers for r in draft.roles):
        raise RegisterBudgetError(f"whole-block phase {at_end[0]} runs after the tile loops with the entry budget of "
                                  f"{cap} registers, which setmaxnreg (multiples of 8) cannot return the roles to",
                                  file=str(link.spec.path), field="roles",
                                  hint="give the roles no `registers`, or use more than 256 threads (a smaller block "
                                       "enters with 255 registers)")
    draft.checks.append(Check("registers", True, f"{detail} = {total} <= {limit}; entry cap {cap}/thread"))

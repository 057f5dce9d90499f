"""The independent plan audit (link/audit.py): zero findings on every real plan, and each invariant
reported when a real plan is corrupted in exactly the way a buggy stage would corrupt it."""

from __future__ import annotations

import copy
import re
from dataclasses import replace

import pytest

import pipelink
from conftest import edit_glue
from pipelink.link import audit, glue
from pipelink.link import glue_ir as ir
from pipelink.link.audit import AuditError
from pipelink.link.plan import TransferFence
from pipelink.link.pipeline import plan_link
from pipelink.refs import Ref


def _planned(spec, **kw):
    plan = plan_link(spec, **kw)
    plan.glue = glue.generate(glue.GlueInputs.of(plan))
    return plan


@pytest.mark.slow
@pytest.mark.parametrize("kw", [{}, {"mode": "monolithic"}, {"mode": "symbol"}, {"trace": True}, {"sanitize": True}])
def test_audit_passes_on_the_demo_in_every_mode(demo_dir, kw):
    plan = _planned(demo_dir / "link.toml", **kw)
    for result in (audit.check_plan(plan), audit.check_glue(plan)):
        assert result.ok, result.violations
        assert result.checked >= 10  # it looked at something
    if kw.get("mode") != "symbol":
        assert any(c.name == "audit (allocation)" for c in plan.checks)


@pytest.mark.slow
def test_audit_passes_on_every_example_link(collide_dir, relayout_dir):
    for spec in (collide_dir / "link.toml", relayout_dir / "link.toml"):
        plan = _planned(spec)
        assert audit.check_plan(plan).ok and audit.check_glue(plan).ok
    # link_pinned collides by design: refused before the audit sees a plan.
    with pytest.raises(pipelink.PipelinkError) as exc:
        plan_link(collide_dir / "link_pinned.toml")
    assert not isinstance(exc.value, AuditError)


# --- each invariant, caught on a corrupted copy of the demo's plan ----------------------------

def _buf(plan, user):
    return next(s for s in plan.smem if Ref.parse(user) in s.users)


def _bar(plan, owner):
    return next(b for b in plan.barriers if b.purpose.owner == owner)


def _fence(plan):
    return next(b for b in plan.barriers if isinstance(b.purpose, TransferFence))


def _alloc(plan, **changes):
    """The plan with its (frozen) allocation replaced by one with ``changes``."""
    plan.allocation = replace(plan.allocation, **changes)


def _inst(plan, name):
    return next(i for i in plan.instances if i.name == name)


def _bump_fact(inst, name):
    inst.facts[name] += 1


def _guaranteed_elsewhere(plan):
    """(instance, fact) where the instance requires a fact another instance guarantees."""
    return next((i, n) for i in plan.instances for n in i.contract.facts.requires
                for o in plan.instances if o is not i and n in o.contract.facts.guarantees)


PLAN_CORRUPTIONS = {
    # A 128-byte-aligned ring moved to an offset that is only 16-byte aligned.
    "smem.align": lambda p: setattr(_buf(p, "load.ring"), "offset", _buf(p, "load.ring").offset + 16),
    # Two buffers that are live together placed on top of each other.
    "smem.overlap": lambda p: setattr(_buf(p, "store.staging"), "offset", _buf(p, "load.ring").offset),
    "smem.size": lambda p: setattr(_buf(p, "load.ring"), "bytes", _buf(p, "load.ring").bytes - 4),
    "smem.total": lambda p: _alloc(p, smem_bytes=p.smem_bytes - 16),
    "mbarrier.counts": lambda p: setattr(p.mbarriers[-1], "arrivals", p.mbarriers[-1].arrivals + 1),
    "mbarrier.align": lambda p: setattr(p.mbarriers[0], "offset", p.mbarriers[0].offset + 4),
    "barrier.unique": lambda p: setattr(_fence(p), "id", 1),
    "barrier.range": lambda p: setattr(_fence(p), "id", 16),
    # The hand-over barrier counting the producer's padding warps, which return before it.
    "barrier.transfer": lambda p: setattr(_fence(p), "threads", p.block),
    "barrier.reserved": lambda p: _alloc(p, barriers=tuple(b for b in p.barriers if b.id != 3)),
    "barrier.threads": lambda p: setattr(_bar(p, "store"), "threads", 32 * 3),
    # A value silently replacing another component's guarantee (ring_arrivals comes from reduce).
    "facts.precedence": lambda p: _bump_fact(*_guaranteed_elsewhere(p)),
    "facts.guarantee": lambda p: _bump_fact(*next((i, n) for i in p.instances for n in i.contract.facts.guarantees)),
    "facts.domain": lambda p: _inst(p, "load").facts.update(stages=17),
    "facts.variant": lambda p: _inst(p, "reduce").facts.update(tile_cols=32),
    "roles.contiguous": lambda p: setattr(p.roles[1], "warp_start", p.roles[1].warp_start + 1),
    "roles.width": lambda p: setattr(p.roles[1], "used_warps", p.roles[1].used_warps - 1),
    "roles.registers": lambda p: setattr(p.roles[0], "registers", 48),
    "roles.register_file": lambda p: [setattr(r, "registers", 256) for r in p.roles] and None,
    "roles.block": lambda p: _alloc(p, block=p.block + 32),
    "bind.value": lambda p: _inst(p, "reduce").bind.update(ring=_inst(p, "reduce").bind["ring"] + 1024),
    "schedule.grid": lambda p: _alloc(p, grid=p.grid + 1),
    "schedule.tiles": lambda p: _alloc(p, num_tiles=p.num_tiles - 1),
}


@pytest.fixture
def demo_plan(demo_dir):
    return plan_link(demo_dir / "link.toml")


@pytest.mark.parametrize("invariant", sorted(PLAN_CORRUPTIONS))
def test_each_plan_invariant_is_checked(demo_plan, invariant):
    plan = copy.deepcopy(demo_plan)
    assert audit.check_plan(plan).ok
    PLAN_CORRUPTIONS[invariant](plan)
    found = {v.invariant for v in audit.check_plan(plan).violations}
    assert invariant in found, found
    with pytest.raises(AuditError) as exc:
        audit.enforce(audit.check_plan(plan))
    assert exc.value.field in found


def _edit(kind, **change):
    """The first statement of ``kind`` with each field changed by its function (the old value in)."""
    def corrupt(p):
        return edit_glue(p, kind, lambda s: replace(s, **{k: f(getattr(s, k)) for k, f in change.items()}))
    return corrupt


def _bump_binding(text: str) -> str:
    new, n = re.subn(r"(\{[^}]*?)(\d+)u", lambda m: m.group(1) + f"{int(m.group(2)) + 16}u", text, count=1)
    assert n, text
    return new


GLUE_CORRUPTIONS = {
    "glue.mbarrier_init": _edit(ir.MbarInit, arrivals=lambda n: n + 1),
    "glue.bar_sync": _edit(ir.Sync, threads=lambda n: n + 32),
    "glue.tile_loop": _edit(ir.TileLoop, step=lambda n: n - 1),
    # The last-tile flag one tile early: an epilogue waits for its final store before the final tile.
    "glue.last_tile": _edit(ir.TileCtx, last=lambda e: replace(e, a=ir.add(e.a.a, ir.lit(2 * e.a.b.value)))),
    "glue.dispatch": _edit(ir.RoleBranch, warps=lambda n: n + 1),
    "glue.role_base": _edit(ir.RoleThreads, warp_start=lambda n: n + 1),
    "glue.padding": _edit(ir.Padding, used_threads=lambda n: n + 32),
    "glue.setmaxnreg": _edit(ir.SetMaxNReg, registers=lambda n: n - 8),
    "glue.launch_bounds": _edit(ir.KernelHead, block=lambda n: n * 2),
    # The first smem offset / barrier ID literal handed to a component.
    "glue.bindings": _edit(ir.EntryCall, binding=_bump_binding),
}


@pytest.mark.parametrize("invariant", sorted(GLUE_CORRUPTIONS))
def test_each_glue_invariant_is_checked(demo_plan, invariant):
    plan = copy.deepcopy(demo_plan)
    plan.glue = glue.generate(glue.GlueInputs.of(plan))
    assert audit.check_glue(plan).ok
    plan = GLUE_CORRUPTIONS[invariant](plan)
    found = {v.invariant for v in audit.check_glue(plan).violations}
    assert invariant in found, found


def test_a_broken_plan_stops_the_link_with_an_internal_error(demo_dir, monkeypatch):
    """link() runs the audit: an allocator that forgets alignment cannot produce a cubin."""
    from pipelink.link import alloc
    real = alloc.allocate

    def misaligning(inputs):
        allocation = real(inputs)
        ring = next(s for s in allocation.smem if Ref("load", "ring") in s.users)
        ring.offset += 16
        for i in allocation.instances:  # the bindings agree with the moved ring: alignment is all that is wrong
            if "ring" in i.bind:
                i.bind["ring"] = ring.offset
        return allocation

    monkeypatch.setattr(alloc, "allocate", misaligning)
    with pytest.raises(AuditError) as exc:
        pipelink.link(demo_dir / "link.toml")
    assert exc.value.field == "smem.align"
    assert "internal error" in exc.value.message and "bind" not in exc.value.message


def _one_warp_hand(name: str, direction: str) -> str:
    """A 1-warp barrier hand-over of a 32 x 32 smem tile (glue_cases.hand, its role one warp)."""
    from glue_cases import hand
    return hand(name, direction, "i * 32 + j", scratch=False).replace("warps = 4", "warps = 1")


def test_a_hand_over_in_a_padded_role_waits_for_the_warps_that_run(tmp_path):
    """Two 1-warp components in one kernel role, then a warpgroup-aligned role: the first role is padded
    to 4 warps, whose 3 idle warps return before the tile loop. Its hand-over barrier must count the 32
    threads that arrive, not the 128 of the padded role (they never come: a hang)."""
    from glue_cases import instances, make_plan, schedule, worker
    aligned = worker(end_phase=False).replace("warps = 4", "warps = 4\nwarpgroup_aligned = true")
    spec = ('[link]\nname = "padded"\n\n'
            '[[instance]]\nname = "a"\npackage = "a.plc"\nroles = { r = "small" }\n\n'
            '[[instance]]\nname = "b"\npackage = "b.plc"\nroles = { r = "small" }\n\n'
            + instances("worker") + '[[connect]]\nfrom = "a.hand"\nto = "b.hand"\n\n'
            + schedule([7], "row_major", 0, 3))
    plan = make_plan(tmp_path, {"a": _one_warp_hand("a", "out"), "b": _one_warp_hand("b", "in"), "worker": aligned},
                     spec)
    small = next(r for r in plan.roles if r.name == "small")
    assert (small.warps, small.used_warps) == (4, 1)
    hand_bar = next(b.id for b in plan.barriers if isinstance(b.purpose, TransferFence))
    assert {s.threads for s in plan.glue.statements if isinstance(s, ir.Sync) and s.barrier == hand_bar} == {32}
    result = audit.check_glue(plan)
    assert result.ok, result.violations

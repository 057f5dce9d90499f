"""Human-facing views of a LinkPlan: the terminal report (rich) and the smem-map picture.

In the link layer, beside the audit: it reads the plan only, and ``LinkedKernel.report`` and
``LinkedKernel.save`` (link/pipeline.py) show and write it.
"""

from __future__ import annotations

import io

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .plan import WHOLE_KERNEL, LinkPlan, LiveRange


def _smem_title(plan: LinkPlan) -> str:
    """Dynamic smem (the buffers below), and once linked the cubin's static smem beside it: the
    block needs both, and the post-link check holds their sum to the device's limit."""
    limit = plan.device["smem_optin_bytes"]
    if plan.backend is None:
        return f"Shared memory: {plan.smem_bytes} bytes dynamic of {limit}"
    static = plan.backend.resources.static_smem
    reserved = plan.device["smem_reserved_bytes"]
    ours = max(0, static - reserved)
    return (f"Shared memory: {plan.smem_bytes} bytes dynamic + {static} static ({reserved} of it the system's "
            f"reserve) = {plan.smem_bytes + ours} of {limit} usable")


def _row(t: Table, *cells: str) -> None:
    """A row of text from specs, contracts and findings, shown as written: rich would read `[[smem]]` or
    `[dim]` in it as markup and drop it (the JSON plan holds the same text intact)."""
    t.add_row(*(escape(str(c)) for c in cells))


def _tmem_table(plan: LinkPlan, con: Console) -> None:
    """Sm_100a/sm_103a links with tensor memory: the glue's allocation and each buffer's columns in it."""
    tmem = plan.allocation.tmem if plan.allocation else None
    if tmem is None:
        return
    own = "".join(f"; {i} allocates {n} itself" for i, n in tmem.own)
    t = Table(title=f"Tensor memory: the glue allocates {tmem.columns} of {tmem.limit} columns{own}",
              title_justify="left")
    for col in ("column", "end", "columns", "align", "buffer", "live"):
        t.add_column(col, justify="right" if col in ("column", "end", "columns", "align") else "left")
    for b in tmem.buffers:
        live = "whole kernel" if b.live is WHOLE_KERNEL else ", ".join(map(str, b.live))
        _row(t, str(b.column), str(b.column + b.columns), str(b.columns), str(b.align),
             " = ".join(map(str, b.users)), live)
    con.print(t)


def print_report(plan: LinkPlan, console: Console | None = None) -> None:
    con = console or Console()
    con.rule(f"[bold]pipelink link report: {escape(plan.spec.link.name)}[/] ({plan.mode} mode, "
             f"entry {escape(plan.entry)})")

    t = Table(title="Instances and facts", title_justify="left")
    for col in ("instance", "component", "variant", "resolved facts"):
        t.add_column(col)
    for inst in plan.instances:
        shown = ", ".join(f"{k}={v}" for k, v in inst.facts.items() if not k.endswith(("_warps", "_threads")))
        t.add_row(escape(inst.name), escape(f"{inst.contract.name} {inst.contract.component.version}")
                  + (" [dim](closed)[/]" if inst.package.closed else ""),
                  escape(", ".join(f"{k}={v}" for k, v in inst.package.variants[inst.variant].facts.items()) or "-"),
                  escape(shown))
    con.print(t)

    choices = plan.resolved.choices if plan.resolved else ()
    if choices:
        t = Table(title="Facts the linker solved (nothing set them)", title_justify="left")
        for col in ("fact", "value", "how", "forced by", "why"):
            t.add_column(col)
        for c in choices:
            _row(t, c.name, str(c.value), c.how, ", ".join(c.forced_by) or "-", c.detail)
        con.print(t)

    t = Table(title=escape(f"Roles: {plan.block} threads, grid {plan.grid}, {plan.num_tiles} tiles {plan.tiles}"),
              title_justify="left")
    for col in ("role", "warps", "used", "setmaxnreg", "warpgroup-aligned"):
        t.add_column(col)
    for r in plan.roles:
        _row(t, r.name, f"{r.warp_start}..{r.warp_start + r.warps - 1}", str(r.used_warps),
                  str(r.registers or "-"), "yes" if r.warpgroup_aligned else "")
    con.print(t)

    t = Table(title=_smem_title(plan), title_justify="left")
    for col in ("offset", "end", "bytes", "align", "buffer", "live", "pinned"):
        t.add_column(col, justify="right" if col in ("offset", "end", "bytes", "align") else "left")
    for s in plan.smem:
        live = "whole kernel" if s.live is WHOLE_KERNEL else ", ".join(map(str, s.live))
        _row(t, str(s.offset), str(s.offset + s.bytes), str(s.bytes), str(s.align), " = ".join(map(str, s.users)),
             live, "pinned" if s.pinned else "")
    con.print(t)

    _tmem_table(plan, con)

    t = Table(title="Named barriers and mbarriers", title_justify="left")
    for col in ("kind", "id / offset", "name", "threads / arrivals", "tx bytes", "pinned"):
        t.add_column(col)
    for b in plan.barriers:
        _row(t, "bar", str(b.id), b.name, str(b.threads or "(opaque)"), "", "pinned" if b.pinned else "")
    for m in plan.mbarriers:
        _row(t, f"mbarrier x{m.count}", str(m.offset), " = ".join(map(str, m.users)), str(m.arrivals),
             str(m.tx_bytes), "")
    con.print(t)

    if plan.transfers:
        t = Table(title="Transfers", title_justify="left")
        for col in ("from", "to", "kind", "barrier", "note"):
            t.add_column(col)
        for x in plan.transfers:
            _row(t, str(x.src), str(x.dst), x.kind, str(x.barrier or "-"), x.note)
        con.print(t)

    t = Table(title="Checks", title_justify="left")
    t.add_column("check")
    t.add_column("result")
    t.add_column("detail")
    for c in plan.all_checks():
        t.add_row(escape(c.name), "[green]ok[/]" if c.ok else "[red]FAILED[/]", escape(c.detail))
    con.print(t)
    b = plan.backend
    if b is not None:
        res = b.resources
        con.print(f"cubin: {len(b.cubin)} bytes, {res.registers} registers, stack {res.stack}, local {res.local}, "
                  f"static smem {res.static_smem}, {res.instructions} SASS instructions, glue {b.glue_compile}, "
                  f"link {b.link}")
    for w in plan.all_warnings():
        con.print(f"[yellow]warning:[/] {escape(w)}")


def report_text(plan: LinkPlan) -> str:
    """The terminal report as plain text (for the output folder)."""
    con = Console(record=True, width=120, file=io.StringIO(), color_system=None)
    print_report(plan, console=con)
    return con.export_text()


def phase_columns(plan: LinkPlan) -> list[LiveRange]:
    cols = []
    for role in plan.roles:
        for inst in plan.instances:
            for e in inst.contract.entry:
                if inst.roles[e.role] == role.name:
                    cols.append(LiveRange(role.name, inst.name, e.phase))
    return cols


def smem_map_png(plan: LinkPlan) -> bytes:
    """Picture of the smem map (PNG): offset (y) against the kernel's phases (x), one box per buffer."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    cols = phase_columns(plan) or ["kernel"]
    fig, ax = plt.subplots(figsize=(max(6, 1.8 * len(cols)), 5))
    colors = plt.get_cmap("tab20").colors
    for n, s in enumerate(plan.smem):
        spans = range(len(cols)) if s.live is WHOLE_KERNEL else [cols.index(p) for p in s.live if p in cols]
        for x in spans:
            ax.add_patch(Rectangle((x + 0.05, s.offset / 1024), 0.9, s.bytes / 1024, facecolor=colors[n % 20],
                                   edgecolor="black", linewidth=0.6, alpha=0.85))
        x0 = min(spans) if spans else 0
        ax.text(x0 + 0.1, (s.offset + s.bytes / 2) / 1024, f"{' = '.join(map(str, s.users))}\n{s.bytes} B @ {s.offset}",
                fontsize=7, va="center")
    limit_kb = plan.device["smem_optin_bytes"] / 1024
    top = max(plan.smem_bytes / 1024 * 1.1, 1)
    ax.axhline(plan.smem_bytes / 1024, color="gray", linestyle=":", linewidth=1)
    if limit_kb <= top * 1.5:
        ax.axhline(limit_kb, color="red", linestyle="--", linewidth=1, label=f"limit {limit_kb:.0f} KB")
        top = max(top, limit_kb * 1.05)
        ax.legend(loc="upper right", fontsize=7)
    ax.set_xlim(0, len(cols))
    ax.set_ylim(0, top)
    ax.set_xticks([i + 0.5 for i in range(len(cols))])
    ax.set_xticklabels([str(c).replace(":", "\n") for c in cols], fontsize=7)
    ax.set_ylabel("shared memory offset (KB)")
    ax.set_title(f"{plan.spec.link.name}: shared memory by phase ({plan.smem_bytes} B, {plan.mode} mode)")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()

"""The seeded-bug (mutation) suite: one-line bugs across the link stages.

Each mutant replaces ``old`` (which must occur exactly once in ``src/pipelink/<file>``) with ``new``.
``tests`` are the pytest node ids or files that must fail once the bug is in; ``run.py`` applies each
mutant to a scratch copy of ``src/`` and runs them. A listed test file that does not exist yet is
skipped by the runner (and reported), so a mutant can name the test that will cover it.

``why`` says what goes wrong for a user. ``kill`` says what kind of test is meant to catch it:
  plan       a plan-invariant audit (tests/link/test_audit*.py) or a plan value asserted by a test
  backend    post-link / conformance / cache-key / package-integrity tests
  behaviour  a stage behaviour test (facts, ports, contract/spec/expr validation)
The first seven (``review-*``) are the bugs an earlier review seeded and the suite then missed.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    id: str
    stage: str
    file: str           # relative to src/pipelink
    old: str            # exact text, occurring exactly once in the file
    new: str
    why: str
    tests: tuple[str, ...]
    kill: str = "behaviour"


T_ERR = "tests/link/test_errors.py"
T_LINK = "tests/link/test_pipeline.py"
T_CONF = "tests/link/test_conform.py"
T_POS = "tests/link/test_conform_positions.py::test_every_generated_violation_is_found_and_every_legal_twin_is_quiet"
T_BEH = "tests/link/test_stage_behaviour.py"
T_LAUNCH = "tests/link/test_launch_facts.py"
T_TARGETS = "tests/link/test_targets.py"
T_AUDIT = "tests/link/test_audit.py"
T_PROPS = "tests/link/test_audit_properties.py"
T_HOST = "tests/link/test_glue_on_host.py"
T_CACHE = "tests/backend/test_cache_keys.py"
T_PKG = "tests/package/test_package_integrity.py"
T_NEG = "tests/link/test_negative_checks.py"
T_SOLVE = "tests/link/test_solve.py"
T_GLOBAL = "tests/link/test_global_ports.py"
T_GLOBAL_BAD = "tests/inputs/test_global_ports_bad_input.py"
T_MOE = "tests/examples/test_moe.py"
T_CACHE_ROBUST = "tests/backend/test_cache_robustness.py"
T_MODEL = "tests/link/test_glue_model.py"
T_TIMING = "tests/verify/test_timing.py"
T_ROOF = "tests/verify/test_roofline.py"
T_METRICS = "tests/verify/test_metrics.py"
T_VERIFY = "tests/verify/test_verify.py"
T_TMEM = "tests/link/test_tmem.py"
T_KEEP = "tests/link/test_keep.py"

MUTANTS: list[Mutant] = [
    # --- the review's seven ------------------------------------------------------------------
    Mutant("review-smem-align", "alloc", "link/alloc.py",
           "candidate = max(candidate, -(-end // g.align) * g.align)",
           "candidate = max(candidate, end)",
           "the smem allocator ignores a buffer's alignment: a 1024-byte-aligned TMA ring lands at an offset "
           "that is not, and TMA faults or reads a shifted tile",
           (T_PROPS, T_AUDIT, T_NEG), kill="plan"),
    Mutant("review-mbar-init-arrivals", "glue", "link/glue.py",
           "w.put(MbarInit(m.count, m.offset, m.arrivals,",
           "w.put(MbarInit(m.count, m.offset, m.count,",
           "the glue initializes mbarriers with the slot count instead of the arrival count: a phase "
           "completes early (data race) or never (hang)",
           (T_AUDIT, T_PROPS), kill="plan"),
    Mutant("review-spec-replaces-guarantee", "facts", "link/solve.py",
           "            if g is not q and name in values[g.name]:",
           "            if g is not q and name in values[g.name] and name not in self.p.spec_facts:",
           "a fact set in the spec's [facts] silently replaces another component's guarantee instead of "
           "conflicting with it",
           (T_BEH + "::test_spec_fact_against_a_guarantee_is_a_conflict",)),
    Mutant("review-xfer-barrier-counts-padding", "glue", "link/glue.py",
           "threads = link.allocation.role(role).used_threads",
           "threads = link.allocation.role(role).threads",
           "a transfer barrier counts the padding warps, which returned before it: the role waits for "
           "threads that never arrive (hang)",
           (T_AUDIT + "::test_a_hand_over_in_a_padded_role_waits_for_the_warps_that_run", T_AUDIT, T_PROPS), kill="plan"),
    Mutant("review-postlink-barrier-unread", "build", "link/postlink.py",
           "hit = hex(b.id) in bar_ids",
           "hit = True",
           "the post-link check reports every allocated barrier ID as an immediate without reading the SASS",
           (T_NEG,), kill="backend"),
    Mutant("review-mono-key-misses-source", "cache", "link/build.py",
           "return make_key(self.kind, self.tools, lto_flags((self.arch,)), self.main, self.files, self.include_dirs,",
           "return make_key(self.kind, self.tools, lto_flags((self.arch,)), self.main, {k: v for k, v in "
           "self.files.items() if not k.startswith('src_')}, self.include_dirs,",
           "the monolithic control's cache key misses a component's source: after a source edit the control is "
           "the stale cubin",
           (T_CACHE,), kill="backend"),
    Mutant("review-contract-not-hashed", "package", "package.py",
           "for part in (self.contract_text, self.toolchain, self.compile_options,",
           "for part in (self.toolchain, self.compile_options,",
           "a package's content hash leaves out its contract: a contract edited inside the .plc loads without a "
           "word, and the link trusts facts the LTO-IR was not built with",
           (T_PKG,), kill="backend"),

    # --- facts ----------------------------------------------------------------------------------
    Mutant("facts-spec-beats-instance", "facts", "link/solve.py",
           "if name in self.p.spec_facts and not q.pinned_by_instance(name):",
           "if name in self.p.spec_facts:",
           "an instance's own facts no longer override the spec's [facts]: a valid per-instance value is "
           "refused as a conflict",
           (T_ERR + "::test_port_shape_mismatch", T_BEH + "::test_instance_fact_overrides_the_spec")),
    Mutant("facts-conflict-unchecked", "facts", "link/solve.py",
           "for value, src in offers[1:]:",
           "for value, src in offers[2:]:",
           "a user value disagreeing with a guarantee is not a conflict: the first source wins silently",
           (T_ERR + "::test_conflicting_facts_name_both_sides",)),
    Mutant("facts-guaranteed-value-unchecked", "facts", "link/solve.py",
           "            problems = q.requires[name].problems(value)",
           "            problems = q.requires[name].problems(value) if sources[q.name][name].kind in "
           "('spec', 'instance') else []",
           "only user-given facts are checked against a component's domain: a value another component "
           "guarantees goes through outside it",
           (T_BEH + "::test_guaranteed_value_outside_the_domain_is_refused",)),
    Mutant("facts-domain-upper-bound", "facts", "contract.py",
           "if self.range is not None and not self.range[0] <= value <= self.range[1]:",
           "if self.range is not None and not self.range[0] <= value < self.range[1]:",
           "a fact at the top of its declared range is refused",
           (T_BEH + "::test_fact_domain_bounds_are_inclusive",)),
    Mutant("facts-domain-multiple", "facts", "contract.py",
           "if self.multiple_of is not None and value % self.multiple_of:",
           "if self.multiple_of is not None and self.multiple_of % value:",
           "multiple_of is tested the wrong way round: values that are not multiples pass",
           (T_BEH + "::test_fact_domain_bounds_are_inclusive",)),
    Mutant("solve-ambiguity-takes-the-first", "facts", "link/solve.py",
           "        if len(solutions) > 1:\n            raise self._ambiguous(group, solutions)",
           "        solutions = solutions[:1]",
           "several values satisfy every component and their defaults disagree, and the linker silently "
           "takes one instead of asking the user",
           (T_SOLVE + "::test_several_solutions_and_defaults_that_disagree_are_ambiguous",)),
    Mutant("solve-port-equalities-ignored", "facts", "link/solve.py",
           "relevant = [c for c in self.constraints if c.deps and c.deps <= set(group)]",
           "relevant = [c for c in self.constraints if c.deps and c.deps <= set(group) and not c.port]",
           "facts tied by a port connection are chosen apart: each side takes its own default and the link "
           "is refused (or, under other names, the shapes disagree)",
           (T_SOLVE + "::test_a_port_equality_ties_facts_of_different_names",)),
    Mutant("solve-guarantee-ignored-as-tie", "facts", "link/solve.py",
           "            return frozenset().union(*(self.deps(g, m, seen) for g in others "
           "for m in g.guarantees[name].names()))",
           "            return frozenset()",
           "a guarantee computed from a fact the linker solves is not tied to it: the taker's domain is "
           "checked too early, against no value, and the link is refused",
           (T_SOLVE + "::test_a_guarantee_computed_from_an_unknown_must_fit_its_taker",)),
    Mutant("abi-workspace-passed-by-caller", "glue", "abi.py",
           "return tuple(p for p in self.params if not p.host_mapped and p.workspace is None)",
           "return tuple(p for p in self.params if not p.host_mapped)",
           "a workspace the link owns is asked of the caller: verify fills it with random inputs instead of "
           "zeros, and a counter starts anywhere",
           ("tests/link/test_workspace.py::test_a_workspace_is_the_links_not_the_callers",)),
    Mutant("glue-start-phase-dropped", "glue", "link/glue.py",
           "    if at_start:\n        _whole_block_phases(link, at_start, w, start=True)\n",
           "",
           "a whole-block phase declared to run before the tile loops is never called: the tables it fills "
           "stay garbage",
           ("tests/link/test_start_phase.py::test_the_start_phase_runs_before_the_roles_in_every_warp",)),
    Mutant("glue-trace-phase-untimed", "glue", "link/glue.py",
           '        _timed(link, w, call, iteration="0")',
           "        call()",
           "a traced build lists the whole-block phases in its trace rows but never stores their spans: "
           "the timeline shows the phases as never run and puts their time nowhere",
           ("tests/link/test_start_phase.py::test_a_traced_build_gives_whole_block_phases_spans_of_their_own",)),
    Mutant("glue-trace-slot-order", "glue", "link/glue.py",
           'return tuple(phases("start") + steps + phases("end"))',
           'return tuple(steps + phases("start") + phases("end"))',
           "the trace's slot labels follow another order than the glue's stores: each span is reported "
           "under the wrong component",
           ("tests/link/test_start_phase.py::test_a_traced_build_gives_whole_block_phases_spans_of_their_own",)),
    Mutant("check-start-phase-budgets", "check", "link/check.py",
           "    if budgets and at_end:",
           "    if budgets and phases:",
           "a phase before the tile loops is refused beside roles with register budgets, although it runs "
           "before any setmaxnreg",
           ("tests/link/test_start_phase.py::test_roles_with_register_budgets_around_whole_block_phases",)),
    Mutant("glue-dynamic-bound-ignored", "glue", "link/glue.py",
           'return var("pl_num_tiles") if link.checks.tile_source else lit(link.allocation.num_tiles)',
           "return lit(link.allocation.num_tiles)",
           "the tile loops run the schedule's upper bound instead of the count decided in the kernel: tiles "
           "past the count read stale tables",
           ("tests/link/test_dynamic_tiles.py::test_the_tile_loops_run_the_count_written_before_them",)),
    Mutant("alloc-coresidency-unchecked", "alloc", "link/alloc.py",
           'if waiting and draft.grid > link.device["sms"]:',
           'if waiting and draft.grid > 2 * link.device["sms"]:',
           "blocks that coordinate through a workspace are launched beyond one per SM: a block waits for "
           "one that is not resident, and the kernel hangs",
           ("tests/link/test_dynamic_tiles.py::test_a_tile_count_nothing_can_write_is_refused",)),
    Mutant("alloc-cluster-tile-rule-always", "alloc", "link/alloc.py",
           'tile_loop = any(e.scope == "role" for inst in link.instances for e in inst.contract.entry)',
           "tile_loop = True",
           "a link of whole-block phases only (no tile loop) is held to the tile rule: a cluster is refused for its "
           "single tile, and the Llama projections cannot share their activation in pairs",
           ("tests/examples/test_llama_decode.py::test_clusters_of_two_share_the_wgmma_cores_activation",), kill="plan"),
    Mutant("alloc-cluster-tile-rule-never", "alloc", "link/alloc.py",
           'tile_loop = any(e.scope == "role" for inst in link.instances for e in inst.contract.entry)',
           "tile_loop = False",
           "a cluster's blocks are not checked to get tiles of one step: an odd fast tile dimension links",
           ("tests/examples/test_qwen.py::test_cluster_needs_an_even_fast_dimension",), kill="plan"),
    Mutant("alloc-cluster-shares-ignores-order", "alloc", "link/alloc.py",
           'shared = "tile_col" if link.spec.schedule.order == "column_major" or len(draft.tiles) == 1 else "tile_row"',
           'shared = "tile_col"',
           "a cluster under row_major is taken to share a tile column: a mainloop that multicasts B links with two "
           "blocks of one row, each multiplying by half of the other's B tile",
           ("tests/examples/test_qwen.py::test_a_cluster_whose_blocks_would_not_share_the_multicast_tile_is_refused",),
           kill="plan"),
    Mutant("contract-cluster-shares-by-ignored", "contract", "contract.py",
           "return self.cluster_shares if by is None else by.values[facts[by.fact]]",
           "return self.cluster_shares",
           "a contract whose fact chooses what a cluster shares (the mainloop's share_a) is taken to share nothing: a "
           "pair that multicasts B links under row_major, each block multiplying by half of the other's B tile",
           ("tests/examples/test_qwen.py::test_a_cluster_whose_blocks_would_not_share_the_multicast_tile_is_refused",),
           kill="plan"),
    Mutant("facts-variant-any", "facts", "link/facts.py",
           "if all(wanted.get(k) == x for k, x in v.facts.items()):",
           "if any(wanted.get(k) == x for k, x in v.facts.items()):",
           "the first variant agreeing on any compile-time fact is linked, not the one agreeing on all",
           (T_BEH + "::test_variant_matching_every_compile_fact_is_selected",)),

    # --- check ----------------------------------------------------------------------------------
    Mutant("check-shape-rank-only", "check", "link/check.py",
           "if s_shape != d_shape:",
           "if len(s_shape) != len(d_shape):",
           "port shapes are compared by rank only: a 128-row producer feeds a 64-row consumer",
           (T_ERR + "::test_port_shape_mismatch", T_BEH + "::test_port_shapes_must_agree")),
    Mutant("check-dtype-across-spaces", "check", "link/check.py",
           'if sp.dtype != dp.dtype and not {"global", "tmem"} & {sp.space, dp.space} and \\\n'
           '                (sp.dtype, dp.dtype) not in CONVERTIBLE:',
           'if sp.dtype != dp.dtype and not {"global", "tmem"} & {sp.space, dp.space} and sp.space == dp.space and '
           '\\\n                (sp.dtype, dp.dtype) not in CONVERTIBLE:',
           "dtypes are compared only within one space: an fp32 register tile is handed to an int32 smem port",
           (T_ERR + "::test_port_dtype_mismatch", T_BEH + "::test_port_dtype_must_convert")),
    Mutant("check-mbar-count-skipped", "check", "link/check.py",
           'for key in ("count", "arrivals", "tx_bytes"):',
           'for key in ("arrivals", "tx_bytes"):',
           "a ring whose two sides declare different numbers of mbarrier slots links: one side indexes slots "
           "the other never initialized",
           (T_BEH + "::test_ring_mbarrier_counts_must_agree",)),
    Mutant("check-mbar-tx-skipped", "check", "link/check.py",
           'for key in ("count", "arrivals", "tx_bytes"):',
           'for key in ("count", "arrivals"):',
           "a ring whose sides expect different transaction bytes links: the phase never completes",
           (T_BEH + "::test_ring_mbarrier_counts_must_agree",)),
    Mutant("check-mbar-names-by-length", "check", "link/check.py",
           "if sorted(sp.mbarriers) != sorted(dp.mbarriers):",
           "if len(sp.mbarriers) != len(dp.mbarriers):",
           "ring sides synchronizing on differently named mbarriers are not refused as a port mismatch",
           (T_BEH + "::test_ring_mbarrier_names_must_agree",)),
    Mutant("check-ring-layout-unchecked", "check", "link/check.py",
           "same_layout = sp.dtype == dp.dtype and smem_offsets_equal(s, d, shape)",
           "same_layout = sp.dtype == dp.dtype",
           "smem layouts are not compared: a transposed consumer aliases the producer's buffer",
           (T_LINK + "::test_smem_to_smem_transfer_converts_layout", T_BEH + "::test_ring_layouts_must_agree")),
    Mutant("check-tma-partial-everywhere", "check", "link/check.py",
           "if n % b and j not in o.tma.partial]",
           "if n % b and not o.tma.partial]",
           "a contract that expects a partial last box along one dimension gets it along every dimension: a box "
           "that does not divide the columns reads past each row",
           (T_NEG + "::test_a_partial_box_is_allowed_only_along_the_dimensions_the_contract_names",)),
    Mutant("check-fragment-shape-only", "check", "link/check.py",
           "if a.shape != b.shape or not np.array_equal(a, b):",
           "if a.shape != b.shape:",
           "register fragments are compared by size only: threads hand over values of other coordinates",
           (T_LINK + "::test_registers_with_another_fragment_layout_are_refused",
            T_BEH + "::test_register_fragments_must_agree")),

    # --- alloc ----------------------------------------------------------------------------------
    Mutant("alloc-concurrent-ignores-roles", "alloc", "link/alloc.py",
           "return len(roles) > 1 or bool(a & b)",
           "return bool(a & b)",
           "buffers of two roles (which run at the same time) share memory because their phase names differ",
           (T_PROPS, T_AUDIT), kill="plan"),
    Mutant("alloc-pinned-overlap-by-start", "alloc", "link/alloc.py",
           "if off < g.pinned + g.bytes and g.pinned < off + other.bytes and _concurrent(g.live, other.live):",
           "if off == g.pinned and _concurrent(g.live, other.live):",
           "two pinned buffers that overlap without starting at the same byte are not a collision",
           (T_PROPS, T_AUDIT), kill="plan"),
    Mutant("alloc-barrier-id-zero", "alloc", "link/alloc.py",
           "free = [i for i in range(1, limit + 1) if i not in pinned]",
           "free = [i for i in range(0, limit + 1) if i not in pinned]",
           "named barrier 0 (__syncthreads) is handed out as a relocatable ID",
           (T_LINK + "::test_colliding_components", T_AUDIT, T_PROPS), kill="plan"),
    Mutant("alloc-barrier-pinned-not-skipped", "alloc", "link/alloc.py",
           "free = [i for i in range(1, limit + 1) if i not in pinned]",
           "free = [i for i in range(1, limit + 1)]",
           "relocatable barriers are given IDs another component pinned (CUTLASS's 1..7)",
           (T_LINK + "::test_demo_links_and_every_decision_is_an_immediate", T_AUDIT, T_PROPS), kill="plan"),
    Mutant("alloc-barrier-id-16", "alloc", "link/alloc.py",
           "free = [i for i in range(1, limit + 1) if i not in pinned]",
           "free = [i for i in range(1, limit + 2) if i not in pinned]",
           "barrier ID 16 (which does not exist) is handed out when 1..15 are taken",
           (T_ERR + "::test_more_named_barriers_than_exist", T_AUDIT, T_PROPS), kill="plan"),
    Mutant("alloc-barrier-id-15-unused", "alloc", "link/alloc.py",
           'limit = link.device["named_barriers"] - 1\n',
           'limit = link.device["named_barriers"] - 2\n',
           "barrier ID 15 is never handed out: a link that needs every free ID is refused",
           (T_BEH + "::test_every_free_barrier_id_up_to_15_is_used",)),
    Mutant("alloc-register-max-not-sum", "alloc", "link/layout.py",
           "total = sum(u for _, u in usage)",
           "total = max(u for _, u in usage)",
           "register budgets are checked role by role, not summed over the register file",
           (T_ERR + "::test_register_budget_over_the_file", T_AUDIT, T_PROPS), kill="plan"),
    Mutant("alloc-register-padding-uncounted", "alloc", "link/layout.py",
           "usage = [(r, r.threads * (r.registers or cap)) for r in draft.roles]",
           "usage = [(r, r.used_threads * (r.registers or cap)) for r in draft.roles]",
           "the register budget leaves out a role's padding warps, which hold registers too: the kernel "
           "does not launch",
           (T_PROPS + "::test_register_budget_counts_the_padding_warps", T_AUDIT, T_PROPS), kill="plan"),
    Mutant("alloc-warpgroup-pad-floor", "alloc", "link/layout.py",
           "padded = -(-warps // 4) * 4",
           "padded = warps // 4 * 4",
           "a role's warps are rounded down to a warpgroup: a one-warp producer gets no warps",
           (T_LINK + "::test_demo_links_and_every_decision_is_an_immediate", T_AUDIT, T_PROPS), kill="plan"),
    Mutant("alloc-warpgroup-gap-unowned", "alloc", "link/layout.py",
           "draft.roles[-1].warps += 4 - cursor % 4  # previous role gets idle warps up to the boundary",
           "pass  # previous role gets idle warps up to the boundary",
           "the idle warps before a warpgroup-aligned role belong to no role: they fall into the next role's "
           "branch and run its code with negative thread indices",
           (T_AUDIT + "::test_a_hand_over_in_a_padded_role_waits_for_the_warps_that_run", T_AUDIT, T_PROPS), kill="plan"),
    Mutant("alloc-smem-limit-per-buffer", "alloc", "link/alloc.py",
           'limit = link.device["smem_optin_bytes"]\n    if total > limit:',
           'limit = link.device["smem_optin_bytes"]\n    if max(g.bytes for g, _ in placed) > limit:',
           "the smem limit is checked per buffer, not on the total: an over-full block links and fails at launch",
           (T_ERR + "::test_smem_over_the_limit_says_by_how_much", T_AUDIT, T_PROPS), kill="plan"),
    Mutant("alloc-mbarrier-region-bytes", "alloc", "link/alloc.py",
           "mbar_bytes = 8 * sum(m.count for m in slots)",
           "mbar_bytes = sum(m.count for m in slots)",
           "the mbarrier region is sized in slots, not bytes: mbarriers run past it into the next buffer",
           (T_AUDIT, T_PROPS), kill="plan"),
    Mutant("alloc-symbol-glue-barrier-16", "alloc", "link/alloc.py",
           'glue_id = link.device["named_barriers"] - 1',
           'glue_id = link.device["named_barriers"]',
           "symbol mode gives the glue's transfer barrier ID 16, which does not exist",
           (T_LINK + "::test_demo_symbol_mode_reports_what_it_did_not_check", T_AUDIT, T_PROPS), kill="plan"),
    Mutant("alloc-bind-packaged-default", "alloc", "link/alloc.py",
           "bind = {n: inst.facts[n] for n, r in c.facts.requires.items() if not r.compile}",
           "bind = {n: r.default if r.default is not None else inst.facts[n] for n, r in c.facts.requires.items() "
           "if not r.compile}",
           "components are bound the contract's default, not the resolved fact: a changed fact does not reach them",
           (T_BEH + "::test_resolved_facts_reach_the_bindings",)),

    # --- glue -----------------------------------------------------------------------------------
    Mutant("glue-reg-store-wrong-barrier", "glue", "link/glue.py",
           'w.put(Sync(t.barrier, threads, "tile visible to the consumer"))',
           'w.put(Sync(t.barrier - 1, threads, "tile visible to the consumer"))',
           "the second barrier of a register->smem transfer uses the ID below the allocated one (another "
           "component's)",
           (T_AUDIT, T_PROPS), kill="plan"),
    Mutant("glue-tile-loop-bound", "glue", "link/glue.py",
           'return var("pl_num_tiles") if link.checks.tile_source else lit(link.allocation.num_tiles)',
           'return var("pl_num_tiles") if link.checks.tile_source else lit(link.allocation.grid)',
           "the persistent loop stops after the first wave: tiles past the grid are never computed",
           (T_AUDIT, T_PROPS), kill="plan"),
    Mutant("glue-k-range-one-short", "glue", "link/glue.py",
           'k_range or (lit(0), lit(k_tiles), mul(var("pl_iter"), lit(k_tiles)))',
           'k_range or (lit(0), lit(k_tiles - 1), mul(var("pl_iter"), lit(k_tiles)))',
           "the mainloop is handed one k-tile less than its tile's reduction: every product misses K / 64 - 1 "
           "onwards (a stream-K range's classic off-by-one)",
           # the model sees every tile's k-range short (a placeholder link, seconds); test_qwen's check on the
           # real GEMM's glue takes a minute and a half
           (T_MODEL + "::test_every_split_sums_each_contributor_once_and_streams_the_ring_in_order",
            "tests/examples/test_qwen.py::test_the_glue_gives_the_mainloop_each_tile_whole"), kill="plan"),
    Mutant("glue-tile-loop-stride", "glue", "link/glue.py",
           "    step, tiles = link.allocation.grid, _tile_bound(link)\n",
           '    step, tiles = 132, _tile_bound(link)\n',  # the SM count of every device (spec.DEVICES)
           "the tile loop strides by the SM count, not the grid: with a smaller grid, tiles are skipped",
           (T_AUDIT, T_PROPS), kill="plan"),
    Mutant("glue-role-dispatch-used-warps", "glue", "link/glue.py",
           'w.put(RoleBranch(n == 0, role.name, role.warp_start, role.warps))',
           'w.put(RoleBranch(n == 0, role.name, role.warp_start, role.used_warps))',
           "role dispatch ends at the declared warps: padding warps fall into the next role's branch",
           (T_AUDIT, T_PROPS), kill="plan"),
    Mutant("glue-setmaxnreg-swapped", "glue", "link/glue.py",
           'w.put(SetMaxNReg("inc" if role.registers > cap else "dec", role.registers))',
           'w.put(SetMaxNReg("inc" if role.registers < cap else "dec", role.registers))',
           "setmaxnreg.inc and .dec are swapped: a role asks to shrink to more registers (undefined)",
           (T_AUDIT, T_PROPS), kill="plan"),
    Mutant("glue-cluster-padding-runs-body", "glue", "link/glue.py",
           'w.put(Padding(role.used_threads, stay))',
           'w.put(Padding(role.threads if stay else role.used_threads, stay))',
           "in a cluster, the padding warps run the component's code too, with thread indices it was not "
           "written for",
           (T_LINK + "::test_cluster_launch_keeps_padding_warps_for_the_cluster_barrier", T_AUDIT, T_PROPS), kill="plan"),

    # --- build / post-link ------------------------------------------------------------------------
    Mutant("build-link-key-misses-glue", "cache", "link/build.py",
           "[(name, hashlib.sha256(d).hexdigest()) for name, d in inputs]",
           "[(name, hashlib.sha256(d).hexdigest()) for name, d in inputs[1:]]",
           "the link cache key leaves out the glue: a relink with another plan returns the old cubin",
           (T_LINK + "::test_colliding_components", T_CACHE), kill="backend"),
    Mutant("build-postlink-calls-exact", "build", "link/postlink.py",
           'relative = [c for c in info.calls if opcode(c).startswith("CALL.REL") and not is_guardrail_call(c)]',
           'relative = [c for c in info.calls if opcode(c) == "CALL.REL" and not is_guardrail_call(c)]',
           "the post-link check misses CALL.REL.NOINC: a component that was not inlined is reported as inlined",
           (T_NEG,), kill="backend"),

    # --- kernel ABI -------------------------------------------------------------------------------
    Mutant("abi-tensor-map-unaligned", "abi", "link/abi.py",
           "offset = -(-offset // align) * align",
           "offset = offset",
           "a TMA tensor map after a pointer lands 8 bytes into the struct instead of at 64: the runtime writes "
           "the map where the kernel does not read it (cuTensorMap needs 64-byte alignment)",
           ("tests/link/test_abi.py::test_a_tensor_map_after_a_pointer_is_aligned",), kill="backend"),
    Mutant("abi-report-claim-word", "abi", "abi.py",
           "REPORT_CLAIM = 7",
           "REPORT_CLAIM = 6",
           "the harness reads the wrong word as the report's claim flag: a kernel that reported an overrun is "
           "described as having reported nothing (or a value as a claim)",
           ("tests/link/test_abi.py",), kill="backend"),

    # --- conform --------------------------------------------------------------------------------
    Mutant("conform-bar-threads-only-more", "conform", "link/conform.py",
           "int(threads, 16) != want:",
           "int(threads, 16) > want:",
           "a barrier synced with fewer threads than declared passes conformance",
           (T_CONF + "::test_seeded_violation_is_found[bar_threads]",)),
    Mutant("conform-bar-any-instance", "conform", "link/conform.py",
           "mine = {b.id: b.threads for b in plan.barriers if b.purpose.owner == inst.name}",
           "mine = {b.id: b.threads for b in plan.barriers}",
           "a component syncing on another component's barrier passes conformance",
           (T_CONF + "::test_seeded_violation_is_found[others_barrier]",)),
    Mutant("conform-mbar-any-instance", "conform", "link/conform.py",
           "if any(u.instance == inst.name for u in a.users)]",
           "if True]",
           "a component operating on another component's mbarrier slots passes conformance",
           (T_NEG + "::test_conformance_mbarrier_of_another_instance", T_NEG), kill="backend"),
    Mutant("conform-mbar-slot-bytes", "conform", "link/conform.py",
           "slots = [(a.offset, a.offset + 8 * a.count, a.name) for a in plan.mbarriers",
           "slots = [(a.offset, a.offset + a.count, a.name) for a in plan.mbarriers",
           "mbarrier slot ranges are counted in slots, not bytes: legal use of slot 1.. is reported",
           (T_NEG + "::test_conformance_own_second_mbarrier_slot_is_legal",)),
    Mutant("conform-syncthreads-two-roles", "conform", "link/conform.py",
           "several_roles = len(plan.roles) > 1",
           "several_roles = len(plan.roles) > 2",
           "__syncthreads in a two-role block passes conformance (it deadlocks)",
           (T_CONF + "::test_seeded_violation_is_found[syncthreads]",)),
    Mutant("conform-expect-tx-warning", "conform", "link/conform.py",
           'severity = "error" if value > array.tx_bytes else "warning"',
           'severity = "warning"',
           "announcing more transaction bytes than arrive (a hang) is only a warning",
           (T_CONF + "::test_seeded_violation_is_found[expect_tx]",)),
    Mutant("conform-past-exit-program-order", "conform", "link/conform.py",
           'self.falls_through = bool(guard) or len(args) > 1 or op.startswith("BRA.DIV")',
           "self.falls_through = True",
           "code past EXIT (a __syncwarp's divergent path) is judged by the registers above it, not by its branch's: "
           "a false overrun refuses a correct link",
           (T_CONF + "::test_addresses_are_followed_along_forward_branches",)),
    Mutant("conform-cpasync-unchecked", "conform", "link/conform.py",
           '"REDS", "LDGSTS")  # LDGSTS',
           '"REDS")  # LDGSTS',
           "a cp.async's shared-memory destination is not checked: a copy past its buffer, onto the glue's mbarriers, "
           "links",
           (T_CONF + "::test_seeded_violation_is_found[smem_past_buffer_cpasync]",)),
    Mutant("conform-cpasync-arrive-unchecked", "conform", "link/conform.py",
           'elif op.startswith(("SYNCS", "ARRIVES")):',
           'elif op.startswith("SYNCS"):',
           "a cp.async arrival (cp.async.mbarrier.arrive) on an mbarrier slot the contract does not give is not "
           "checked",
           (T_CONF + "::test_seeded_violation_is_found[mbar_outside_cpasync]",)),
    Mutant("conform-shared-include-view", "conform", "backend/nvcc.py",
           'return "_i" + hashlib.sha256(component.encode()).hexdigest()[:6]',
           "return VIEW",
           "every component names the headers it shares by one path: ptxas may give one component's inlined "
           "instructions another's chain, and the conformance check judges them against the wrong contract",
           (T_CONF + "::test_each_component_names_its_headers_by_paths_of_its_own",)),

    # --- cache / package ------------------------------------------------------------------------
    Mutant("cache-digest-unchecked", "cache", "backend/cache.py",
           "if hashlib.sha256(data).hexdigest() != digest:",
           "if not data:",
           "a corrupted cache entry is served instead of rebuilt",
           (T_LINK + "::test_cache_hit_and_corrupted_entry_rebuilt",)),
    # issue 48 item 5: a cache entry whose digest matches but whose payload is garbage
    Mutant("cache-decode-failure-uncaught", "cache", "backend/cache.py",
           "except Exception as exc:  # noqa: BLE001",
           "except OSError as exc:  # noqa: BLE001",
           "an entry of garbage written with its own digest ends the link in a traceback (UnicodeDecodeError, "
           "exit 1) instead of being rebuilt",
           (T_CACHE_ROBUST + "::test_a_garbage_entry_with_its_own_digest_is_rebuilt_with_a_warning",
            T_CACHE_ROBUST + "::test_the_cli_rebuilds_garbage_entries_and_exits_0"), kill="backend"),
    Mutant("cache-corruption-unwarned", "cache", "backend/cache.py",
           'warnings.warn(f"build cache entry {path} is corrupted ({why}); rebuilding it", CacheWarning, stacklevel=4)',
           "pass",
           "a corrupted cache entry is rebuilt without a word: a disk or a hand that damages the cache goes unseen",
           (T_CACHE_ROBUST + "::test_a_garbage_entry_with_its_own_digest_is_rebuilt_with_a_warning",), kill="backend"),
    Mutant("cache-digest-limit-64", "cache", "backend/cache.py",
           "DIGEST_LIMIT = 4096",
           "DIGEST_LIMIT = 64",
           "a digest file of garbage longer than a digest turns the whole cache off at every run, instead of "
           "that one entry being rebuilt",
           (T_CACHE_ROBUST + "::test_a_garbage_entry_with_its_own_digest_is_rebuilt_with_a_warning",), kill="backend"),
    Mutant("cache-deps-list-unchecked", "cache", "backend/cache.py",
           'if not isinstance(files, list) or not all(isinstance(f, str) and "\\0" not in f for f in files):',
           "if False:",
           "a tracked entry's recorded header list of another shape is used as one: a path with a NUL byte ends "
           "in a ValueError traceback, a JSON object is taken for a list of its keys",
           (T_CACHE_ROBUST + "::test_a_garbage_entry_with_its_own_digest_is_rebuilt_with_a_warning",), kill="backend"),
    Mutant("cache-removed-entry-disables", "cache", "backend/cache.py",
           'if getattr(exc, "hint", None) == _GONE:',
           "if False:",
           "an entry that another process removes between the lookup's check and its read turns the whole cache "
           "off for the run, with a warning, instead of being a miss",
           (T_CACHE_ROBUST + "::test_an_entry_removed_while_it_is_read_is_a_miss",), kill="backend"),
    Mutant("cache-put-in-place", "cache", "backend/cache.py",
           "            write_atomic(path, data)",
           "            path.parent.mkdir(parents=True, exist_ok=True), path.write_bytes(data)",
           "a cache entry is written in place: a process killed inside the write leaves half a payload beside "
           "the digest of the whole one",
           (T_CACHE_ROBUST + "::test_a_put_killed_midway_leaves_a_miss_or_the_whole_entry",), kill="backend"),
    Mutant("cache-ltoir-unchecked", "cache", "link/build.py",
           "return cache.get_or_build_tracked(inputs.key(), compile_it, fatbin)",
           "return cache.get_or_build_tracked(inputs.key(), compile_it)",
           "a cached glue LTO-IR of garbage with its own digest goes to nvJitLink, which refuses it: the link "
           "fails until the user empties the cache",
           (T_CACHE_ROBUST + "::test_a_garbage_entry_with_its_own_digest_is_rebuilt_with_a_warning",), kill="backend"),
    Mutant("cache-cubin-unchecked", "cache", "link/build.py",
           "        cubin_payload)",
           "        bytes)",
           "a cached cubin of garbage with its own digest is returned as the link's cubin (cuobjdump then fails)",
           (T_CACHE_ROBUST + "::test_a_garbage_entry_with_its_own_digest_is_rebuilt_with_a_warning",), kill="backend"),
    Mutant("cache-inspection-roundtrip-unchecked", "cache", "link/build.py",
           "if json.dumps(info.__dict__).encode() != data:",
           "if False:",
           "a cached SASS inspection with fields it should not have is used as if this version had stored it",
           (T_CACHE_ROBUST + "::test_a_garbage_entry_with_its_own_digest_is_rebuilt_with_a_warning",), kill="backend"),
    Mutant("package-extra-entries-allowed", "package", "package.py",
           "if sorted(names) != sorted(expected):",
           "if not set(expected) <= set(names):",
           "a package may carry archive entries besides its own (a second contract, a swapped fatbin) unnoticed",
           (T_PKG,), kill="backend"),

    # --- contract / spec / expr -------------------------------------------------------------------
    Mutant("contract-barrier-id-zero", "contract", "contract.py",
           "if v is not None and not 1 <= v <= MAX_NAMED_BARRIER_ID:",
           "if v is not None and not 0 <= v <= MAX_NAMED_BARRIER_ID:",
           "a contract may pin named barrier 0 (__syncthreads)",
           (T_BEH + "::test_contract_refuses_barrier_id_0",)),
    Mutant("contract-setmaxnreg-256", "contract", "contract.py",
           "if not lo <= role.registers <= hi or role.registers % 8:",
           "if not lo <= role.registers < hi or role.registers % 8:",
           "setmaxnreg 256 (the maximum) is refused",
           (T_ERR + "::test_register_budget_over_the_file",)),
    Mutant("contract-warpgroup-multiple", "contract", "contract.py",
           "if role.warpgroup_aligned and role.warps % 4:",
           "if role.warpgroup_aligned and role.warps % 2:",
           "a warpgroup-aligned role of 6 warps (one and a half warpgroups) is accepted",
           (T_BEH + "::test_contract_refuses_partial_warpgroups",)),
    Mutant("spec-duplicate-instance", "spec", "spec.py",
           "if names.count(inst.name) > 1:",
           "if names.count(inst.name) > 2:",
           "two instances with one name are accepted; ports and bindings of the second shadow the first",
           (T_BEH + "::test_spec_refuses_duplicate_instances_and_unknown_ports",)),
    Mutant("spec-connect-instance-unchecked", "spec", "spec.py",
           "if not port or inst not in names:",
           "if not port:",
           "a connection naming an instance that does not exist is not a spec error",
           (T_BEH + "::test_spec_refuses_duplicate_instances_and_unknown_ports",)),
    Mutant("expr-ceil-div", "expr", "expr.py",
           "return -(-a // b)",
           "return a // b + 1",
           "ceil_div rounds exact quotients up: align_up(256, 128) = 384 and every buffer sized with it grows",
           (T_BEH + "::test_expression_functions_on_exact_quotients",)),
    Mutant("expr-ceil-div-c", "expr", "expr.py",
           'return f"(({args[0]} + {args[1]} - 1) / {args[1]})"',
           'return f"(({args[0]} + {args[1]}) / {args[1]})"',
           "ceil_div in generated C differs from the linker's own evaluation: layouts in the glue disagree "
           "with the plan",
           (T_BEH + "::test_expression_functions_on_exact_quotients",)),
    Mutant("expr-unknown-call", "expr", "expr.py",
           "if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS or node.keywords:",
           "if not isinstance(node.func, ast.Name) or node.keywords:",
           "any function name parses in a contract expression",
           ("tests/inputs/test_expr.py::test_unsafe_or_unsupported_syntax_is_refused",)),

    # --- global ports ---------------------------------------------------------------------------
    Mutant("check-global-size-in-elements", "check", "link/check.py",
           "need = int(np.prod(shape)) * DTYPES[sp.dtype][1]",
           "need = int(np.prod(shape))",
           "a global port's size is counted in elements, not bytes: a workspace a quarter the size of an "
           "int32 tensor links, and the producer writes past it into the next workspace",
           (T_GLOBAL + "::test_a_workspace_too_small_for_the_port_is_refused",
            T_GLOBAL_BAD + "::test_link_refuses_a_bad_global_hand_over")),
    Mutant("check-global-dtype-convertible", "check", "link/check.py",
           'if sp.dtype != dp.dtype:\n        complain(mismatch(f"dtype {sp.dtype} ({si.contract.name}) differs',
           'if sp.dtype != dp.dtype and (sp.dtype, dp.dtype) not in CONVERTIBLE:\n'
           '        complain(mismatch(f"dtype {sp.dtype} ({si.contract.name}) differs',
           "a global hand-over between convertible dtypes (bf16 -> fp32) links, but nothing converts a tensor "
           "read in place: the consumer reads bf16 bits as floats",
           (T_GLOBAL + "::test_a_global_hand_over_must_agree_on_the_dtype",
            T_GLOBAL_BAD + "::test_link_refuses_a_bad_global_hand_over")),
    Mutant("glue-global-source-port-name", "glue", "link/glue.py",
           "port.buffer).c_name}",
           "port.name).c_name}",
           "the glue fills a global in-port with a kernel parameter named after the producer's port, not "
           "the workspace behind it: the glue does not compile, or (a workspace of that name) reads the wrong one",
           (T_GLOBAL + "::test_the_reader_gets_the_producers_workspace",)),
    Mutant("contract-global-port-tma-operand", "contract", "contract.py",
           "[o.name for o in c.operand if o.tma is None]",
           "[o.name for o in c.operand]",
           "a global out-port may name a TMA operand: the in-port gets the address of a tensor map "
           "parameter, not of the caller's array",
           (T_GLOBAL_BAD + "::test_pack_refuses_a_bad_global_port",)),

    # --- split schedules (issue 15): the stream-K table, the count, the fix-up --------------------------
    Mutant("glue-split-completes-early", "glue", "link/glue_ir.py",
           'pl_n) + pl_n == {self.k_tiles};"]',
           'pl_n) + pl_n >= {self.k_tiles - 1};"]',
           "a split tile counts as complete one k-tile early: the epilogue stores the sum before the last "
           "contributor's partials are in (a race that verify sees only sometimes)",
           (T_HOST, "tests/link/test_split.py::test_a_split_link_runs_the_schedules_units"), kill="plan"),
    Mutant("render-tile-loop-inclusive", "glue", "link/glue_ir.py",
           'pl_tile < {c_text(self.bound)}; "',
           'pl_tile <= {c_text(self.bound)}; "',
           "the printed tile loop runs one stride past its bound: a block stores a tile past the last "
           "(the statement's fields, which the model reads, are right)",
           (T_HOST,), kill="plan"),
    Mutant("render-unit-pick-counts-the-head", "glue", "link/glue_ir.py",
           "pl_tile = pl_row[{self.run}] + pl_u - pl_head;",
           "pl_tile = pl_row[{self.run}] + pl_u;",
           "the printed unit pick forgets the head unit: a block with a head runs each whole tile of its "
           "stream-K run one tile late, the first never (the fields the model reads are right)",
           (T_HOST,), kill="plan"),
    Mutant("glue-split-slot-test", "glue", "link/glue.py",
           'SlotRead(Cond(Bin(">=", var("pl_begin"), first)',
           'SlotRead(Cond(Bin(">", var("pl_begin"), first)',
           "a contributor whose range starts exactly at the tile's first k-tile is read from its tail slot: "
           "the sum takes another tile's partials",
           ("tests/link/test_split.py::test_a_split_link_runs_the_schedules_units", T_HOST), kill="plan"),
    Mutant("glue-split-tail-slot", "glue", "link/glue.py",
           "tail=(5, 6, 1), run=3)",
           "tail=(5, 6, 0), run=3)",
           "a block's tail unit stores its partials over its head unit's: the head tile's sum is wrong "
           "whenever its completing block reads late",
           ("tests/link/test_split.py::test_a_split_link_runs_the_schedules_units", T_HOST), kill="plan"),
    Mutant("stream-k-row-next-block", "glue", "link/glue.py",
           "tuple(block_row(mode, link.allocation.num_tiles, split.k_tiles, grid, b))",
           "tuple(block_row(mode, link.allocation.num_tiles, split.k_tiles, grid, min(b + 1, grid - 1)))",
           "each block runs its neighbour's units: the last block's k-tiles twice, the first block's never",
           ("tests/link/test_split.py::test_a_split_link_runs_the_schedules_units", T_HOST), kill="plan"),
    Mutant("glue-split-count-not-reset", "glue", "link/glue_ir.py",
           '            lines.append("          if (pl_completes) *pl_count = 0;")',
           '            lines.append("          if (pl_completes) *pl_count += 0;")',
           "the block that completes a split tile leaves its count at K / 64: the runtime clears the counts "
           "before the first launch only, so every later launch completes no tile and stores none",
           (T_HOST, "tests/link/test_split.py::test_a_split_link_runs_the_schedules_units"), kill="plan"),
    Mutant("abi-split-counts-never-cleared", "abi", "link/abi.py",
           'workspace={"zero": False, "zero_once": True},',
           'workspace={"zero": False},',
           "the split's tile counts are never cleared: the first launch counts from whatever the allocation "
           "held",
           ("tests/link/test_split.py::test_a_split_link_runs_the_schedules_units", T_HOST), kill="plan"),
    Mutant("facts-limit-unchecked", "facts", "link/solve.py",
           "for i, limit in enumerate(q.limits):",
           "for i, limit in enumerate(q.limits[:0]):",
           "a contract's [[facts.limit]] is never checked: a Llama link with L = Lmax stores the new token's K and V "
           "one row past its (sequence, head) slice of the cache",
           ("tests/link/test_solve.py::test_a_limit_refuses_fixed_values_naming_each_fact_and_its_source",
            "tests/link/test_solve.py::test_two_facts_under_a_limit_match_the_oracle")),
    Mutant("abi-zero-once-dropped", "abi", "link/abi.py",
           'workspace={"zero": w.zero, **({"zero_once": True} if w.zero_once else {})}))',
           'workspace={"zero": w.zero}))',
           "a contract's zero_once workspace is never cleared: the Llama block's first grid barrier counts from "
           "whatever the allocation held, and passes early or hangs",
           ("tests/examples/test_llama_decode.py::test_the_block_links_in_both_modes",), kill="plan"),
    Mutant("glue-split-trace-slots", "glue", "link/glue.py",
           "        w.spans = first_span  # the units run the same steps",
           "        w.spans += 0  # the units run the same steps",
           "a traced split build counts its trace slots on through the units' loop: each span after the "
           "whole tiles is reported under the next step's label, and the last ones land past the row",
           ("tests/link/test_split.py::test_a_traced_split_link_stores_each_step_in_its_own_slot",), kill="plan"),

    # --- register budgets and smem reuse around whole-block phases --------------------------------
    Mutant("glue-budget-not-returned", "glue", "link/glue.py",
           "if role.registers and role.registers != cap and whole_block:",
           "if role.registers and role.registers != cap and not whole_block:",
           "the roles keep their setmaxnreg budgets into the phases at the end: the producer warps run the "
           "combine with 56 registers where the code was compiled for 168",
           (T_MOE + "::test_what_the_components_share", "tests/link/test_audit.py")),
    Mutant("alloc-reuse-fence-for-block-phases", "alloc", "link/alloc.py",
           "{r for r in g.live if link.in_tile_loop(r)} for g in (a, b)",
           "{r for r in g.live} for g in (a, b)",
           "memory shared by a whole-block phase and a role phase gets a reuse barrier the glue never executes: "
           "the post-link check fails the link",
           (T_MOE + "::test_what_the_components_share",), kill="plan"),
    Mutant("alloc-entry-budget-unchecked", "alloc", "link/layout.py",
           "if at_end and cap % 8 and any(r.registers for r in draft.roles):",
           "if False:",
           "a block that enters with 255 registers links with whole-block phases after setmaxnreg roles: the "
           "glue would return them to 255, which setmaxnreg cannot encode",
           ("tests/link/test_start_phase.py::test_roles_with_register_budgets_around_whole_block_phases",
            "tests/link/test_whole_block.py::test_whole_block_phase_refuses_setmaxnreg_and_register_ports")),

    # --- error text (issue 48 item 4) -------------------------------------------------------------
    Mutant("check-global-dtype-hints-conversions", "check", "link/check.py",
           'if sp.dtype != dp.dtype and not {"global", "tmem"} & {sp.space, dp.space} and \\\n'
           '                (sp.dtype, dp.dtype) not in CONVERTIBLE:',
           "if sp.dtype != dp.dtype and (sp.dtype, dp.dtype) not in CONVERTIBLE:",
           "a dtype mismatch on a global port, read in place, is answered with the smem conversions, which do not "
           "apply, and names no package to repack",
           (T_GLOBAL_BAD + "::test_link_refuses_a_bad_global_hand_over",)),
    Mutant("report-warning-read-as-markup", "report", "link/report.py",
           'con.print(f"[yellow]warning:[/] {escape(w)}")',
           'con.print(f"[yellow]warning:[/] {w}")',
           "the link report prints a warning through rich's markup: `[[smem]]` in a fix and `[contract: smem.buf]` "
           "vanish from the console (the JSON plan keeps them)",
           ("tests/cli/test_error_text.py::test_symbol_link_report_keeps_bracketed_names",)),

    # --- pinned packages (issue 48) ---------------------------------------------------------------
    Mutant("load-pin-unchecked", "package", "link/facts.py",
           "if inst.sha256 is not None and pkg.file_sha256 != inst.sha256:",
           "if False:",
           "a spec that pins its packages links whatever file lies at the path: a vendor's update (or a "
           "swapped package) goes in unreviewed, which is all a pin is there to stop",
           ("tests/package/test_pins.py::test_pin_mismatch_is_refused_naming_both_hashes",)),
    Mutant("lock-hashes-the-content-not-the-file", "package", "package.py",
           "pkg.file_sha256 = hashlib.sha256(data).hexdigest()",
           "pkg.file_sha256 = pkg.content_hash()",
           "the pin is pipelink's own digest of the package's parts, not the file's: `sha256sum` no longer checks "
           "it, and bytes outside the parts it covers change unpinned",
           ("tests/package/test_pins.py::test_lock_writes_the_pins_after_each_package_line_and_link_passes",)),

    # --- bounds a guarantee can outgrow, facts the link decides, the plain symbol control (issue 48) ----
    Mutant("check-count-bound-unchecked", "check", "link/check.py",
           "if tiles >= bound:",
           "if tiles >= 0:",
           "a schedule's tile number below what the count's writer guarantees links: the tiles past it never run "
           "and their output stays unwritten, in pipelink mode (the MoE permute updated to list more tiles)",
           ("tests/link/test_dynamic_tiles.py::test_a_schedule_below_the_guaranteed_count_is_refused_naming_both",
            "tests/link/test_dynamic_tiles.py::test_the_link_runs_every_tile_the_component_can_list")),
    Mutant("facts-symbol-guarantees-one-pass", "facts", "link/facts.py",
           "while True:  # in the order they can be computed",
           "for _ in range(1):  # in the order they can be computed",
           "symbol linking evaluates guarantees once, in declaration order: one that names a guarantee declared "
           "below it is left out and the allocator ends in a KeyError",
           ("tests/link/test_dynamic_tiles.py::test_symbol_mode_computes_a_guarantee_that_names_one_declared_below_it",)),
    Mutant("check-tile-grid-unchecked", "check", "link/check.py",
           "if _padded(theirs) == _padded(grid):",
           "if True:",
           "a spec's tile grid other than the one a component covers links: half the GEMM's output tiles never "
           "run (unwritten), or tiles past its operands run (out of bounds)",
           ("tests/link/test_tile_grid.py::test_a_spec_grid_other_than_the_components_is_refused_naming_both",
            "tests/link/test_tile_grid.py::test_the_link_accepts_exactly_the_covered_grid")),
    Mutant("glue-count-over-bound-cut-silently", "glue", "link/glue.py",
           'bound if source.bounded else None,',
           'None,',
           "a count over the bound (a writer that breaks its count_max) is cut by min() without a trap: tiles "
           "are skipped silently instead of the kernel stopping",
           ("tests/link/test_dynamic_tiles.py::test_the_tile_loops_run_the_count_written_before_them",), kill="plan"),
    Mutant("facts-block-threads-not-offered", "facts", "link/facts.py",
           "if BLOCK_THREADS in required:",
           "if False:",
           "block_threads is solved like a free fact: the component's default (the probe's 128) is taken and the "
           "link refused, although the package holds the variant for the block's 160 threads",
           ("tests/link/test_whole_block.py::test_block_threads_is_decided_by_the_link",
            "tests/link/test_whole_block.py::test_block_threads_set_against_the_block_is_a_conflict")),
    Mutant("check-symbol-refuses-global-dtype", "check", "link/check.py",
           'complain(mismatch(f"dtype {sp.dtype} ({si.contract.name}) differs from {dp.dtype}',
           'raise (mismatch(f"dtype {sp.dtype} ({si.contract.name}) differs from {dp.dtype}',
           "the symbol control refuses a dtype mismatch on a global port, which a hand-written host launches: "
           "the perturbation study's 'symbol linking accepted it' no longer measures symbol linking",
           ("tests/link/test_global_ports.py::test_a_global_hand_over_must_agree_on_the_dtype",)),
    Mutant("check-symbol-refuses-count-cut", "check", "link/check.py",
           'if problem is not None:\n        if link.mode != "symbol":\n            raise problem',
           'if problem is not None:\n        if True:\n            raise problem',
           "the symbol control refuses a schedule below the count's bound: it checks what symbol linking does not",
           ("tests/link/test_dynamic_tiles.py::test_a_schedule_below_the_guaranteed_count_is_refused_naming_both",)),

    # --- generated input that was accepted or crashed (issue 48 item 6) ---------------------------------
    Mutant("expr-array-range-unchecked", "expr", "expr.py",
           "over, under = np.any(value > MAX_LITERAL), np.any(value < MIN_C_INT)",
           "over, under = False, False",
           "a port offset evaluated over index arrays is not held to C int: `t + 2147483647 * 2147483647 * "
           "2147483647` crashes the link with an OverflowError, and a product past int64 wraps silently",
           ("tests/inputs/test_expr.py::test_a_huge_partial_result_over_arrays_is_a_typed_error_not_an_overflow",
            "tests/inputs/test_expr.py::test_array_evaluation_is_exact_or_refused_at_the_c_int_boundary",
            T_NEG + "::test_a_layout_the_glue_cannot_compute_is_refused_naming_the_port")),
    Mutant("expr-array-divisor-unchecked", "expr", "expr.py",
           "if node.func.id in _DIVIDING:",
           "if node.func.id in _DIVIDING and not isinstance(args[1], np.ndarray):",
           "ceil_div and align_up over index arrays divide by zero without a word (numpy gives 0): `ceil_div(0, s)` "
           "in a port offset links where `0 // s` is refused",
           ("tests/inputs/test_expr.py::test_every_divisor_over_arrays_is_checked_for_zero",
            T_NEG + "::test_a_layout_the_glue_cannot_compute_is_refused_naming_the_port",
            T_NEG + "::test_a_fragment_the_glue_cannot_compute_is_refused_naming_the_port")),
    # The first place a port's layout is evaluated (since the layout-inside-its-buffer check, issue 48 item 1):
    Mutant("check-layout-error-unlocated", "check", "link/check.py",
           'off = inst.facts_eval_array(port.offset, f"port.{port.name}.offset", dict(zip(port.shape, grid)))',
           "off = port.offset.eval_array({**inst.facts, **dict(zip(port.shape, grid))})",
           "a layout the glue cannot compute is refused without the package, the component or the port it is in",
           (T_NEG + "::test_a_layout_the_glue_cannot_compute_is_refused_naming_the_port",)),
    Mutant("contract-guarantee-names-itself", "contract", "contract.py",
           "graphlib.TopologicalSorter(needs).prepare()",
           "graphlib.TopologicalSorter({n: d - {n} for n, d in needs.items()}).prepare()",
           "a guarantee computed from itself (`ring_arrivals = \"ring_arrivals + 1\"`) loads: it never gets a value",
           ("tests/inputs/test_hardening_contract.py::test_bad_contract_is_refused_naming_file_and_field",
            "tests/inputs/test_hardening_contract.py::test_guarantees_computed_from_themselves_are_refused")),
    Mutant("contract-guarantee-cycle", "contract", "contract.py",
           "needs = {n: e.names() & c.facts.guarantees.keys() for n, e in c.facts.guarantees.items()}",
           "needs = {n: e.names() & {n} for n, e in c.facts.guarantees.items()}",
           "guarantees computed from each other (a = b + 1, b = a) load: neither ever gets a value",
           ("tests/inputs/test_hardening_contract.py::test_bad_contract_is_refused_naming_file_and_field",
            "tests/inputs/test_hardening_contract.py::test_guarantees_computed_from_themselves_are_refused")),
    Mutant("spec-repeated-connect", "spec", "spec.py",
           "earlier[c.src, c.dst] = i",
           "earlier[c.dst, c.src] = i",
           "a [[connect]] given twice loads: the glue copies the tile twice and allocates a named barrier no code "
           "uses, and the audit does not notice",
           ("tests/cli/test_hardening_cli.py::test_a_connection_given_twice_is_refused_on_load",
            "tests/cli/test_hardening_cli.py::test_any_repeated_connection_is_refused_naming_both")),

    # --- every refusal has a negative test (issue 53 item 6) ---
    Mutant("check-port-direction-and", "check", "link/check.py",
           'if sp.direction != "out" or dp.direction != "in":',
           'if sp.direction != "out" and dp.direction != "in":',
           "the port-direction check refuses only a connection written backwards: an out-port connected to an "
           "out-port (two writers, no reader) or an in-port to an in-port links",
           ("tests/link/test_check_refusals.py::test_a_connection_must_run_from_an_out_port_to_an_in_port",
            "tests/link/test_check_refusals.py::test_an_out_port_to_an_out_port_exits_2_at_the_cli")),
    Mutant("check-unknown-port-unchecked", "check", "link/queries.py",
           "    if port is None:",
           "    if port is None and not inst.contract.port:",
           "a connection naming a port its component lacks is not refused when the component has other ports: "
           "an AttributeError instead of a typed error naming the port",
           ("tests/link/test_check_refusals.py::test_a_port_the_component_does_not_have_is_refused",)),
    Mutant("check-global-space-producer-only", "check", "link/check.py",
           "    if sp.space != dp.space:",
           '    if sp.space != "global":',
           "only the producer side of a global hand-over is held to global: a global workspace links to an smem "
           "in-port, which reads a shared buffer nothing wrote",
           ("tests/link/test_check_refusals.py::test_a_global_port_connects_only_to_a_global_port",)),
    Mutant("check-split-tiles-from-allowed", "check", "link/check.py",
           '"[schedule] tiles_from: the tile count is known only in the kernel" if link.spec.schedule.tiles_from else',
           '"[schedule] tiles_from: the tile count is known only in the kernel" if False else',
           "a split schedule of a tile count decided in the kernel is not refused for it: its table of units is "
           "cut from the upper bound",
           ("tests/link/test_check_refusals.py::test_a_split_of_a_tile_count_read_in_the_kernel_is_refused",)),
    Mutant("check-split-k-tiles-disagree", "check", "link/check.py",
           "if len(set(k_tiles.values())) > 1:",
           "if len(set(k_tiles.values())) > 2:",
           "two mainloops that cut k into different k-tile counts are not refused as such",
           ("tests/link/test_check_refusals.py::test_a_split_whose_mainloops_disagree_on_k_tiles_is_refused_naming_both",)),
    Mutant("check-split-two-summed-entries", "check", "link/check.py",
           "if len(summed) != 1:",
           "if len(summed) < 1:",
           "a split with two entries whose out-ports are summed links: the glue sums the first and the second "
           "instance's partial tiles are never added up",
           ("tests/link/test_check_refusals.py::test_a_split_with_two_summed_entries_is_refused_naming_both",)),
    Mutant("facts-role-mapping-unchecked", "facts", "link/facts.py",
           "if crole not in pkg.contract.roles:",
           "if crole not in pkg.contract.roles and crole not in inst.roles.values():",
           "an instance mapping a role its component does not have is not refused when the name is also a kernel "
           "role: the mapping is dropped and the component runs in a role of its own",
           ("tests/link/test_check_refusals.py::test_a_role_the_component_does_not_have_is_refused",
            "tests/link/test_check_refusals.py::test_refusals_of_each_stage_exit_2_at_the_cli")),
    Mutant("facts-symbol-one-missing-fact", "facts", "link/facts.py",
           "        if missing:",
           "        if len(missing) > 1:",
           "symbol linking does not report a single fact nothing gives: the allocator ends in a KeyError",
           ("tests/link/test_check_refusals.py::test_symbol_linking_refuses_a_fact_nothing_gives",)),
    Mutant("facts-guarantee-error-untyped", "facts", "link/facts.py",
           "    except ExpressionError as exc:",
           "    except ZeroDivisionError as exc:",
           "a guarantee that cannot be computed with the resolved facts escapes as a bare ExpressionError, "
           "without the package, the component or the field",
           ("tests/link/test_check_refusals.py::test_a_guarantee_that_cannot_be_computed_is_refused_naming_its_field",)),
    Mutant("facts-required-value-unchecked", "facts", "link/facts.py",
           "            raise MissingFact(f\"instance '{inst.name}' requires fact '{name}', but nothing in the link gives it \"",
           "            if False: raise MissingFact(f\"instance '{inst.name}' requires fact '{name}', but nothing in the link "
           "gives it \"",
           "a required fact left without a value (guarantees of two components waiting on each other) is not "
           "refused as missing: a guarantee fails to evaluate instead, naming neither instance",
           ("tests/link/test_check_refusals.py::test_guarantees_that_wait_on_each_other_are_a_missing_fact",)),
    Mutant("facts-select-variant-first", "facts", "link/facts.py",
           "    raise VariantMissing(f\"instance '{inst.name}' needs compile-time facts {need}, but the package holds "
           "only \"",
           "    return 0  # the first variant\n"
           "    raise VariantMissing(f\"instance '{inst.name}' needs compile-time facts {need}, but the package holds "
           "only \"",
           "the variant check after solving takes the first variant when none was built for the solved values: "
           "the kernel runs code compiled for other facts",
           ("tests/link/test_check_refusals.py::test_the_variant_check_after_solving_refuses_a_variant_the_package_lacks",)),
    Mutant("solve-variant-any-fact", "facts", "link/solve.py",
           "            if any(all(wanted.get(k) == x for k, x in v.items()) for v in q.variants):",
           "            if any(any(wanted.get(k) == x for k, x in v.items()) for v in q.variants):",
           "the solver accepts compile-time values that a variant shares only in part (tile_n=128 with gated=1 "
           "against a variant tile_n=128, gated=0)",
           ("tests/link/test_check_refusals.py::test_solver_refuses_a_variant_the_package_lacks",)),
    Mutant("solve-combinations-summed", "facts", "link/solve.py",
           "            count *= len(candidates[n])",
           "            count += len(candidates[n])",
           "the solver counts a group's combinations as a sum, not a product: a group far over the limit is "
           "enumerated (minutes, or ambiguous) instead of refused naming its facts",
           ("tests/link/test_check_refusals.py::test_solver_refuses_too_many_combinations_naming_each_fact",)),
    Mutant("alloc-group-divides-all-tiles", "alloc", "link/alloc.py",
           "if len(draft.tiles) != 2 or group < 1 or banded % group:",
           "if len(draft.tiles) != 2 or group < 1 or draft.num_tiles % group:",
           "bands are checked against the number of tiles, not the fast dimension they cut: a group that leaves a "
           "partial band (4 of 6 columns) links",
           ("tests/link/test_check_refusals.py::test_bands_must_divide_the_fast_tile_dimension",)),
    Mutant("alloc-cluster-grid-by-tiles", "alloc", "link/alloc.py",
           "    if draft.grid % c:",
           "    if draft.num_tiles % c:",
           "a cluster is checked against the tiles, not the blocks: a grid of 3 blocks in clusters of 2 links",
           ("tests/link/test_check_refusals.py::test_a_cluster_is_refused_where_its_blocks_would_not_step_together",)),
    Mutant("alloc-cluster-group-by-two", "alloc", "link/alloc.py",
           "    if tile_loop and link.spec.schedule.group % c:",
           "    if tile_loop and link.spec.schedule.group % 2:",
           "bands are held to clusters of two: a band of 2 tiles links under clusters of 4",
           ("tests/link/test_check_refusals.py::test_a_cluster_is_refused_where_its_blocks_would_not_step_together",)),
    Mutant("alloc-cluster-trace-four-only", "alloc", "link/alloc.py",
           "    if link.trace:",
           "    if link.trace and c > 2:",
           "a traced build of a cluster of 2 links, though tracing does not support clusters",
           ("tests/link/test_check_refusals.py::test_a_cluster_is_refused_where_its_blocks_would_not_step_together",)),
    Mutant("alloc-pinned-hand-over-one-way", "alloc", "link/alloc.py",
           "if a.pinned is not None and b.pinned is not None and a.pinned != b.pinned:",
           "if a.pinned is not None and b.pinned is not None and a.pinned > b.pinned:",
           "a hand-over buffer the consumer pins above the producer's offset links at the producer's: the consumer's "
           "code addresses bytes nobody wrote",
           ("tests/link/test_check_refusals.py::test_a_hand_over_buffer_pinned_at_two_offsets_is_refused_naming_both",)),
    Mutant("alloc-pinned-overlap-by-end", "alloc", "link/alloc.py",
           "if off < g.pinned + g.bytes and g.pinned < off + other.bytes and _concurrent(g.live, other.live):",
           "if off < g.pinned + g.bytes and g.pinned + g.bytes < off + other.bytes and _concurrent(g.live, other.live):",
           "a pinned buffer that overlaps another up to its last byte is not a collision: two components write "
           "the same shared memory",
           ("tests/link/test_check_refusals.py::test_pinned_buffers_that_overlap_are_refused_naming_both",)),
    Mutant("alloc-barrier-threads-contract-bound", "alloc", "link/alloc.py",
           "if threads % 32 or not 32 <= threads <= draft.block:",
           "if threads % 32 or not 32 <= threads <= 1024:",
           "a named barrier over more threads than the block has links: bar.sync waits for threads that do not "
           "exist and the block hangs",
           ("tests/link/test_check_refusals.py::test_a_named_barrier_must_count_whole_warps_of_the_block",)),
    Mutant("alloc-barrier-threads-half-warps", "alloc", "link/alloc.py",
           "if threads % 32 or not 32 <= threads <= draft.block:",
           "if threads % 16 or not 32 <= threads <= draft.block:",
           "symbol linking lets a named barrier count half warps (48 threads): bar.sync counts whole warps, so it "
           "waits for 64 and hangs",
           ("tests/link/test_check_refusals.py::test_a_named_barrier_must_count_whole_warps_of_the_block",)),

    # --- what the glue means, seen on the CPU by the model of link/glue_model.py (issue 53 item 6): one-line
    # generator bugs the audit's numbers do not see (every number in them is one the plan holds) ----------
    Mutant("model-column-major-by-columns", "glue", "link/glue.py",
           "return mod(TILE, lit(rows)), div(TILE, lit(rows))",
           "return mod(TILE, lit(rows)), div(TILE, lit(cols))",
           "column-major tile coordinates divide by the column count instead of the row count: tiles land on "
           "the wrong place of the output, some twice, some never",
           (T_MODEL + "::test_every_tile_grid_order_band_and_phase_runs_each_tile_once_where_the_schedule_says",)),
    Mutant("model-row-major-by-rows", "glue", "link/glue.py",
           "return div(TILE, lit(cols)), mod(TILE, lit(cols))",
           "return div(TILE, lit(rows)), mod(TILE, lit(cols))",
           "row-major rows divided by the row count: on a grid that is not square, rows past the first are "
           "computed at the wrong place",
           (T_MODEL + "::test_every_tile_grid_order_band_and_phase_runs_each_tile_once_where_the_schedule_says",)),
    Mutant("model-band-width", "glue", "link/glue.py",
           "add(mul(Par(div(TILE, lit(g * rows))), lit(g)),",
           "add(mul(Par(div(TILE, lit(g * cols))), lit(g)),",
           "a row-major band's column steps by bands of the wrong length: band columns overlap or skip",
           (T_MODEL + "::test_every_tile_grid_order_band_and_phase_runs_each_tile_once_where_the_schedule_says",)),
    Mutant("model-end-phase-one-short", "glue", "link/glue.py",
           "add(div(Par(sub(sub(tiles, lit(1)), block)), lit(link.allocation.grid)), lit(1)),",
           "div(Par(sub(sub(tiles, lit(1)), block)), lit(link.allocation.grid)),",
           "the whole-block phase after the tile loops is told one tile fewer than the block ran (a reduction "
           "over the block's tiles leaves the last one out)",
           (T_MODEL + "::test_every_tile_grid_order_band_and_phase_runs_each_tile_once_where_the_schedule_says",)),
    Mutant("model-fixup-half-open", "glue", "link/glue.py",
           'ContributorLoop(var("pl_b0"), "<=", var("pl_b1"))',
           'ContributorLoop(var("pl_b0"), "<", var("pl_b1"))',
           "the stream-K fix-up sums contributors [b0, b1) instead of [b0, b1]: the last block's partial sum of "
           "every split tile is left out",
           (T_MODEL + "::test_every_split_sums_each_contributor_once_and_streams_the_ring_in_order",)),
    Mutant("model-unit-last-off-by-one", "glue", "link/glue.py",
           'Bin("==", var("pl_u"), sub(var("pl_units"), lit(1)))',
           'Bin("==", var("pl_u"), var("pl_units"))',
           "ctx.last is never set on a block's last stream-K unit: an epilogue that flushes on its last tile "
           "never flushes",
           (T_MODEL + "::test_every_split_sums_each_contributor_once_and_streams_the_ring_in_order",)),
    Mutant("model-ring-advances-by-k-end", "glue", "link/glue.py",
           'w.put(Assign("pl_stage", sub(var("pl_k_end"), var("pl_k_begin")), 6, op="+="))',
           'w.put(Assign("pl_stage", var("pl_k_end"), 6, op="+="))',
           "the ring position after a unit that starts inside a tile advances by k_end, not its k-tiles: the "
           "mainloop waits on a ring slot that no producer fills (hang) or reads another stage",
           (T_MODEL + "::test_every_split_sums_each_contributor_once_and_streams_the_ring_in_order",)),
    Mutant("model-ring-ignores-whole-tiles", "glue", "link/glue.py",
           'w.put(Let("int", (("pl_stage", mul(var("pl_iter"), lit(k_tiles))),), 4,',
           'w.put(Let("int", (("pl_stage", lit(0)),), 4,',
           "the stream-K units start the ring at 0 although the block's whole tiles streamed k-tiles before "
           "them (hybrid): the producer and the mainloop disagree on the stage",
           (T_MODEL + "::test_every_split_sums_each_contributor_once_and_streams_the_ring_in_order",)),
    Mutant("model-alias-without-producer-side-sync", "glue", "link/glue.py",
           '            w.put(Sync(t.barrier, threads, f"{t.src} -> {t.dst}: consumer done with the buffer"))',
           "            pass",
           "a barrier hand-over inside one role without its producer-side barrier: the producer writes the "
           "next tile while the consumer still reads this one (a write-after-read race)",
           (T_MODEL + "::test_hand_overs_in_one_role_are_ordered_both_ways",)),
    Mutant("model-register-store-does-not-wait", "glue", "link/glue.py",
           '    w.put(Sync(t.barrier, threads, "consumer is done with the previous tile"))',
           "    pass",
           "a register-to-smem store no longer waits for the consumer to finish the previous tile (a "
           "write-after-read race)",
           (T_MODEL + "::test_hand_overs_in_one_role_are_ordered_both_ways",)),
    Mutant("model-copy-not-visible", "glue", "link/glue.py",
           '    w.put(Sync(t.barrier, threads, "copy visible to the consumer"))',
           "    pass",
           "an smem-to-smem copy is not made visible before the consumer reads it (a read-after-write race)",
           (T_MODEL + "::test_hand_overs_in_one_role_are_ordered_both_ways",)),
    Mutant("model-reuse-sync-dropped", "glue", "link/glue.py",
           "        if reuse_bar is not None:\n            w.put(Sync(reuse_bar,",
           "        if False:\n            w.put(Sync(reuse_bar,",
           "buffers that share memory across phases of one role are rewritten by the next phase with no barrier "
           "after the last read of the previous one",
           (T_MODEL + "::test_hand_overs_in_one_role_are_ordered_both_ways",)),
    # --- conformance at its edges (issue 56): each killed by the violations generated across positions ---------
    Mutant("conform-expect-tx-slot-zero-only", "conform", "link/conform.py",
           "array = next((m for m in plan.mbarriers if m.offset <= off < m.offset + 8 * m.count",
           "array = next((m for m in plan.mbarriers if m.offset == off",
           "arrive.expect_tx is checked on slot 0 of an mbarrier array only: too many bytes announced on a later ring "
           "slot (a hang) passes", (T_POS + "[g-smem]",)),
    Mutant("conform-runtime-judged-by-start", "conform", "link/conform.py",
           "if not own or end <= max(s.offset + s.bytes for s in own):",
           "if not own or offset < max(s.offset + s.bytes for s in own):",
           "an access with a run-time index is judged by where it starts: a wide access starting inside the last "
           "buffer and ending past it passes", (T_POS + "[g-smem]",)),
    Mutant("conform-static-judged-by-start", "conform", "link/conform.py",
           "elif any(s.offset <= offset and end <= s.offset + s.bytes for s in own):",
           "elif any(s.offset <= offset < s.offset + s.bytes for s in own):",
           "an access at a known offset is judged by where it starts: an 8- or 16-byte access running past its "
           "buffer's end passes", (T_POS + "[g-smem]",)),
    Mutant("conform-mbarriers-in-anything-goes", "conform", "link/conform.py",
           "    allowed = own if is_init else own + [(lo, hi) for lo, hi, _ in slots]\n",
           "    allowed = own if is_init else own + [(lo, hi) for lo, hi, _ in slots]\n    if own:\n        return\n",
           "a component keeping mbarriers in its own buffer (reserve.mbarriers_in) may init or arrive on any "
           "mbarrier, the glue's and other instances' included", (T_POS + "[h-mbarriers_in]",)),
    Mutant("conform-ldsm-4-bytes", "conform", "link/conform.py",
           "        return 16  # each thread addresses one 16-byte row of an 8x8 matrix",
           "        return 4  # each thread addresses one 16-byte row of an 8x8 matrix",
           "ldmatrix/stmatrix counted as touching 4 bytes a thread instead of a 16-byte row: one whose row runs past "
           "the buffer end passes", (T_POS + "[g-smem]",)),
    Mutant("conform-64-bit-access-as-4", "conform", "link/conform.py",
           '(".128", 16), (".64", 8),', '(".128", 16), (".64", 4),',
           "an 8-byte access (LDS.64, STS.64, cp.async 8) counted as 4 bytes: one running 4 bytes past its buffer "
           "passes", (T_POS + "[g-smem]",)),
    Mutant("conform-16-bit-access-as-4", "conform", "link/conform.py",
           '(".U16", 2), (".S16", 2),', '(".U16", 4), (".S16", 4),',
           "a 2-byte access counted as 4 bytes: a legal store into a buffer's last two bytes is refused",
           (T_POS + "[g-smem]",)),
    Mutant("conform-mbarrier-slot-end-inclusive", "conform", "link/conform.py",
           "    elif any(lo <= at.offset < hi for lo, hi in allowed) or \\",
           "    elif any(lo <= at.offset <= hi for lo, hi in allowed) or \\",
           "an mbarrier operation on the slot just past its array (another instance's barrier, or the glue's) passes",
           (T_POS + "[g-smem]",)),
    Mutant("conform-mbarrier-runtime-slot-anything", "conform", "link/conform.py",
           "(at.runtime and any(at.offset < hi for _, hi in allowed))",
           "at.runtime",
           "an mbarrier operation with a run-time slot index passes wherever its known part lies, even past every "
           "slot of the instance", (T_POS + "[g-smem]",)),
    Mutant("conform-bar-red-threads-unparsed", "conform", "link/conform.py",
           r'(?:,\s*([^,\s]+))?")  # BAR.RED.POPC', r'(?:,\s*(\S+))?")  # BAR.RED.POPC',
           "bar.red's thread count is read with the predicate's comma: the check crashes (an untyped ValueError) "
           "on a component using bar.red.popc", (T_POS + "[g-smem]",)),
    Mutant("conform-predicate-first-dest-kept", "conform", "link/conform.py",
           'return 1 if args and _PRED_OUT.match(args[0]) and "SETP" not in op and not op.startswith("PLOP3") else 0',
           "return 0",
           "a register written after a predicate (R2UR P0, UR5, R6) keeps the value it had: a uniform address is "
           "judged by a stale window, a false finding refuses a legal link",
           (T_CONF + "::test_registers_written_after_a_predicate_and_constants_built_from_halves",)),
    Mutant("conform-halves-constant-unfollowed", "conform", "link/conform.py",
           'if base == "HFMA2" and len(srcs) == 4 and srcs[:2] == ["-RZ", "RZ"]:',
           "if False:",
           "a byte count ptxas builds as two fp16 halves (HFMA2.MMA R, -RZ, RZ, hi, lo) is not followed: too many "
           "transaction bytes announced that way pass",
           (T_CONF + "::test_registers_written_after_a_predicate_and_constants_built_from_halves", T_POS + "[g-smem]")),
    Mutant("conform-dedupe-merges-kinds", "conform", "link/conform.py",
           "key = (f.instance, f.location, f.field, f.message, opcode(f.instruction))",
           "key = (f.instance, f.location, f.field, f.message)",
           "findings of two instruction kinds with the same words on one line are reported as one: an LDSM overrun "
           "hides behind an LDS.128 one",
           (T_CONF + "::test_findings_of_two_instruction_kinds_on_one_line_are_both_kept",)),
    Mutant("conform-loop-head-first-values", "conform", "link/conform.py",
           "            self.values = {r: v for r, v in self.values.items() if r not in self.loop_writes[n]}",
           "            pass",
           "at a loop's head the registers the loop body writes keep their values from before the loop: a stage "
           "counter's -1 makes a legal ring slot look 8 bytes below the array, and the link is refused",
           (T_CONF + "::test_a_value_carried_around_a_loop_is_not_its_first_value",)),
    # --- the copy engine (issue 56: TMA boxes and bulk copies), each killed by the generated copy cases -----
    Mutant("conform-copy-box-judged-by-start", "conform", "link/conform.py",
           'nbytes, align, copy = box, _BOX_ALIGN, " (a TMA box)"',
           'nbytes, align, copy = 1, _BOX_ALIGN, " (a TMA box)"',
           "a TMA box copy is judged by where its shared-memory side starts: a box that starts inside the last "
           "buffer and runs past it (into the next buffer, the mbarriers, or past the allocation) passes",
           (T_POS + "[g-copy]",)),
    Mutant("conform-copy-largest-box", "conform", "link/conform.py",
           "    return min(boxes, default=None)", "    return max(boxes, default=None)",
           "a box copy is sized by the largest box the instance declares, not the smallest: a legal copy of the "
           "small box near a buffer's end is refused",
           (T_POS + "[g-copy]",)),
    Mutant("conform-copy-bulk-size-as-bytes", "conform", "link/conform.py",
           "nbytes = 16 * size if isinstance(size, int)", "nbytes = size if isinstance(size, int)",
           "a bulk copy's size register is read as bytes, not 16-byte units: a 1024-byte copy counts as 64 and "
           "runs past its buffer unseen", (T_POS + "[g-copy]",)),
    Mutant("conform-copy-store-unchecked", "conform", "link/conform.py",
           '_BOX_OPS = ("UTMALDG", "UTMASTG", "UTMAREDG")', '_BOX_OPS = ("UTMALDG",)',
           "TMA stores and reductions (UTMASTG, UTMAREDG) are not checked: a box read from past a buffer's end "
           "writes another instance's data to global memory", (T_POS + "[g-copy]",)),
    Mutant("conform-copy-source-side-unchecked", "conform", "link/conform.py",
           'sides = [(0, False)] * (to == "S") + [(1, True)] * (source == "S")',
           'sides = [(0, False)] * (to == "S")',
           "a bulk copy's shared-memory source (shared to global, shared to shared, bulk reduce) is not checked",
           (T_POS + "[g-copy]",)),
    Mutant("conform-copy-mbarrier-unchecked", "conform", "link/conform.py",
           "    if completes:\n", "    if False:\n",
           "the mbarrier a TMA load or bulk copy completes its bytes on is not checked: a copy completing on the "
           "slot past the ring (another instance's barrier) or in a data buffer passes", (T_POS + "[g-copy]",)),
    Mutant("conform-copy-mbarrier-register-is-dst", "conform", "link/conform.py",
           'reg = m and f"{m.group(1)}{int(m.group(2)) + 1}"', 'reg = m and f"{m.group(1)}{int(m.group(2))}"',
           "a copy's mbarrier is read from its destination register instead of the one after it: every TMA load "
           "and bulk copy into shared memory is reported as completing outside the instance's mbarriers",
           (T_POS + "[g-copy]",)),
    Mutant("conform-copy-alignment-unchecked", "conform", "link/conform.py",
           "if at is not None and not at.runtime and at.offset % align:", "if False:",
           "a copy's shared-memory side off the copy engine's alignment (128 bytes for a box, 16 for a bulk copy) "
           "passes", (T_POS + "[g-copy]",)),
    Mutant("conform-copy-lane-loop-unfollowed", "conform", "link/conform.py",
           'lane_loop = op.startswith("R2UR") and len(args) == 3 and _PRED_OUT.match(args[0])', "lane_loop = False",
           "a uniform address built by ptxas's loop over the lanes' values (@P R2UR P0, UR, R) is not followed: a "
           "TMA store or bulk copy from past a buffer's end at a run-time index passes", (T_POS + "[g-copy]",)),
    Mutant("conform-copy-elected-unfollowed", "conform", "link/conform.py",
           '        if op.startswith("ELECT") and args and _PRED.match(args[0]):\n',
           '        if False:\n',
           "a uniform address set under the predicate ELECT gave one lane is not followed: a TMA load or bulk copy "
           "past a buffer's end at a run-time index passes", (T_POS + "[g-copy]",)),
    # --- allocation at its edges (issue 56) -------------------------------------------------------------------
    Mutant("alloc-alias-pin-ignores-alignment", "alloc", "link/alloc.py",
           "        if merged.pinned is not None and merged.pinned % merged.align:",
           "        if False:",
           "a hand-over buffer pinned by one side at an offset the other side's alignment does not divide (a "
           "1024-aligned swizzled tile behind a 16-aligned pin) is placed misaligned; only the audit's internal "
           "error stops it, not a typed refusal naming both sides",
           ("tests/link/test_check_refusals.py::test_a_pinned_hand_over_buffer_must_meet_the_strictest_alignment_of_its_sides",)),
    Mutant("alloc-alias-align-producer-only", "alloc", "link/alloc.py",
           "max(a.align, b.align)",
           "a.align",
           "a buffer aliased through a port is placed with the producer side's alignment only: a consumer that "
           "needs 1024 (a 128B-swizzled TMA or WGMMA tile) behind a 16-aligned producer buffer lands misaligned",
           ("tests/link/test_check_refusals.py::test_an_aliased_buffer_meets_every_sides_alignment_and_size",),
           kill="plan"),
    Mutant("alloc-alias-align-consumer-only", "alloc", "link/alloc.py",
           "max(a.align, b.align)",
           "b.align",
           "a buffer aliased through a port is placed with the consumer side's alignment only: a 1024-aligned "
           "producer tile handed to a 16-aligned consumer lands misaligned",
           ("tests/link/test_check_refusals.py::test_an_aliased_buffer_meets_every_sides_alignment_and_size",),
           kill="plan"),
    Mutant("alloc-alias-bytes-producer-only", "alloc", "link/alloc.py",
           "max(a.bytes, b.bytes)",
           "a.bytes",
           "a buffer aliased through a port is as large as the producer side's only: a consumer that declares more "
           "bytes reads and writes past its end, into the next buffer",
           ("tests/link/test_check_refusals.py::test_an_aliased_buffer_meets_every_sides_alignment_and_size",),
           kill="plan"),
    Mutant("alloc-alias-live-producer-only", "alloc", "link/alloc.py",
           "_union(a.live, b.live))",
           "a.live)",
           "a buffer aliased through a port is live in the producer side's phases only: a buffer live only in the "
           "consumer's phase shares its memory and overwrites the handed-over data",
           ("tests/link/test_check_refusals.py::test_an_aliased_buffer_meets_every_sides_alignment_and_size",),
           kill="plan"),
    Mutant("alloc-hand-over-gap", "alloc", "link/alloc.py",
           "        g.live = _filled(g.live, steps)",
           "        pass",
           "a hand-over buffer is live in its sides' phases only: a buffer of an instance whose phase runs between "
           "them shares its memory and overwrites the data before the reader reads it",
           ("tests/link/test_check_refusals.py::test_a_hand_over_stays_live_through_the_phases_between_its_sides",)),
    Mutant("check-smem-port-layout-unbounded", "check", "link/check.py",
           "            over = _smem_layout_overrun(inst, port)",
           "            over = None",
           "an smem port whose layout reaches past its buffer links: the glue's copy writes the tile over the "
           "buffer's neighbour (conformance does not look at the glue's code)",
           ("tests/link/test_check_refusals.py::test_an_smem_ports_layout_must_lie_inside_its_buffer",)),
    # --- the judge's own arithmetic, its poison, the cache's headers (issue 55) ----------------------------------
    Mutant("judge-speedup-inverted", "verify", "verify/timing.py",
           "    return baseline_ms / kernel_ms",
           "    return kernel_ms / baseline_ms",
           "the bench's speed-up is kernel / baseline: a slower kernel is reported as faster",
           (T_TIMING,)),
    Mutant("judge-median-is-mean", "verify", "verify/timing.py",
           '"median_ms": float(np.median(arr))',
           '"median_ms": float(np.mean(arr))',
           "the median is the mean: one slow launch moves every ratio and roofline figure",
           (T_TIMING,)),
    Mutant("judge-p90-is-p80", "verify", "verify/timing.py",
           '"p90_ms": float(np.percentile(arr, 90))',
           '"p90_ms": float(np.percentile(arr, 80))',
           "the spread's upper end is the 80th percentile, reported as the 90th",
           (T_TIMING,)),
    Mutant("judge-roofline-floor-min", "verify", "verify/roofline.py",
           "floor = max(t_compute, t_memory)",
           "floor = min(t_compute, t_memory)",
           "the roofline floor is the smaller of the compute and memory times: every pct_of_roofline is overstated",
           (T_ROOF,)),
    Mutant("judge-roofline-pct-inverted", "verify", "verify/roofline.py",
           '"pct_of_roofline": 100 * floor / seconds,',
           '"pct_of_roofline": 100 * seconds / floor,',
           "the percentage of the roofline is time over floor: a slow kernel reads as far above 100 %",
           (T_ROOF,)),
    Mutant("judge-roofline-bound-flipped", "verify", "verify/roofline.py",
           '"bound": "memory" if t_memory >= t_compute else "compute"',
           '"bound": "compute" if t_memory >= t_compute else "memory"',
           "the roofline names the wrong bound: a memory-bound kernel is tuned for its FLOPs",
           (T_ROOF,)),
    Mutant("judge-float-poison-zero", "verify", "verify/metrics.py",
           "    return math.nan",
           "    return 0.0",
           "outputs are zero-filled instead of NaN-poisoned: elements the kernel never writes are not seen where "
           "the reference is zero",
           (T_METRICS,)),
    Mutant("judge-child-zero-fills", "verify", "verify/child.py",
           "torch.full(p.shape, metrics.poison_value(p.dtype),",
           "torch.full(p.shape, 0,",
           "the verify child fills outputs with zeros instead of their poison: unwritten elements pass where the "
           "reference is zero",
           (T_METRICS + "::test_the_child_poisons_with_poison_value",)),
    Mutant("judge-int-poison-zero", "verify", "verify/metrics.py",
           '"int8": -(1 << 7)',
           '"int8": 0',
           "int8 outputs are zero-filled: an unwritten element is not seen where the reference is zero",
           (T_METRICS,)),
    Mutant("judge-int-poison-not-counted", "verify", "verify/metrics.py",
           "        left = left | ((out == float(poison)) & (ref != float(poison)))",
           "        left = left",
           "an integer output's elements that still hold the poison are not counted unwritten",
           (T_METRICS,)),
    Mutant("judge-int-poison-in-the-reference", "verify", "verify/metrics.py",
           " & (ref != float(poison)))",
           ")",
           "an integer element the reference also holds the poison value at counts as unwritten: a right kernel "
           "fails",
           (T_METRICS,)),
    Mutant("judge-nonfinite-counts-unwritten", "verify", "verify/metrics.py",
           "nonfinite = int(xp.count_nonzero(~xp.isfinite(out) & ref_ok)) - int(xp.count_nonzero(nan & ref_ok))",
           "nonfinite = int(xp.count_nonzero(~xp.isfinite(out) & ref_ok))",
           "every unwritten element is also reported as a NaN the kernel wrote: the reasons say the kernel computed "
           "NaN where it never ran",
           (T_METRICS,)),
    Mutant("judge-zero-tolerance-is-the-default", "verify", "verify/metrics.py",
           "return TOLERANCES[precision][0] if rel_l2_tol is None else rel_l2_tol",
           "return rel_l2_tol or TOLERANCES[precision][0]",
           "a spec's rel_l2_tol = 0 (exact) is silently replaced by the precision's default",
           (T_METRICS, T_VERIFY + "::test_the_specs_tolerance_reaches_the_child_as_written")),
    Mutant("judge-job-drops-zero-tolerance", "verify", "verify/runner.py",
           '"rel_l2_tol": v.rel_l2_tol,',
           '"rel_l2_tol": v.rel_l2_tol or None,',
           "the child's job drops a spec's rel_l2_tol = 0: the output is judged with the precision's default",
           (T_VERIFY + "::test_the_specs_tolerance_reaches_the_child_as_written",)),
    Mutant("cache-depfile-keeps-dot-h-only", "cache", "backend/nvcc.py",
           'for p in re.split(r"(?<!\\\\)\\s+", body) if p})',
           'for p in re.split(r"(?<!\\\\)\\s+", body) if p.endswith((".h", ".cu"))})',
           "the build cache tracks only .h headers from nvcc's dependency list: an edit of a .cuh, .hpp or .inl "
           "header (all of CuTe and CUTLASS) serves a stale LTO-IR",
           (T_CACHE,), kill="backend"),
    Mutant("cache-tracks-dot-h-only", "cache", "link/build.py",
           "return ltoir, [p for p in read if not Path(p).is_relative_to(work.resolve())]",
           'return ltoir, [p for p in read if p.endswith(".h") and not Path(p).is_relative_to(work.resolve())]',
           "the compile records only the .h headers it read: an edit of any other kind is served stale",
           (T_CACHE,), kill="backend"),
    Mutant("package-variant-may-lack-a-fact", "package", "package.py",
           "if sorted(v.facts) != names:",
           "if not set(v.facts) <= set(names):",
           "a package variant that lacks one of the contract's compile-time facts is accepted: it matches any value "
           "of that fact and is linked for values it was not built for",
           (T_PKG,), kill="backend"),
    # Issue 52: source instances, inspect by instance; issue 49: which configuration wins a bucket.
    Mutant("source-instance-never-repacked", "package", "packer.py",
           "if pkg is None or not _still_current(pkg, source, contract_path):",
           "if pkg is None:",
           "a source instance linked again in the same process keeps the package packed before its source was "
           "edited: the link serves code the user already changed",
           ("tests/link/test_source_instances.py::test_an_edited_source_is_packed_again_in_the_same_process",)),
    Mutant("tune-low-end-off-by-one", "tune", "tune/search.py",
           "low = max(1, m - step + 1)",
           "low = max(1, m - step)",
           "a bucket's low end is taken one size below what it serves: the size timed there belongs to the "
           "previous bucket's kernel, not to this one",
           ("tests/link/test_tune.py::test_a_buckets_low_end_is_the_smallest_size_it_serves",)),
    Mutant("tune-pick-by-the-top-alone", "tune", "tune/search.py",
           'ends.append(("low_end", lambda o: o.timing["low_end"]["median_ms"]))',
           "pass",
           "the winner is the fastest at the bucket's size alone: a configuration 9 % slower at the bucket's "
           "small sizes serves them (the M = 1 .. 64 bucket of the Qwen operator, on an H100)",
           ("tests/link/test_tune.py::test_the_winner_is_the_least_worst_at_both_ends_of_the_bucket",)),
    Mutant("cpu-compile-only-rungs-twice", "verify", "verify/pykernel.py",
           'planned = [n for n in planned if n not in ("compile", "dumps")]',
           "planned = list(planned)",
           "a kernel file compiled without a GPU lists compile and dumps twice, the second time as skipped: the "
           "results and verify.json say the compile that ran did not",
           ("tests/verify/test_kernel_files.py::test_without_a_gpu_compile_only_gives_the_compile_and_dumps_rungs",)),
    Mutant("cpu-missing-module-said-ok", "verify", "verify/child.py",
           'return "skipped", (f"not run: the kernel file imports {module}',
           'return "ok", (f"not run: the kernel file imports {module}',
           "a kernel file whose DSL or torch is not installed gets its compile and dumps rungs marked ok: a "
           "compile that never happened is reported as done",
           ("tests/verify/test_kernel_files.py::"
            "test_without_a_gpu_a_module_the_file_imports_that_is_missing_is_not_run_not_failed",)),
    Mutant("inspect-by-instance-any-plan", "report", "cli.py",
           'if backend.get("cubin_sha256") != hashlib.sha256(cubin).hexdigest():',
           "if False:",
           "inspect groups a cubin's SASS by the glue sites of whatever plan JSON lies beside it: another link's "
           "plan attributes instructions to the wrong components",
           ("tests/cli/test_inspect_sass.py::test_a_plan_of_another_link_is_not_used_and_raw_is_cuobjdumps",)),

    # --- facts given at launch (issue 50) ---
    Mutant("launch-range-one-too-low", "facts", "link/facts.py",
           "all(_allows(inst, name, low - 1) for inst in takers)",
           "all(_allows(inst, name, low) for inst in takers)",
           "the range a launch fact may take reaches one value below what the contracts allow: a position the "
           "component never promised to handle (a limit broken) passes the kernel's guard",
           (T_LAUNCH + "::test_the_range_stops_where_a_limit_would_break",
            T_LAUNCH + "::test_the_range_is_exactly_the_values_every_taker_allows")),
    Mutant("launch-binding-folded", "glue", "link/glue.py",
           'elif kind == "fact" and any(f.name == name for f in link.launch):',
           "elif False:",
           "a fact given at launch is still folded into the component's binding: every step of a decode loop "
           "runs at the linked position, whatever the cache says",
           (T_LAUNCH + "::test_the_position_is_a_parameter_read_once_and_guarded",)),
    Mutant("launch-guard-printed-wide", "glue", "link/glue_ir.py",
           'pl_launch_fact(p.{self.member}, {self.low}LL, {self.high}LL);"',
           'pl_launch_fact(p.{self.member}, {self.low}LL, {self.high + 1}LL);"',
           "the printed guard lets one value past the linked one through (the audit reads the statement, not the "
           "text): a decode step at Lmax writes its cache row past the buffer",
           (T_LAUNCH + "::test_the_position_is_a_parameter_read_once_and_guarded",)),
    Mutant("launch-fact-sizing-unchecked", "contract", "contract.py",
           'if name in e.names() and not re.fullmatch(r"facts\\.limit\\[\\d+\\]\\.expr", path):',
           "if False:",
           "a contract that sizes a buffer or an operand with a fact given at launch loads: the buffer is sized for "
           "the linked value while the code reads the launch value",
           (T_LAUNCH + "::test_a_launch_fact_reaches_the_code_only_through_its_binding",
            T_LAUNCH + "::test_a_guarantee_of_a_launch_fact_is_refused")),

    # --- targets other than Hopper (issue 54) ---
    Mutant("target-check-skipped", "check", "link/check.py",
           "    _check_targets(link)\n",
           "",
           "a package without LTO-IR for the device's target goes on to nvJitLink, which fails with a link log "
           "instead of naming the component and the two targets",
           (T_TARGETS + "::test_a_package_without_the_devices_target_is_refused",)),
    Mutant("link-for-hopper-always", "backend", "link/build.py",
           "link_cubin(inputs, symbol_owners=owners, arch=arch)",
           "link_cubin(inputs, symbol_owners=owners)",
           "the link is made for sm_90a whatever the device: an RTX 5090 link fails (its glue is sm_120a LTO-IR), "
           "or with every package holding sm_90a too, a Hopper cubin is handed to a Blackwell profile",
           (T_TARGETS + "::test_the_demo_links_for_the_rtx_5090",)),

    # --- tensor memory as a linked resource (issue 54) ---
    Mutant("tmem-alloc-not-power-of-two", "alloc", "link/tmem.py",
           "        n *= 2\n",
           "        n += 32\n",
           "the glue asks tcgen05.alloc for 96 columns: not a power of two, which the instruction does not take "
           "(undefined behaviour on the GPU)",
           (T_TMEM + "::test_the_reader_is_bound_to_the_producers_column_and_the_allocation_rounds_up",
            T_TMEM + "::test_an_allocation_is_what_tcgen05_alloc_takes"), kill="plan"),
    Mutant("tmem-lifetimes-ignored", "alloc", "link/alloc.py",
           'inst.facts_eval(b.align, f"tmem.{b.name}.align"), live=_live(inst, b.live))',
           'inst.facts_eval(b.align, f"tmem.{b.name}.align"), live=WHOLE_KERNEL)',
           "every tensor-memory buffer is taken as live throughout: buffers of disjoint phases no longer share "
           "columns, and a link that fits only with that reuse is refused as over 512 columns",
           (T_TMEM + "::test_buffers_of_one_role_in_disjoint_phases_share_columns",), kill="plan"),
    Mutant("tmem-own-columns-uncounted", "alloc", "link/tmem.py",
           "    total = columns + sum(n for _, n in own)\n",
           "    total = columns\n",
           "a component that allocates tensor memory itself is not counted: the glue's 256 and its 512 pass, and "
           "one of the two waits for columns the other never frees (a hang)",
           (T_TMEM + "::test_parts_over_the_sms_512_columns_are_refused_naming_each",)),
    Mutant("tmem-in-port-column-zero", "alloc", "link/tmem.py",
           "            out[t.dst.instance][t.dst.name] = tmem.column_of(Ref(si.name, sp.buffer))\n",
           "            out[t.dst.instance][t.dst.name] = 0\n",
           "the reader of a tmem port is bound to column 0 instead of the producer's buffer: it reads another "
           "buffer's columns (wrong output, no error)",
           (T_TMEM + "::test_the_reader_is_bound_to_the_producers_column_and_the_allocation_rounds_up",), kill="plan"),
    Mutant("tmem-permit-given-up-anyway", "alloc", "link/tmem.py",
           "        return not self.own\n",
           "        return True\n",
           "the glue gives up the block's allocation permit while a component still allocates: its tcgen05.alloc is "
           "then undefined (the guardrail traps, or it waits forever)",
           (T_TMEM + "::test_a_components_own_allocation_is_refused_unless_declared",)),
    Mutant("tmem-freed-short", "glue", "link/glue.py",
           "        w.put(TmemDealloc(_tmem_columns(link)))\n",
           "        w.put(TmemDealloc(32))\n",
           "the glue frees fewer columns than it took: the SM's tensor memory leaks a little with every block, and "
           "later blocks wait for columns that never come back",
           (T_TMEM + "::test_one_allocation_for_the_block_each_buffer_its_address_the_reader_the_producers",),
           kill="plan"),
    Mutant("tmem-own-alloc-unchecked", "conform", "link/conform.py",
           '    if inst.facts_eval(inst.contract.reserve.tmem_columns, "reserve.tmem_columns"):\n        return\n',
           "    return\n",
           "a component that allocates tensor memory without declaring it passes conformance: beside the glue's "
           "allocation the two may starve each other",
           (T_TMEM + "::test_a_components_own_allocation_is_refused_unless_declared",), kill="backend"),
    Mutant("tmem-layouts-unchecked", "check", "link/check.py",
           "    if not np.array_equal(a, b):\n        k = int(np.argmax(np.any(a != b, axis=0)))\n        cols",
           "    if False:\n        k = int(np.argmax(np.any(a != b, axis=0)))\n        cols",
           "a reader that lays the tile over tensor memory otherwise than its producer is linked: it reads every "
           "element from another one's cell (wrong output)",
           (T_TMEM + "::test_a_tmem_port_layout_mismatch_is_refused",)),

    # --- [link] keep: a workspace handed to the caller (issue 51) ---
    Mutant("keep-cleared-workspace-kept", "check", "link/check.py",
           "        if cleared:\n",
           "        if False:\n",
           "a counter the kernel needs cleared before every launch is handed to the caller as an output: the caller's "
           "tensor arrives holding anything, and the count starts from garbage (wrong output, or a grid barrier that "
           "never opens)",
           (T_KEEP + "::test_a_workspace_that_cannot_be_the_callers_is_refused",), kill="plan"),
    Mutant("keep-size-unchecked", "check", "link/check.py",
           "        if holds != size:\n",
           "        if False:\n",
           "a port larger than its workspace is kept: the caller's output is sized by the port, and reads past what "
           "the kernel wrote (or a smaller one has the kernel write past it)",
           (T_KEEP + "::test_a_workspace_that_cannot_be_the_callers_is_refused",), kill="plan"),
    Mutant("keep-ignored-in-the-abi", "abi", "link/abi.py",
           "            k = kept_as.get(Ref(inst.name, w.name))\n",
           "            k = None\n",
           "the kept workspace stays the runtime's scratch: the caller never gets what the backward needs (the torch "
           "op returns one output fewer than linked_function expects)",
           (T_KEEP + "::test_a_kept_workspace_is_a_write_operand_of_the_ports_type",), kill="plan"),
]



def by_id() -> dict[str, Mutant]:
    return {m.id: m for m in MUTANTS}

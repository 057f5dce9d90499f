"""The paper's table (issue 16), its CPU half: every configuration of bench/configs.py links both
ways (pipelink, and the monolithic control compiled from the same sources as one unit) to the same
SASS after blanking symbol addresses. The GPU half (verify and timing) is bench/paper_table.py."""

from __future__ import annotations

import functools
import gzip
import json
import multiprocessing
import os
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import configs  # noqa: E402  (bench/ is not a package)
import sass_compare  # noqa: E402


@pytest.fixture(scope="module")
def workers():
    """Two processes for the packing and the 170 links (CI has two cores; each step is one nvcc or
    nvJitLink at a time). Spawned: they inherit sys.path (bench/) and the environment (the session's
    build cache)."""
    with ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield pool


@pytest.fixture(scope="module")
def built(tmp_path_factory, workers):
    folders = [tmp_path_factory.mktemp(family) for family in configs.FAMILIES]
    packed = workers.map(functools.partial(configs.build, progress=_quiet), [[f] for f in configs.FAMILIES], folders)
    return dict(zip(configs.FAMILIES, packed))


def _quiet(_: str) -> None:
    pass


def test_at_least_51_configurations_with_distinct_names(built):
    names = [name for family in built.values() for name, _ in family]
    assert len(names) >= 51 and len(set(names)) == len(names)
    assert {name.split("/")[0] for name in names} == set(configs.FAMILIES)


# Which configurations the SASS comparison links: "cover" (the default, in CI) or "all". A configuration's name
# lists what it varies ("n144_s6_row_major_g0_c2", "b8_l512_long_wt"); the cover keeps few whose parts together are
# every part (`covering`), so every tile width, stage count, order, band, cluster, split, tile height, epilogue,
# batch and context is linked both ways at least once. PIPELINK_PAPER_CONFIGS=all compares every one, as
# bench/paper_table.py does for the rows it times.
WHICH = os.environ.get("PIPELINK_PAPER_CONFIGS", "cover")


def _parts(name: str) -> set[str]:
    """What a configuration's name varies: its parts split at "_" and "/", the family left out."""
    return set(name.replace("/", "_").split("_")[1:])


def covering(configs_of_family: list[tuple[str, object]]) -> list[tuple[str, object]]:
    """Few configurations that together have every part of a name (_parts): greedily, the one with the most parts
    not yet had, ties to the earlier in table order (a set cover: 10 of the 32 Qwen configurations, where keeping
    each one that adds a part in table order kept 18), returned in table order."""
    need = set().union(*(_parts(name) for name, _ in configs_of_family)) if configs_of_family else set()
    had: set[str] = set()
    kept: list[int] = []
    while need - had:
        best = max(range(len(configs_of_family)), key=lambda i: (len(_parts(configs_of_family[i][0]) - had), -i))
        kept.append(best)
        had |= _parts(configs_of_family[best][0])
    return [configs_of_family[i] for i in sorted(kept)] or configs_of_family[:1]


def test_the_cover_keeps_a_part_of_every_name():
    names = [("qwen/a/n256_s4_c1", 0), ("qwen/a/n256_s4_c2", 1), ("qwen/b/n256_s4_c2", 2), ("qwen/b/n256_s4_c1", 3)]
    assert [n for n, _ in covering(names)] == ["qwen/a/n256_s4_c1", "qwen/b/n256_s4_c2"]
    assert [n for n, _ in covering(names[:1])] == ["qwen/a/n256_s4_c1"]


@pytest.mark.parametrize("family", configs.FAMILIES)
def test_linked_and_monolithic_sass_are_identical(built, workers, family):
    chosen = built[family] if WHICH == "all" else covering(built[family])
    assert set().union(*(_parts(n) for n, _ in built[family])) == set().union(*(_parts(n) for n, _ in chosen))
    rows = list(workers.map(sass_compare.compare, *zip(*chosen)))
    different = {r["name"]: (r.get("opcode_diff"), r.get("first_difference")) for r in rows if not r["sass_identical"]}
    assert rows and not different


def test_the_table_prepares_a_batch_in_worker_processes(tmp_path):
    # bench/paper_table.py on the CPU machine: the demo family's four configurations, two at a time in
    # worker processes (link, SASS, verify), then the timing half in the parent, which cannot time
    # here (verify fails without a GPU) and records each configuration as not timed.
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "paper_table.py"), "--only", "demo", "--jobs", "2",
                           "--out", str(tmp_path), "--seconds", "1"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("preparing 2 configurations in 2 processes") + \
        proc.stderr.count("preparing 2 configurations in 2 processes") == 2
    (path,) = [p for p in tmp_path.glob("paper_table-*.json") if not p.name.endswith(".times.json")]
    rows = json.loads(path.read_text())["configs"]
    names = [name for name, _ in configs.build(["demo"], tmp_path / "specs", progress=lambda _: None)]
    assert [r["name"] for r in rows] == names
    for r in rows:
        assert r["sass_identical"] and set(r["verify"]) == {"pipelink", "monolithic"}
        assert r["prepare_seconds"] > 0 and r["seconds"] >= r["prepare_seconds"]
        assert "linked_over_monolithic_paired" not in r  # no GPU: nothing timed


def _table(out, revision: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PIPELINK_GIT_REVISION": revision}
    return subprocess.run([sys.executable, str(ROOT / "bench" / "paper_table.py"), "--only", "collide", "--jobs", "1",
                           "--out", str(out), "--seconds", "1"], capture_output=True, text=True, timeout=600, env=env)


def test_a_table_of_another_revision_lends_only_rows_whose_link_is_the_same_bytes(tmp_path):
    # A row measured at revision A (here: the CPU's row, marked as a GPU would have left it) is kept at
    # revision B when both links are the same bytes (their manifests, with the cubins' sha256), and
    # measured again when they are not. Packing is skipped once a family's rows are all recorded.
    first = _table(tmp_path, "revA")
    assert first.returncode == 0, first.stderr[-2000:]
    (path_a,) = tmp_path.glob("paper_table-*.json")
    table = json.loads(path_a.read_text())
    assert table["families"] == {"collide": ["collide"]}
    (row,) = table["configs"]
    assert row["revision"] == "revA" and len(row["sass"]["manifest_sha256"]["pipelink"]) == 64
    row.update(verify_passed=True, linked_over_monolithic_paired=1.0001, aa_noise=0.0001, loads_per_role=3,
               medians_ms={"linked0": 0.2},  # a kernel of 0.2 ms gets three loads a role (harness.loads_for)
               times={"linked0": {"median_ms": 0.2, "times_ms": [0.2, 0.21, 0.19]}})
    path_a.write_text(json.dumps(table))

    second = _table(tmp_path, "revB")
    assert second.returncode == 0, second.stderr[-2000:]
    log = second.stdout + second.stderr
    assert "collide: the same link as at revA, its row kept" in log
    (path_b,) = [p for p in tmp_path.glob("paper_table-*.json") if p != path_a]
    kept = json.loads(path_b.read_text())
    assert kept["git_revision"] == "revB" and kept["earlier_table"] == path_a.name
    (row_b,) = kept["configs"]
    assert row_b["measured_at"] == "revA" and row_b["linked_over_monolithic_paired"] == 1.0001
    # its per-launch series stay where they were, not copied into every later table
    assert row_b["times"] == {"linked0": {"median_ms": 0.2}} and row_b["series_file"] == path_a.name
    assert "times_file" not in kept

    third = _table(tmp_path, "revB")  # the same revision again: continued, nothing packed
    assert "collide: every configuration recorded, not packed again" in third.stdout + third.stderr

    # A link that changed since: the earlier row is not lent (here its manifest's hash differs).
    path_b.unlink()
    row["sass"]["manifest_sha256"]["pipelink"] = "0" * 64
    path_a.write_text(json.dumps(table))
    fourth = _table(tmp_path, "revC")
    assert fourth.returncode == 0, fourth.stderr[-2000:]
    (path_c,) = [p for p in tmp_path.glob("paper_table-*.json") if p != path_a]
    (row_c,) = json.loads(path_c.read_text())["configs"]
    assert "measured_at" not in row_c and row_c["revision"] == "revC" and not row_c["verify_passed"]


def test_a_row_timed_on_workspaces_of_its_own_or_with_fewer_loads_is_not_kept(built, tmp_path):
    # The Llama block has grid-synchronised workspaces: its rows are kept across revisions only when
    # they were timed with every load on one set of workspaces ("shared") and with the loads a role that
    # harness.loads_for gives for the row's recorded time (16 below 0.125 ms); the tables before gave
    # each load its own workspaces (where they lay cost up to 1.7 %, bench/NOTES.md, fifth session), or
    # loaded each role once (one draw of where modules land, seventh session), or three times (too few
    # at 23 us, eighth session).
    import harness
    import paper_table
    name, spec = built["llama"][0]
    sass = sass_compare.compare(name, spec)
    assert sass["workspaces"] >= 2
    short = {"linked0": 0.023, "monolithic0": 0.023}
    assert harness.loads_for(short["linked0"]) == harness.SHORT_LOADS > harness.LOADS == harness.loads_for(0.144)
    earlier = {"name": name, "revision": "revA", "verify_passed": True, "sass": sass, "medians_ms": short,
               "linked_over_monolithic_paired": 1.0001, "aa_noise": 0.0001}
    kept, runs = paper_table.prepare(name, spec, tmp_path / "kept",
                                     {**earlier, "workspaces": "shared", "loads_per_role": harness.SHORT_LOADS})
    assert kept["measured_at"] == "revA" and runs == {}
    for n, other in enumerate(({**earlier, "loads_per_role": harness.SHORT_LOADS},  # on workspaces of its own
                               {**earlier, "workspaces": "shared"},                   # one load a role
                               {**earlier, "workspaces": "shared", "loads_per_role": harness.LOADS})):  # too few
        again, runs = paper_table.prepare(name, spec, tmp_path / f"again{n}", other)
        assert "measured_at" not in again and set(runs) == {"pipelink", "monolithic"}
    assert built["collide"] and sass_compare.compare(*built["collide"][0])["workspaces"] == 0


def test_a_roles_loads_are_named_in_rotation_and_found_by_role():
    # role_loads calls load() in rotation (linked, monolithic, linked_again, linked, ...), reusing a
    # linked0 loaded already; loads_of tells linked's loads from linked_again's.
    import harness
    calls = []
    got = harness.role_loads(lambda role: calls.append(role) or f"{role}-{len(calls)}", 4, first="probe")
    assert list(got)[:4] == ["linked0", "monolithic0", "linked_again0", "linked1"] and len(got) == 12
    assert got["linked0"] == "probe" and calls[:3] == ["monolithic", "linked_again", "linked"] and len(calls) == 11
    assert harness.loads_of(got, "linked") == [f"linked{n}" for n in range(4)]
    assert harness.loads_of(got, "linked_again") == [f"linked_again{n}" for n in range(4)]


def test_the_ratio_and_the_a_a_each_average_a_roles_loads():
    # Synthetic launch times, as time_interleaved records them: the linked loads 10, 10.1 and 9.9 us,
    # every monolithic load 10.2 us, the linked cubin's second role 10.05 us; linked/monolithic is the
    # mean of the loads (10 / 10.2), the A/A the same for linked_again over linked (10.05 / 10), and
    # load_spread the widest pair of loads of one role (9.9 / 10.1).
    import harness
    rounds = 200
    series = {"linked0": 0.0100, "linked1": 0.0101, "linked2": 0.0099, **{f"monolithic{n}": 0.0102 for n in range(3)},
              **{f"linked_again{n}": 0.01005 for n in range(3)}}
    times = {name: {"times_ms": [ms] * rounds} for name, ms in series.items()}
    got = harness.role_ratios(times)
    assert got["loads_per_role"] == harness.LOADS == 3
    assert got["linked_over_monolithic_paired"] == pytest.approx(0.0100 / 0.0102)
    assert got["aa_paired"] == pytest.approx(1.005) and got["aa_noise"] == pytest.approx(0.005)
    assert got["load_spread"] == pytest.approx(1 - 0.0099 / 0.0101)
    lo, hi = got["linked_over_monolithic_paired_ci95"]
    assert lo <= 0.0100 / 0.0102 <= hi


def test_the_interval_over_loads_takes_each_load_as_one_sample():
    # The same loads as above: the linked loads' log times have a sample variance, the monolithic
    # loads none, so Welch's degrees of freedom are 3 - 1 = 2 (t = 4.303) and the interval is
    # exp(mean log linked - log 10.2 +- 4.303 sqrt(var / 3)).
    import math
    import statistics

    import harness
    medians = {"linked0": 10.0, "linked1": 10.1, "linked2": 9.9, **{f"monolithic{n}": 10.2 for n in range(3)}}
    logs = [math.log(v) for v in (10.0, 10.1, 9.9)]
    centre, half = statistics.mean(logs) - math.log(10.2), 4.303 * math.sqrt(statistics.variance(logs) / 3)
    lo, hi = harness.load_interval(medians)
    assert (lo, hi) == (pytest.approx(math.exp(centre - half)), pytest.approx(math.exp(centre + half)))
    # three loads spread by 2 % cannot tell a 2 % offset from none: the interval reaches past 1
    assert lo < 10.0 / 10.2 < 1 < hi
    # loads that agree exactly give a point; a role with one load gives no interval
    assert harness.load_interval({**medians, "linked1": 10.0, "linked2": 10.0}) == [pytest.approx(10 / 10.2)] * 2
    assert harness.load_interval({"linked0": 10.0, "monolithic0": 10.2, "monolithic1": 10.2}) is None


def test_a_row_above_the_bound_is_explained_only_by_its_own_noise():
    # An offset of 0.5 % with the linked loads spread by 1 % is inside the interval over loads; the
    # same offset with every load of a role equal (and a narrow interval over launches, a small A/A)
    # is not explained; a SASS difference explains any ratio.
    import paper_table
    row = {"sass_identical": True, "sass": {}, "linked_over_monolithic_paired": 0.995,
           "linked_over_monolithic_paired_ci95": [0.994, 0.996], "aa_noise": 0.001,
           "medians_ms": {"linked0": 23.17, "linked1": 23.01, "linked2": 23.04,
                          "monolithic0": 23.17, "monolithic1": 23.20, "monolithic2": 23.20}}
    assert "interval over its loads" in paper_table.explain(row)
    tight = {**row, "medians_ms": {**{f"linked{n}": 23.08 for n in range(3)},
                                   **{f"monolithic{n}": 23.20 for n in range(3)}}}
    assert paper_table.explain(tight).startswith("UNEXPLAINED")
    assert paper_table.explain({**tight, "aa_noise": 0.006}).startswith("identical SASS; the A/A")
    assert paper_table.explain({**tight, "sass_identical": False,
                                "sass": {"opcode_diff": {"HMMA": 2}}}).startswith("SASS differs")
    assert paper_table.explain({**tight, "linked_over_monolithic_paired": 0.999}) is None


def test_the_plot_draws_every_timed_row_and_nothing_without_one(tmp_path):
    # The committed H200 table drawn again (its rows, intervals and A/A), and a table of rows that
    # were never timed (a CPU run) draws nothing.
    import paper_table
    committed = ROOT / "bench" / "results" / "paper_table-gpu-20261203T112013.json.gz"
    table = json.loads(gzip.decompress(committed.read_bytes()))
    png = paper_table.plot(table, tmp_path / "table.png")
    assert png == tmp_path / "table.png" and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    untimed = {"configs": [{k: v for k, v in c.items() if k != "linked_over_monolithic_paired"}
                           for c in table["configs"]]}
    assert paper_table.plot(untimed, tmp_path / "none.png") is None and not (tmp_path / "none.png").exists()


def test_a_table_of_another_card_lends_nothing(tmp_path):
    """An H100's table continues and borrows only from tables measured on the same card (machine.gpu)."""
    assert _table(tmp_path, "revA").returncode == 0
    (path_a,) = tmp_path.glob("paper_table-*.json")
    table = json.loads(path_a.read_text())
    table["machine"]["gpu"] = "NVIDIA H200"
    table["configs"][0].update(verify_passed=True, linked_over_monolithic_paired=1.0001, aa_noise=0.0001,
                               loads_per_role=3, medians_ms={"linked0": 0.2}, times={"linked0": {"median_ms": 0.2}})
    path_a.write_text(json.dumps(table))
    again = _table(tmp_path, "revA")  # the same revision on this machine: a new table, not the H200's continued
    assert again.returncode == 0 and "its row kept" not in again.stdout + again.stderr
    (path_b,) = [p for p in tmp_path.glob("paper_table-*.json") if p != path_a]
    new = json.loads(path_b.read_text())
    assert "earlier_table" not in new and "measured_at" not in new["configs"][0]


def test_a_configuration_over_the_cards_memory_is_left_out_saying_why(tmp_path):
    import paper_table
    import pipelink
    ((name, spec),) = configs.build(["collide"], tmp_path / "specs", progress=lambda _: None)
    need = paper_table.verify_bytes(pipelink.link(spec).manifest)
    assert need > 0
    row, runs = paper_table.prepare(name, spec, tmp_path / "work", None, memory=need)  # 85 % of it is less
    assert runs == {} and not row["verify_passed"] and row["verify_bytes"] == need
    assert row["left_out"].startswith("its verify needs about") and "85% of the card's" in row["left_out"]
    assert paper_table.finish(row, runs, spec, 1.0) is row
    assert paper_table.summarize([row])["left_out"] == [{"name": name, "why": row["left_out"]}]

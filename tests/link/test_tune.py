"""`pipelink tune` (issue 49 item 2) on the CPU: the search space from --fact and --shape, the parallel links of
every configuration (one that does not fit is recorded with its reason, the others link), the tune cache that
pipelink.op reads (corrupted or foreign files rebuilt, never trusted), and the command's typed errors. The GPU
part (verify, interleaved timing, the winner recorded and served) is the `gpu` test at the end.

The tunable link is tests/rowcopy.py: a TMA copy through shared memory, M bound, tile_m packed as two
variants, stages sizing the buffer (tile_m = 128 with 15 stages is over the block's shared memory)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import gpu_ok
from pipelink.errors import SpecError
from pipelink.tune import TuneCache, parse_fact, parse_shape, tune
from pipelink.tune.cache import new_entry
from pipelink.spec import TUNABLE
from pipelink.tune.space import MAX_CONFIGS, make_space, parse_setting
from rowcopy import make

DEVICE = {"gpu": "NVIDIA test card", "driver": "13000"}  # a cache's device identity, given (no GPU here)


@pytest.fixture(scope="module")
def rowcopy(tmp_path_factory):
    return make(tmp_path_factory.mktemp("rowcopy"))


def test_every_configuration_is_linked_in_parallel_and_a_failure_keeps_its_reason(rowcopy):
    """2 shapes x (2 tile_m x 2 stages): the shapes fall in their buckets (whole 128-row boxes of the spec's own
    tile: M = 100 -> 128, M = 1000 -> 1024), each configuration is linked in a worker process, and the one over the
    shared-memory limit is recorded with the link's own error (the amount over), the search going on."""
    r = tune(rowcopy, ["M=100", "M=1000"], ["tile_m=64,128", "stages=1,15"], jobs=2, link_only=True, progress=False)
    assert r.link_only and [b.bucket for b in r.buckets] == [{"M": 128}, {"M": 1024}]
    for b in r.buckets:
        status = {o.config.label: o.status for o in b.outcomes}
        assert status == {"tile_m=64,stages=1": "linked", "tile_m=64,stages=15": "linked",
                          "tile_m=128,stages=1": "linked", "tile_m=128,stages=15": "link failed"}, status
        failed = next(o for o in b.outcomes if o.status == "link failed")
        assert "over the h200 opt-in limit of 232448 bytes per block by 13328 bytes" in failed.reason
        assert b.winner is None  # nothing is timed without a GPU: nothing is chosen
    assert json.loads(json.dumps(r.to_json()))["buckets"][0]["outcomes"][3]["status"] == "link failed"


def test_a_smaller_tile_in_the_space_gives_small_sizes_buckets_of_their_own(rowcopy):
    """The bucket step is the smallest box among the configurations searched: with 64-row tiles in the space,
    M = 50 and M = 100 are tuned apart (the 64-row tile may win the first and lose the second); with 128-row
    tiles only, they share one bucket."""
    both = tune(rowcopy, ["M=50", "M=100"], ["tile_m=64,128"], jobs=1, link_only=True, progress=False)
    assert [b.bucket for b in both.buckets] == [{"M": 64}, {"M": 128}]
    one = tune(rowcopy, ["M=50", "M=100"], ["tile_m=128"], jobs=1, link_only=True, progress=False)
    assert [b.bucket for b in one.buckets] == [{"M": 128}]


def test_shapes_of_one_bucket_are_tuned_once(rowcopy):
    r = tune(rowcopy, [{"M": 100}, {"M": 120}, {"M": 128}], {"tile_m": [64]}, jobs=1, link_only=True, progress=False)
    assert [b.bucket for b in r.buckets] == [{"M": 128}] and [o.status for o in r.buckets[0].outcomes] == ["linked"]


@pytest.mark.parametrize("facts, shapes, field, words", [
    (["stages=6..3"], ["M=128"], "--fact", "the range 6..3 is empty"),
    (["stages=1..100000"], ["M=128"], "--fact", f"over the limit of {MAX_CONFIGS} by"),
    (["stages=a"], ["M=128"], "--fact", "is not an integer"),
    (["stages"], ["M=128"], "--fact", "is not NAME=VALUES"),
    (["stages=1,"], ["M=128"], "--fact", "is not a value or a range"),
    (["9stages=1"], ["M=128"], "--fact", "the name in"),
    (["stages=1", "stages=2"], ["M=128"], "--fact", "fact stages is given twice"),
    (["warps=1,2"], ["M=128"], "--fact", "fact warps is not a fact of"),
    (["M=64,128"], ["M=128"], "--fact", "fact M is both searched and a shape's size"),
    (["stages=1"], ["M=0"], "--shape", "a size is at least 1"),
    (["stages=1"], ["M=1,M=2"], "--shape", "M is given twice"),
    (["stages=1"], [], "--shape", "no shape to tune for"),
    (["stages=1"], ["M=1", "K=2"], "--shape", "shapes name different facts"),
    (["stages=1"], ["tile_m=64"], "vary", "cannot vary at launch"),
], ids=["empty-range", "huge-range", "not-int", "no-values", "dangling-comma", "bad-name", "twice", "unknown",
        "searched-and-varied", "zero-size", "shape-twice", "no-shape", "mixed-shapes", "unbound-vary"])
def test_a_bad_search_is_a_typed_error_naming_the_option(rowcopy, facts, shapes, field, words):
    with pytest.raises(SpecError) as info:
        tune(rowcopy, shapes, facts, jobs=1, link_only=True, progress=False)
    assert info.value.field == field and words in info.value.message, info.value.format()


def test_alternative_specs_and_numeric_options_are_checked_before_any_work(rowcopy, tmp_path):
    """An alternative spec must be a file beside the spec (the tune cache names a winner by its file name);
    --jobs, --reps and --timeout take sensible numbers; each refusal names its option (exit 2 on the command
    line), and no configuration is linked."""
    elsewhere = tmp_path / "other.toml"
    elsewhere.write_text(rowcopy.read_text())
    for specs, words in (([elsewhere], "not in the spec's folder"), ([rowcopy.parent / "none.toml"], "not a file")):
        with pytest.raises(SpecError) as info:
            tune(rowcopy, ["M=100"], ["tile_m=64"], specs, jobs=1, link_only=True, progress=False)
        assert info.value.field == "--spec" and words in info.value.message
    for flag, value in (("--jobs", "0"), ("--reps", "0"), ("--timeout", "-1"), ("--jobs", "100000")):
        p = _cli("tune", str(rowcopy), "--shape", "M=100", "--fact", "tile_m=64", "--link-only", flag, value)
        assert p.returncode == 2 and flag in p.stderr and "Traceback" not in p.stderr, p.stderr


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="stage=0123456789.,-+x _", max_size=24))
def test_any_fact_option_parses_to_bounded_values_or_a_typed_error(text):
    """Whatever is typed after --fact: distinct values within a fact's bounds, at most MAX_CONFIGS of them, or a
    SpecError naming --fact; never another exception."""
    try:
        name, values = parse_fact(text)
    except SpecError as exc:
        assert exc.field == "--fact"
        return
    assert name.isidentifier() and 0 < len(values) <= MAX_CONFIGS and len(set(values)) == len(values)
    assert all(isinstance(v, int) and abs(v) < 2 ** 31 for v in values)


def test_the_specs_tune_section_is_the_default_search(rowcopy, tmp_path):
    """`pipelink tune SPEC` with no --shape and no --fact searches what the spec's [tune] says; a malformed
    [tune] is refused when the spec loads, naming the field."""
    spec = tmp_path / "rowcopy.toml"
    text = rowcopy.read_text().replace('package = "rows.plc"', f'package = "{rowcopy.parent}/rows.plc"')
    spec.write_text(text + '\n[tune]\nshapes = [{ M = 100 }]\nfacts = { tile_m = "64,128", stages = "1" }\n')
    (tmp_path / "ref.py").write_text((rowcopy.parent / "ref.py").read_text())
    r = tune(spec, jobs=1, link_only=True, progress=False)
    assert [b.bucket for b in r.buckets] == [{"M": 128}]
    assert sorted(o.config.label for o in r.buckets[0].outcomes) == ["tile_m=128,stages=1", "tile_m=64,stages=1"]
    for bad, field in (('facts = { stages = "1..; rm" }', "tune.facts.stages"), ("shapes = [{ M = 0 }]", "tune.shapes[0]"),
                       ("shapes = [{}]", "tune.shapes[0]")):
        spec.write_text(text + f"\n[tune]\n{bad}\n")
        with pytest.raises(SpecError) as info:
            tune(spec, jobs=1, link_only=True, progress=False)
        assert info.value.field == field, info.value.format()


def test_schedule_and_launch_settings_are_searched_and_a_refused_one_keeps_its_reason(rowcopy):
    """--set searches [schedule] and [launch] fields as --fact searches facts (the product of both): each
    configuration's spec is loaded with its settings and checked whole, so a split the components cannot take
    (stream_k, and no instance cuts tiles along k) is a link failure with the link's own words, and a grid reaches
    the linked kernel."""
    from pipelink.link.pipeline import link
    from pipelink.spec import load_spec
    r = tune(rowcopy, ["M=100"], ["tile_m=64"], (), ["launch.grid=1,4", "schedule.split=tiles,stream_k"], jobs=2,
             link_only=True, progress=False)
    status = {o.config.label: (o.status, o.reason) for o in r.buckets[0].outcomes}
    assert {k: v[0] for k, v in status.items()} == {
        "tile_m=64,launch.grid=1,schedule.split=tiles": "linked",
        "tile_m=64,launch.grid=1,schedule.split=stream_k": "link failed",
        "tile_m=64,launch.grid=4,schedule.split=tiles": "linked",
        "tile_m=64,launch.grid=4,schedule.split=stream_k": "link failed"}, status
    assert "no instance declares [schedule] k_tiles" in status["tile_m=64,launch.grid=4,schedule.split=stream_k"][1]
    assert r.to_json()["buckets"][0]["outcomes"][0]["settings"] == {"launch.grid": 1, "schedule.split": "tiles"}
    kernel = link(load_spec(rowcopy, facts={"M": 128, "tile_m": 64}, settings={"launch.grid": 1}))
    assert kernel.manifest["grid"][0] == 1


@pytest.mark.parametrize("option, field, words", [
    ("schedule.splt=tiles", "--set", "did you mean 'schedule.split'"),
    ("schedule.tiles=x", "--set", "is not a field a tune search may set"),
    ("launch.cluster=a", "--set", "is not an integer"),
    ("launch.cluster=4..1", "--set", "is empty"),
    ("schedule.split=a b", "--set", "is not a C identifier"),
    ("schedule.split", "--set", "is not SECTION.FIELD=VALUES"),
    ("schedule.split=stream_kk", "schedule.split", "'stream_kk' is not one of tiles, stream_k, hybrid"),
    ("launch.cluster=3", "launch.cluster", "is not one of"),
    ("launch.grid=0", "launch.grid", "below"),
], ids=["typo", "not-tunable", "not-int", "empty-range", "not-a-name", "no-values", "unknown-split", "cluster-3",
        "grid-0"])
def test_a_bad_setting_is_a_typed_error_before_any_link(rowcopy, option, field, words):
    with pytest.raises(SpecError) as info:
        tune(rowcopy, ["M=100"], ["tile_m=64"], (), [option], jobs=1, link_only=True, progress=False)
    assert info.value.field == field and words in info.value.message, info.value.format()


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="schedulaunchsplitgroupcluster.=0123456789_,. x", max_size=32))
def test_any_set_option_parses_to_a_tunable_field_or_a_typed_error(text):
    try:
        key, values = parse_setting(text)
    except SpecError as exc:
        assert exc.field == "--set"
        return
    section, _, name = key.partition(".")
    kind = TUNABLE[section][name]
    assert 0 < len(values) <= MAX_CONFIGS and len(set(values)) == len(values)
    assert all(isinstance(v, int) and abs(v) < 2 ** 31 if kind is int else v.isidentifier() for v in values)


def test_searches_of_their_own_cover_shape_ranges(rowcopy, tmp_path):
    """[tune]'s own search and each [[tune.search]] tune their shapes over their own space (small M: 64-row
    tiles; large M: 128-row tiles in either order), the buckets on one grid (the smallest box of all); a bucket
    two searches would tune is refused, as are an unknown or malformed field and a search without shapes."""
    spec = tmp_path / "rowcopy.toml"
    text = rowcopy.read_text().replace('package = "rows.plc"', f'package = "{rowcopy.parent}/rows.plc"')
    (tmp_path / "ref.py").write_text((rowcopy.parent / "ref.py").read_text())
    spec.write_text(text + '\n[tune]\nshapes = [{ M = 50 }]\nfacts = { tile_m = "64" }\n\n[[tune.search]]\n'
                    'shapes = [{ M = 1000 }]\nfacts = { tile_m = "128" }\nschedule = { order = "row_major,column_major" }\n')
    r = tune(spec, jobs=2, link_only=True, progress=False)
    assert [(b.bucket, sorted(o.config.label for o in b.outcomes)) for b in r.buckets] == [
        ({"M": 64}, ["tile_m=64"]),
        ({"M": 1024}, ["tile_m=128,schedule.order=column_major", "tile_m=128,schedule.order=row_major"])]
    assert all(o.status == "linked" for b in r.buckets for o in b.outcomes)
    # shapes alone: each searched with the space of the search listing the shape nearest it
    r = tune(spec, ["M=40", "M=700"], jobs=2, link_only=True, progress=False)
    assert [(b.bucket, len(b.outcomes), b.outcomes[0].config.facts) for b in r.buckets] == [
        ({"M": 64}, 1, (("tile_m", 64),)), ({"M": 704}, 2, (("tile_m", 128),))]
    overlap = text + '\n[tune]\nshapes = [{ M = 100 }]\nfacts = { tile_m = "64" }\n\n[[tune.search]]\nshapes = [{ M = 120 }]\n'
    spec.write_text(overlap)
    with pytest.raises(SpecError) as info:
        tune(spec, jobs=1, link_only=True, progress=False)
    assert info.value.field == "tune.search" and "which search 1 also tunes" in info.value.message
    for bad, field in (('[tune]\nschedule = { tiles = "1" }', "tune.schedule.tiles"),
                       ('[tune]\nschedule = { split = "a b" }', "tune.schedule.split"),
                       ('[tune]\nlaunch = { cluster = "1;2" }', "tune.launch.cluster"),
                       ('[[tune.search]]\nfacts = { tile_m = "64" }', "tune.search[0].shapes")):
        spec.write_text(text + f"\n{bad}\n")
        with pytest.raises(SpecError) as info:
            tune(spec, jobs=1, link_only=True, progress=False)
        assert info.value.field == field, info.value.format()


def test_ranges_and_lists_make_the_product(rowcopy):
    assert parse_fact("stages=3..6") == ("stages", (3, 4, 5, 6))
    assert parse_fact("tile_n=128, 256,128") == ("tile_n", (128, 256))
    assert parse_shape("M=1,K=5120") == {"M": 1, "K": 5120}
    space = make_space(rowcopy, ["tile_m=64,128", "stages=3..5"], [rowcopy])
    assert len(space.configs()) == 6 and space.configs()[0].label == "tile_m=64,stages=3"


# --- the tune cache -----------------------------------------------------------------------------------------------

def _entry(spec, m: int, tile_m: int, ms: float = 0.01, settings=None):
    return new_entry(spec, spec, {"M": m}, {"M": m}, {"tile_m": tile_m}, ms, 4, 1, settings)


def test_the_cache_keeps_winners_per_bucket_and_the_nearest_serves_an_untuned_one(rowcopy, tmp_path):
    cache = TuneCache(rowcopy, tmp_path, DEVICE)
    assert cache.entries == {} and cache.rebuilt is None
    cache.put(_entry(rowcopy, 128, 64))
    cache.put(_entry(rowcopy, 4096, 128, settings={"schedule.split": "tiles", "launch.grid": 8}))
    cache.granule = {"M": 64}
    path = cache.save()
    again = TuneCache(rowcopy, tmp_path, DEVICE)
    assert again.path == path and again.rebuilt is None and again.granule == {"M": 64}
    assert again.get({"M": 128}).facts == {"tile_m": 64} and again.get({"M": 256}) is None
    assert again.nearest({"M": 256}).facts == {"tile_m": 64}      # 1 octave from 128, 4 from 4096
    assert again.nearest({"M": 2048}).facts == {"tile_m": 128}
    assert again.get({"M": 4096}).settings == {"schedule.split": "tiles", "launch.grid": 8}
    # another GPU or driver: another file, nothing served from this one
    other = TuneCache(rowcopy, tmp_path, {"gpu": "NVIDIA other card", "driver": "13000"})
    assert other.path != path and other.entries == {}


def test_a_changed_package_is_another_cache(rowcopy, tmp_path):
    before = TuneCache(rowcopy, tmp_path, DEVICE).path
    package = rowcopy.parent / "rows.plc"
    saved = package.read_bytes()
    try:
        package.write_bytes(saved + b"\0")
        assert TuneCache(rowcopy, tmp_path, DEVICE).path != before
    finally:
        package.write_bytes(saved)


def _corruptions():
    def edit(fn):
        def apply(data):
            fn(data)
            return json.dumps(data).encode()
        return apply

    def entry(data):
        return next(iter(data["entries"].values()))
    return {
        "not-json": lambda data: b"{ not json",
        "empty": lambda data: b"",
        "binary": lambda data: bytes(range(256)),
        "format": edit(lambda d: d.update(format=99)),
        "foreign": edit(lambda d: d["identity"]["device"].update(gpu="NVIDIA H100 80GB HBM3")),
        "foreign-toolchain": edit(lambda d: d["identity"].update(toolchain={"nvcc": "12.0"})),
        "entries-list": edit(lambda d: d.update(entries=[])),
        "negative-time": edit(lambda d: entry(d).update(median_ms=-1.0)),
        "nan-time": edit(lambda d: entry(d).update(median_ms=float("nan"))),
        "bool-fact": edit(lambda d: entry(d)["facts"].update(tile_m=True)),
        "bad-fact-name": edit(lambda d: entry(d)["facts"].update({"a b": 1})),
        "huge-fact": edit(lambda d: entry(d)["facts"].update(tile_m=2 ** 40)),
        "spec-path-escape": edit(lambda d: entry(d).update(spec="../../etc/x.toml")),
        "spec-absolute": edit(lambda d: entry(d).update(spec="/tmp/x.toml")),
        "wrong-bucket": edit(lambda d: entry(d)["bucket"].update(M=999)),
        "extra-field": edit(lambda d: entry(d).update(run="rm -rf /")),
        "short-hash": edit(lambda d: entry(d).update(spec_sha256="abc")),
        "settings-unknown-field": edit(lambda d: entry(d)["settings"].update({"schedule.tiles": "x"})),
        "settings-bool-cluster": edit(lambda d: entry(d)["settings"].update({"launch.cluster": True})),
        "settings-not-a-name": edit(lambda d: entry(d)["settings"].update({"schedule.split": "a; b"})),
        "settings-missing": edit(lambda d: entry(d).pop("settings")),
        "granule-zero": edit(lambda d: d.update(granule={"M": 0})),
        "granule-missing": edit(lambda d: d.pop("granule")),
    }


@pytest.mark.parametrize("how", list(_corruptions()))
def test_a_corrupted_or_foreign_cache_is_set_aside_and_rebuilt(rowcopy, tmp_path, how):
    """Anything on disk may be someone else's: a file that is not exactly what a tune wrote for this machine,
    toolchain and package content is not served (its winners could be for other code), the reason is kept,
    and the next save writes a good file in its place."""
    cache = TuneCache(rowcopy, tmp_path, DEVICE)
    cache.put(_entry(rowcopy, 128, 64))
    path = cache.save()
    path.write_bytes(_corruptions()[how](json.loads(path.read_text())))
    again = TuneCache(rowcopy, tmp_path, DEVICE)
    assert again.entries == {} and again.get({"M": 128}) is None
    assert again.rebuilt and str(path) in again.rebuilt
    again.put(_entry(rowcopy, 256, 128))
    again.save()
    third = TuneCache(rowcopy, tmp_path, DEVICE)
    assert third.rebuilt is None and third.get({"M": 256}).facts == {"tile_m": 128}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=64), st.integers(0, 4000))
def test_any_damage_to_the_file_is_rebuilt_or_still_valid(rowcopy, tmp_path, junk, at):
    """Bytes spliced anywhere into a good file: it loads as valid entries or is set aside; never an exception."""
    cache = TuneCache(rowcopy, tmp_path, DEVICE)
    cache.put(_entry(rowcopy, 128, 64))
    path = cache.save()
    good = path.read_bytes()
    path.write_bytes(good[:at] + junk + good[at:])
    again = TuneCache(rowcopy, tmp_path, DEVICE)
    assert again.rebuilt or all(e.facts for e in again.entries.values())


# --- the command --------------------------------------------------------------------------------------------------

def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "pipelink", *args], capture_output=True, text=True, cwd=cwd)


def test_the_command_links_the_space_and_writes_a_report(rowcopy, tmp_path):
    report = tmp_path / "tune.json"
    p = _cli("tune", str(rowcopy), "--shape", "M=100", "--fact", "tile_m=64,128", "--fact", "stages=1,15",
             "--link-only", "-j", "2", "--report", str(report))
    assert p.returncode == 0, p.stderr
    assert "tile_m=128,stages=15: link failed" in p.stdout and "link only" in p.stdout
    assert "left" in p.stderr and "0:00:" in p.stderr  # the progress bar: configurations left, elapsed time
    data = json.loads(report.read_text())
    assert [o["status"] for o in data["buckets"][0]["outcomes"]].count("linked") == 3


@pytest.mark.parametrize("args, words", [
    (("--shape", "M=100", "--fact", "stages=9..2"), "the range 9..2 is empty"),
    (("--shape", "M=-3", "--fact", "stages=1"), "a size is at least 1"),
    (("--fact", "stages=1"), "no shape to tune for"),
    (("--shape", "M=100", "--set", "schedule.splt=tiles"), "did you mean 'schedule.split'"),
    (("--shape", "M=100", "--set", "launch.cluster=3"), "is not one of 1, 2, 4"),
], ids=["empty-range", "negative-size", "no-shape", "set-typo", "set-cluster-3"])
def test_the_command_refuses_a_bad_search_with_exit_2(rowcopy, args, words):
    p = _cli("tune", str(rowcopy), *args, "--link-only")
    assert p.returncode == 2 and words in p.stderr and "Traceback" not in p.stderr, p.stderr


# --- on the GPU -----------------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
def test_the_fastest_verified_configuration_is_recorded_and_served(rowcopy, tmp_path, monkeypatch):
    """On the GPU: each linked configuration verified against the reference, the verified ones timed interleaved,
    the fastest recorded per bucket in the tune cache; pipelink.op then links that bucket with the winner's facts
    and settings (and says nothing), and a bucket nobody tuned with the nearest one's, said once."""
    import warnings

    import torch

    import pipelink
    from pipelink.shape_op import TuningWarning
    monkeypatch.setenv("PIPELINK_CACHE_DIR", str(tmp_path / "cache"))
    r = tune(rowcopy, ["M=1000"], ["tile_m=64,128", "stages=1,15"], (), ["launch.grid=1,8"], jobs=2, reps=10,
             progress=False)
    b = r.buckets[0]
    assert not r.link_only and b.winner is not None and r.cache, r.to_json()
    status = sorted(o.status for o in b.outcomes)
    assert status == ["link failed"] * 2 + ["timed"] * 6, r.to_json()
    assert b.winner.median_ms == min(o.median_ms for o in b.outcomes if o.status == "timed")
    entry = TuneCache(rowcopy).get({"M": 1024})
    assert entry.facts == dict(b.winner.config.facts) and entry.settings == dict(b.winner.config.settings)
    op = pipelink.op(rowcopy, vary=("M",), name="rowcopy_tuned_test")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        x = torch.randn(1000, 64, device="cuda").to(torch.bfloat16)
        assert torch.equal(op(x), x)
        assert not [w for w in said if issubclass(w.category, TuningWarning)]
        kernel = op.kernel_for(M=1000)
        assert all(kernel.plan.instances[0].facts[k] == v for k, v in b.winner.config.facts)
        assert kernel.manifest["grid"][0] == entry.settings["launch.grid"]  # the winner's settings reach the link
        for m in (3, 5000):  # untuned buckets: the heuristic, said once
            x = torch.randn(m, 64, device="cuda").to(torch.bfloat16)
            assert torch.equal(op(x), x)
    assert len([w for w in said if issubclass(w.category, TuningWarning)]) == 1


# --- on a Ray cluster ---------------------------------------------------------------------------------------------

def test_ray_asked_for_where_it_is_not_installed_is_a_typed_error(rowcopy, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # what an interpreter without Ray sees on import
    from pipelink.errors import UsageError
    with pytest.raises(UsageError) as info:
        tune(rowcopy, ["M=100"], ["tile_m=64"], link_only=True, progress=False, ray="local")
    assert info.value.field == "--ray" and "pipelink[ray]" in info.value.hint


@pytest.mark.ray
@pytest.mark.slow
def test_a_local_ray_links_the_space_and_ships_each_link_into_the_local_cache(rowcopy, tmp_path, monkeypatch):
    """--ray local: each configuration linked by a Ray task from the spec and packages shipped as bytes (no
    shared files), in a cache of its own; the task's cache entries land in this machine's build cache, so the
    same link here afterwards runs neither nvJitLink nor the SASS inspection again. Outcomes as without Ray."""
    ray = pytest.importorskip("ray", reason="Ray is an optional extra (pip install 'pipelink[ray]')")
    from pipelink.backend.cache import Cache
    from pipelink.link.pipeline import link
    from pipelink.spec import load_spec
    monkeypatch.setenv("PIPELINK_CACHE_DIR", str(tmp_path / "cache"))
    try:
        r = tune(rowcopy, ["M=100"], ["tile_m=64,128", "stages=1,15"], (), ["launch.grid=1,4"], link_only=True,
                 progress=False, ray="local", jobs=2)
    finally:
        ray.shutdown()
    status = {o.config.label: o.status for o in r.buckets[0].outcomes}
    assert status == {f"tile_m={m},stages={s},launch.grid={g}": "link failed" if (m, s) == (128, 15) else "linked"
                      for m in (64, 128) for s in (1, 15) for g in (1, 4)}, status
    cache = Cache()
    link(load_spec(rowcopy, facts={"M": 128, "tile_m": 64, "stages": 15}, settings={"launch.grid": 4}), cache=cache)
    misses = [e for e in cache.events if e.startswith("miss")]
    hits = [e for e in cache.events if e.startswith("hit")]
    # one machine: every stage a hit (on another node's install the glue's compile may miss: its headers' paths)
    assert misses == [] and len(hits) >= 3, cache.events


@pytest.mark.ray
@pytest.mark.slow
def test_on_a_ray_cluster_with_gpus_each_bucket_is_verified_and_timed_by_a_gpu_task(rowcopy, tmp_path, monkeypatch):
    """A cluster that offers several GPUs (here a local Ray declaring two, on this machine): after the links, each
    bucket's linked configurations go to a Ray task holding one GPU, which gets the spec, its packages and its
    reference as bytes and verifies and times them there. On a machine without a CUDA device the task's verify says
    so for every configuration, nothing is timed, and no tune cache is written (its identity would be no GPU's)."""
    ray = pytest.importorskip("ray", reason="Ray is an optional extra (pip install 'pipelink[ray]')")
    if gpu_ok():
        pytest.skip("on a GPU machine the tasks would time for real: the GPU test above covers that")
    monkeypatch.setenv("PIPELINK_CACHE_DIR", str(tmp_path / "cache"))
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    try:
        r = tune(rowcopy, ["M=100", "M=1000"], ["tile_m=64,128"], ray="auto", jobs=2, reps=3, progress=False)
    finally:
        ray.shutdown()
    assert [b.bucket for b in r.buckets] == [{"M": 128}, {"M": 1024}]
    for b in r.buckets:
        assert b.where.startswith("Ray node ") and ", GPU " in b.where, b.where
        assert [o.status for o in b.outcomes] == ["wrong", "wrong"], b.to_json()
        assert all("not run" in o.reason for o in b.outcomes), [o.reason for o in b.outcomes]
    assert r.link_only and r.cache is None and not (tmp_path / "cache" / "tune").exists()


def test_a_gpu_task_is_shipped_the_reference_beside_the_spec_and_nothing_from_elsewhere(rowcopy, tmp_path):
    """What a Ray GPU task gets (distributed.ship with verify): the spec with its packages renamed, and the Python
    files its [verify] names, which must lie beside it: a reference in another folder is refused naming --ray
    (a task gets the spec's folder flat), before anything is sent."""
    from pipelink.errors import UsageError
    from pipelink.tune.distributed import ship
    shipped = ship(str(rowcopy), verify=True)
    assert set(shipped["files"]) == {"package_r.plc", "ref.py"} and 'package = "package_r.plc"' in shipped["spec"]
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "ref.py").write_text((rowcopy.parent / "ref.py").read_text())
    spec = tmp_path / "rowcopy.toml"
    spec.write_text(rowcopy.read_text().replace('package = "rows.plc"', f'package = "{rowcopy.parent}/rows.plc"')
                    .replace('reference = "ref.py:copy"', 'reference = "sub/ref.py:copy"'))
    with pytest.raises(UsageError) as info:
        ship(str(spec), verify=True)
    assert info.value.field == "--ray" and "sub/ref.py is not a file beside" in info.value.message


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 20000), st.sampled_from([64, 128]))
def test_a_buckets_low_end_is_the_smallest_size_it_serves(m, granule):
    """_low_end: the operands' bound dimension cut to the smallest M whose bucket is this one (1 for the first
    bucket): M = low end links the same kernel, M = low end - 1 another (or is 0)."""
    from pipelink.shape_op import BoundDim, linked_sizes
    from pipelink.tune.search import _low_end
    dims = [BoundDim("r.x", 0, "M", 128), BoundDim("r.y", 0, "M", 128)]
    g = {"M": granule}
    (b,) = linked_sizes(dims, ("M",), {"M": m}, g)
    cuts = _low_end(dims, ("M",), {"M": b}, g)
    low = cuts[0]["size"] if cuts else b
    assert [(c["param"], c["dim"]) for c in cuts] == ([("r.x", 0), ("r.y", 0)] if cuts else [])
    assert all(c["size"] == low for c in cuts) and low <= m <= b
    assert linked_sizes(dims, ("M",), {"M": low}, g) == (b,)
    assert low == 1 or linked_sizes(dims, ("M",), {"M": low - 1}, g) != (b,)


def test_the_winner_is_the_least_worst_at_both_ends_of_the_bucket():
    """_pick: a bucket serves every size down to its low end; what won at M = 64 by 1.4 % and lost at M = 1 by 9 %
    on the H100 (bench/results/any_shape-gpu-20261207T061144.json.gz) is not chosen over the one that is within 1.4 %
    everywhere. Without low-end times, the fastest at the bucket's size."""
    from pipelink.tune.outcomes import Outcome
    from pipelink.tune.search import _pick

    def timed(label, top, low=None):
        o = Outcome(label)
        o.status, o.median_ms = "timed", top
        o.timing = {"median_ms": top, **({"low_end": {"median_ms": low}} if low is not None else {})}
        return o
    wide, narrow, slow = timed("128x208", 0.1819, 0.2000), timed("64x256", 0.1845, 0.1835), timed("x", 0.30, 0.30)
    assert _pick([wide, narrow, slow]).config == "64x256"
    assert _pick([timed("a", 0.19), timed("b", 0.18)]).config == "b"
    assert _pick([timed("a", 0.2, 0.1), timed("b", 0.2, 0.1)]).config == "a"  # a tie: the first of the faster
    assert _pick([]) is None

"""Issue 18, part 4: every cache key sees every input of what it caches, so that no change can be
answered with a stale entry.

The cache entries (link/build.py): the glue compile and the monolithic unit compile
(``glue_inputs``), the PL_SANITIZE recompile of a component (``sanitize_inputs``), the nvJitLink
link (``link_key``) and the parsed SASS (``inspect_key``). Each key's inputs are a visible list
(``CompileInputs``); the headers an nvcc run includes are found by the run itself (nvcc -MD) and
re-hashed at every lookup (``Cache.get_or_build_tracked``). Key tests need no compiler; the end to
end tests relink with the real cache after an edit and compare with a build that used no cache.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
from pathlib import Path

import pytest

import pipelink
from pipelink.backend import inspect as inspect_module
from pipelink.backend import nvcc
from pipelink.backend.cache import Cache, make_key
from pipelink.backend.inspect import inspector_id
from pipelink.backend.toolchain import INCLUDE_DIR, find_nvcc, nvjitlink_version, toolchain_id
from pipelink.link import build, glue
from pipelink.link.pipeline import plan_link

from contracts import violation_contract, violation_link

SOURCE = """#include "v_scale.h"
extern "C" __device__ void v_run(pl_ctx ctx, pl_bind_v b) {
  float* buf = reinterpret_cast<float*>(ctx.smem + b.buf);
  buf[ctx.thread] = b.in[ctx.thread % 1024] * V_SCALE;
  pl_bar_sync(b.sync, 128);
  b.out[ctx.tile * 128 + ctx.thread] = buf[(ctx.thread + 1) % 128];
  pl_bar_sync(b.sync, 128);
}
"""


COMPILE_FACT = "W = { set = [1, 2], default = 1, compile = true }"  # a variant fact (unused by the code)


def component(tmp_path: Path, *, scale="3.0f", source=SOURCE, contract_edit=("", ""), nvcc_flags=()) -> Path:
    """A one-component link (the seeded-violation contract) whose source includes a header of its own
    folder; returns the spec. Packing again with other arguments replaces the package."""
    spec = violation_link(tmp_path, "benign", {}, False)  # the spec and contract; the package is replaced below
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "v.cu").write_text(source)
    (src / "v_scale.h").write_text(f"#define V_SCALE {scale}\n")
    contract = tmp_path / "v.toml"
    text = violation_contract()
    text = text.replace("N = { range = [128, 1073741824] }", "N = { range = [128, 1073741824] }\n" + COMPILE_FACT)
    contract.write_text(text.replace(*contract_edit))
    pipelink.pack(src / "v.cu", contract, tmp_path / "packages" / "v.plc", nvcc_flags=list(nvcc_flags), check=False)
    return spec


def planned(spec: Path, mode="pipelink"):
    plan = plan_link(spec, mode=mode)
    plan.glue = glue.generate(glue.GlueInputs.of(plan))
    return plan


# --- the compile keys: glue (pipelink, symbol), unit (monolithic), sanitize -------------------------

@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return component(tmp_path_factory.mktemp("base"))


def keys(spec: Path, mode="pipelink", edit=None) -> tuple[str, str]:
    """(glue or unit key, sanitize key) of a plan, after ``edit(plan)``."""
    plan = planned(spec, mode)
    if edit:
        edit(plan)
    return build.glue_inputs(plan).key(), build.sanitize_inputs(plan.instances[0]).key()


def package_edit(**changes):
    def edit(plan):
        pkg = plan.instances[0].package
        for name, change in changes.items():
            setattr(pkg, name, change(getattr(pkg, name)))
    return edit


@pytest.mark.parametrize("what,edit", [
    ("source", package_edit(source_text=lambda s: s.replace("% 1024", "% 512"))),
    ("compile options", package_edit(compile_options=lambda o: [*o, "-DV_EXTRA=1"])),
    ("a packaged header", package_edit(headers=lambda h: {**h, "v_scale.h": "#define V_SCALE 4.0f\n"})),
    ("source name", package_edit(source_name=lambda n: "w.cu")),
    ("variant facts", lambda plan: plan.instances[0].package.variants[0].facts.update(W=2)),  # -> facts.h
])
@pytest.mark.slow
def test_compile_keys_see_the_package(base, what, edit):
    """What each component brings: the unit (monolithic) and sanitize keys change with it; the
    pipelink glue, which does not compile component code, does not."""
    unit, sanitize = keys(base, "monolithic")
    unit2, sanitize2 = keys(base, "monolithic", edit)
    assert unit2 != unit and sanitize2 != sanitize, what
    assert keys(base, "pipelink", edit)[0] == keys(base, "pipelink")[0]


@pytest.mark.slow
def test_compile_keys_see_the_contract(tmp_path, base):
    """A contract edit that changes the bindings struct (a second smem buffer)."""
    edited = component(tmp_path, contract_edit=('[[named_barrier]]', '[[smem]]\nname = "more"\nbytes = 64\n\n[[named_barrier]]'))
    for mode in ("pipelink", "monolithic"):
        assert keys(edited, mode)[0] != keys(base, mode)[0], mode
    assert keys(edited)[1] != keys(base)[1]


def _edit_glue(plan):
    plan.glue = dataclasses.replace(plan.glue, text=plan.glue.text + "// edit\n")


def test_compile_keys_see_the_spec_and_the_glue(tmp_path, base):
    """A spec fact that changes the glue (the tile count), and the glue text itself."""
    other = tmp_path / "link.toml"
    other.write_text(base.read_text().replace("N = 16896", "N = 33792"))
    shutil.copytree(base.parent / "packages", tmp_path / "packages")
    for mode in ("pipelink", "monolithic"):
        assert planned(other, mode).glue.text != planned(base, mode).glue.text
        assert keys(other, mode)[0] != keys(base, mode)[0], mode
        assert keys(base, mode, _edit_glue)[0] != keys(base, mode)[0]


def test_compile_keys_follow_the_mode_through_what_is_compiled(base):
    inputs = {mode: build.glue_inputs(planned(base, mode)) for mode in ("pipelink", "symbol", "monolithic")}
    assert inputs["monolithic"].kind == "unit" and "monolithic.cu" in inputs["monolithic"].files
    assert inputs["monolithic"].key() != inputs["pipelink"].key()
    # symbol and pipelink differ exactly when their glue does (here: barrier and smem positions may agree)
    same_glue = inputs["symbol"].files == inputs["pipelink"].files
    assert (inputs["symbol"].key() == inputs["pipelink"].key()) == same_glue


def test_compile_keys_see_the_toolchain(base):
    inputs = build.glue_inputs(planned(base))
    major, minor = nvjitlink_version()
    assert inputs.tools == toolchain_id() == {"nvcc": find_nvcc().version, "nvjitlink": f"{major}.{minor}"}
    for tool in ("nvcc", "nvjitlink"):
        assert dataclasses.replace(inputs, tools={**inputs.tools, tool: "99.9"}).key() != inputs.key()


def test_every_field_of_compile_inputs_is_in_the_key(base):
    """No field of CompileInputs can be left out of key() without this failing."""
    inputs = build.sanitize_inputs(planned(base, "monolithic").instances[0])
    changed = {"kind": "other", "main": "other.cu", "files": {**inputs.files, "x.h": ""},
               "include_dirs": (*inputs.include_dirs, "/x"), "flags": (*inputs.flags, "-DX"),
               "forced": inputs.forced[:1], "view": "_iother", "tools": {**inputs.tools, "nvcc": "0"},
               "arch": "sm_120a"}
    assert set(changed) == {f.name for f in dataclasses.fields(inputs)}
    for name, value in changed.items():
        assert dataclasses.replace(inputs, **{name: value}).key() != inputs.key(), name


def test_make_key_parts_cannot_run_into_each_other():
    assert make_key("ab", "c") != make_key("a", "bc")
    assert make_key(b"ab", b"c") != make_key(b"a", b"bc")


# --- link and inspect keys ------------------------------------------------------------------------

def test_link_key_sees_every_input_its_order_and_the_tools():
    inputs = [("glue.fatbin", b"glue LTO-IR"), ("a.fatbin", b"component a"), ("b.fatbin", b"component b")]
    tools = {"nvcc": "13.0.88", "nvjitlink": "13.0"}
    key = build.link_key(inputs, tools)
    for i in range(len(inputs)):
        edited = list(inputs)
        edited[i] = (inputs[i][0], inputs[i][1] + b"!")
        assert build.link_key(edited, tools) != key, inputs[i][0]
    assert build.link_key(inputs[::-1], tools) != key
    assert build.link_key(inputs[1:], tools) != key
    assert build.link_key(inputs, {**tools, "nvjitlink": "13.1"}) != key
    assert build.link_key(inputs, tools, "sm_120a") != key  # the same LTO-IR linked for another target


def test_inspect_key_sees_cubin_kernel_disassembler_and_parser(monkeypatch):
    ident = inspector_id()
    assert ident["parser"] == hashlib.sha256(Path(inspect_module.__file__).read_bytes()).hexdigest()
    assert ident["nvdisasm"].startswith("V") and ident["cuobjdump"].startswith("V")
    key = build.inspect_key(b"cubin", "entry")
    assert build.inspect_key(b"cubin!", "entry") != key and build.inspect_key(b"cubin", "other") != key
    for field in ident:
        monkeypatch.setattr(build, "inspector_id", lambda f=field: {**ident, f: "changed"})
        assert build.inspect_key(b"cubin", "entry") != key, field


# --- the cache's dependency tracking --------------------------------------------------------------

def test_tracked_entry_is_rebuilt_when_a_header_changes_or_goes(tmp_path):
    header = tmp_path / "h.h"
    header.write_text("1")
    cache = Cache(root=tmp_path / "cache")
    builds = []

    def build_it():
        builds.append(header.read_text())
        return f"built from {header.read_text()}".encode(), [str(header)]
    assert cache.get_or_build_tracked("k", build_it) == (b"built from 1", False)
    assert cache.get_or_build_tracked("k", build_it) == (b"built from 1", True)
    header.write_text("2")
    assert cache.get_or_build_tracked("k", build_it) == (b"built from 2", False)
    header.unlink()
    with pytest.raises(FileNotFoundError):
        cache.get_or_build_tracked("k", build_it)  # not served from the cache: it tried to build
    assert builds == ["1", "2"]


HEADER_KINDS = ("a.h", "b.cuh", "c.hpp", "d.inl", "e")  # CuTe's .hpp, CUTLASS's .inl, CCCL's <cuda/std/...>


def test_nvccs_dependency_list_keeps_every_kind_of_header(tmp_path):
    text = "out.fatbin : main.cu lib/a.h \\\n lib/b.cuh lib/c.hpp \\\n /usr/include/d.inl lib/e lib/with\\ space.h\n"
    got = nvcc.parse_depfile(text, tmp_path)
    names = ["main.cu", "a.h", "b.cuh", "c.hpp", "d.inl", "e", "with space.h"]
    assert sorted(Path(p).name for p in got) == sorted(names)
    assert str(Path("/usr/include/d.inl")) in got and str((tmp_path / "lib" / "e").resolve()) in got


def test_an_edit_of_any_kind_of_header_a_compile_read_rebuilds(tmp_path):
    """A header library's headers (found by nvcc -MD, re-hashed at every lookup), one of each kind a component's
    includes reach: an edit of any one of them is a miss and a new LTO-IR, never a stale one."""
    lib = tmp_path / "lib"
    lib.mkdir()
    for i, name in enumerate(HEADER_KINDS):
        (lib / name).write_text(f"#define V{i} {i + 1}\n")
    source = "".join(f'#include "{name}"\n' for name in HEADER_KINDS)
    source += 'extern "C" __device__ int v_sum(int x) { return x * V0 + V1 - V2 * x + V3 + V4; }\n'
    inputs = build.CompileInputs("glue", "main.cu", {"main.cu": source}, include_dirs=(str(lib),))
    cache = Cache(root=tmp_path / "cache")
    seen = {build.compile_cached(inputs, cache, lambda msg: None, "test")[0]}
    for i, name in enumerate(HEADER_KINDS):
        assert build.compile_cached(inputs, cache, lambda msg: None, "test")[1], "unchanged: a hit"
        (lib / name).write_text(f"#define V{i} {i + 11}\n")
        ltoir, hit = build.compile_cached(inputs, cache, lambda msg: None, "test")
        assert not hit and ltoir not in seen, f"an edit of {name} was served from the cache"
        seen.add(ltoir)


# --- end to end, with the real cache --------------------------------------------------------------

def relink(spec, cache, mode, sanitize=False):
    return pipelink.link(spec, mode=mode, sanitize=sanitize, cache=cache)


def uncached(spec, cache, mode, sanitize=False):
    """The same link without the cache's help."""
    return pipelink.link(spec, mode=mode, sanitize=sanitize, cache=Cache(root=cache.root, enabled=False))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["monolithic", "pipelink"])
def test_source_edit_and_repack_is_never_a_stale_cubin(tmp_path, mode):
    cache = Cache(root=tmp_path / "cache")
    spec = component(tmp_path)
    before = relink(spec, cache, mode)
    assert relink(spec, cache, mode).plan.backend.glue_compile == "cache hit"
    component(tmp_path, source=SOURCE.replace("% 1024", "% 512"))  # edit the source, repack
    after = relink(spec, cache, mode)
    assert after.cubin != before.cubin
    assert after.cubin == uncached(spec, cache, mode).cubin
    if mode == "monolithic":
        assert after.plan.backend.glue_compile == "compiled"


@pytest.mark.slow
@pytest.mark.parametrize("sanitize", [False, True], ids=["monolithic", "sanitize"])
def test_header_edit_is_never_a_stale_cubin(tmp_path, sanitize):
    """The component's own header (next to its source) travels in its package: builds that compile
    the source read the packaged copy, not the folder it was packed from. An edit reaches the link
    with the repack, and then it is never a stale cubin."""
    cache = Cache(root=tmp_path / "cache")
    spec = component(tmp_path)
    mode = "pipelink" if sanitize else "monolithic"
    before = relink(spec, cache, mode, sanitize)
    (tmp_path / "src" / "v_scale.h").write_text("#define V_SCALE 5.0f\n")
    assert relink(spec, cache, mode, sanitize).cubin == before.cubin  # not repacked: the package's header
    after = relink(component(tmp_path, scale="5.0f"), cache, mode, sanitize)
    assert after.cubin != before.cubin
    assert after.cubin == uncached(spec, cache, mode, sanitize).cubin
    # The header is one of the build folder's files (in the key); pipelink's component.h is tracked.
    plan = after.plan
    inputs = build.sanitize_inputs(plan.instances[0]) if sanitize else build.glue_inputs(plan)
    assert inputs.files["src_v/v_scale.h"] == "#define V_SCALE 5.0f\n"
    recorded = cache.get(make_key("deps", inputs.key())).decode()
    assert str((INCLUDE_DIR / "pipelink" / "component.h").resolve()) in recorded


@pytest.mark.slow
def test_glue_change_relinks(tmp_path):
    """Same component LTO-IR, other glue (another tile count): the link is not served from the cache."""
    cache = Cache(root=tmp_path / "cache")
    spec = component(tmp_path)
    before = relink(spec, cache, "pipelink")
    spec.write_text(spec.read_text().replace("N = 16896", "N = 33792"))
    after = relink(spec, cache, "pipelink")
    assert after.plan.backend.glue_compile == "compiled" and after.plan.backend.link == "linked"
    assert after.cubin != before.cubin and after.cubin == uncached(spec, cache, "pipelink").cubin

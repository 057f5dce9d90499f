"""`pipelink new` (issue 52 item 2): `new component NAME` writes a component, its contract, a link spec naming it by
source, its reference and a README that pack, link and (on a GPU) verify unchanged; `new link NAME COMPONENT...`
writes a spec naming each component with the facts to set listed. Nothing is overwritten; bad names and paths are
typed errors (exit 2). Through the command line, as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelink.errors import UsageError
from pipelink.new import derived_names, new_component
from pipelink.schema import identifier_problem
from pipelink.spec import load_spec

from conftest import RAW, edit, gpu_ok


def run(*args, cwd):
    return subprocess.run([sys.executable, "-m", "pipelink.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=600, env={**os.environ, "COLUMNS": "200"})


def ok(proc):
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    return proc


def refused(proc, *words):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    for w in words:
        assert w in proc.stderr, (w, proc.stderr)


def test_a_new_component_packs_and_links_unchanged(tmp_path):
    ok(run("new", "component", "scale", cwd=tmp_path))
    folder = tmp_path / "scale"
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "link.toml", "reference.py", "scale.cu",
                                                        "scale.toml"]
    ok(run("link", "link.toml", "-q", "-o", "out", cwd=folder))
    assert (folder / "out" / "scale_kernel.cubin").is_file()
    ok(run("pack", "scale.cu", "-o", "scale.plc", cwd=folder))  # the contract found beside it
    assert (folder / "scale.plc").is_file()


def test_new_overwrites_nothing_and_writes_nothing_when_a_file_is_there(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "reference.py").write_text("# the user's own\n")
    refused(run("new", "component", "scale", "-o", folder, cwd=tmp_path), "reference.py exists", "overwrites nothing")
    assert sorted(p.name for p in folder.iterdir()) == ["reference.py"]
    assert (folder / "reference.py").read_text() == "# the user's own\n"


@pytest.mark.parametrize("name, words", [("class", ["C++ keyword"]), ("2x", ["not a C identifier"]),
                                         ("pl_mine", ["reserved prefix"]), ("a-b", ["not a C identifier"]),
                                         ("_", ["makes the name '__tile'", "reserved prefix"]),
                                         ("a" * 60, ["makes the name", "over the limit of 64"])])
def test_a_bad_component_name_is_a_usage_error(tmp_path, name, words):
    refused(run("new", "component", name, "-o", tmp_path / "out", cwd=tmp_path), "field 'NAME'", *words)
    assert not (tmp_path / "out").exists()


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=1, max_size=70))
def test_any_name_writes_a_component_exactly_when_it_and_the_names_it_makes_are_identifiers(tmp_path_factory, name):
    folder = tmp_path_factory.mktemp("new")
    if all(identifier_problem(n) is None for n in derived_names(name)):  # its entry and link names too
        files = new_component(name, folder)
        assert {p.name for p in files} == {f"{name}.cu", f"{name}.toml", "link.toml", "reference.py", "README.md"}
        assert load_spec(folder / "link.toml").instance[0].source == f"{name}.cu"
    else:
        with pytest.raises(UsageError):
            new_component(name, folder)
        assert list(folder.iterdir()) == []


def test_a_new_link_names_each_component_and_links_once_its_facts_are_set(tmp_path):
    ok(run("new", "component", "scale", cwd=tmp_path))
    ok(run("new", "link", "twice", "scale/scale.cu", "-o", "k/link.toml", cwd=tmp_path))
    spec = tmp_path / "k" / "link.toml"
    text = spec.read_text()
    assert "# N = ?   # required by scale: range [1, 1073741824]" in text  # no default: the user's to set
    assert load_spec(spec).instance[0].source == "../scale/scale.cu"
    refused(run("link", spec, cwd=tmp_path), "MissingFact", "'N'")
    edit(spec, "# N = ?", "N = 4096  #")
    ok(run("link", spec, "-q", "-o", tmp_path / "out", cwd=tmp_path))
    assert (tmp_path / "k" / "reference.py").read_text().count('"scale.y": None') == 1


def test_a_new_link_of_a_pair_lists_the_ports_to_connect(tmp_path):
    ok(run("new", "link", "pair", RAW / "ring_producer.cu", RAW / "ring_reduce.cu", cwd=tmp_path))
    text = (tmp_path / "link.toml").read_text()
    assert "ring_producer.ring (out), ring_reduce.ring (in)" in text
    assert load_spec(tmp_path / "link.toml").instance[1].name == "ring_reduce"


@pytest.mark.parametrize("given, words", [("nothing.cu", ["no contract beside it"]), ("x.txt", ["neither a .cu"]),
                                          ('we"ird.cu', ["quote"])])
def test_a_bad_component_for_a_new_link_is_a_usage_error(tmp_path, given, words):
    path = tmp_path / given
    if given.startswith("we"):
        path.write_text("")
        path.with_suffix(".toml").write_text((RAW / "tile_store.toml").read_text())
    refused(run("new", "link", "k", path, cwd=tmp_path), *words)
    assert not (tmp_path / "link.toml").exists()


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an NVIDIA GPU (sm_90a)")
def test_a_new_component_verifies_on_the_gpu_unchanged(tmp_path):
    ok(run("new", "component", "scale", cwd=tmp_path))
    proc = ok(run("verify", "link.toml", "--no-bench", cwd=tmp_path / "scale"))
    assert "PASS" in proc.stdout + proc.stderr

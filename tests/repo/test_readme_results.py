"""README.md's results section is what bench/readme_results.py makes of the newest JSON in
bench/results (no figure typed by hand), and every result file README.md and bench/NOTES.md cite
is there, or is cited with the commit that holds it (`b8ef828:bench/results/...`: what left the tree,
tests/repo/test_results_tree.py)."""

import json
import re
import subprocess
import sys

from conftest import ROOT

RESULTS = ROOT / "bench" / "results"
# A result file by name: <what>-<where>-<stamp>[-<more>].json|json.gz|png|log.gz (stamps: 20261201T171057).
CITED = re.compile(r"[A-Za-z0-9_]+-[A-Za-z0-9_-]*?\d{8}T\d{4,6}[A-Za-z0-9_-]*\.(?:json(?:\.gz)?|png|log\.gz)")
# A file cited with the commit that holds it, not the tree: `b8ef828:bench/results/logs/<name>`.
IN_HISTORY = re.compile(r"\b[0-9a-f]{7,40}:bench/results/[^`\s]+")


def test_readme_results_are_generated_from_the_newest_json():
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "readme_results.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_cited_result_exists():
    for doc in ("README.md", "bench/NOTES.md"):
        cited = set(CITED.findall(IN_HISTORY.sub("", (ROOT / doc).read_text())))
        assert cited, doc
        for name in cited:
            assert (RESULTS / name).exists() or (RESULTS / "logs" / name).exists(), f"{doc} cites {name}"
    for times in RESULTS.glob("**/*.times.json.gz"):  # per-launch times, kept only beside the JSON naming them
        run = times.name.removesuffix(".times.json.gz")
        assert any((times.parent / f"{run}{ext}").exists() for ext in (".json", ".json.gz")), times.name


def test_a_newer_sweep_alone_keeps_the_llama_table_of_the_run_before(tmp_path):
    """The Llama table and its crossover sweep are separate device calls, each writing a JSON: the
    README shows the newest run of each, not the newest file's empty table."""
    sys.path.insert(0, str(ROOT / "bench"))
    import readme_results
    table = {"benchmark": "llama_decode", "date": "2026-12-02T00:00:00", "git_revision": "0" * 40,
             "machine": {"gpu": "GPU"}, "read_bw_GBps": 4000.0,
             "configs": [{"batch": 1, "context": 16, "attention": "short", "verify_passed": True, "median_ms": 0.02,
                          "pct_of_read_bw": 0.1, "speedup_vs_torch": 1.5, "fastest_torch": "torch_compile",
                          "linked_over_monolithic_paired": 1.001}]}
    sweep = {**table, "configs": [], "crossover": {"1": {"contexts": [16, 32], "short_ms": [0.02, 0.03],
                                                         "long_ms": [0.025, 0.024], "long_over_short": [1.25, 0.8],
                                                         "crosses_at": 22.0}}}
    (tmp_path / "llama_decode-gpu-20261202T010000.json").write_text(json.dumps(table))
    newest = tmp_path / "llama_decode-gpu-20261202T020000.json"
    newest.write_text(json.dumps(sweep))
    lines = readme_results.llama_decode(newest, sweep)
    assert "| 1 | 16 | short | yes | 20.0 |" in "\n".join(lines)
    assert any("long overtakes short at B = 1: L = 22" in line for line in lines)


def test_a_table_of_some_families_says_which_were_not_run_and_cites_the_newest_whole_table(tmp_path):
    """`paper_table.py --only llama` writes a table of one family: the README says which families it
    did not run, and gives the newest table that has them all beside it."""
    sys.path.insert(0, str(ROOT / "bench"))
    import configs
    import readme_results

    def table(families, ratio):
        rows = [{"name": f"{f}/x", "family": f, "verify_passed": True, "sass_identical": True,
                 "linked_over_monolithic_paired": ratio,
                 "linked_over_monolithic_paired_ci95": [ratio - 1e-4, ratio + 1e-4], "aa_noise": 0.0005,
                 "loads_per_role": 3} for f in families]
        return {"benchmark": "paper_table", "date": "2026-12-03T00:00:00", "git_revision": "0" * 40,
                "machine": {"gpu": "GPU"}, "families": {f: [f"{f}/x"] for f in families}, "configs": rows,
                "summary": {"configs": len(rows), "verified": len(rows), "sass_identical": len(rows),
                            "median_abs_deviation": abs(1 - ratio), "max_abs_deviation": abs(1 - ratio)}}

    whole = table(configs.FAMILIES, 1.001)
    (tmp_path / "paper_table-gpu-20261203T010000.json").write_text(json.dumps(whole))
    part = table(["llama"], 1.003)
    newest = tmp_path / "paper_table-gpu-20261203T020000.json"
    newest.write_text(json.dumps(part))
    text = "\n".join(readme_results.paper_table(newest, part))
    others = [f for f in configs.FAMILIES if f != "llama"]
    assert f"(not run: {', '.join(others)})" in text and "each loaded 3 time(s)" in text
    assert (f"The newest table of every family, paper_table-gpu-20261203T010000.json: {len(configs.FAMILIES)} "
            "configurations, median 0.100 %, max 0.100 %.") in text
    whole_text = "\n".join(readme_results.paper_table(tmp_path / "paper_table-gpu-20261203T010000.json", whole))
    assert "not run" not in whole_text and "The newest table of every family" not in whole_text


def test_a_resumed_qwen_run_lists_each_family_by_m(tmp_path):
    """`qwen_mlp.py --resume` adds the shapes a run lacked after those it had (M = 64 after 4096): the README
    lists each family where it first appears, and its shapes by M."""
    sys.path.insert(0, str(ROOT / "bench"))
    import readme_results

    def shape(m, k, n):
        ratios = {"speedup_vs_cublas_compiled_swiglu": 1.1, "speedup_vs_cublas_alone": 1.0,
                  "linked_over_monolithic_paired": 1.0}
        return {"shape": {"M": m, "K": k, "N": n}, "chosen": {"tile_n": 256, "stages": 4, "group": 0, "cluster": 1},
                "times": {"pipelink": {"median_ms": 1.0}}, "tflops": {"pipelink": 700.0}, "ratios": ratios}

    names = ["qwen_gate_up_128", "qwen_gate_up_4096", "qwen_down_4096", "qwen_gate_up_64", "llama1b_gate_up_4096"]
    run = {"benchmark": "qwen_mlp", "date": "2026-12-05T00:00:00", "git_revision": "0" * 40,
           "machine": {"gpu": "GPU"}, "peak": {"tflops": 800.0},
           "shapes": {name: shape(int(name.rsplit("_", 1)[1]), 5120, 51200) for name in names}}
    rows = [line.split(" ")[1] for line in readme_results.qwen_mlp(tmp_path / "qwen_mlp-gpu-x.json", run)
            if line.startswith("| ") and "(" in line.split("|")[1]]
    assert rows == ["qwen_gate_up_64", "qwen_gate_up_128", "qwen_gate_up_4096", "qwen_down_4096",
                    "llama1b_gate_up_4096"]


def test_the_transformers_tables_keep_each_parts_newest_run(tmp_path):
    """bench/transformers_e2e.py runs Llama decode and the Qwen3-MoE prefill in separate device calls, each writing
    a JSON: the README shows each part's newest run, with its own source."""
    sys.path.insert(0, str(ROOT / "bench"))
    import readme_results
    base = {"benchmark": "transformers_e2e", "git_revision": "0" * 40, "machine": {"gpu": "GPU"},
            "read_bw_GBps": 4000.0}
    llama = {**base, "date": "2026-12-07T01:00:00", "moe": [],
             "llama": [{"batch": 1, "context": 16, "new_tokens": 64, "tokens_match": 64, "floor_ms_per_token": 0.6,
                        "speedup_vs_fastest_stock": 1.25, "ms_per_token": {
                            "stock_eager": 20.0, "stock_compile": 1.0, "pipelink": 9.0, "pipelink_compile": 0.8}}]}
    moe = {**base, "date": "2026-12-07T02:00:00", "llama": [],
           "moe": [{"tokens": 4096, "verify_passed": True, "speedup_vs_fastest_stock": 1.6,
                    "speedup_vs_torch_grouped_mm": 1.1, "ms": {
                        "stock_grouped_mm": 1.6, "stock_eager": 30.0, "stock_compile": 1.7, "torch_grouped_mm": 1.1,
                        "pipelink": 1.0}}]}
    (tmp_path / "transformers_e2e-gpu-20261207T010000.json").write_text(json.dumps(llama))
    newest = tmp_path / "transformers_e2e-gpu-20261207T020000.json"
    newest.write_text(json.dumps(moe))
    text = "\n".join(readme_results.transformers_e2e(newest, moe))
    assert "| 1 | 16 | 64/64 | - | 20.000 | 1.000 | 9.000 | 0.800 | 1.25 | 0.600 | 1.33 |" in text
    llama["llama"][0]["paths"] = {"stock_compile": {"tokens_match": 7, "first_differences": [
        {"sequence": 1, "step": 9, "logit_gap": 0.01}, {"sequence": 0, "step": 7, "logit_gap": 0.0}]}}
    (tmp_path / "transformers_e2e-gpu-20261207T010000.json").write_text(json.dumps(llama))
    assert "| 1 | 16 | 64/64 | 7/64 (gap 0.000) | 20.000 |" in "\n".join(readme_results.transformers_e2e(newest, moe))
    assert "| 4096 | yes | 1.600 | 30.000 | 1.700 | 1.100 | 1.000 | 1.60 | 1.10 |" in text
    assert "transformers_e2e-gpu-20261207T010000.json" in text and "transformers_e2e-gpu-20261207T020000.json" in text


def test_the_llama_table_sets_the_attention_beside_its_anchors(tmp_path):
    sys.path.insert(0, str(ROOT / "bench"))
    import readme_results
    config = {"batch": 64, "context": 4096, "attention": "long_wt", "verify_passed": True, "median_ms": 0.17,
              "pct_of_read_bw": 72.5, "speedup_vs_torch": 0.95, "fastest_torch": "torch_compile",
              "linked_over_monolithic_paired": 1.0,
              "attention_anchors_ms": {"pipelink_attention_phase": 0.125, "attn_sdpa_graph": 0.25},
              "attention_anchors_pct_of_read_bw": {"pipelink_attention_phase": 99.0, "attn_sdpa_graph": 49.5}}
    table = {"benchmark": "llama_decode", "date": "2026-12-07T00:00:00", "git_revision": "0" * 40,
             "machine": {"gpu": "GPU"}, "read_bw_GBps": 4000.0, "configs": [config]}
    path = tmp_path / "llama_decode-gpu-20261207T010000.json"
    path.write_text(json.dumps(table))
    text = "\n".join(readme_results.llama_decode(path, table))
    assert "| 64 | 4096 | long_wt | 125.0 (99 %) | 250.0 (50 %) | - |" in text


def test_the_paper_table_shows_each_cards_newest_run(tmp_path):
    """Issue 54: the table on the H100 beside the H200's, each from its own JSON (a newer H100 run does not hide the
    H200's table)."""
    sys.path.insert(0, str(ROOT / "bench"))
    import readme_results
    row = {"name": "demo_a", "family": "demo", "verify_passed": True, "sass_identical": True,
           "linked_over_monolithic_paired": 1.001, "aa_noise": 0.0005}
    runs = {}
    for stamp, gpu in (("20261203T010000", "NVIDIA H200"), ("20261204T010000", "NVIDIA H100 80GB HBM3")):
        runs[gpu] = {"benchmark": "paper_table", "date": stamp[:4] + "-12-0" + stamp[7] + "T00:00:00",
                     "git_revision": "0" * 40, "machine": {"gpu": gpu}, "configs": [row],
                     "families": {f: [] for f in readme_results.FAMILIES}}
        (tmp_path / f"paper_table-gpu-{stamp}.json").write_text(json.dumps(runs[gpu]))
    newest = tmp_path / "paper_table-gpu-20261204T010000.json"
    text = "\n".join(readme_results.paper_table(newest, runs["NVIDIA H100 80GB HBM3"]))
    assert text.index("NVIDIA H100 80GB HBM3") < text.index("NVIDIA H200")
    assert text.count("| family | configurations |") == 2

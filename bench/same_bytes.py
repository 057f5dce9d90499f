"""Same bytes (issue 53): the generated glue and the linked cubin of every link the CPU can make, before
and after a change, compared byte for byte. The safety net of a refactor that must not change what
pipelink emits. CPU only: nvcc, nvJitLink and cuobjdump, no GPU.

    python bench/same_bytes.py --base REV [--rev REV2] [--only SUBSTRING] [--mode MODE ...] [--record FILE]
    python bench/same_bytes.py --record FILE [--rev REV] [--only SUBSTRING] [--mode MODE ...]
    python bench/same_bytes.py --compare FILE [--rev REV] [--only SUBSTRING] [--mode MODE ...]
    python bench/same_bytes.py --compare A.json --compare B.json      (two records; nothing is linked)
    python bench/same_bytes.py --list [--rev REV] [--only SUBSTRING]

`--base REV` checks REV out in a temporary `git worktree`, runs the enumeration there (a child Python with
PYTHONPATH at that worktree's src/ and its bench/ first: pipelink, bench/configs.py, the examples and the
components all come from REV; the child refuses to run if `pipelink.__file__` is not under it), then the same on
the working tree (or on a second worktree of `--rev REV2`), and prints one row per link and mode: glue
same/DIFFERENT, cubin same/DIFFERENT, and two columns for information only (the plan JSON and the launch
manifest, see below). Exit status 0 when every glue and cubin is the same and every link has the same outcome
on both sides, 1 otherwise (a link made on one side and refused or failing on the other counts; so does a
different refusal), 2 when a side could not run at all. The differing glue texts are shown as unified diffs
(their first 40 lines). `--record FILE` writes the working tree's (or --rev's) hashes and glue texts as JSON
(gzip if FILE ends in .gz); `--compare FILE` compares the working tree (or --rev) against such a record (made
by the same toolchain: the record says which, and a difference is warned about), `--compare A --compare B`
two records; a record made with --only or --mode is compared on the links both selections hold.
`--only SUBSTRING` keeps the links whose name holds it (a family is
packed only when some of its links can match: give `paper/qwen/...` rather than `qwen_gate_up_128` to pack
the Qwen family alone); `--mode` keeps those modes. `--list` packs what it must and prints the links and modes.
Progress goes to stderr, one line per link with its time. Each side gets its own empty build cache
(PIPELINK_CACHE_DIR in a temporary folder) shared by all its links, so no output of one side is ever a cache
hit of the other; packages are packed once per side. `--keep` keeps the temporary folder (each side's record,
work folder and cache; the worktrees are always removed). A determinism check is `--base HEAD --rev HEAD` (two
fresh worktrees of one revision, at two paths): at b8ef828 all 288 link-modes (277 made, 11 refused alike)
were the same bytes, and so were the normalized plan JSON and the manifests; each side took 44-45 minutes on
the 2-core CPU machine shared with other work (packing about 9 minutes of it; a CUTLASS monolithic control
20-40 s).

What is linked (every link that can be made on the CPU; names are family/...):
  paper/<config>          every configuration of the paper's table (bench/configs.py: BUILDERS, in order),
                          modes pipelink and monolithic, as bench/paper_table.py and bench/sass_compare.py
                          link them.
  example/<dir>/<spec>    every examples/*/link*.toml as written (its packages: those the paper family of that
                          example packs, or the example's own), modes pipelink, monolithic, symbol,
                          pipelink+trace (the glue's %globaltimer slots: `verify --trace`) and
                          pipelink+sanitize (canaries and bounded waits). A refused link (link_pinned.toml in
                          pipelink mode) is recorded as its error type and message.
  perturb_study/<l>/<c>   every case of bench/perturb.py's two studies: its symbol spec in symbol mode and its
                          pipelink spec in pipelink mode, on the case's packages (packed with sources by the
                          paper family `perturb`; the unperturbed case, which that family leaves out, packed
                          here the same way; perturb.py packs the changed component --closed, which symbol
                          and pipelink linking do not read). Several cases are refused by design (pipelink
                          mode): their error type and message are compared.
examples/loop holds kernel files of other DSLs (no link spec): nothing to link.

Hashed per link: sha256 of the glue text (plan.glue.text; what `LinkedKernel.save` writes as .glue.cu) and of
the cubin. For information, not in the verdict: the plan JSON (plan.to_json(), sorted keys) with the side's
work folder and tree replaced by <work> and <root> -- as written it holds absolute paths (the spec, every
package, every fact's source), so its raw bytes differ per folder; normalized it is deterministic -- and the
launch manifest (LinkedKernel.manifest, which holds the cubin's sha256). A refusal's message is compared with
the same folders replaced. Issue 53 adds a schema version to plan.json, so
the plan column is expected to change there.
"""

from __future__ import annotations

import argparse
import difflib
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
FORMAT = 1
PAPER_MODES = ("pipelink", "monolithic")
EXAMPLE_MODES = ("pipelink", "monolithic", "symbol", "pipelink+trace", "pipelink+sanitize")
MODES = {"pipelink": {"mode": "pipelink"}, "monolithic": {"mode": "monolithic"}, "symbol": {"mode": "symbol"},
         "pipelink+trace": {"mode": "pipelink", "trace": True},
         "pipelink+sanitize": {"mode": "pipelink", "sanitize": True}}
# examples/<dir>: the paper family (bench/configs.py) whose packages hold what its specs name (None: its own),
# and the packages it needs beside them: (source, contract, package name), relative to the tree.
EXAMPLE_PACKAGES = {
    "demo": ("demo", []),
    "collide": ("collide", [("examples/collide/block_sum.cu", "examples/collide/block_sum_pinned.toml",
                             "block_sum_pinned"),
                            ("examples/collide/block_max.cu", "examples/collide/block_max_pinned.toml",
                             "block_max_pinned")]),
    "block_reduce": ("block_reduce", []),
    "bias_gelu": ("bias_gelu", []),
    "qwen_mlp": ("qwen", []),
    "moe": ("moe", []),
    "llama_decode": ("llama", []),
    "tutorial": (None, []),
    "cutlass_gemm": (None, [("components/cutlass/gemm_sm90.cu", "components/cutlass/gemm_sm90.toml", "gemm_sm90")]),
}
DIFF_LINES = 40


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def sha(data: str | bytes) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


# --- one side: enumerate, link, hash (runs in a child Python whose pipelink is the side's) ---------

class Side:
    """The links of one tree (``root``), packed under ``work``: families built on demand, once."""

    def __init__(self, root: Path, work: Path, only: str | None, modes: set[str], label: str):
        self.root, self.work, self.only, self.modes, self.label = root, work, only, modes, label
        self.built: dict[str, list[tuple[str, Path]]] = {}   # paper family -> its configurations
        self.families: dict[str, dict] = {}                  # family -> {seconds, links, error}

    def wanted(self, name: str) -> bool:
        return self.only is None or self.only in name

    def may_want(self, prefix: str) -> bool:
        """Whether a link named ``prefix``/... can hold --only, before the rest of its name is known."""
        s = self.only
        if s is None or s in prefix or s.startswith(prefix + "/"):
            return True
        # a substring that starts with a family's head ("paper/", ...) lies at the start of a name
        return not any(s.startswith(head) for head in ("paper/", "example/", "perturb_study/"))

    def paper_family(self, family: str) -> list[tuple[str, Path]]:
        """bench/configs.py's configurations of ``family`` (packed into work/paper/<family>), once;
        RuntimeError if it could not be packed (recorded in self.families)."""
        key = f"paper/{family}"
        if family not in self.built:
            import configs
            t0 = time.perf_counter()
            say(f"[{self.label}] {key}: packing")
            try:
                self.built[family] = configs.BUILDERS[family](self.work / "paper" / family)
            except Exception as exc:  # noqa: BLE001 - recorded: the other side may fail the same way, or not
                self.built[family] = None
                self.families[key] = {"error": _error(exc)["error"], "seconds": round(time.perf_counter() - t0, 1)}
                say(f"[{self.label}] {key}: FAILED to pack: {self.families[key]['error']}")
            else:
                self.families[key] = {"error": None, "seconds": round(time.perf_counter() - t0, 1),
                                      "links": len(self.built[family])}
                say(f"[{self.label}] {key}: {len(self.built[family])} configurations packed in "
                    f"{self.families[key]['seconds']:.1f} s")
        if self.built[family] is None:
            raise RuntimeError(f"the paper family {family} failed to pack: {self.families[key]['error']}")
        return self.built[family]

    def links(self) -> list[tuple[str, list[tuple[str, Path]]]]:
        """Every selected link: (name, [(mode, spec), ...]), in a fixed order."""
        import configs
        out = []
        for family in configs.FAMILIES:
            if self.may_want(f"paper/{family}"):
                try:
                    built = self.paper_family(family)
                except RuntimeError:
                    continue
                out += [(f"paper/{name}", [(m, spec) for m in PAPER_MODES]) for name, spec in built]
        out += self.example_links()
        out += self.perturb_links()
        out = [(name, [(m, s) for m, s in pairs if m in self.modes]) for name, pairs in out if self.wanted(name)]
        return [(name, pairs) for name, pairs in out if pairs]

    def _family(self, key: str, build) -> list:
        """``build()``'s links, its time and any failure recorded under ``key``."""
        t0 = time.perf_counter()
        try:
            got = build()
        except Exception as exc:  # noqa: BLE001 - recorded: the other side may fail the same way, or not
            self.families[key] = {"error": _error(exc)["error"], "seconds": round(time.perf_counter() - t0, 1)}
            say(f"[{self.label}] {key}: FAILED to prepare: {self.families[key]['error']}")
            return []
        self.families[key] = {"error": None, "seconds": round(time.perf_counter() - t0, 1), "links": len(got)}
        return got

    def example_links(self) -> list[tuple[str, list[tuple[str, Path]]]]:
        out = []
        for folder in sorted(p for p in (self.root / "examples").iterdir() if p.is_dir()):
            specs = sorted(folder.glob("link*.toml"))
            if any(self.wanted(f"example/{folder.name}/{s.name}") for s in specs):
                out += self._family(f"example/{folder.name}", lambda: self._example(folder, specs))
        return out

    def _example(self, folder: Path, specs: list[Path]) -> list[tuple[str, list[tuple[str, Path]]]]:
        """examples/<folder>'s specs as written: where they name sources, linked in place; else beside its reference
        files, naming packed packages (a tree from before issue 52)."""
        import pipelink
        if folder.name not in EXAMPLE_PACKAGES:
            raise KeyError(f"bench/same_bytes.py does not know which packages examples/{folder.name}'s specs "
                           "name: add it to EXAMPLE_PACKAGES")
        family, extra = EXAMPLE_PACKAGES[folder.name]
        if all('package = "packages/' not in spec.read_text() for spec in specs):
            # Specs that name their components by source (issue 52): linked where they lie, the link packs them.
            return [(f"example/{folder.name}/{spec.name}", [(m, spec) for m in EXAMPLE_MODES]) for spec in specs]
        if family:
            self.paper_family(family)
            packages = self.work / "paper" / family / "packages"
        else:
            packages = self.work / "example" / folder.name / "packages"
        for source, contract, name in extra:
            if not (packages / f"{name}.plc").exists():
                pipelink.pack(self.root / source, self.root / contract, packages / f"{name}.plc")
        here = self.work / "example" / folder.name
        here.mkdir(parents=True, exist_ok=True)
        for py in folder.glob("*.py"):   # a spec's [verify] names its reference file beside it
            shutil.copyfile(py, here / py.name)
        out = []
        for spec in specs:
            (here / spec.name).write_text(spec.read_text().replace('package = "packages/',
                                                                   f'package = "{packages}/'))
            out.append((f"example/{folder.name}/{spec.name}", [(m, here / spec.name) for m in EXAMPLE_MODES]))
        return out

    def perturb_links(self) -> list[tuple[str, list[tuple[str, Path]]]]:
        if not self.may_want("perturb_study"):
            return []
        import perturb
        cases = [(link, study, case) for link, study in perturb.STUDIES.items() for case in study.cases
                 if self.wanted(f"perturb_study/{link}/{case.name}")]
        return self._family("perturb_study", lambda: self._perturb(cases)) if cases else []

    def _perturb(self, cases) -> list[tuple[str, list[tuple[str, Path]]]]:
        """Each case's symbol spec (symbol mode) and pipelink spec (pipelink mode), on the packages the paper
        family `perturb` packed for it: work/paper/perturb/<link>/<case>/packages. The unperturbed case, which
        that family leaves out (its plain link is in a family of its own), is packed here as perturb.py
        packs every case: the unchanged packages, and the case's component repacked over them (with source)."""
        import perturb
        self.paper_family("perturb")
        out = []
        for link, study, case in cases:
            folder = self.work / "perturb_study" / link / case.name
            packages = self.work / "paper" / "perturb" / link / case.name / "packages"
            if case.name == "unperturbed":
                packages = folder / "packages"
                shutil.copytree(self.work / "paper" / "perturb" / link / "base" / "packages", packages)
                perturb.closed_package(study, case, folder, packages, closed=False)
            if not packages.is_dir():
                raise FileNotFoundError(f"bench/configs.py's perturb family left no packages at {packages}")
            symbol, linked = study.specs(folder, packages, study.shape)
            out.append((f"perturb_study/{link}/{case.name}", [("symbol", symbol), ("pipelink", linked)]))
        return out


def _error(exc: BaseException) -> dict:
    from pipelink.errors import PipelinkError
    typed = isinstance(exc, PipelinkError)
    text = exc.format() if typed else "".join(traceback.format_exception_only(type(exc), exc)).strip()
    out = {"ok": False, "error_type": type(exc).__name__, "typed": typed, "error": text}
    if not typed:
        out["traceback"] = traceback.format_exc()[-3000:]
    return out


def glue_text(kernel) -> str:
    """The generated glue: plan.glue.text, or what LinkedKernel.save writes as <name>.glue.cu where a
    revision keeps it elsewhere."""
    text = getattr(getattr(kernel.plan, "glue", None), "text", None)
    if isinstance(text, str):
        return text
    with tempfile.TemporaryDirectory(prefix="same-bytes-save-") as tmp:
        return Path(kernel.save(tmp)["glue"]).read_text()


class Normalizer:
    """Replaces the side's own folders in text: what a plan or an error says about where it ran."""

    def __init__(self, pairs: list[tuple[Path, str]]):
        folders = []
        for path, token in pairs:
            folders += [(str(path), token), (str(path.resolve()), token)]
        self.pairs = sorted(set(folders), key=lambda p: -len(p[0]))

    def __call__(self, text: str) -> str:
        for folder, token in self.pairs:
            text = text.replace(folder, token)
        return text


def link_one(spec: Path, mode: str, norm: Normalizer) -> tuple[dict, str | None]:
    import pipelink
    t0 = time.perf_counter()
    try:
        kernel = pipelink.link(spec, **MODES[mode])
        glue = glue_text(kernel)
        row = {"ok": True, "glue": sha(glue), "cubin": sha(kernel.cubin), "cubin_bytes": len(kernel.cubin)}
        try:
            row["plan"] = sha(norm(json.dumps(kernel.plan.to_json(), sort_keys=True)))
        except Exception as exc:  # noqa: BLE001 - information only
            row["plan"] = f"error: {type(exc).__name__}: {exc}"
        try:
            row["manifest"] = sha(norm(json.dumps(kernel.manifest, sort_keys=True)))
        except Exception as exc:  # noqa: BLE001 - information only
            row["manifest"] = f"error: {type(exc).__name__}: {exc}"
    except Exception as exc:  # noqa: BLE001 - a refusal is an outcome to compare, an untyped error too
        row, glue = _error(exc), None
        row["error"] = norm(row["error"])
        row.pop("traceback", None) if row["typed"] else row.update(traceback=norm(row["traceback"]))
    row["seconds"] = round(time.perf_counter() - t0, 3)
    return row, glue


def run_side(root: Path, work: Path, only: str | None, modes: set[str], label: str, list_only: bool) -> dict:
    import pipelink
    where = Path(pipelink.__file__).resolve()
    if not where.is_relative_to((root / "src").resolve()):
        raise SystemExit(f"same_bytes: pipelink was imported from {where}, not from {root / 'src'}")
    record = {"format": FORMAT, "label": label, "root": str(root), "pipelink_file": str(where),
              "revision": _revision(root), "python": sys.version.split()[0], "toolchain": _toolchain(),
              "only": only, "modes": sorted(modes), "families": {}, "links": {}, "glue_texts": {}}
    say(f"[{label}] pipelink from {where}; revision {record['revision']}")
    t0 = time.perf_counter()
    side = Side(root, work, only, modes, label)
    links = side.links()
    record["families"] = side.families
    norm = Normalizer([(work, "<work>"), (root, "<root>")])
    for name, pairs in links:
        for mode, spec in pairs:
            if list_only:
                print(f"{name}\t{mode}\t{norm(str(spec))}")
                continue
            row, glue = link_one(spec, mode, norm)
            record["links"].setdefault(name, {})[mode] = row
            if glue is not None:
                record["glue_texts"][row["glue"]] = glue
            said = (f"glue {row['glue'][:10]} cubin {row['cubin'][:10]}" if row["ok"]
                    else f"{row['error_type']}: {row['error'].splitlines()[0][:120]}")
            say(f"[{label}] {name} {mode}: {said} ({row['seconds']:.1f} s)")
    record["seconds"] = round(time.perf_counter() - t0, 1)
    return record


def _revision(root: Path) -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _toolchain() -> dict:
    try:
        from pipelink.backend.toolchain import toolchain_id
        return toolchain_id()
    except Exception as exc:  # noqa: BLE001
        return {"error": f"{type(exc).__name__}: {exc}"}


# --- the parent: sides in child Pythons, records, comparison -----------------------------------

def write_record(record: dict, path: Path) -> None:
    data = json.dumps(record, indent=1).encode()
    path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)


def read_record(path: Path) -> dict:
    data = Path(path).read_bytes()
    record = json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
    if record.get("format") != FORMAT:
        raise SystemExit(f"{path}: not a same_bytes record of format {FORMAT}")
    return record


def side_in_child(root: Path, tmp: Path, label: str, args, list_only: bool = False) -> dict:
    """The enumeration of ``root`` in a child Python importing pipelink from root/src and the bench
    scripts from root/bench, with a build cache of its own."""
    out = tmp / f"{label}.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root / "bench")]
                                                         + [p for p in [os.environ.get("PYTHONPATH")] if p]),
           "PIPELINK_CACHE_DIR": str(tmp / f"cache-{label}"), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PIPELINK_CACHE", None)
    cmd = [sys.executable, "-P", str(Path(__file__).resolve()), "--side-root", str(root), "--side-work",
           str(tmp / f"work-{label}"), "--side-out", str(out), "--side-label", label]
    cmd += ["--only", args.only] if args.only else []
    cmd += [a for m in (args.mode or []) for a in ("--mode", m)]
    cmd += ["--list"] if list_only else []
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=tmp, stdout=None if list_only else sys.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"same_bytes: the {label} side ({root}) failed (exit {proc.returncode}); its output is above")
    if list_only:
        return {}
    record = read_record(out)
    record["wall_seconds"] = round(time.perf_counter() - t0, 1)
    return record


def resolve(rev: str) -> str:
    """The commit ``rev`` names now (a branch or HEAD may move while a side runs)."""
    commit = subprocess.run(["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=ROOT, capture_output=True,
                            text=True)
    if commit.returncode != 0:
        raise SystemExit(f"same_bytes: {rev} is not a revision of {ROOT}: {commit.stderr.strip()}")
    return commit.stdout.strip()


def worktree(commit: str, where: Path) -> Path:
    subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(where), commit], cwd=ROOT, check=True)
    return where


def remove_worktree(where: Path) -> None:
    subprocess.run(["git", "worktree", "remove", "--force", str(where)], cwd=ROOT, capture_output=True)
    subprocess.run(["git", "worktree", "prune"], cwd=ROOT, capture_output=True)


def selected(record: dict, only: str | None, modes) -> dict:
    """``record`` with only the links a selection (--only, --mode) holds."""
    links = {name: {m: row for m, row in by_mode.items() if modes is None or m in modes}
             for name, by_mode in record["links"].items() if only is None or only in name}
    return {**record, "links": {name: by_mode for name, by_mode in links.items() if by_mode}}


def compare(base: dict, work: dict) -> tuple[list[dict], list[str]]:
    """One row per (link, mode) of either record, and the glue diffs of those whose glue differs. Each record
    is cut to the other's selection first (a record of every link compared with an --only run)."""
    base = selected(base, work.get("only"), work.get("modes"))
    work = selected(work, base.get("only"), base.get("modes"))
    rows, diffs = [], []
    names = list(dict.fromkeys([*base["links"], *work["links"]]))
    for name in names:
        modes = list(dict.fromkeys([*base["links"].get(name, {}), *work["links"].get(name, {})]))
        for mode in modes:
            a, b = base["links"].get(name, {}).get(mode), work["links"].get(name, {}).get(mode)
            row = {"link": name, "mode": mode, "same": False}
            if a is None or b is None:
                row["note"] = f"only in {'the base' if b is None else 'the working tree'}"
            elif a["ok"] != b["ok"]:
                failed = b if a["ok"] else a
                row["note"] = (f"links in {'the base' if a['ok'] else 'the working tree'} only; the other: "
                               f"{failed['error_type']}: {failed['error'].splitlines()[0][:100]}")
            elif not a["ok"]:
                row["same"] = (a["error_type"], a["error"]) == (b["error_type"], b["error"])
                row["note"] = f"refused both: {a['error_type']}" if row["same"] else \
                    f"refused differently: {a['error_type']} / {b['error_type']}"
            else:
                row.update(glue=a["glue"] == b["glue"], cubin=a["cubin"] == b["cubin"],
                           plan=a.get("plan") == b.get("plan"), manifest=a.get("manifest") == b.get("manifest"))
                row["same"] = row["glue"] and row["cubin"]
                if not row["glue"]:
                    diffs.append(glue_diff(name, mode, base["glue_texts"].get(a["glue"]),
                                           work["glue_texts"].get(b["glue"])))
            rows.append(row)
    for family in [f for f in base.get("families", {}) if f in work.get("families", {})]:
        a, b = base["families"][family], work["families"][family]
        # a family's count of links holds only where both sides made every link (no --only on either)
        counted = base.get("only") is None and work.get("only") is None
        if bool(a.get("error")) != bool(b.get("error")) or (counted and a.get("links") != b.get("links")):
            rows.append({"link": family, "mode": "(family)", "same": False,
                         "note": f"base: {a.get('error') or a.get('links')}; working tree: "
                                 f"{b.get('error') or b.get('links')}"})
    return rows, diffs


def glue_diff(name: str, mode: str, a: str | None, b: str | None) -> str:
    if a is None or b is None:
        return f"--- {name} {mode}: glue text not recorded on one side"
    lines = list(difflib.unified_diff(a.splitlines(), b.splitlines(), f"base/{name} ({mode})",
                                      f"work/{name} ({mode})", lineterm=""))
    more = len(lines) - DIFF_LINES
    return "\n".join(lines[:DIFF_LINES] + ([f"... {more} more diff lines"] if more > 0 else []))


def table(rows: list[dict]) -> str:
    def cell(row, key):
        return "" if key not in row else ("same" if row[key] else "DIFFERENT")
    width = max([len(r["link"]) for r in rows] + [4])
    mwidth = max([len(r["mode"]) for r in rows] + [4])
    out = [f"{'link':<{width}}  {'mode':<{mwidth}}  {'glue':<9}  {'cubin':<9}  {'plan*':<9}  {'manifest*':<9}  note",
           "-" * (width + mwidth + 56)]
    for r in rows:
        out.append(f"{r['link']:<{width}}  {r['mode']:<{mwidth}}  {cell(r, 'glue'):<9}  {cell(r, 'cubin'):<9}  "
                   f"{cell(r, 'plan'):<9}  {cell(r, 'manifest'):<9}  {r.get('note', '')}".rstrip())
    return "\n".join(out)


def report(base: dict, work: dict, base_name: str, work_name: str) -> int:
    """Print the table, the glue diffs and a summary; the exit status (0 all same, 1 otherwise)."""
    if base.get("toolchain") != work.get("toolchain"):
        say(f"warning: the toolchains differ: {base_name} {base.get('toolchain')}, {work_name} {work.get('toolchain')}")
    rows, diffs = compare(base, work)
    print(table(rows))
    print("* information only (plan: the plan JSON with the side's folders as <work>/<root>; manifest: the launch "
          "manifest); the verdict is the glue, the cubin and each link's outcome")
    for d in diffs:
        print()
        print(d)
    for label, record in ((base_name, base), (work_name, work)):
        for family, f in record.get("families", {}).items():
            if f.get("error"):
                print(f"{family} could not be made in {label}: {f['error'].splitlines()[0][:200]}")
    different = [r for r in rows if not r["same"]]
    made = sum(1 for r in rows if "glue" in r)
    print(f"\n{len(rows)} link-modes: {made} made on both sides, {len(rows) - made - len(different)} refused "
          f"alike on both; {len(different)} different. {base_name}: {_took(base)}; {work_name}: {_took(work)}.")
    info = [r for r in rows if "plan" in r and not (r["plan"] and r["manifest"])]
    if info:
        print(f"(information: {sum(not r['plan'] for r in info)} plan JSON and {sum(not r['manifest'] for r in info)} "
              "manifests differ)")
    print("IDENTICAL" if not different else "DIFFERENT")
    return 0 if not different else 1


def _took(record: dict) -> str:
    wall = record.get("wall_seconds", record.get("seconds"))
    return f"{sum(len(m) for m in record['links'].values())} link-modes at {record.get('revision')}" + (
        f" in {wall:.0f} s" if wall is not None else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", metavar="REV", help="compare against this revision (a temporary git worktree)")
    ap.add_argument("--rev", metavar="REV", help="the other side: this revision instead of the working tree")
    ap.add_argument("--record", type=Path, metavar="FILE", help="write the working tree's (or --rev's) hashes here")
    ap.add_argument("--compare", type=Path, metavar="FILE", action="append",
                    help="compare the working tree against this record; given twice, the two records (nothing linked)")
    ap.add_argument("--only", metavar="SUBSTRING", help="only the links whose name holds SUBSTRING")
    ap.add_argument("--mode", action="append", choices=sorted(MODES), help="only these modes (repeatable)")
    ap.add_argument("--list", action="store_true", help="print the links and their modes (packs what it must)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (worktrees, work, caches)")
    for hidden in ("--side-root", "--side-work", "--side-out", "--side-label"):
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    args = ap.parse_args()
    modes = set(args.mode or MODES)

    if args.side_root:   # a child: one side's enumeration, its pipelink and bench scripts from side_root
        root = Path(args.side_root)
        sys.path[:] = [str(root / "bench")] + [p for p in sys.path if Path(p or ".").resolve() != HERE]
        record = run_side(root, Path(args.side_work), args.only, modes, args.side_label, args.list)
        if not args.list:
            write_record(record, Path(args.side_out))
        return 0

    if args.base and args.compare:
        ap.error("--base and --compare are two ways to name the other side: give one")
    if args.compare and len(args.compare) > 2:
        ap.error("--compare FILE compares the working tree with FILE, --compare A --compare B two records")
    if args.compare and len(args.compare) == 2:
        a, b = args.compare
        return report(read_record(a), read_record(b), f"record {a}", f"record {b}")
    if not (args.base or args.compare or args.record or args.list):
        ap.error("give --base REV, --compare FILE, --record FILE or --list")
    commits = {rev: resolve(rev) for rev in (args.base, args.rev) if rev}
    tmp = Path(tempfile.mkdtemp(prefix="same-bytes-"))
    trees = []
    try:
        def tree(rev: str | None, label: str) -> tuple[Path, str]:
            if rev is None:
                return ROOT, "working tree"
            trees.append(worktree(commits[rev], tmp / f"tree-{label}"))
            return trees[-1], f"{rev} ({commits[rev][:10]})"

        if args.list:
            root, _ = tree(args.rev, "tree")
            side_in_child(root, tmp, "list", args, list_only=True)
            return 0
        base = base_name = None
        if args.base:
            root, base_name = tree(args.base, "base")
            base = side_in_child(root, tmp, "base", args)
        elif args.compare:
            base, base_name = read_record(args.compare[0]), f"record {args.compare[0]}"
        root, work_name = tree(args.rev, "work")
        work = side_in_child(root, tmp, "work", args)
        if args.record:
            write_record(work, args.record)
            say(f"wrote {args.record} ({_took(work)})")
        if base is None:
            return 0
        return report(base, work, base_name, work_name)
    finally:
        for where in trees:
            remove_worktree(where)
        if args.keep:
            say(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

"""Does a refactor change what the linker writes? Links the demo five ways (pipelink, monolithic and
symbol mode, sanitize, trace) with a fresh, empty build cache and compares each cubin byte for byte,
and each manifest and plan JSON key for key, with outputs written before the change.

    python tests/check_reference_outputs.py --write FOLDER REFS   # before: the reference outputs
    python tests/check_reference_outputs.py FOLDER REFS           # after: compare (exit 1 on a difference)

FOLDER holds the demo's link.toml and packages/ (made by `pipelink demo`); REFS receives or holds
demo-<kind>.cubin, .manifest.json and .plan.json. Two plan values say whether the build cache was
hit, not what was linked, and are left out of the comparison: backend.glue_compile and backend.link.
Not collected by pytest (a before/after check, not a test of one tree).

Write the references with the old code and an empty cache, as this script does: a cubin served
from an older cache entry can differ in its line table alone (.debug_line records each file's size
and time, and an older build left glue.cu's in), with the same SASS. To run the old code, export it
and put it first on the path, pointing its component header at this checkout's (the line table
records that folder too):

    git archive HEAD src | tar -x -C /tmp/head
    PYTHONPATH=/tmp/head/src python -c "import sys, runpy, pathlib, pipelink.backend.nvcc as n; \
        n.INCLUDE_DIR = pathlib.Path('src/pipelink/include').resolve(); \
        sys.argv = ['x', '--write', 'FOLDER', 'REFS']; \
        runpy.run_path('tests/check_reference_outputs.py', run_name='__main__')"
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pipelink
from pipelink.backend.cache import Cache

KINDS = {"pipelink": {"mode": "pipelink"}, "monolithic": {"mode": "monolithic"}, "symbol": {"mode": "symbol"},
         "sanitize": {"sanitize": True}, "trace": {"trace": True}}
CACHE_STATE = ("glue_compile", "link")  # backend values that record a cache hit or miss


def outputs(folder: Path) -> dict[str, dict]:
    """kind -> {"cubin": bytes, "manifest": dict, "plan": dict}, linked with an empty cache."""
    out = {}
    with tempfile.TemporaryDirectory(prefix="pipelink-ref-") as tmp:
        for kind, options in KINDS.items():
            kernel = pipelink.link(folder / "link.toml", cache=Cache(root=Path(tmp) / "cache"), **options)
            out[kind] = {"cubin": kernel.cubin, "manifest": kernel.manifest, "plan": kernel.plan.to_json()}
    return out


def write(refs: Path, found: dict[str, dict]) -> None:
    refs.mkdir(parents=True, exist_ok=True)
    for kind, o in found.items():
        (refs / f"demo-{kind}.cubin").write_bytes(o["cubin"])
        for part in ("manifest", "plan"):
            (refs / f"demo-{kind}.{part}.json").write_text(json.dumps(o[part], indent=2))


def differences(a, b, where: str = "") -> list[str]:
    """Where two JSON values differ (keys, values, list lengths), as paths."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{where}.{k}: only in {'reference' if k in a else 'new'}" for k in sorted(set(a) ^ set(b))]
        for k in a.keys() & b.keys():
            out += differences(a[k], b[k], f"{where}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for n, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{where}[{n}]")]
    return [] if a == b else [f"{where}: {json.dumps(a)[:120]} != {json.dumps(b)[:120]}"]


def compare(refs: Path, found: dict[str, dict]) -> list[str]:
    problems = []
    for kind, o in found.items():
        ref_cubin = (refs / f"demo-{kind}.cubin").read_bytes()
        same = ref_cubin == o["cubin"]
        print(f"{kind:10s} cubin {len(o['cubin'])} B: {'byte-identical' if same else 'DIFFERENT'}")
        if not same:
            problems.append(f"{kind}: the cubin differs from the reference")
        for part in ("manifest", "plan"):
            path = refs / f"demo-{kind}.{part}.json"
            if not path.exists():
                print(f"{kind:10s} {part}: no reference")
                continue
            ref, new = json.loads(path.read_text()), json.loads(json.dumps(o[part]))
            if part == "plan":
                for d in (ref, new):
                    for key in CACHE_STATE:
                        d.get("backend", {}).pop(key, None)
            diff = differences(ref, new, part)
            print(f"{kind:10s} {part}: {'equal' if not diff else f'{len(diff)} difference(s)'}")
            problems += [f"{kind}: {d}" for d in diff]
    return problems


def main(argv: list[str]) -> int:
    writing = "--write" in argv
    folder, refs = (Path(a) for a in argv if a != "--write")
    found = outputs(folder)
    if writing:
        write(refs, found)
        return 0
    problems = compare(refs, found)
    for p in problems:
        print("  " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

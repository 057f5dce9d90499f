"""Following the link options from ``pipelink.link()`` to the glue generator (issue 53, item 1): how many
files a reader passes through, and how often they come back to one already seen.

Method: ``sys.setprofile`` records every Python call from the entry of ``pipelink.link()`` to the return of
``glue.generate`` (then the link is stopped: no backend runs). Two measures, over the files of
``src/pipelink``:

- ``options``: the calls of functions that receive the options or the plan, i.e. an argument (``self``
  included) that is a ``LinkOptions`` or a ``LinkPlan``, or a dataclass with a field holding one (a stage's
  inputs bundled). These are the places a reader follows the options through.
- ``all``: every call into a pipelink module (expression evaluation and the like included).

For each: the distinct files, the stops (calls whose file differs from the previous recorded call's; the
first call is a stop), the returns (stops to a file already stopped at before) and the most returns to one
file. Run from the repository root: ``PYTHONPATH=src python bench/follow_options.py [--no-demo] [-v]``.
Links: the demo (packed with the real toolchain into a temporary folder, traced and sanitized) and the
stream-K link of tests/glue_cases.py (placeholder packages: no toolchain).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import pipelink  # noqa: E402
from pipelink.link import glue  # noqa: E402
from pipelink.link.options import LinkOptions  # noqa: E402
from pipelink.link.plan import LinkPlan  # noqa: E402
from pipelink.demo import packaged_spec

PACKAGE = Path(pipelink.__file__).resolve().parent
CARRIERS = (LinkOptions, LinkPlan)


class _Stop(Exception):
    """Raised from the profiler when glue.generate returns: the link goes no further."""


def _carries(value) -> bool:
    if isinstance(value, CARRIERS):
        return True
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return any(isinstance(getattr(value, f.name, None), CARRIERS) for f in dataclasses.fields(value))
    return False


def _receives_options(frame) -> bool:
    code = frame.f_code
    names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    return any(_carries(frame.f_locals.get(n)) for n in names)


def trace_link(spec: Path, **options) -> dict[str, list[str]]:
    """The files of the calls each measure records, in order, from link() to glue.generate's return."""
    calls: dict[str, list[str]] = {"options": [], "all": []}
    generate = glue.generate.__code__

    def profile(frame, event, arg):
        if event == "return" and frame.f_code is generate:
            sys.setprofile(None)
            raise _Stop
        if event != "call":
            return
        path = Path(frame.f_code.co_filename)
        if not path.is_relative_to(PACKAGE):
            return
        name = str(path.relative_to(PACKAGE))
        calls["all"].append(name)
        if _receives_options(frame):
            calls["options"].append(name)

    sys.setprofile(profile)
    try:
        pipelink.link(spec, **options)
    except _Stop:
        pass
    finally:
        sys.setprofile(None)
    return calls


def summary(files: list[str]) -> dict:
    stops = [f for i, f in enumerate(files) if i == 0 or files[i - 1] != f]
    seen: set[str] = set()
    returns: Counter[str] = Counter()
    for f in stops:
        if f in seen:
            returns[f] += 1
        seen.add(f)
    return {"calls": len(files), "files": len(seen), "stops": len(stops), "returns": sum(returns.values()),
            "most_returns": returns.most_common(1)[0] if returns else ("-", 0), "returns_by_file": dict(returns),
            "path": stops}


def _demo(folder: Path) -> Path:
    from conftest import DEMO_COMPONENTS, DEMO_REDUCE_VARIANTS, RAW
    (folder / "packages").mkdir()
    for name in DEMO_COMPONENTS:
        variants = DEMO_REDUCE_VARIANTS if name == "ring_reduce" else None
        pipelink.pack(RAW / f"{name}.cu", RAW / f"{name}.toml", folder / "packages" / f"{name}.plc", variants=variants)
    (folder / "link.toml").write_text(packaged_spec((ROOT / "examples" / "demo" / "link.toml").read_text()))
    return folder / "link.toml"


def _stream_k(folder: Path) -> Path:
    from glue_cases import ksum_packages, ksum_spec
    packages = ksum_packages(folder)
    spec = packages / "link-stream_k.toml"
    spec.write_text(ksum_spec("stream_k", 128 * 20, 7, 8))
    return spec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-demo", action="store_true", help="skip the demo (it needs the CUDA toolchain to pack)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print the options measure's path of stops")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        links = {"stream-K (placeholder packages)": (_stream_k, {})}
        if not args.no_demo:
            links["demo, trace + sanitize"] = (_demo, {"trace": True, "sanitize": True})
        for n, (label, (make, options)) in enumerate(links.items()):
            folder = Path(tmp) / str(n)
            folder.mkdir()
            calls = trace_link(make(folder), **options)
            for measure, files in calls.items():
                s = summary(files)
                print(f"{label:32} {measure:8} calls {s['calls']:6}  files {s['files']:3}  stops {s['stops']:5}  "
                      f"returns {s['returns']:5}  most returns: {s['most_returns'][0]} {s['most_returns'][1]}")
                if args.verbose and measure == "options":
                    print("   returns by file:", s["returns_by_file"])
                    print("   path:", " > ".join(Path(f).stem for f in s["path"]))


if __name__ == "__main__":
    main()

"""One of the processes of tests/backend/test_cache_robustness.py's concurrency test: ``n`` links of specs
picked at random (seeded) through the build cache $PIPELINK_CACHE_DIR, shared with the other
processes; before some of them, a few entries of the cache removed (as a user or a cleaner would
while builds run: the next links of them are misses while others read), and before one of them a
repack of a package the others are reading. Writes, as JSON, each link's spec and cubin SHA-256,
every warning, and the traceback if anything raised.

    python tests/backend/cache_worker.py JOB.json OUT.json
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import traceback
import warnings


def main(job_path: str, out_path: str) -> int:
    job = json.loads(open(job_path).read())
    rng = random.Random(job["seed"])
    result: dict = {"links": [], "warnings": [], "error": None}
    try:
        import pipelink
        from pipelink.backend.cache import Cache
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for i in range(job["links"]):
                if i == job["pack_at"]:
                    p = job["pack"]
                    pipelink.pack(p["source"], p["contract"], p["output"], variants=p["variants"])
                if rng.random() < job["evict"]:
                    evict(rng)
                n = rng.randrange(len(job["specs"]))
                spec = job["specs"][n]
                cache = Cache()
                kernel = pipelink.link(spec["path"], mode=spec["mode"], cache=cache)
                result["links"].append({"spec": n, "sha256": hashlib.sha256(kernel.cubin).hexdigest(),
                                        "link": kernel.plan.backend.link,
                                        "events": [e for e in cache.events if not e.startswith(("hit", "miss"))]})
        result["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught]
    except BaseException:  # noqa: BLE001 -- the test reports it
        result["error"] = traceback.format_exc()
    with open(out_path, "w") as f:
        json.dump(result, f)
    return 1 if result["error"] else 0


def evict(rng: random.Random) -> None:
    """Remove up to three files of entries (a payload, a digest or both; never another process's temp
    file, which only that process touches)."""
    files = [os.path.join(d, f) for d, _, names in os.walk(os.environ["PIPELINK_CACHE_DIR"]) for f in names
             if not f.startswith(".")]
    for f in rng.sample(files, min(3, len(files))):
        try:
            os.unlink(f)
        except FileNotFoundError:
            pass


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))

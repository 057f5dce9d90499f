"""Generated bad input: valid contracts and link specs with random mutations, as TOML text.

A case is a deterministic function of a ``random.Random``: the fuzz runner (run.py) and the
hypothesis test (tests/inputs/test_hardening_contract.py) both draw cases from here. Mutations pick a
random node of a valid document and replace it with a value of the wrong type, a huge, negative or
zero number, a hostile name (newline and code, NUL, ../, a keyword, 10 000 characters, random
unicode), a deep or long expression, or delete it, add an unknown key, move a value elsewhere; a
few cases also break the bytes (invalid UTF-8, cut short) or nest arrays beyond any parser.

Random mutation seldom makes an input that is wrong only in meaning, and one it makes looks like
any accepted case. So the ``broken-*`` kinds are made wrong on purpose: a valid document with one
break (a guarantee computed from itself, directly or through others; a [[connect]] given twice) that
the loader must refuse. The ``layout`` kind is an expression as a port's offset or fragment is
evaluated at link time, over index arrays: boundary constants of C int, huge products, zero
divisors in every dividing operator and function, wrong argument counts.
"""

from __future__ import annotations

import copy
import json
import math
import random
import tomllib
from pathlib import Path
from pipelink.demo import packaged_spec

ROOT = Path(__file__).resolve().parents[2]

# One contract that uses every section, so that mutations reach every check.
CONTRACT = {
    "component": {"name": "fold", "version": "1.2.0", "origin": "raw", "summary": "a test component"},
    "facts": {
        "requires": {
            "K": {"range": [1, 1 << 30], "doc": "columns"},
            "stages": {"range": [1, 16], "default": 4},
            "tile_rows": {"set": [64, 128], "default": 128, "compile": True},
            "tile_cols": {"set": [32, 64], "default": 64, "compile": True, "multiple_of": 32},
        },
        "guarantees": {"ring_arrivals": "consumer_warps", "box_rows": "tile_rows"},
    },
    "roles": {"consumer": {"warps": 8, "registers": 232, "warpgroup_aligned": True}, "loader": {"warps": 1}},
    "entry": [
        {"symbol": "fold_tile", "role": "consumer", "phase": "reduce", "ports": ["acc"]},
        {"symbol": "fold_load", "role": "loader", "phase": "load"},
    ],
    "smem": [
        {"name": "ring", "bytes": "stages * tile_rows * tile_cols * 4", "align": 128, "default_offset": 1024},
        {"name": "scratch", "bytes": 256, "align": 16, "offset": 0, "live": ["reduce"]},
    ],
    "named_barrier": [{"name": "sync", "threads": "consumer_threads", "id": 9}, {"name": "pair", "threads": 64}],
    "mbarrier": [
        {"name": "full", "count": "stages", "arrivals": 1, "tx_bytes": "tile_rows * tile_cols * 4"},
        {"name": "empty", "count": "stages", "arrivals": "consumer_warps", "default_offset": 128},
    ],
    "reserve": {"named_barriers": [1, 2], "mbarriers_in": ["scratch"]},
    "operand": [
        {"name": "x", "dtype": "fp32", "shape": ["tile_rows", "K"], "tma": {"box": ["tile_rows", "tile_cols"],
                                                                           "swizzle": 128}},
        {"name": "y", "dtype": "bf16", "shape": ["tile_rows"], "access": "write"},
    ],
    "port": [
        {"name": "ring", "direction": "in", "space": "smem", "dtype": "fp32",
         "shape": {"s": "stages", "row": "tile_rows", "col": "tile_cols"}, "buffer": "ring",
         "offset": "s * tile_rows * tile_cols + row * tile_cols + col", "mbarriers": ["full", "empty"],
         "protocol": "mbarrier_ring"},
        {"name": "acc", "direction": "out", "space": "registers", "dtype": "fp32",
         "shape": {"row": "tile_rows", "col": "tile_cols"}, "values": "tile_rows * tile_cols / consumer_threads",
         "fragment": {"row": "t // (tile_cols // 4) + (consumer_threads // (tile_cols // 4)) * (v // 4)",
                      "col": "4 * (t % (tile_cols // 4)) + v % 4"}, "protocol": "registers"},
    ],
    "schedule": {"order": "any"},
}


def base_spec() -> dict:
    """examples/demo/link.toml, with the optional sections filled in so that mutations reach them."""
    spec = tomllib.loads(packaged_spec((ROOT / "examples" / "demo" / "link.toml").read_text()))
    spec["instance"][0]["facts"] = {"stages": 4}
    spec["launch"] = {"grid": 132, "cluster": 1, "roles": ["producer", "consumer"]}
    spec["verify"].update({"inputs": {"load.x": "normal * 0.5"}, "seeds": 2, "timeout": 30, "rel_l2_tol": 0.01})
    spec["schedule"]["group"] = 0
    return spec


class Raw(str):
    """TOML text pasted as it is (structures too deep to build as Python values and print)."""


def dumps(doc: dict) -> str:
    """TOML for ``doc``: every top-level key an inline value (enough for every shape tomllib reads)."""
    return "".join(f"{_key(k)} = {_value(v)}\n" for k, v in doc.items())


def _key(k: str) -> str:
    return json.dumps(k, ensure_ascii=False)


def _value(v) -> str:
    if isinstance(v, Raw):
        return str(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + "}"


def _nasty_string(rng: random.Random) -> str:
    pick = rng.randrange(14)
    if pick == 0:
        return "x\n#include <cstdlib>\nint y = (std::abort(), 0);"
    if pick == 1:
        return rng.choice(["", " ", "a b", "../up", "x\0y", "tab\there", "class", "pl_smem", "__x", "_Z", "p", "ctx",
                           "min", "1abc", "a-b", "t", "consumer_warps", "ring", "fold_tile", "reduce", "\\", "é"])
    if pick == 2:
        return "a" * rng.choice([63, 64, 65, 10_000])
    if pick == 3:
        return "".join(chr(rng.randrange(1, 0x10FFFF)) for _ in range(rng.randrange(1, 12)))
    if pick == 4:
        return "".join(chr(rng.randrange(0, 128)) for _ in range(rng.randrange(1, 12)))
    if pick == 5:
        n = rng.choice([50, 500, 20_000])
        return "(" * n + "1" + ")" * n
    if pick == 6:
        return "1 + " * rng.choice([100, 5000, 250_000]) + "1"
    if pick == 7:
        return "-" * rng.choice([70, 999, 20_000]) + "1"
    if pick == 8:
        return rng.choice(["1 / 0", "stages / 3", "stages // 0", "stages % 0", "ceil_div(1, 0)", "align_up(1, 0)",
                           "tile_rows - 128", "0 - stages", "stages * 1000000000", "2147483647 * 2147483647",
                           "tile_cols / 7", "min()", "max(1)", "ceil_div(1)", "x ** 2", "a.b", "f(1)", "[1]",
                           "__import__('os')", "1 if 1 else 2", "lambda: 1", "1.5", "'s'", "stages # c", "(stages\n)"])
    if pick == 9:
        return rng.choice(["0", "-1", str(2 ** 20), str(2 ** 31), str(2 ** 70), "9" * 5000])
    if pick == 10:
        return "normal * " + rng.choice(["nan", "inf", "1e999", "x", "", "-1"])
    if pick == 11:
        return "reference.py:" + rng.choice(["", "f\nimport os", "a.b", "x" * 300, "1bad"])
    if pick == 12:
        return rng.choice(["load.ring", "load.", ".ring", "load.ring.x", "nobody.ring", "load.r\ning"])
    return "x" * rng.randrange(0, 5)


def _nasty(rng: random.Random, like=None):
    """A value of the wrong type, out of range, or hostile; None: delete the node."""
    pick = rng.randrange(12)
    if pick == 0:
        return rng.choice([0, -1, 1, 3, 31, 33, 1023, 1025, 2 ** 20, 2 ** 31, -2 ** 31 - 1, 2 ** 63 - 1, -2 ** 63,
                           2 ** 64, 2 ** 70, -2 ** 70, Raw("9" * 400), Raw("9" * 5000)])
    if pick == 1 and isinstance(like, int) and not isinstance(like, bool):
        return rng.choice([like - 1, like + 1, -like, 2 * like, like * 2 ** 40, like // 3])
    if pick == 2:
        return rng.choice([1.5, -0.0, float("nan"), float("inf"), True, False])
    if pick in (3, 4, 5):
        return _nasty_string(rng)
    if pick == 6:
        return rng.choice([[], [[]], [1, "a"], [_nasty_string(rng)], list(range(rng.choice([3, 5000])))])
    if pick == 7:
        return rng.choice([{}, {"a": 1}, {_nasty_string(rng): 1}, {"name": "x"}])
    if pick == 8:
        n = rng.choice([30, 2000, 20_000])
        return Raw(rng.choice(["[" * n + "]" * n, "{a = " * n + "1" + "}" * n]))
    if pick == 9 and isinstance(like, str):
        return like + rng.choice(["\n", " ", "\0", "x" * 100, "/../", "é", "\\"])
    if pick == 10 and isinstance(like, list) and like:
        return like * rng.choice([2, 100])
    if pick == 11:
        return None  # delete it
    return _nasty_string(rng)


def _nodes(doc, path=()):
    """Every (path, value) below ``doc``, containers included."""
    yield path, doc
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for k, v in items:
        yield from _nodes(v, path + (k,))


def _at(doc, path):
    for k in path:
        doc = doc[k]
    return doc


def mutate(doc: dict, rng: random.Random, count: int) -> dict:
    doc = copy.deepcopy(doc)
    for _ in range(count):
        nodes = list(_nodes(doc))[1:]
        path, value = rng.choice(nodes)
        parent = _at(doc, path[:-1])
        kind = rng.randrange(10)
        if kind < 6:
            new = _nasty(rng, value)
            if new is None:
                del parent[path[-1]]
            else:
                parent[path[-1]] = new
        elif kind == 6 and isinstance(value, dict):
            value[rng.choice(["colour", "name", "__proto__", _nasty_string(rng)[:50]])] = _nasty(rng) or 1
        elif kind == 7:  # a value from elsewhere in the document (a name where a number goes, ...)
            parent[path[-1]] = copy.deepcopy(rng.choice(nodes)[1])
        elif kind == 8 and isinstance(value, list) and value:
            value.append(copy.deepcopy(rng.choice(value)))
        elif kind == 9 and isinstance(parent, dict):  # rename a key: tables of names (roles, facts, shape)
            parent[_nasty_string(rng)[:80] or "k"] = parent.pop(path[-1])
    return doc


def _guarantee_cycle(doc: dict, rng: random.Random) -> str:
    """Guarantees (the contract's own, or new ones) each computed from the next, the last from the
    first; a cycle of one is a guarantee computed from itself. Sometimes another guarantee leads in."""
    guarantees = doc["facts"]["guarantees"]
    names = [*guarantees, "g0", "g1", "g2"]
    ring = rng.sample(names, rng.randrange(1, len(names) + 1))
    for name, needs in zip(ring, ring[1:] + ring[:1]):
        guarantees[name] = rng.choice([needs, f"{needs} + 1", f"max({needs}, stages)", f"tile_rows * {needs} // 2"])
    if rng.randrange(2):
        guarantees["lead"] = f"{rng.choice(ring)} * 2"
    return f"guarantees computed from themselves: {' -> '.join(ring)}"


def _connect_repeated(doc: dict, rng: random.Random) -> str:
    """One [[connect]] again, anywhere after it, its keys in either order."""
    i = rng.randrange(len(doc["connect"]))
    again = dict(reversed(doc["connect"][i].items())) if rng.randrange(2) else dict(doc["connect"][i])
    doc["connect"].insert(rng.randrange(i + 1, len(doc["connect"]) + 1), again)
    return f"connect[{i}] given twice"


BREAKS = {"contract": _guarantee_cycle, "spec": _connect_repeated}

# The layout kind: index arrays as a fragment's t and v (their extents), and facts, as the link has them.
LAYOUT_INDEX = {"t": 16, "v": 4}
LAYOUT_FACTS = {"stages": 4, "tile_cols": 64, "zero": 0, "big": 2 ** 31 - 1}
_LAYOUT_LEAVES = [*LAYOUT_INDEX, *LAYOUT_FACTS, "0", "1", "2", "3", "46341", "65536", "1073741824", "2147483647"]


def layout(rng: random.Random, depth: int = 0) -> str:
    """A layout expression over t, v and the facts, up to 4 operators deep."""
    if depth == 4 or (depth and rng.randrange(10) < 3):
        return rng.choice(_LAYOUT_LEAVES)
    pick = rng.randrange(8)
    if pick < 4:
        op = rng.choice(["+", "-", "*", "*", "//", "%", "/"])
        return f"({layout(rng, depth + 1)} {op} {layout(rng, depth + 1)})"
    if pick < 6:
        args = ", ".join(layout(rng, depth + 1) for _ in range(rng.choice([2, 2, 2, 1, 3])))
        return f"{rng.choice(['min', 'max', 'ceil_div', 'align_up'])}({args})"
    if pick == 6:
        return f"-{layout(rng, depth + 1)}"
    return f"{layout(rng, depth + 1)} + {' * '.join(['2147483647'] * rng.randrange(2, 4))}"


def case(kind: str, rng: random.Random) -> bytes:
    """One generated ``kind`` file, as bytes: 'contract' or 'spec' (randomly mutated), 'broken-contract' or
    'broken-spec' (one break; the first line, a comment, names it), or 'layout' (one expression)."""
    if kind == "layout":
        return layout(rng).encode()
    if kind.startswith("broken-"):
        kind = kind.removeprefix("broken-")
        doc = copy.deepcopy(CONTRACT if kind == "contract" else base_spec())
        return f"# {BREAKS[kind](doc, rng)}\n{dumps(doc)}".encode()
    base = CONTRACT if kind == "contract" else base_spec()
    text = dumps(mutate(base, rng, rng.choice([0, 1, 1, 1, 2, 3]))).encode("utf-8", "surrogatepass")
    damage = rng.randrange(40)
    if damage == 0:  # invalid UTF-8
        at = rng.randrange(len(text))
        text = text[:at] + bytes([rng.choice([0x80, 0xC3, 0xFF, 0xED])]) + text[at:]
    elif damage == 1:
        text = text[:rng.randrange(len(text))]
    return text

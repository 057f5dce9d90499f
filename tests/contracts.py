"""Contract text more than one test file uses, in one place (issue 53 item 5). Import what you need:
``from contracts import ...`` (tests/ is on sys.path: pytest puts the folder of tests/conftest.py there).

- The seeded-violation contract of tests/violations (its template, ``violation_contract`` and
  ``violation_link``): the conformance tests (tests/link/test_conform.py) and every test that needs a
  small real component with a known conformance finding, or none (``benign``).
- The global-port pair ``counter`` -> ``writer`` (tests/link/test_global_ports.py, and the bad inputs of
  tests/inputs/test_global_ports_bad_input.py, which edit these texts).
- Builders of small contracts whose entries are empty (planning reads no code): ``component`` and the
  port fragments ``register_port`` and ``smem_tile``, for the refusal and negative-check tests of
  tests/link/ (packed by conftest's ``empty_part`` fixture).
"""

from __future__ import annotations

from pathlib import Path

import pipelink

ROOT = Path(__file__).resolve().parent.parent

# --- the seeded-violation component (tests/violations) -------------------------------------------------

VIOLATIONS = ROOT / "tests" / "violations"

VIOLATION_CONTRACT = """
[component]
name = "{name}"
version = "1"

[facts.requires]
N = {{ range = [128, 1073741824] }}

[roles.w]
warps = 4
{registers}

[[entry]]
symbol = "{name}_run"
role = "w"
phase = "run"

[[smem]]
name = "buf"
bytes = 1024

[[named_barrier]]
name = "sync"
threads = 128
{barrier_id}

[[mbarrier]]
name = "bar"
arrivals = 128

[[operand]]
name = "out"
dtype = "fp32"
shape = ["N"]
access = "write"

[[operand]]
name = "in"
dtype = "fp32"
shape = ["1024"]
{reserve}
"""


def violation_contract(name: str = "v", **tweaks: str) -> str:
    """VIOLATION_CONTRACT for component ``name``; ``tweaks`` fill its slots (registers, barrier_id, reserve)."""
    return VIOLATION_CONTRACT.format(name=name, **{"registers": "", "barrier_id": "", "reserve": "", **tweaks})


def violation_link(tmp_path: Path, kind: str, tweaks: dict, second_role: bool) -> Path:
    """The link spec of tests/violations/KIND.cu packed under the violation contract as instance ``v``; with
    ``second_role``, next to a neighbour in its own warps that reserves named barriers 1..7."""
    (tmp_path / "packages").mkdir(parents=True, exist_ok=True)
    contract = tmp_path / "v.toml"
    contract.write_text(violation_contract("v", **tweaks))
    pipelink.pack(VIOLATIONS / f"{kind}.cu", contract, tmp_path / "packages" / "v.plc", check=False)
    spec = ['[link]\nname = "seeded"\n\n[facts]\nN = 16896\n',
            '[[instance]]\nname = "v"\npackage = "packages/v.plc"\n']
    if second_role:
        # A neighbour in its own warps that, like CUTLASS, reserves named barriers 1..7.
        other = tmp_path / "other.toml"
        other.write_text(violation_contract("n", reserve="\n[reserve]\nnamed_barriers = [1, 2, 3, 4, 5, 6, 7]\n"))
        pipelink.pack(VIOLATIONS / "neighbour.cu", other, tmp_path / "packages" / "other.plc")
        spec.append('[[instance]]\nname = "neighbour"\npackage = "packages/other.plc"\nroles = { w = "w2" }\n')
    spec.append('[schedule]\ntiles = ["N / 128"]\n')
    (tmp_path / "link.toml").write_text("\n".join(spec))
    return tmp_path / "link.toml"


# --- a global hand-over: counter -> writer ---------------------------------------------------------------

COUNTER = """
[component]
name = "counter"
version = "1.0.0"

[facts.requires]
N = { range = [128, 1048576], multiple_of = 128, default = 65536 }

[roles.work]
warps = 4

[[entry]]
symbol = "counter_count"
role = "work"
phase = "count"
scope = "block"
when = "start"

[[workspace]]
name = "hits"
bytes = 4

[[workspace]]
name = "arrived"
bytes = 4
grid_sync = true

[[workspace]]
name = "ntiles"
bytes = 4
count_max = "N / 128"  # one tile per 128 even elements, rounded up

[[operand]]
name = "x"
dtype = "int32"
shape = ["N"]
access = "read"

[[port]]
name = "count"
direction = "out"
space = "global"
buffer = "hits"
dtype = "int32"
shape = { n = 1 }

[schedule]
order = "any"
"""

COUNTER_SOURCE = """extern "C" __device__ void counter_count(pl_ctx ctx, pl_bind_counter b) {
  int mine = 0;
  for (int i = blockIdx.x * blockDim.x + ctx.thread; i < b.N; i += gridDim.x * blockDim.x)
    mine += (b.x[i] & 1) == 0;
  if (mine) atomicAdd(reinterpret_cast<int*>(b.hits), mine);
  __syncthreads();
  if (ctx.thread == 0) {
    pl_grid_sync(b.arrived, 1);
    *reinterpret_cast<volatile int*>(b.ntiles) = (pl_ld_acquire_int(b.hits) + 127) / 128;
  }
  __syncthreads();
}
"""

WRITER = """
[component]
name = "writer"
version = "1.0.0"

[facts.requires]
N = { range = [128, 1048576], multiple_of = 128, default = 65536 }

[roles.work]
warps = 4

[[entry]]
symbol = "writer_tile"
role = "work"
phase = "tile"

[[operand]]
name = "y"
dtype = "int32"
shape = ["N / 128"]
access = "write"

[[port]]
name = "count"
direction = "in"
space = "global"
dtype = "int32"
shape = { n = 1 }

[schedule]
order = "any"
"""

WRITER_SOURCE = """extern "C" __device__ void writer_tile(pl_ctx ctx, pl_bind_writer b) {
  if (ctx.thread == 0) b.y[ctx.tile] = pl_ld_acquire_int(b.count);
}
"""

COUNTER_WRITER_SPEC = """
[link]
name = "evens2"

[facts]
N = 65536

[[instance]]
name = "c"
package = "counter.plc"

[[instance]]
name = "w"
package = "writer.plc"

[[connect]]
from = "c.count"
to = "w.count"

[schedule]
tiles = ["N / 128"]
tiles_from = "c.ntiles"
"""


# --- small components with empty entries --------------------------------------------------------------

def component(name: str, body: str = "", *, role: str = "math", ports: str = "[]", requires: str = "",
              guarantees: str = "") -> str:
    """A contract: one role of 4 warps (128 threads), one per-tile entry passing ``ports``, then ``body``."""
    return (f'[component]\nname = "{name}"\nversion = "1"\n\n'
            f"[facts.requires]\nN = {{ range = [1, 1073741824] }}\n{requires}\n"
            + (f"[facts.guarantees]\n{guarantees}\n" if guarantees else "")
            + f'[roles.{role}]\nwarps = 4\n\n'
            f'[[entry]]\nsymbol = "{name}_run"\nrole = "{role}"\nphase = "{name}"\nports = {ports}\n\n{body}')


def register_port(direction: str, *, dtype: str = "fp32", values: int = 4, row: str = "t // 32 + 4 * v") -> str:
    """A register port ``acc``: a 16 x 32 fragment over the role's 128 threads."""
    return f"""
[[port]]
name = "acc"
direction = "{direction}"
space = "registers"
dtype = "{dtype}"
shape = {{ row = 16, col = 32 }}
values = {values}
fragment = {{ row = "{row}", col = "t % 32" }}
protocol = "registers"
"""


def smem_tile(direction: str, offset: int | None = None) -> str:
    """A 16 x 32 fp32 smem buffer ``tile`` (pinned at ``offset`` if given) and its barrier-protocol port."""
    pinned = "" if offset is None else f"offset = {offset}\n"
    return f"""
[[smem]]
name = "tile"
bytes = 2048
{pinned}
[[port]]
name = "tile"
direction = "{direction}"
space = "smem"
dtype = "fp32"
shape = {{ row = 16, col = 32 }}
buffer = "tile"
offset = "row * 32 + col"
protocol = "barrier"
"""

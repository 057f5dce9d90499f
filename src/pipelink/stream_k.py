"""The stream-K schedule (issue 15, docs/design/stream_k.md): which k-tiles of which output tile each
block computes, and which blocks' partial sums make up a split tile. Pure arithmetic, written once
here: the glue will emit each block's units as a table (block_row) and the contributor formula in
C, and the plan audit checks them against this.

Three schedules over ``tiles`` output tiles of ``k_tiles`` k-tiles each, on ``grid`` blocks:

- ``tiles``: today's persistent loop; tile t is block t mod grid's, whole.
- ``stream_k``: the (tile, k-tile) iterations laid end to end, tiles x k_tiles of them; block b takes
  [b N / grid, (b + 1) N / grid). Every block streams the same number of k-tiles to within one; its
  range holds whole tiles in the middle and at most one partial tile at each end.
- ``hybrid`` (data-parallel + split-K for the last wave): every full wave whole, as in ``tiles``; the
  R = tiles mod grid tiles left are cut S = min(grid // R, k_tiles, MAX_SPLITS) ways, as ``stream_k``
  over the first R x S blocks (the rest have no more work). Each of those blocks then streams k_tiles
  / S k-tiles, and the blocks on one S-th of the k-range at a time read the same slices of A and B, as
  the whole tiles before them did: on the H200 a stream-K range over the last two waves (this
  schedule's first form) ran its k-tiles ~1.5x slower than the whole tiles, every block at another
  k offset and L2 thrashing (bench/NOTES.md, twelfth session).

A partial unit stores its fragment to the block's slot (0: the first unit of its range, 1: the last);
the block that completes a tile sums the slots of its contributors in block order, so the fp32 sum
of a split tile is the same whichever block finishes last.
"""

from __future__ import annotations

from dataclasses import dataclass

SPLITS = ("tiles", "stream_k", "hybrid")
# The most ways hybrid cuts a tile: the block that completes it reads every other part's partial sums
# (128 KB each for a 128 x 256 fp32 tile) alone, so more parts cost more than they save.
MAX_SPLITS = 8


@dataclass(frozen=True)
class Unit:
    """One call of a mainloop: k-tiles [k_begin, k_end) of ``tile``."""
    tile: int
    k_begin: int
    k_end: int
    stage_base: int        # k-tiles the block streamed before this unit (its ring position)
    slot: int | None       # the partials slot a split tile's unit stores to; None: a whole tile


def _check(split: str, tiles: int, k_tiles: int, grid: int) -> None:
    if split not in SPLITS:
        raise ValueError(f"split {split!r}: one of {', '.join(SPLITS)}")
    if tiles < 0 or k_tiles < 1 or grid < 1:
        raise ValueError(f"tiles {tiles}, k_tiles {k_tiles}, grid {grid}: tiles >= 0, k_tiles and grid >= 1")


def whole_tiles(split: str, tiles: int, grid: int) -> int:
    """How many tiles, from the first, run whole in the data-parallel part (the rest are stream-K)."""
    if split == "tiles":
        return tiles
    if split == "stream_k":
        return 0
    return tiles // grid * grid


def stream_blocks(split: str, tiles: int, k_tiles: int, grid: int) -> int:
    """How many blocks, from the first, share the stream-K part: every block under ``stream_k``; under
    ``hybrid`` the R tiles left after the full waves times the S ways each is cut."""
    if split != "hybrid":
        return grid
    left = tiles - whole_tiles(split, tiles, grid)
    return left * min(grid // left, k_tiles, MAX_SPLITS) if left else grid


def _range(block: int, iterations: int, blocks: int) -> tuple[int, int]:
    """Block ``block``'s stream-K iterations (none past the ``blocks`` that share them)."""
    if block >= blocks:
        return iterations, iterations
    return block * iterations // blocks, (block + 1) * iterations // blocks


def block_units(split: str, tiles: int, k_tiles: int, grid: int, block: int) -> tuple[Unit, ...]:
    """What block ``block`` computes, in order: its whole tiles, then its stream-K range cut at tile
    boundaries."""
    _check(split, tiles, k_tiles, grid)
    dp = whole_tiles(split, tiles, grid)
    spans = [(t, 0, k_tiles, None) for t in range(block, dp, grid)]
    begin, end = _range(block, (tiles - dp) * k_tiles, stream_blocks(split, tiles, k_tiles, grid))
    start = begin
    while begin < end:
        tile, k = divmod(begin, k_tiles)
        stop = min(end - tile * k_tiles, k_tiles)
        # a split tile's unit is the first or the last of the block's stream-K range: its slot
        slot = None if (k, stop) == (0, k_tiles) else 0 if begin == start else 1
        spans.append((dp + tile, k, stop, slot))
        begin = tile * k_tiles + stop
    units, base = [], 0
    for tile, k_begin, k_end, slot in spans:
        units.append(Unit(tile, k_begin, k_end, base, slot))
        base += k_end - k_begin
    return tuple(units)


def cut_tiles(split: str, tiles: int, k_tiles: int, grid: int) -> int:
    """How many tiles the schedule cuts between blocks (those whose partial sums the glue adds up): one
    per boundary between two stream-K ranges that falls inside a tile. O(grid), however many tiles."""
    _check(split, tiles, k_tiles, grid)
    iterations = (tiles - whole_tiles(split, tiles, grid)) * k_tiles
    blocks = stream_blocks(split, tiles, k_tiles, grid)
    return len({begin // k_tiles for begin in (_range(b, iterations, blocks)[0] for b in range(1, blocks))
                if begin % k_tiles})


def contributors(split: str, tiles: int, k_tiles: int, grid: int, tile: int) -> tuple[tuple[int, int], ...]:
    """The (block, slot) pairs whose partial sums make up ``tile``, in block order (the summation
    order); empty where one block computes the tile whole. By formula, without enumerating blocks: the
    glue computes the same at run time."""
    _check(split, tiles, k_tiles, grid)
    dp = whole_tiles(split, tiles, grid)
    if tile < dp:
        return ()
    iterations = (tiles - dp) * k_tiles
    blocks = stream_blocks(split, tiles, k_tiles, grid)
    first, last = (tile - dp) * k_tiles, (tile - dp + 1) * k_tiles - 1

    def owner(x):  # the last block whose range starts at or before iteration x: its range holds x
        return min(blocks - 1, ((x + 1) * blocks + iterations - 1) // iterations - 1)

    b0, b1 = owner(first), owner(last)
    if b0 == b1:
        return ()
    out = []
    for b in range(b0, b1 + 1):
        begin, end = _range(b, iterations, blocks)
        if begin == end:
            continue  # more blocks than iterations: this one has none
        out.append((b, 0 if begin >= first else 1))  # its range starts inside the tile: its first unit
    return tuple(out)


# What the glue emits per block for its stream-K part (a __constant__ table, so that the arithmetic
# above is written once, here, and not again in C): the first unit when it is part of a tile (slot 0),
# the run of whole tiles after it, and the last unit when it is another part of a tile (slot 1; it
# starts at k-tile 0). NONE marks a part the block does not have.
ROW_FIELDS = ("head_tile", "head_k_begin", "head_k_end", "run_begin", "run_end", "tail_tile", "tail_k_end")
NONE = -1


def block_row(split: str, tiles: int, k_tiles: int, grid: int, block: int) -> tuple[int, ...]:
    """Block ``block``'s stream-K units as the seven ints of ROW_FIELDS."""
    dp = whole_tiles(split, tiles, grid)
    units = [u for u in block_units(split, tiles, k_tiles, grid, block) if u.tile >= dp]
    head = units.pop(0) if units and units[0].slot == 0 else None
    tail = units.pop() if units and units[-1].slot == 1 else None
    run = (units[0].tile, units[-1].tile + 1) if units else (NONE, NONE)
    return ((head.tile, head.k_begin, head.k_end) if head else (NONE, NONE, NONE)) + run + \
        ((tail.tile, tail.k_end) if tail else (NONE, NONE))


def row_units(row: tuple[int, ...], k_tiles: int, stage_base: int) -> tuple[Unit, ...]:
    """The units a block runs from its row (what the glue's loop does with it), its ring starting at
    ``stage_base`` (the k-tiles of its whole tiles before them)."""
    head_tile, head_begin, head_end, run_begin, run_end, tail_tile, tail_end = row
    spans = ([(head_tile, head_begin, head_end, 0)] if head_tile != NONE else []) + \
        [(t, 0, k_tiles, None) for t in range(run_begin, run_end)] + \
        ([(tail_tile, 0, tail_end, 1)] if tail_tile != NONE else [])
    units = []
    for tile, k_begin, k_end, slot in spans:
        units.append(Unit(tile, k_begin, k_end, stage_base, slot))
        stage_base += k_end - k_begin
    return tuple(units)

"""The stream-K schedule's arithmetic (pipelink.stream_k; issue 15, docs/design/stream_k.md): the
bug a split schedule invites is a k-tile counted twice or never, or a partial sum read from the wrong
slot, which verify would only see as a wrong sum. These properties hold for every tile count, k-tile
count and grid."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from pipelink import stream_k
from pipelink.stream_k import SPLITS, block_units, contributors, whole_tiles

shapes = st.tuples(st.sampled_from(SPLITS), st.integers(0, 700), st.integers(1, 96), st.integers(1, 140))


def _all_units(split, tiles, k_tiles, grid):
    return {b: block_units(split, tiles, k_tiles, grid, b) for b in range(grid)}


@settings(max_examples=300, deadline=None)
@given(shapes)
def test_every_k_tile_of_every_tile_is_computed_exactly_once(shape):
    split, tiles, k_tiles, grid = shape
    seen = {}
    for block, units in _all_units(*shape).items():
        base = 0
        for u in units:
            assert 0 <= u.k_begin < u.k_end <= k_tiles and 0 <= u.tile < tiles
            assert u.stage_base == base  # the ring position: k-tiles streamed before, in this block
            base += u.k_end - u.k_begin
            for k in range(u.k_begin, u.k_end):
                assert (u.tile, k) not in seen, f"tile {u.tile} k {k}: blocks {seen[(u.tile, k)]} and {block}"
                seen[(u.tile, k)] = block
    assert len(seen) == tiles * k_tiles


@settings(max_examples=300, deadline=None)
@given(shapes)
def test_the_blocks_share_the_work_evenly(shape):
    split, tiles, k_tiles, grid = shape
    units = _all_units(*shape)
    work = [sum(u.k_end - u.k_begin for u in mine) for mine in units.values()]
    # whole tiles leave a last partial wave (up to a tile a block); stream-K evens it to one k-tile
    assert max(work) - min(work) <= (1 if split == "stream_k" else k_tiles)
    if split == "hybrid":  # the last wave's tiles cut S ways: its blocks within a k-tile, the others idle
        dp, blocks = whole_tiles(split, tiles, grid), stream_k.stream_blocks(split, tiles, k_tiles, grid)
        streamed = [sum(u.k_end - u.k_begin for u in units[b] if u.tile >= dp) for b in range(grid)]
        assert max(streamed[:blocks]) - min(streamed[:blocks]) <= 1 and not any(streamed[blocks:])
        if tiles > dp:
            ways = blocks // (tiles - dp)
            assert 1 <= ways <= stream_k.MAX_SPLITS and min(streamed[:blocks]) >= k_tiles // ways


@settings(max_examples=300, deadline=None)
@given(shapes)
def test_a_split_tile_is_summed_from_its_contributors_slots_in_k_order(shape):
    split, tiles, k_tiles, grid = shape
    units = _all_units(*shape)
    split_tiles = 0
    for tile in range(tiles):
        parts = [(b, u) for b in range(grid) for u in units[b] if u.tile == tile]
        got = contributors(*shape, tile)
        if len(parts) == 1:
            assert got == () and parts[0][1].slot is None  # whole: straight to the epilogue
            continue
        split_tiles += 1
        # the formula the glue will run names the same blocks and slots, in block order ...
        assert got == tuple((b, u.slot) for b, u in parts)
        # ... and block order is k order: the partial sums cover the tile's k-tiles in sequence
        assert [u.k_begin for _, u in parts] == [0] + [u.k_end for _, u in parts[:-1]]
        assert parts[-1][1].k_end == k_tiles
    dp = whole_tiles(split, tiles, grid)
    for mine in units.values():  # at most two partials a block, in distinct slots
        slots = [u.slot for u in mine if u.slot is not None]
        assert len(slots) == len(set(slots)) <= 2
        ranged = [u for u in mine if u.tile >= dp]  # after the whole tiles, its stream-K range
        assert all(u.tile < dp for u in mine[:len(mine) - len(ranged)])
        assert all(u.slot is None for u in ranged[1:-1])  # only the range's ends are split
    assert split_tiles <= max(0, grid - 1)  # each boundary between two blocks' ranges splits one tile
    assert stream_k.cut_tiles(*shape) == split_tiles  # what the link report says, without enumerating tiles
    if split == "tiles":
        assert split_tiles == 0 and all(u.tile % grid == b for b, us in units.items() for u in us)


def test_hybrid_runs_every_full_wave_whole_and_cuts_the_last():
    # The design's worked examples (docs/design/stream_k.md), the Qwen gate/up GEMM on 132 SMs: at M =
    # 4096, 6400 tiles, 48 waves whole and the 64 tiles left cut 2 ways over 128 blocks; at M = 1024,
    # 1600 tiles, 12 waves whole and the 16 left cut 8 ways, 10 of their 80 k-tiles a block.
    assert whole_tiles("hybrid", 6400, 132) == 48 * 132 == 6400 - 64
    assert stream_k.stream_blocks("hybrid", 6400, 80, 132) == 128
    assert whole_tiles("hybrid", 1600, 132) == 1600 - 16 and stream_k.stream_blocks("hybrid", 1600, 80, 132) == 128
    assert [u.k_end - u.k_begin for u in block_units("hybrid", 1600, 80, 132, 5)][-1] == 10
    assert stream_k.stream_blocks("hybrid", 1584 + 5, 80, 132) == 5 * stream_k.MAX_SPLITS  # not 26 ways: 8 at most
    # a full last wave leaves nothing to cut; M = 128's 200 tiles leave 68, each whole on a block of its own
    assert whole_tiles("hybrid", 264, 132) == 264 and not any(contributors("hybrid", 264, 80, 132, t) for t in range(264))
    assert stream_k.stream_blocks("hybrid", 200, 80, 132) == 68 and contributors("hybrid", 200, 80, 132, 150) == ()
    assert whole_tiles("stream_k", 6400, 132) == 0 and whole_tiles("tiles", 6400, 132) == 6400


def test_a_schedule_outside_the_three_is_refused():
    with pytest.raises(ValueError, match="split 'split_k'"):
        stream_k.block_units("split_k", 10, 4, 2, 0)
    with pytest.raises(ValueError, match="grid 0"):
        stream_k.contributors("stream_k", 10, 4, 0, 0)


@settings(max_examples=300, deadline=None)
@given(shapes)
def test_the_table_the_glue_emits_gives_back_every_blocks_units(shape):
    # The glue writes block_row's seven ints per block and loops over them (row_units): the table must
    # hold exactly the stream-K units block_units computes, with their slots and ring positions.
    split, tiles, k_tiles, grid = shape
    dp = whole_tiles(split, tiles, grid)
    for block, units in _all_units(*shape).items():
        whole = [u for u in units if u.tile < dp]
        row = stream_k.block_row(*shape, block)
        assert len(row) == len(stream_k.ROW_FIELDS)
        assert stream_k.row_units(row, k_tiles, len(whole) * k_tiles) == units[len(whole):]

"""One operator for every size (issue 49): the buckets a bound fact is linked for, and what a contract must say
before a fact may be smaller at launch than linked. The operator itself runs on the GPU
(tests/examples/test_qwen.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from pipelink.contract import load_contract
from pipelink.errors import ContractError
from pipelink.shape_op import BUCKET_BITS, bucket

from contracts import component


@given(st.integers(1, 2 ** 31 - 1))
def test_a_bucket_covers_its_size_with_at_most_an_eighth_more(n):
    """The linked size is never below the size asked (tiles past it load zeros and store nothing, so more is
    only slower), at most 12.5 % above it, and has at most four significant bits. Sizes of one bucket share
    it; a larger size never gets a smaller one."""
    b = bucket(n)
    assert n <= b <= n + n // 8
    shift = max(0, b.bit_length() - BUCKET_BITS)
    assert b >> shift << shift == b and bucket(b) == b and bucket(n + 1) >= b


def test_the_buckets_of_the_sizes_a_decode_step_sees():
    assert [bucket(n) for n in (1, 7, 16, 17, 19, 33, 100, 1000, 1024, 1025)] == [1, 7, 16, 18, 20, 36, 104, 1024,
                                                                                  1024, 1152]
    assert len({bucket(n) for n in range(1, 65)}) == 32  # 1 to 64 boxes (M up to 8192 in 128-row tiles)


OPERAND = '[[operand]]\nname = "x"\ndtype = "bf16"\nshape = [{shape}]\naccess = "read"\n{tma}\n'


@pytest.mark.parametrize("shape, tma, req, field, words", [
    ('"M", 64', 'tma = { box = [64, 64], swizzle = 128, partial = [0] }', "", None, None),
    ('"M", 64', 'tma = { box = [64, 64], swizzle = 128 }', "", "operand[0].shape",
     "operand 'x' dimension 0 ('M') mentions bound fact 'M', but only a TMA dimension"),
    ('"M", 64', "", "", "operand[0].shape", "operand 'x' dimension 0 ('M') mentions bound fact 'M'"),
    ('"M * 2", 64', 'tma = { box = [64, 64], swizzle = 128, partial = [0] }', "", "operand[0].shape",
     "dimension 0 ('M * 2') mentions bound fact 'M'"),
    ('"M", 64', 'tma = { box = [64, 64], swizzle = 128, partial = [0] }', ", compile = true, default = 64",
     "facts.requires.M.bound", "fact 'M' is compile-time"),
], ids=["control", "not-partial", "not-tma", "not-bare", "compile-time"])
def test_a_bound_fact_reaches_the_code_only_through_partial_tma_dimensions(tmp_path, shape, tma, req, field, words):
    """A fact declared bound may be smaller at launch than linked: only a TMA dimension that is the fact itself
    and may be partial can take that (the box past the tensor loads zeros, stores nothing); a plain pointer's
    extent, a product, a compile-time value cannot. Refused on load, naming the operand and the dimension."""
    text = component("c", OPERAND.format(shape=shape, tma=tma),
                     requires=f"M = {{ range = [1, 4096], bound = true{req} }}")
    path = tmp_path / "c.toml"
    path.write_text(text)
    if field is None:
        assert load_contract(path).facts.requires["M"].bound
        return
    with pytest.raises(ContractError) as info:
        load_contract(path)
    assert info.value.field == field and words in info.value.message, info.value


def test_a_buffer_sized_by_a_bound_fact_is_refused(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(component("c", '[[smem]]\nname = "rows"\nbytes = "M * 4"\n',
                              requires="M = { range = [1, 4096], bound = true }"))
    with pytest.raises(ContractError) as info:
        load_contract(path)
    assert info.value.field == "smem[0]" and "sized by bound fact 'M'" in info.value.message

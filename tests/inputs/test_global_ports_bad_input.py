"""Bad global ports, refused as every bad input is (issue 10's promise): exit status 2, a typed error
naming the file and the field, no traceback, nothing written. The components are those of
tests/link/test_global_ports.py, their text in tests/contracts.py (`counter` hands its count to `writer`
through its workspace `hits`); each case edits their contracts. A wrong link (dtype, size) is refused by
`pipelink link`, a wrong contract (the out-port's buffer) already by `pipelink pack`."""

from __future__ import annotations

import pytest

import pipelink

from contracts import COUNTER, COUNTER_SOURCE, COUNTER_WRITER_SPEC as SPEC, WRITER, WRITER_SOURCE
from test_new_inputs_bad import cli, refused

PORT = 'dtype = "int32"\nshape = { n = 1 }'
# A second global hand-over: the counter's operand x (N int32) to the writer, sized 2 N.
XS = '[[port]]\nname = "xs"\ndirection = "{}"\nspace = "global"\ndtype = "int32"\nshape = {{ n = "2 * N" }}\n{}\n'
XS_CONNECT = '[[connect]]\nfrom = "c.xs"\nto = "w.xs"\n\n[schedule]'

# case: (counter edits, writer edits, spec edits, words the message must hold besides the spec's path)
LINK_CASES = {
    # bf16 -> fp32 converts in smem, not in place: the writer would read bf16 bits as floats. Either way the
    # error names the package to repack ({tmp}: the test's folder) and says nothing of smem conversions.
    "dtype-read-in-place": ([(PORT, PORT.replace("int32", "bf16"))], [(PORT, PORT.replace("int32", "fp32"))], [],
                            ["connect[0]", "dtype bf16 (counter) differs from fp32 (writer)", "read in place",
                             "no conversion is possible", "consumer's package {tmp}/writer.plc (port.count.dtype = "
                             '"fp32")', "producer's package {tmp}/counter.plc (port.count.dtype = \"bf16\")"]),
    "dtype-not-convertible": ([], [(PORT, PORT.replace("int32", "fp32"))], [],
                              ["connect[0]", "dtype int32 (counter) differs from fp32 (writer)", "read in place",
                               "consumer's package {tmp}/writer.plc", "producer's package {tmp}/counter.plc"]),
    # both sides agree on 2 int32, the workspace holds 1
    "workspace-too-small": ([("{ n = 1 }", "{ n = 2 }")], [("{ n = 1 }", "{ n = 2 }")], [],
                            ["connect[0]", "workspace 'hits' of counter", "holds 4 bytes", "= 8 bytes (4 over)",
                             "size the workspace"]),
    "operand-too-small": ([("[schedule]", XS.format("out", 'buffer = "x"') + "[schedule]")],
                          [("[schedule]", XS.format("in", "") + "[schedule]")], [("[schedule]", XS_CONNECT)],
                          ["connect[1]", "operand 'x' of counter", "holds 262144 bytes", "= 524288 bytes"]),
}


def _edited(text, edits):
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(LINK_CASES))
def test_link_refuses_a_bad_global_hand_over(tmp_path, case):
    counter, writer, spec_edits, words = LINK_CASES[case]
    for name, contract, source, edits in (("counter", COUNTER, COUNTER_SOURCE, counter),
                                          ("writer", WRITER, WRITER_SOURCE, writer)):
        (tmp_path / f"{name}.toml").write_text(_edited(contract, edits))
        (tmp_path / f"{name}.cu").write_text(source)
        pipelink.pack(tmp_path / f"{name}.cu", tmp_path / f"{name}.toml", tmp_path / f"{name}.plc")
    spec, out = tmp_path / "link.toml", tmp_path / "out"
    spec.write_text(_edited(SPEC, spec_edits))
    proc = cli("link", spec, "-o", out)
    refused(proc, str(spec), *(w.format(tmp=tmp_path) for w in words))
    assert "convert" not in proc.stderr  # a global tensor is read in place: no smem conversion applies
    assert not out.exists()


TMA_X = ('access = "read"\n', 'access = "read"\ntma = { box = [128], swizzle = 0 }\n')

# case: (contract, edits, field, words)
PACK_CASES = {
    "out-port-names-a-missing-buffer": ("counter", [('buffer = "hits"', 'buffer = "nothing"')], "port[0].buffer",
                                        ["global out-port 'count' must name one of its [[workspace]]s",
                                         "it has: hits, arrived, ntiles, x"]),
    "out-port-names-no-buffer": ("counter", [('buffer = "hits"\n', "")], "port[0].buffer",
                                 ["global out-port 'count' must name"]),
    # a TMA operand's kernel parameter is a tensor map, not the caller's array
    "out-port-names-a-tma-operand": ("counter", [('buffer = "hits"', 'buffer = "x"'), TMA_X], "port[0].buffer",
                                     ["plain (non-TMA) operands", "it has: hits, arrived, ntiles"]),
    "in-port-names-a-buffer": ("writer", [('space = "global"\n', 'space = "global"\nbuffer = "y"\n')],
                               "port[0].buffer", ["global in-port 'count' names a buffer"]),
    "in-port-has-a-protocol": ("writer", [('space = "global"\n', 'space = "global"\nprotocol = "mbarrier_ring"\n')],
                               "port[0].protocol", ["the components order a global hand-over themselves"]),
}


@pytest.mark.parametrize("case", sorted(PACK_CASES))
def test_pack_refuses_a_bad_global_port(tmp_path, case):
    name, edits, field, words = PACK_CASES[case]
    contract, source, out = tmp_path / f"{name}.toml", tmp_path / f"{name}.cu", tmp_path / "out" / f"{name}.plc"
    text = {"counter": COUNTER, "writer": WRITER}[name]
    contract.write_text(_edited(text, edits))
    source.write_text({"counter": COUNTER_SOURCE, "writer": WRITER_SOURCE}[name])
    refused(cli("pack", source, "--contract", contract, "-o", out), str(contract), field, *words)
    assert not out.exists() and not out.parent.exists()

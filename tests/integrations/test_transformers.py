"""pipelink inside Hugging Face transformers (issue 50): which modules a model's config lets pipelink take and why
the others stay stock (CPU, no torch needed), the routing applied to a model (CPU with torch and transformers: the
q/k/v weights become views of one tensor, prefill and CPU calls fall back, generate() gives the stock tokens), and
on the GPU a Llama with the decode block's shape against the stock model, step by step."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pipelink.integrations.transformers import plan_routes

from conftest import gpu_ok

LLAMA_1B = dict(model_type="llama", hidden_size=2048, num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                attention_bias=False, num_hidden_layers=3)


def test_a_llama_of_the_decode_blocks_shape_has_every_attention_taken():
    routes = plan_routes(SimpleNamespace(**LLAMA_1B), "bfloat16")
    assert [r.module for r in routes if r.taken] == [f"model.layers.{i}.self_attn" for i in range(3)]
    stock = [r for r in routes if not r.taken]
    assert [r.module for r in stock] == [f"model.layers.{i}.mlp" for i in range(3)]
    assert all("interleaved every 8 rows" in r.why for r in stock)


@pytest.mark.parametrize("change, words", [
    ({"hidden_size": 4096}, "hidden_size = 4096 (the decode block takes 2048)"),
    ({"num_key_value_heads": 4}, "num_key_value_heads = 4 (the decode block takes 8)"),
    ({"head_dim": None, "hidden_size": 2048, "num_attention_heads": 16}, "head_dim = 128"),
    ({"attention_bias": True}, "attention_bias = True"),
    ({"pretraining_tp": 2}, "pretraining_tp = 2"),
    ({"dtype": "float16"}, "parameters in float16 (the decode block takes bfloat16)"),
], ids=["hidden", "kv-heads", "head-dim-from-heads", "bias", "tp", "dtype"])
def test_each_mismatch_keeps_the_attention_stock_and_says_why(change, words):
    config = {**LLAMA_1B, **{k: v for k, v in change.items() if k != "dtype"}}
    routes = plan_routes(SimpleNamespace(**config), change.get("dtype", "bfloat16"))
    attention = [r for r in routes if r.module.endswith("self_attn")]
    assert attention and not any(r.taken for r in attention)
    assert all(words in r.why for r in attention), attention[0].why


def test_another_model_type_is_left_whole():
    (only,) = plan_routes(SimpleNamespace(model_type="gpt2"), "bfloat16")
    assert not only.taken and "'gpt2'" in only.why


def _llama(layers=2, vocab=512, seed=0):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=2048, intermediate_size=8192, num_hidden_layers=layers, num_attention_heads=32,
        num_key_value_heads=8, head_dim=64, max_position_embeddings=8192, rms_norm_eps=1e-5,
        rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 8192}, rope_theta=500000.0)
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(config).to(torch.bfloat16).eval()


def test_routing_keeps_the_models_weights_and_its_tokens_on_the_cpu():
    import warnings
    from pipelink.integrations.transformers import RoutingWarning, route
    model = _llama()
    import torch
    ids = torch.randint(0, 512, (2, 8), generator=torch.Generator().manual_seed(1))
    stock = model.generate(ids, max_new_tokens=3, do_sample=False, cache_implementation="static")
    before = {name: t.clone() for name, t in model.state_dict().items()}
    with pytest.warns(RoutingWarning, match="interleaved every 8 rows"):
        routing = route(model)
    assert routing.taken() == ["model.layers.0.self_attn", "model.layers.1.self_attn"]
    attn = model.model.layers[0].self_attn
    fused = attn._pipelink_wqkv
    step = 2048 * fused.element_size()
    assert [p.weight.data_ptr() - fused.data_ptr() for p in (attn.q_proj, attn.k_proj, attn.v_proj)] == [
        0, 2048 * step, 2560 * step]  # views of the kernel's wqkv: the same parameters, no copy
    after = model.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RoutingWarning)
        routed = model.generate(ids, max_new_tokens=3, do_sample=False, cache_implementation="static")
    assert torch.equal(routed, stock)
    assert any("prefill" in why for why in routing.declined)
    assert any("on cpu" in why for why in routing.declined)  # the block runs on the GPU: here every step is stock


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ok(), reason="needs an sm_90 (Hopper) GPU")
@pytest.mark.parametrize("batch,context,compiled", [(1, 16, False), (8, 300, True), (64, 40, False)])
def test_greedy_decoding_matches_the_stock_model(tmp_path, batch, context, compiled):
    """The same random-weight model, stock and routed, greedy from the same prompt (eager, or as generate() compiles
    a static cache's steps by itself): every sequence's tokens agree at 15 of 16 steps at least (a random model has
    near ties), and until the first step where any differs the last layer's hidden state is within bf16 rounding
    of the stock one (rel L2 < 1e-2)."""
    import torch
    from pipelink.integrations.transformers import route
    new = 16
    rows = -(-(context + new) // 64) * 64
    ids = torch.randint(0, 512, (batch, context), generator=torch.Generator().manual_seed(2)).cuda()
    outs = {}
    for label in ("stock", "pipelink"):
        model = _llama().cuda()
        if label == "pipelink":
            routing = route(model, work_dir=tmp_path)
        outs[label] = model.generate(ids, max_new_tokens=new, do_sample=False, cache_implementation="static",
                                     max_cache_len=rows, output_hidden_states=True, return_dict_in_generate=True,
                                     disable_compile=not compiled)
    assert not any("cpu" in why or "static" in why for why in routing.declined), routing.declined
    got, want = (outs[k].sequences[:, context:] for k in ("pipelink", "stock"))
    agree = (got == want).sum(dim=1)
    assert agree.min().item() >= new - 1, agree.tolist()
    differ = (got != want).any(dim=0).nonzero()
    first = differ[0].item() if len(differ) else new
    for step in range(1, first):  # step 0 is the prefill (stock in both); step s feeds token s - 1
        a, b = (outs[k].hidden_states[step][-1].float() for k in ("stock", "pipelink"))
        rel = (torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(a)).item()
        assert rel < 1e-2, (step, rel)

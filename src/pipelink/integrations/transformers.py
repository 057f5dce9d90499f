"""Hugging Face transformers models on pipelink kernels (the optional extra ``pipelink[transformers]``).

    from pipelink.integrations.transformers import route
    routing = route(model)            # after from_pretrained / from_config; prints nothing, warns per fallback
    print(routing)                    # which modules run on pipelink, which stay stock, and why
    model.generate(ids, cache_implementation="static", max_new_tokens=64)
    unroute(model)                    # the stock forwards again

What is taken:
- **Llama decoder layers** whose attention is the decode block's shape (hidden 2048, 32 query and 8 KV heads of 64,
  no bias, bf16, RoPE without an attention scaling): at a decode step (one new token per sequence, a static cache,
  no padding) the layer's attention half (qkv projection, RoPE, the cache append, attention, o-projection and the
  residual add) is one linked kernel: components/llama with the step's position given at launch ([link]
  launch_facts), read from the cache's own position tensor, so one kernel per batch and cache size serves every
  step, eagerly, under torch.compile and in CUDA graphs. Prefill and any step the kernel cannot take run the stock
  layer; each reason is warned once (RoutingWarning). The q/k/v projections' weights become views of one
  [3072, 2048] tensor, the kernel's wqkv: they stay the model's own parameters (state_dict, optimizers, loading),
  nothing is copied.
- **Llama MLPs** of Llama-3.2-1B's shape (hidden 2048, intermediate 8192, SiLU, no bias, bf16), at calls of at
  most 64 rows (decode steps): gate/up projection + SwiGLU as one kernel that reads the gate and up weights where
  the model keeps them (the mainloop gathers each tile's rows from the two; examples/llama_mlp), then the down
  projection with stream-K over every SM. Both are any-M operators (pipelink.op). gate_proj and up_proj become
  views of one [16384, 2048] tensor, as q/k/v above. Prefill-sized calls run stock (cuBLAS).
- **Qwen3-MoE sparse MoE blocks** whose shape the MoE layer's contracts take (Qwen3-30B-A3B: hidden 2048, 128
  experts of 768, top-8; norm_topk_prob on, bf16): the whole block (router, grouping by expert, the gate/up +
  SwiGLU and down GEMMs, the weighted combine) is one linked kernel per token count (components/moe), reading
  gate_up_proj and down_proj as they are (the mainloop gathers gate and up per tile: b_halves).
- Everything else stays stock, and ``route`` says why for each module (``Routing.routes``). The kernels have no
  backward pass: while autograd records (a weight or the input requires grad), every call runs stock.

The components and the decode block's spec are read from a source checkout of pipelink (components/, examples/).
"""

from __future__ import annotations

import importlib.util
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PipelinkError

ROOT = Path(__file__).resolve().parents[3]
HIDDEN, HEADS, KV_HEADS, HEAD_DIM = 2048, 32, 8, 64
SHORT_ROWS = 256  # caches of at most this many rows use attn_short (one pass); longer ones attn_long_wt (split KV)
BATCHES = range(1, 65)  # the decode block's B
INTERMEDIATE = 8192
MLP_ROWS = 64  # the MLP kernels' 64-row tiles: one tile row serves a decode batch; more rows run stock


class RoutingWarning(UserWarning):
    """A module, or one call of it, runs the stock transformers code instead of a pipelink kernel."""


@dataclass(frozen=True)
class Route:
    """One module of the model: what would serve it on pipelink, whether it does, and why (not)."""
    module: str     # its name in the model: "model.layers.3.self_attn"
    target: str     # the pipelink kernel that serves (or would serve) it
    taken: bool
    why: str


@dataclass
class Routing:
    routes: list[Route]
    declined: dict[str, int] = field(default_factory=dict)  # calls that ran stock, by reason

    def taken(self) -> list[str]:
        return [r.module for r in self.routes if r.taken]

    def __str__(self) -> str:
        lines = [f"{'pipelink' if r.taken else 'stock   '}  {r.module}: {r.target} ({r.why})" for r in self.routes]
        lines += [f"ran stock {n}x: {why}" for why, n in self.declined.items()]
        return "\n".join(lines)


def plan_routes(config, dtype: str) -> list[Route]:
    """Which modules of a model with ``config`` (a transformers config, or anything with its attributes) and
    parameters of ``dtype`` ("bfloat16") pipelink takes, and why each other one stays stock. Reads no weights."""
    kind = getattr(config, "model_type", None)
    if kind == "llama":
        return _llama_routes(config, dtype)
    if kind == "qwen3_moe":
        return _qwen3_moe_routes(config, dtype)
    return [Route("model", "-", False, f"model type {kind!r}: pipelink routes Llama and Qwen3-MoE decoder layers")]


# What the MoE layer's contracts take (components/moe: tests/integrations check these against them)
MOE_RANGES = {"hidden_size": (256, 65536, 256), "moe_intermediate_size": (128, 65536, 128),
              "num_experts": (2, 128, 1), "num_experts_per_tok": (1, 8, 1)}
MOE_TOKENS = 1048576


def _qwen3_moe_routes(config, dtype: str) -> list[Route]:
    off = []
    for name, (low, high, step) in MOE_RANGES.items():
        value = getattr(config, name, None)
        if not isinstance(value, int) or not low <= value <= high or value % step:
            off.append(f"{name} = {value!r} (the MoE layer takes {low} .. {high}" +
                       (f", a multiple of {step})" if step > 1 else ")"))
    if getattr(config, "norm_topk_prob", None) is not True:
        off.append(f"norm_topk_prob = {getattr(config, 'norm_topk_prob', None)!r} (the MoE layer's weights are the "
                   "softmax over the top k: True)")
    if dtype != "bfloat16":
        off.append(f"parameters in {dtype} (the MoE layer takes bfloat16)")
    why = "; ".join(off) or "one kernel per token count: router, grouping, gate/up + SwiGLU, down and combine"
    sparse = _qwen3_moe_sparse_layers(config)
    routes = []
    for i in range(int(getattr(config, "num_hidden_layers", 0))):
        routes.append(Route(f"model.layers.{i}.self_attn", "-", False, "Qwen3-MoE attention: no pipelink kernel"))
        if i in sparse:
            routes.append(Route(f"model.layers.{i}.mlp", "MoE layer", not off, why))
        else:
            routes.append(Route(f"model.layers.{i}.mlp", "-", False, "a dense MLP layer of a Qwen3-MoE: not routed"))
    return routes


def _qwen3_moe_sparse_layers(config) -> set[int]:
    """The layers Qwen3MoeDecoderLayer gives a sparse MoE block (its own rule)."""
    step = getattr(config, "decoder_sparse_step", 1)
    dense = set(getattr(config, "mlp_only_layers", None) or ())
    experts = getattr(config, "num_experts", 0) or 0
    return {i for i in range(int(getattr(config, "num_hidden_layers", 0)))
            if i not in dense and experts > 0 and step and (i + 1) % step == 0}


def _llama_routes(config, dtype: str) -> list[Route]:
    heads = getattr(config, "num_attention_heads", None)
    hidden = getattr(config, "hidden_size", None)
    wanted = {"hidden_size": HIDDEN, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
              "head_dim": HEAD_DIM, "attention_bias": False, "pretraining_tp": 1}
    got = {name: getattr(config, name, None) for name in wanted}
    if got["head_dim"] is None and hidden and heads:
        got["head_dim"] = hidden // heads  # what LlamaAttention uses when the config has none
    if got["pretraining_tp"] is None:
        got["pretraining_tp"] = 1
    off = [f"{name} = {got[name]!r} (the decode block takes {want!r})" for name, want in wanted.items()
           if got[name] != want]
    if dtype != "bfloat16":
        off.append(f"parameters in {dtype} (the decode block takes bfloat16)")
    why = "; ".join(off) or "decode steps: one kernel per batch and cache size, the position given at launch"
    mlp_wanted = {"hidden_size": HIDDEN, "intermediate_size": INTERMEDIATE, "hidden_act": "silu", "mlp_bias": False,
                  "pretraining_tp": 1}
    mlp_got = {name: got.get(name, getattr(config, name, None)) for name in mlp_wanted}
    if mlp_got["mlp_bias"] is None:
        mlp_got["mlp_bias"] = False  # LlamaConfig's default
    mlp_off = [f"{name} = {mlp_got[name]!r} (the MLP kernels take {want!r})" for name, want in mlp_wanted.items()
               if mlp_got[name] != want]
    if dtype != "bfloat16":
        mlp_off.append(f"parameters in {dtype} (the MLP kernels take bfloat16)")
    mlp_why = "; ".join(mlp_off) or (f"calls of at most {MLP_ROWS} rows (decode): gate/up + SwiGLU on the gate and "
                                     "up weights as they are, then down with stream-K; more rows run stock")
    routes = []
    for i in range(int(getattr(config, "num_hidden_layers", 0))):
        routes.append(Route(f"model.layers.{i}.self_attn", "llama decode block", not off, why))
        routes.append(Route(f"model.layers.{i}.mlp", "llama MLP (gate/up + SwiGLU, down)", not mlp_off, mlp_why))
    return routes


def route(model, work_dir: str | Path | None = None) -> Routing:
    """Route ``model``'s modules to pipelink kernels where they fit (``plan_routes``), in place; returns what was
    taken and why the rest was not. Kernels are packed and linked on first use, in ``work_dir`` (default: a
    folder under the pipelink cache)."""
    import torch
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    routes = plan_routes(model.config, dtype)
    rotary = getattr(getattr(model, "model", None), "rotary_emb", None)
    scaling = getattr(rotary, "attention_scaling", None)
    if scaling not in (None, 1.0):
        routes = [r if r.target != "llama decode block" or not r.taken else
                  Route(r.module, r.target, False, f"RoPE with attention scaling {scaling} (the block takes 1.0)")
                  for r in routes]
    routing = Routing(routes)
    work = Path(work_dir) if work_dir else _default_work_dir()
    # the kernels linked so far serve a model routed again (unroute, route) in the same work folder
    blocks = _BLOCKS if _BLOCKS is not None and _BLOCKS.work == work else DecodeBlocks(work)
    moes = _MOE if _MOE is not None and _MOE.work == work / "moe" else MoeLayers(work / "moe")
    mlps = MlpKernels()
    layers = model.model.layers
    for r in routes:
        layer = layers[int(r.module.split(".")[2])] if r.taken else None
        if r.taken and r.target == "llama decode block":
            _fuse_qkv(layer.self_attn, torch)
            _install(layer, _DecodeRoute(layer, rotary, blocks, routing))
        elif r.taken and r.target == "MoE layer":
            _install(layer.mlp, _MoeRoute(layer.mlp, model.config, moes, routing))
        elif r.taken:
            _fuse_gate_up(layer.mlp, torch)
            _install(layer.mlp, _MlpRoute(layer.mlp, mlps, routing))
    for why in dict.fromkeys(r.why for r in routes if not r.taken):
        warnings.warn(f"stock transformers for {sum(r.why == why for r in routes)} module(s): {why}", RoutingWarning,
                      stacklevel=2)
    return routing


def unroute(model) -> int:
    """Every routed module of ``model`` back on its stock forward (the fused weights stay: the same values, and
    still the model's parameters); returns how many. ``route`` takes them again."""
    undone = 0
    for module in model.modules():
        earlier = module.__dict__.pop("_pipelink_route", None)
        if earlier is not None:
            module.forward = earlier.stock
            if getattr(earlier.stock, "__self__", None) is module and \
                    earlier.stock.__func__ is getattr(type(module), "forward", None):
                del module.forward  # the class's own forward, as before route()
            undone += 1
    return undone


def _default_work_dir() -> Path:
    from ..backend.cache import default_root
    return default_root() / "transformers"


def _fuse_qkv(attn, torch) -> None:
    """q, k and v projection weights as views of one [q; k; v] tensor (the decode block's wqkv): the same
    parameters to the model, one operand to the kernel."""
    projections = (attn.q_proj, attn.k_proj, attn.v_proj)
    fused = getattr(attn, "_pipelink_wqkv", None)
    if fused is not None and [p.weight.data_ptr() for p in projections] == [
            fused.data_ptr() + rows * HIDDEN * fused.element_size() for rows in (0, HIDDEN, HIDDEN + 512)]:
        return  # routed before, and still views of it
    fused = torch.cat([p.weight.detach() for p in projections])
    start = 0
    for p in projections:
        rows = p.weight.shape[0]
        p.weight = torch.nn.Parameter(fused[start:start + rows], requires_grad=p.weight.requires_grad)
        start += rows
    attn._pipelink_wqkv = fused  # the kernel's operand (route after moving the model: .to() would part them)


def _fuse_gate_up(mlp, torch) -> None:
    """gate and up projection weights as views of one [gate; up] tensor (the gate/up kernel's B, which it reads in
    two halves): the same parameters to the model, one operand to the kernel."""
    projections = (mlp.gate_proj, mlp.up_proj)
    fused = getattr(mlp, "_pipelink_wgu", None)
    if fused is not None and [p.weight.data_ptr() for p in projections] == [
            fused.data_ptr() + rows * HIDDEN * fused.element_size() for rows in (0, INTERMEDIATE)]:
        return  # routed before, and still views of it
    fused = torch.cat([p.weight.detach() for p in projections])
    for i, p in enumerate(projections):
        p.weight = torch.nn.Parameter(fused[i * INTERMEDIATE:(i + 1) * INTERMEDIATE],
                                      requires_grad=p.weight.requires_grad)
    mlp._pipelink_wgu = fused


def _install(module, route) -> None:
    """The module's forward becomes the route's (which calls the stock one where it declines); routed again, the
    new route replaces the old one."""
    earlier = getattr(module, "_pipelink_route", None)
    route.stock = earlier.stock if earlier is not None else module.forward
    module.forward = route
    module._pipelink_route = route


class _DecodeRoute:
    """A Llama decoder layer's forward: the attention half on the decode block at a decode step, else stock."""

    def __init__(self, layer, rotary, blocks: DecodeBlocks, routing: Routing):
        self.layer, self.rotary, self.blocks, self.routing = layer, rotary, blocks, routing
        self.stock = None

    def __call__(self, hidden_states, *args, **kwargs):
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        why, at = self._decline(hidden_states, cache, kwargs)
        if not why and _recording(hidden_states, self.layer.self_attn.o_proj.weight):
            why = RECORDING
        if why:
            self.routing.declined[why] = self.routing.declined.get(why, 0) + 1
            return self.stock(hidden_states, *args, **kwargs)
        import torch
        layer, attn = self.layer, self.layer.self_attn
        b = hidden_states.shape[0]
        keys, values, position = at
        h = hidden_states.reshape(b, HIDDEN)
        x = layer.input_layernorm(hidden_states).reshape(b, HIDDEN)
        # inv_freq in fp32, as the kernel reads it: a model moved to bf16 holds it in bf16, and transformers' own RoPE
        # widens those values to fp32 too
        y = torch.ops.pipelink.llama_decode_layer(position.reshape(1), h, x, attn._pipelink_wqkv,
                                                  self.rotary.inv_freq.float(), keys, values, attn.o_proj.weight)
        if hasattr(cache.layers[attn.layer_idx], "cumulative_length"):
            cache.layers[attn.layer_idx].cumulative_length.add_(1)
        y = y.reshape(b, 1, HIDDEN)
        return y + layer.mlp(layer.post_attention_layernorm(y))

    def _decline(self, hidden_states, cache, kwargs):
        """Why this call runs the stock layer (None if it does not), and the cache's keys, values and position."""
        b, q = hidden_states.shape[0], hidden_states.shape[1]
        if q != 1:
            if cache is not None:
                self._note_padding(cache, kwargs.get("attention_mask"), q)
            return f"{q} tokens per sequence (prefill): the decode block takes one", None
        if hidden_states.device.type != "cuda" or hidden_states.dtype != self.layer.self_attn.o_proj.weight.dtype:
            return f"activations in {hidden_states.dtype} on {hidden_states.device.type} (the block runs on the GPU)", None
        if b not in BATCHES:
            return f"batch {b}: the decode block takes 1 .. 64", None
        layers = getattr(cache, "layers", None)
        idx = self.layer.self_attn.layer_idx
        layer = layers[idx] if layers is not None and idx < len(layers) else None
        keys = getattr(layer, "keys", None)
        if type(layer).__name__ != "StaticLayer" or keys is None:
            return "no static cache (generate(..., cache_implementation='static'))", None
        # read from the cache object itself (its prefill marked it): a set of cache ids here made torch.compile guard
        # on each cache's identity, and recompile every frame for every generate() call (each makes a new cache)
        if getattr(cache, PADDED, False):
            return "a padded batch (the block reads one position for every sequence)", None
        position = getattr(layer, "cumulative_length", None)
        if position is None:
            position = kwargs.get("cache_position")
        if position is None or position.numel() != 1 or str(position.dtype) != "torch.int64":
            return "no int64 position tensor in the cache (the block reads one int64)", None
        rows = keys.shape[2]
        if rows > SHORT_ROWS and rows % 64:
            return f"a cache of {rows} rows: past {SHORT_ROWS} the block takes whole 64-row tiles (set max_cache_len)", None
        return None, (keys, layer.values, position)

    def _note_padding(self, cache, mask, q: int) -> None:
        """At prefill (eager): whether any prompt position is masked off for the last query (left padding), marked
        on the cache (a cache prefilled again is marked again)."""
        padded = False
        if mask is not None and hasattr(mask, "dtype"):
            import torch
            last = mask[..., -1, :q]
            allowed = last if last.dtype == torch.bool else last == 0
            padded = not bool(allowed.all())
        setattr(cache, PADDED, padded)


RECORDING = "autograd is recording (the kernels have no backward pass)"
PADDED = "_pipelink_padded"  # set on a cache whose prefill was left-padded


def _compiling() -> bool:
    import torch
    return torch.compiler.is_compiling()


def _recording(x, weight) -> bool:
    import torch
    return torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)


class _MoeRoute:
    """A Qwen3-MoE sparse block's forward: the linked MoE layer (one kernel per token count), else stock."""

    def __init__(self, block, config, layers: MoeLayers, routing: Routing):
        self.block, self.layers, self.routing = block, layers, routing
        self.topk = int(config.num_experts_per_tok)
        self.stock = None

    def __call__(self, hidden_states):
        experts = self.block.experts
        w1, w2, wr = experts.gate_up_proj, experts.down_proj, self.block.gate.weight
        tokens = hidden_states.numel() // hidden_states.shape[-1]
        if hidden_states.device.type != "cuda" or hidden_states.dtype != w1.dtype:
            why = f"activations in {hidden_states.dtype} on {hidden_states.device.type} (the MoE layer runs on the GPU)"
        elif not 1 <= tokens <= MOE_TOKENS:
            why = f"{tokens} tokens (the MoE layer takes 1 .. {MOE_TOKENS})"
        elif _recording(hidden_states, w1):
            why = RECORDING
        elif not all(t.is_contiguous() for t in (w1, w2, wr)):
            why = "expert weights that are not contiguous"
        else:
            import torch
            h = hidden_states.shape[-1]
            x = hidden_states.reshape(tokens, h).contiguous()
            y = torch.ops.pipelink.moe_layer(x, wr.detach(), w1.detach().reshape(-1, h),
                                             w2.detach().reshape(-1, w2.shape[-1]), self.topk)
            return y.reshape(hidden_states.shape)
        self.routing.declined[why] = self.routing.declined.get(why, 0) + 1
        return self.stock(hidden_states)


def moe_agreement(block, x, out, topk: int) -> dict:
    """A routed Qwen3-MoE block's output ``out`` on input ``x`` against transformers' own experts given the kernel's
    routing (the top k of fp32 logits, ties to the lower expert, weights the softmax over those k): ``rel_l2``. The
    stock block routes on bf16 logits, which near a tie between the k-th and the next expert pick another set for a
    few tokens; ``tokens_routed_differently`` counts them and ``largest_gap_flipped`` is the widest fp32 logit gap
    between the two experts swapped (a bf16 rounding explains a gap of a few 1e-3)."""
    import torch
    h = x.shape[-1]
    flat, wr = x.reshape(-1, h), block.gate.weight
    logits = flat.float() @ wr.float().t()
    ids = torch.sort(logits, dim=-1, descending=True, stable=True).indices[:, :topk]
    weights = torch.softmax(torch.gather(logits, 1, ids), dim=-1)
    want = block.experts(flat, ids, weights.to(flat.dtype)).float()
    got = out.reshape(-1, h).float()
    _, _, stock_ids = block.gate(flat)
    ours, theirs = ids.sort(dim=-1).values, stock_ids.sort(dim=-1).values
    flipped = (ours != theirs).any(dim=-1)
    gaps = (torch.gather(logits, 1, ids).min(dim=-1).values -
            torch.gather(logits, 1, stock_ids).min(dim=-1).values).abs()
    return {"rel_l2": (torch.linalg.vector_norm(got - want) / torch.linalg.vector_norm(want)).item(),
            "tokens": flat.shape[0], "tokens_routed_differently": int(flipped.sum()),
            "largest_gap_flipped": float(gaps[flipped].max()) if flipped.any() else 0.0}


class MoeLayers:
    """components/moe with W1 read as [gate; up] halves per expert, packed once into ``work`` and linked per (shape,
    token count) on first use, behind torch.ops.pipelink.moe_layer(x, wr, w1, w2, topk) -> y."""

    def __init__(self, work: Path):
        self.work = work
        self.runtimes: dict[tuple[int, ...], object] = {}
        self._packages: Path | None = None
        global _MOE
        _MOE = self
        _register_moe_op()

    def runtime(self, hidden: int, inter: int, experts: int, topk: int, tokens: int):
        key = (hidden, inter, experts, topk, tokens)
        if key not in self.runtimes:
            import pipelink
            from ..runtime import Runtime
            shapes = _example("moe")
            if self._packages is None:
                self._packages = shapes.pack(self.work)
            band = 8 if 2 * inter * hidden * 2 > shapes.L2_BYTES else 0  # shapes.default_band's rule
            spec = shapes.write_spec(self.work / "_".join(map(str, key)), self._packages,
                                     (hidden, inter, experts, topk), tokens, facts={**shapes.HALVES, "band": band})
            kernel = pipelink.link(spec)
            self.runtimes[key] = Runtime(kernel.cubin, kernel.manifest)
        return self.runtimes[key]


_MOE: MoeLayers | None = None


def _register_moe_op() -> None:
    """torch.ops.pipelink.moe_layer(x [T, H], wr [E, H], w1 [E 2I, H], w2 [E H, I], topk) -> y [T, H]."""
    import torch
    if getattr(_register_moe_op, "done", False):
        return

    def launch(x, wr, w1, w2, topk):
        tokens, hidden = x.shape
        experts, inter = wr.shape[0], w2.shape[1]
        y = torch.empty_like(x)
        runtime = _MOE.runtime(hidden, inter, experts, topk, tokens)
        given = {"router.x": x, "router.wr": wr, "gemm.w1": w1, "gemm.w2": w2, "combine.y": y}
        runtime.launch_arrays([given[p.name] for p in runtime.params])
        return y

    op = torch.library.custom_op("pipelink::moe_layer", launch, mutates_args=(), device_types="cuda",
                                 schema="(Tensor x, Tensor wr, Tensor w1, Tensor w2, int topk) -> Tensor")
    op.register_fake(lambda x, *rest: torch.empty_like(x))
    _register_moe_op.done = True


class _MlpRoute:
    """A Llama MLP's forward: the gate/up + SwiGLU and down kernels for calls of at most MLP_ROWS rows, else stock."""

    def __init__(self, mlp, kernels: MlpKernels, routing: Routing):
        self.mlp, self.kernels, self.routing = mlp, kernels, routing
        self.stock = None
        self.gate = mlp.gate_proj.weight  # the view of the fused weight (route() made it just before)

    def __call__(self, x):
        rows = x.numel() // HIDDEN if x.shape[-1] == HIDDEN else 0
        wgu = self.mlp._pipelink_wgu
        if x.device.type != "cuda" or x.dtype != wgu.dtype:
            why = f"activations in {x.dtype} on {x.device.type} (the MLP kernels run on the GPU)"
        elif not 0 < rows <= MLP_ROWS:
            why = f"MLP calls of more than {MLP_ROWS} rows (prefill): the MLP kernels are linked for decode batches"
        elif self.mlp.gate_proj.weight is not self.gate or (
                not _compiling() and self.gate.data_ptr() != wgu.data_ptr()):
            # Eagerly the view's address is checked too (its data replaced in place); under torch.compile only the
            # parameter's identity, which dynamo guards: data_ptr() breaks its graph.
            why = "gate_proj.weight is no longer a view of the fused weight (it was replaced after route())"
        elif _recording(x, self.mlp.gate_proj.weight):
            why = RECORDING
        else:
            gate_up, down = self.kernels.ops()
            act = gate_up(x.reshape(rows, HIDDEN).contiguous(), wgu)
            return down(act, self.mlp.down_proj.weight.detach()).reshape(x.shape)
        self.routing.declined[why] = self.routing.declined.get(why, 0) + 1
        return self.stock(x)


class MlpKernels:
    """examples/llama_mlp's two kernels as any-M operators (pipelink.op, linked on first use):
    torch.ops.pipelink.llama_gate_up_any(x, wgu) and torch.ops.pipelink.llama_down_any(act, wd)."""

    def __init__(self):
        self._ops = None

    def ops(self):
        if self._ops is None:
            import pipelink
            folder = ROOT / "examples" / "llama_mlp"
            if not (folder / "gate_up.toml").is_file():
                raise PipelinkError(f"the Llama MLP's specs are not here ({folder})",
                                    hint="route from a source checkout of pipelink (pip install -e .)")
            self._ops = (pipelink.op(folder / "gate_up.toml", vary=("M",)), pipelink.op(folder / "down.toml",
                                                                                        vary=("M",)))
        return self._ops


class DecodeBlocks:
    """The decode block, packed once into ``work`` and linked per (batch, cache rows) on first use (the position at
    launch: one kernel serves every step), behind the operator torch.ops.pipelink.llama_decode_layer."""

    def __init__(self, work: Path):
        self.work = work
        self.runtimes: dict[tuple[int, int], object] = {}
        self._packages: Path | None = None
        global _BLOCKS
        _BLOCKS = self
        _register_op()

    def runtime(self, batch: int, rows: int):
        key = (batch, rows)
        if key not in self.runtimes:
            import pipelink
            from ..runtime import Runtime
            shapes = _llama_shapes()
            if self._packages is None:
                self._packages = shapes.pack(self.work)
            attention = "short" if rows <= SHORT_ROWS else "long_wt"
            spec = shapes.write_spec(self.work / f"b{batch}_r{rows}", self._packages, batch, rows - 1, attention,
                                     launch=True, rows=rows, residual=True)
            kernel = pipelink.link(spec)
            self.runtimes[key] = Runtime(kernel.cubin, kernel.manifest)
        return self.runtimes[key]


_BLOCKS: DecodeBlocks | None = None
OPERANDS = ("glue.fact_L", "res.h", "qkv.x", "qkv.wqkv", "qkv.inv_freq", "qkv.k_cache", "qkv.v_cache", "oproj.wo")


def _register_op() -> None:
    """torch.ops.pipelink.llama_decode_layer(position, h, x, wqkv, inv_freq, k_cache, v_cache, wo) -> y: the cache
    rows at ``position`` written in place, y = h + attention(x) Wo^T. Registered once per process."""
    import torch
    if getattr(_register_op, "done", False):
        return
    schema = ("(Tensor position, Tensor h, Tensor x, Tensor wqkv, Tensor inv_freq, Tensor(a!) k_cache, "
              "Tensor(b!) v_cache, Tensor wo) -> Tensor")

    def launch(position, h, x, wqkv, inv_freq, k_cache, v_cache, wo):
        y = torch.empty_like(h)
        runtime = _BLOCKS.runtime(h.shape[0], k_cache.shape[2])
        given = dict(zip(OPERANDS, (position, h, x, wqkv, inv_freq, k_cache, v_cache, wo)), **{"oproj.y": y})
        runtime.launch_arrays([given[p.name] for p in runtime.params])
        return y

    op = torch.library.custom_op("pipelink::llama_decode_layer", launch, mutates_args=("k_cache", "v_cache"),
                                 device_types="cuda", schema=schema)
    op.register_fake(lambda position, h, *rest: torch.empty_like(h))
    _register_op.done = True


def _llama_shapes():
    """examples/llama_decode/shapes.py of the source checkout: the decode block's spec and its chosen facts."""
    return _example("llama_decode")


def _example(name: str):
    """examples/<name>/shapes.py of the source checkout (specs and packing of a case study's components)."""
    path = ROOT / "examples" / name / "shapes.py"
    if not path.is_file() or not (ROOT / "components").is_dir():
        raise PipelinkError(f"the components of examples/{name} are not here ({path.parent})",
                            hint="route from a source checkout of pipelink (pip install -e .): the integration "
                                 f"links components/ with examples/{name}'s specs")
    spec = importlib.util.spec_from_file_location(f"pipelink_{name}_shapes", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

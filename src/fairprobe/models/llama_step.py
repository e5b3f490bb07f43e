"""The decode step of a transformers Llama model, run directly on packed weights without its modules' Python.

transformers runs a decode step through nested modules (keyword plumbing, decorators, the attention interface,
the causal-mask builder, output records) for every layer: for SmolLM2 (30 layers) about a fifth of a 13-row
step on two threads went to Python between the products, and SDPA's CPU kernel took 120-230 us for a decode
step's tiny attention that three batched products do in 45. `LlamaStep` computes the layer as transformers'
Llama classes do (their rotary module, RMSNorm as one `rms_norm` call with their weights, bitwise theirs) on
oneDNN-packed weights, with q, k and v in one product and gate and up in another (oneDNN sums every output over
the same blocks of the input whatever the number of outputs, so a fused product's columns are bitwise the
separate products'), each residual added in its product's kernel (bitwise the separate sum), queries and keys
rotated in one pass, and attention as softmax(q k^T * scale + mask) v over each key head's group of queries
(the keys read where the cache holds them: position-last in a pool that holds them so, `reserved.position_last`). The softmax is summed in another order than SDPA's, so the logits are the model's own forward's
within float32 roundings (4.6e-5 at most over 13 paper prompts and 5 steps), and greedy decoding keeps
`transformers.generate`'s continuations on every prompt the tests and benchmarks ask (tests/test_engine.py).

Only a model whose modules are exactly transformers' Llama classes takes this step (SmolLM2, Llama and the many
models that reuse the Llama architecture); any other (an adapter, another architecture) runs its own forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from transformers import Cache
from transformers.models.llama import modeling_llama as llama

from fairprobe.models.engine import PackedLinears, ScreenedHead, Shortlist, packed_product

LAYER_PARTS = {
    "self_attn": llama.LlamaAttention,
    "mlp": llama.LlamaMLP,
    "input_layernorm": llama.LlamaRMSNorm,
    "post_attention_layernorm": llama.LlamaRMSNorm,
}
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_PROJECTIONS = ("gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class PackedLayer:
    """One decoder layer's modules and packed products: (weight, bias) of q+k+v, o, gate+up and down."""

    layer: llama.LlamaDecoderLayer
    qkv: tuple[torch.Tensor, torch.Tensor | None]
    o: tuple[torch.Tensor, torch.Tensor | None]
    gate_up: tuple[torch.Tensor, torch.Tensor | None]
    down: tuple[torch.Tensor, torch.Tensor | None]


def fits(model: Any) -> bool:
    """Whether `model` is exactly transformers' Llama (every layer of its classes, SDPA attention, SiLU, plain
    Linear projections), so that LlamaStep computes what its forward computes."""
    if type(model) is not llama.LlamaForCausalLM or model.config._attn_implementation != "sdpa":
        return False
    if model.config.hidden_act != "silu" or type(model.model.norm) is not llama.LlamaRMSNorm:
        return False
    for layer in model.model.layers:
        if type(layer) is not llama.LlamaDecoderLayer:
            return False
        if any(type(getattr(layer, name)) is not kind for name, kind in LAYER_PARTS.items()):
            return False
        linears = [getattr(layer.self_attn, p) for p in PROJECTIONS] + [getattr(layer.mlp, p) for p in MLP_PROJECTIONS]
        if any(type(linear) is not torch.nn.Linear for linear in linears):
            return False
    return True


def layer_products(layer: llama.LlamaDecoderLayer) -> list[list[torch.nn.Linear]]:
    """A layer's Linears as the products of its step: q+k+v, o, gate+up and down."""
    attention, mlp = layer.self_attn, layer.mlp
    return [
        [attention.q_proj, attention.k_proj, attention.v_proj],
        [attention.o_proj],
        [mlp.gate_proj, mlp.up_proj],
        [mlp.down_proj],
    ]


def products(model: llama.LlamaForCausalLM) -> list[list[torch.nn.Linear]]:
    """Every layer's products (`layer_products`): the Linears whose packed copies the decode step reads."""
    return [group for layer in model.model.layers[: model.config.num_hidden_layers] for group in layer_products(layer)]


class LlamaStep:
    """`step(tokens, positions, mask, cache)`: the logits (B, V) of the next token after `tokens` (B,) at
    `positions` (B,), with `mask` (B, L) the attention mask so far and `cache` the rows' keys and values, as
    `model(input_ids=tokens[:, None], attention_mask=mask, position_ids=positions[:, None], cache=cache)
    .logits[:, -1]` gives them with every Linear on its packed weight (and the head as `packed` gives it: for greedy
    steps the screened head's `Shortlist`, whose argmax is the full logits')."""

    def __init__(self, model: llama.LlamaForCausalLM, packed: PackedLinears, greedy: bool) -> None:
        self.body = model.model
        self.layers = [
            PackedLayer(layer, *(packed.fused(group) for group in layer_products(layer)))
            for layer in self.body.layers[: model.config.num_hidden_layers]
        ]
        head = packed.head_forward(greedy) or model.lm_head
        self.head = head.shortlist if isinstance(head, ScreenedHead) else head
        attention = self.body.layers[0].self_attn
        self.heads = (model.config.num_attention_heads, model.config.num_key_value_heads)
        self.head_dim, self.scaling = attention.head_dim, attention.scaling
        weight = self.body.embed_tokens.weight
        self.sign = torch.tensor([-1.0, 1.0], dtype=weight.dtype, device=weight.device)[:, None]

    def __call__(
        self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: Cache
    ) -> torch.Tensor | Shortlist:
        hidden = self.body.embed_tokens(tokens)
        cos, sin = self.body.rotary_emb(hidden[:, None], position_ids=positions[:, None])
        half = self.head_dim // 2
        # rotate_half(x) * sin is the halves of x swapped times sin with its first half negated.
        rotary = (cos.view(-1, 1, 2, half), (sin.view(-1, 1, 2, half) * self.sign).contiguous())
        kv_heads, groups = self.heads[1], self.heads[0] // self.heads[1]
        # The additive mask of every (row, key head, query of its group) (B * kv_heads, groups, L): 0 where the row
        # attends, -inf at its left padding.
        bias = torch.zeros(mask.shape, dtype=hidden.dtype, device=hidden.device).masked_fill_(mask == 0, -torch.inf)
        bias = bias[:, None, None, :].expand(-1, kv_heads, groups, -1).reshape(-1, groups, mask.shape[1])
        for index, packed in enumerate(self.layers):
            hidden = self.layer_step(packed, hidden, bias, rotary, cache.layers[index])
        return self.head(norm(self.body.norm, hidden))

    def layer_step(
        self,
        packed: PackedLayer,
        hidden: torch.Tensor,
        bias: torch.Tensor,
        rotary: tuple[torch.Tensor, torch.Tensor],
        cache: Any,
    ) -> torch.Tensor:
        """One decoder layer on hidden states (B, hidden), as LlamaDecoderLayer, LlamaAttention and LlamaMLP
        compute it (queries and keys rotated in one pass; attention as softmax(q k^T * scale + bias) v over each
        key head's group of queries; each residual added in its product's kernel)."""
        layer, (batch, head_dim), (heads, kv_heads) = packed.layer, (hidden.shape[0], self.head_dim), self.heads
        qkv = packed_product(norm(layer.input_layernorm, hidden), *packed.qkv)
        rotated = qkv[:, : (heads + kv_heads) * head_dim].view(batch, heads + kv_heads, 2, head_dim // 2)
        rotated = (rotated * rotary[0] + rotated.flip(-2) * rotary[1]).view(batch, heads + kv_heads, head_dim)
        value = qkv[:, (heads + kv_heads) * head_dim :].view(batch, kv_heads, 1, head_dim)
        cache.write(rotated[:, heads:, None], value)
        keys, values = cache.keys, cache.values  # in the cache's layout: position-last keys are read in place
        length = keys.shape[2]
        scores = torch.baddbmm(
            bias,
            rotated[:, :heads].reshape(batch * kv_heads, heads // kv_heads, head_dim),
            keys.reshape(batch * kv_heads, length, head_dim).transpose(1, 2),
            alpha=self.scaling,
        )
        out = torch.bmm(scores.softmax(-1), values.reshape(batch * kv_heads, length, head_dim))
        hidden = packed_product(out.view(batch, heads * head_dim), *packed.o, plus=hidden)
        gate, up = packed_product(norm(layer.post_attention_layernorm, hidden), *packed.gate_up).chunk(2, -1)
        return packed_product(torch.nn.functional.silu(gate) * up, *packed.down, plus=hidden)


def norm(module: llama.LlamaRMSNorm, hidden: torch.Tensor) -> torch.Tensor:
    """LlamaRMSNorm's forward in one call (torch's rms_norm: the same float32 operations, bitwise)."""
    return torch.nn.functional.rms_norm(hidden, module.weight.shape, module.weight, module.variance_epsilon)

"""The local engine's speed and memory: packed weights for decode steps on CPU, attention kernels on CUDA, batches
sized by a memory budget.

Decode steps multiply a few rows by every weight matrix, where a plain float32 GEMM with the weight transposed is
slow; oneDNN's weight layout packed once ("mkldnn" linear) runs those steps about twice as fast on CPU. A
prompt pass whose pool reads probabilities keeps the plain kernels, so the first-step distribution (every
probability fairprobe reads), the prompt's key/value cache and every scoring pass are exactly those of
`model(...)`; only the tokens chosen after the first come from the packed kernels (the same float32 products summed
in another order: differences of order 1e-6 in the logits, which choose the same greedy tokens on every prompt we
measured). A pool that reads no probabilities runs its prompt passes on the packed weights too, and while it runs
the plain weights' pages of the model's file are given back (models/mapped.py): the process then holds one copy of
the weights, and the pool's keys and values take the other's room.

On CUDA, torch gave bfloat16 attention to cuDNN's kernel (torch 2.11 on an H200), which builds a new graph for each
key length it has not met: every decode step paid that in every layer (88.7 ms a step against 30.6 with the
memory-efficient kernel, SmolLM2's shape in bfloat16 at batch 32). `attention_without_cudnn` makes a model's
forward choose among flash, memory-efficient and math kernels instead; float32 never goes to cuDNN, so its numbers
do not change.

Memory: a batch's keys and values, and the activations of its prompt pass, grow with its rows times its tokens;
`rows_within` splits a batch so that they stay within a budget derived from the model's shape (as much as its
weights by default, `-M memory=2GB` to set it; pools that read no probabilities add the mapped weights' bytes they
give back); long prompts are prefilled a row at a time, and in chunks beyond ONE_PASS_ALONE tokens.

This module imports only torch and transformers (the GPU benchmark loads it on a machine without fairprobe's
other dependencies).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

PREFILL_CHUNK = 512  # prompt tokens per row per prefill step when a prompt is longer (chunked prefill)
ONE_PASS_ALONE = 8192  # the most prompt tokens of a row prefilled alone in one pass (see prefill_chunk)
# How far a bfloat16 logit may be from the float32 one, per unit of |hidden| x |weight row| (twice bfloat16's two
# roundings of 2^-9 each, so the screen keeps every token that can be the argmax with a factor 2 to spare).
SCREEN_MARGIN = 2.0**-7
CUDA_ATTENTION = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH")  # SDPA kernels of a forward on CUDA (no cuDNN)


def attention_without_cudnn(model: torch.nn.Module) -> Callable[[], None]:
    """Make every forward of `model` choose its SDPA kernel among CUDA_ATTENTION (see the module's docstring); the
    function that puts the model's own forward back.

    The wrapped forward is the decoder's under the LM head and any peft wrapper (`generate`, a peft model's calls
    and fairprobe's steps all reach it); it runs in torch's `sdpa_kernel`, which sets the choice for the call and
    restores it after. A decoder wrapped already is left as it is.
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel

    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder: torch.nn.Module = getattr(inner, "base_model", inner)
    if hasattr(decoder.forward, "sdpa_kernels"):
        return lambda: None
    kernels = [getattr(SDPBackend, name) for name in CUDA_ATTENTION]
    forward = decoder.forward

    @functools.wraps(forward)
    def forward_without_cudnn(*args: Any, **kwargs: Any) -> Any:
        with sdpa_kernel(kernels):
            return forward(*args, **kwargs)

    forward_without_cudnn.sdpa_kernels = CUDA_ATTENTION  # type: ignore[attr-defined]
    decoder.forward = forward_without_cudnn  # type: ignore[method-assign]

    def restore() -> None:
        decoder.__dict__.pop("forward", None)

    return restore


@dataclass(frozen=True)
class Shape:
    """What one position costs in bytes: its keys and values kept over all layers, and the activations a forward
    pass holds for it at once (residual, norm, q/k/v, attention output, the MLP's three intermediate vectors); what
    a row's logits cost with what is computed from them at once (`logits_per_row`: log-probabilities, a sampled
    draw's float64 uniforms); what a scoring pass's position costs (`logits_per_position`: its float32 logits and
    their log-softmax); and the shape of a position's keys (or values) over every layer (`cache`: layers, key heads,
    head size)."""

    kv_per_token: int
    activations_per_token: int
    logits_per_row: int
    logits_per_position: int
    weights: int
    cache: tuple[int, int, int]

    @classmethod
    def of(cls, model: torch.nn.Module) -> Shape:
        """The shape of a transformers causal LM from its config and parameters."""
        config = getattr(model, "config", None)
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        hidden = int(getattr(text, "hidden_size", 0) or 0)
        heads = int(getattr(text, "num_attention_heads", 1) or 1)
        head_dim = int(getattr(text, "head_dim", None) or hidden // heads)
        kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
        layers = int(getattr(text, "num_hidden_layers", 1) or 1)
        inner = int(getattr(text, "intermediate_size", 4 * hidden) or 4 * hidden)
        vocab = int(getattr(text, "vocab_size", 0) or 0)
        params = list(model.parameters())
        size = params[0].element_size() if params else 4
        return cls(
            kv_per_token=2 * layers * kv_heads * head_dim * size,
            activations_per_token=(4 * hidden + heads * head_dim + 2 * kv_heads * head_dim + 3 * inner) * size,
            # float32 logits, their quotient by the temperature and log-probabilities, float64 uniforms, and masks
            logits_per_row=6 * vocab * 4,
            logits_per_position=2 * vocab * 4,
            weights=sum(p.numel() * p.element_size() for p in params),
            cache=(layers, kv_heads, head_dim),
        )

    def default_budget(self) -> int:
        """As much as the weights, at least 256 MiB: the working memory a batch may take besides the weights
        (and, on CPU, their packed copy)."""
        return max(self.weights, 2**28)

    def prefill_bytes(
        self, prompt_tokens: int, copies: int = 1, chunked: bool = True, scored: int = 0, alone: bool = False
    ) -> int:
        """Peak working bytes of one row's prompt pass: its prompt's keys and values (`copies` of them when scoring
        passes repeat it), the activations of its prompt (of one chunk when `chunked`, see prefill_chunk, for a row
        `alone` or not), its logits, and those of the `scored` positions its largest scoring pass feeds."""
        chunk = (prefill_chunk(prompt_tokens, alone) or prompt_tokens) if chunked else prompt_tokens
        held = self.kv_per_token * prompt_tokens * copies + self.activations_per_token * chunk + self.logits_per_row
        return held + self.logits_per_position * scored

    def decode_bytes(self, prompt_tokens: int, new_tokens: int) -> int:
        """Peak working bytes of one row while it decodes: its keys and values at their full length, and a step's
        logits and draw."""
        return self.kv_per_token * (prompt_tokens + new_tokens) + self.logits_per_row

    def row_bytes(
        self, prompt_tokens: int, new_tokens: int, copies: int = 1, chunked: bool = True, scored: int = 0
    ) -> int:
        """Peak working bytes of one row: its prompt pass or its decoding, whichever takes more. They do not hold
        their memory at once: the pass's activations and scoring copies are freed before decoding starts, and the
        keys and values reserved for the reply take memory only as its positions are written."""
        prefill = self.prefill_bytes(prompt_tokens, copies, chunked, scored)
        return max(prefill, self.decode_bytes(prompt_tokens, new_tokens))


def rows_within(
    shape: Shape,
    budget: int,
    prompt_tokens: int,
    new_tokens: int,
    copies: int = 1,
    chunked: bool = True,
    scored: int = 0,
) -> int:
    """How many rows of this length one pass may hold within `budget` bytes (at least one)."""
    return max(1, budget // shape.row_bytes(prompt_tokens, new_tokens, copies, chunked, scored))


def even_parts(batch: int, most: int) -> int:
    """The rows of each part when `batch` rows are split into as few parts of at most `most` rows as possible, of
    equal size (the last may be smaller by less than a part): 32 rows at most 28 a part go as 16 + 16, not 28 + 4.

    A decode step's products cost a CPU nearly as much for 4 rows as for 16 (they read every weight either way), so
    a small remainder part costs almost a full part's time; even parts cost the least passes and the least time."""
    parts = -(-batch // max(1, most))
    return -(-batch // parts)


def prefill_chunk(prompt_tokens: int, alone: bool = False) -> int | None:
    """The prefill chunk for prompts of this length: None (one pass) up to twice PREFILL_CHUNK, or for a row
    `alone` up to ONE_PASS_ALONE.

    A row alone has no padding, so transformers gives SDPA no mask and torch runs its causal flash kernel, which
    skips the blocks above the diagonal: one pass costs less than chunks, each of which attends with a mask
    (0.76-0.87 of their time at 1,100-8,192 tokens on two threads, benchmarks/engine_kernels.py), and its
    activations grow with the prompt alone."""
    chunked = prompt_tokens > ONE_PASS_ALONE if alone else prefill_alone(prompt_tokens)
    return PREFILL_CHUNK if chunked else None


def prefill_alone(prompt_tokens: int) -> bool:
    """Whether prompts of this length are prefilled a row at a time (see prefill_chunk): those that padded passes
    would chunk."""
    return prompt_tokens > 2 * PREFILL_CHUNK


class PackedLinears:
    """oneDNN-packed copies of a CPU float32 model's Linear weights, swapped in for decode steps only.

    `decoding()` is a context in which `start()` makes every Linear use its packed weight until the context
    ends; a weight changed in place since it was packed (training) is packed again.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.linears = [m for m in model.modules() if type(m) is torch.nn.Linear]
        self._packed: dict[tuple[int, ...], tuple[Any, torch.Tensor, torch.Tensor | None]] = {}
        self._on = False
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        self.head = head if type(head) is torch.nn.Linear and head.bias is None else None
        self._screens: dict[tuple[int, int], ScreenedHead] = {}

    @staticmethod
    def usable(model: torch.nn.Module) -> bool:
        """Whether packing applies: float32 weights on CPU with oneDNN available."""
        param = next(model.parameters(), None)
        return (
            param is not None
            and param.device.type == "cpu"
            and param.dtype == torch.float32
            and torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_linear_pointwise")
        )

    def fused(self, linears: list[torch.nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The packed weight of `linears`' weights stacked, and their biases stacked: one product for all their
        outputs, whose columns are bitwise the separate products' (oneDNN sums each output over the same blocks
        of the input). Packed again when one of the weights changed in place (training)."""
        names = tuple(id(linear) for linear in linears)
        key = [(linear.weight.data_ptr(), linear.weight._version) for linear in linears]
        held = self._packed.get(names)
        if held is None or held[0] != key:
            with torch.inference_mode(False), torch.no_grad():
                weights = [linear.weight.detach() for linear in linears]
                weight = weights[0] if len(weights) == 1 else torch.cat(weights)
                bias = None
                if any(linear.bias is not None for linear in linears):
                    bias = torch.cat(
                        [
                            linear.weight.new_zeros(linear.out_features)
                            if linear.bias is None
                            else linear.bias.detach()
                            for linear in linears
                        ]
                    )
                held = (key, torch.ops.mkldnn._reorder_linear_weight(weight, None), bias)
            self._packed[names] = held
        return held[1], held[2]

    def drop(self) -> None:
        """Forget the packed copies (their memory goes back at the next heap release); the next decode step or
        packed pass packs them again (0.3 s for SmolLM2 on two threads). Work that reads the plain weights alone (a
        scoring pass) then holds one copy of the weights, as a pool on the packed ones does (`HFBackend.loglikelihood`)."""
        self._packed.clear()

    def head_forward(self, greedy: bool) -> Any:
        """The LM head of decode steps: with `greedy`, exact float32 logits only where the argmax can be
        (ScreenedHead) and -inf elsewhere; else the packed product (the model's own head when it is not a plain
        Linear)."""
        if self.head is None:
            return None
        if greedy and torch.ops.mkldnn._is_mkldnn_bf16_supported():
            weight = self.head.weight
            key = (weight.data_ptr(), weight._version)
            if key not in self._screens:
                self._screens = {key: ScreenedHead(weight)}
            return self._screens[key]
        return self._packed_forward(self.head)

    def start(self, greedy: bool = False, groups: Sequence[Sequence[torch.nn.Linear]] = ()) -> None:
        """From now until the context ends, every Linear runs on its packed weight; with `greedy`, the LM head
        gives exact float32 logits only where the argmax can be (ScreenedHead), -inf elsewhere. The Linears of each
        of `groups` share one packed product (SharedProduct): the packed copies the decode step of a Llama model
        reads, so a prompt pass on them holds no other copy."""
        self._on = True
        grouped = {id(linear) for group in groups for linear in group}
        for group in groups:
            shared = SharedProduct(self, group)
            for index, linear in enumerate(group):
                linear.forward = shared.part(index)  # type: ignore[method-assign]
        for linear in self.linears:
            if id(linear) not in grouped:
                forward = self.head_forward(greedy) if linear is self.head else self._packed_forward(linear)
                linear.forward = forward  # type: ignore[method-assign]

    def _packed_forward(self, linear: torch.nn.Linear) -> Any:
        packed, bias = self.fused([linear])
        return lambda x: packed_product(x, packed, bias)

    @contextlib.contextmanager
    def decoding(self) -> Iterator[PackedLinears]:
        """A generation call: plain kernels until `start()`, the packed ones after it; plain again at the end."""
        try:
            yield self
        finally:
            if self._on:
                for linear in self.linears:
                    linear.__dict__.pop("forward", None)
                self._on = False


class SharedProduct:
    """Linears that a forward calls in turn on one input (a layer's q, k and v projections; its gate and up) run as
    one product on their weights stacked (`PackedLinears.fused`): the first call on an input computes every Linear's
    output at once, and the others' calls on that same input take their columns of it (bitwise the separate
    products', see `fused`). A call on another input computes the product again."""

    def __init__(self, packed: PackedLinears, linears: Sequence[torch.nn.Linear]) -> None:
        self.packed, self.linears = packed, list(linears)
        self.sizes = [linear.out_features for linear in self.linears]
        self._input: torch.Tensor | None = None
        self._parts: dict[int, torch.Tensor] = {}
        packed.fused(self.linears)  # packed now, while the plain weights are at hand

    def part(self, index: int) -> Callable[[torch.Tensor], torch.Tensor]:
        """The forward of the `index`-th Linear."""

        def forward(x: torch.Tensor) -> torch.Tensor:
            if x is not self._input or index not in self._parts:
                weight, bias = self.packed.fused(self.linears)
                self._parts = dict(enumerate(packed_product(x, weight, bias).split(self.sizes, -1)))
                self._input = x
            out = self._parts.pop(index)
            if not self._parts:
                self._input = None
            return out

        return forward


def packed_product(
    x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None, plus: torch.Tensor | None = None
) -> torch.Tensor:
    """x @ W.T + b on a weight packed by oneDNN (`_reorder_linear_weight`), for x of any leading shape; with
    `plus` (of the output's shape), + plus in the same kernel (bitwise the separate sum: the product is rounded
    to float32 before it is added)."""
    flat = x if x.dim() == 2 else x.reshape(-1, x.shape[-1])
    if plus is None:
        y = torch.ops.mkldnn._linear_pointwise(flat, packed, bias, "none", [], "")
    else:
        y = torch.ops.mkldnn._linear_pointwise.binary(flat, plus.reshape(flat.shape[0], -1), packed, bias, "add")
    return y if x.dim() == 2 else y.reshape(*x.shape[:-1], y.shape[-1])


@dataclass(frozen=True)
class Shortlist:
    """A greedy decode step's logits where only a few tokens can be the argmax: their exact float32 logits (B, n)
    and their ids (n,), ascending; every other token's logit is -inf. Reading the argmax off the n columns instead
    of the vocabulary's (a full float32 argmax over 61 x 49,152 logits took 2 ms of a 100 ms step) gives the same
    token: the first of the largest, as torch's argmax takes it."""

    logits: torch.Tensor
    ids: torch.Tensor

    def argmax(self, dim: int = -1) -> torch.Tensor:
        """The argmax token of each row (B,) (`dim` is the vocabulary's, -1, as for a logits tensor)."""
        return self.ids[self.logits.argmax(dim)]

    def dense(self, vocab: int) -> torch.Tensor:
        """The full logits (B, vocab): the shortlist's where it has them, -inf elsewhere."""
        out = self.logits.new_full((self.logits.shape[0], vocab), float("-inf"))
        out[:, self.ids] = self.logits
        return out


class ScreenedHead:
    """The LM head of greedy decode steps: a bfloat16 product screens the vocabulary, float32 decides.

    A greedy step needs only the argmax of the logits. The bfloat16 product (half the bytes of the head's weight,
    about twice as fast) is within SCREEN_MARGIN x |h| x max|W_v| of the float32 logit for every token, so every
    token within twice that of the rough maximum is a candidate and the true argmax is one of them; the candidates'
    float32 logits are computed exactly (`shortlist`), and called as a module every other token gets -inf. The
    argmax is the float32 one.
    """

    def __init__(self, weight: torch.Tensor) -> None:
        with torch.inference_mode(False), torch.no_grad():
            self.weight = weight.detach()
            self.packed = torch.ops.mkldnn._reorder_linear_weight(self.weight.bfloat16(), None)
            self.row_norm = float(self.weight.norm(dim=1).max())

    def shortlist(self, x: torch.Tensor) -> Shortlist:
        """The candidates of hidden states x (B, hidden) and their float32 logits. A token is a candidate where
        its rough logit is within reach of its row's rough maximum in any row; with no candidate (logits that are
        not numbers) every token is one, as the float32 head would give them."""
        rough = torch.ops.mkldnn._linear_pointwise(x.bfloat16(), self.packed, None, "none", [], "").float()
        reach = 2 * SCREEN_MARGIN * self.row_norm * x.norm(dim=-1, keepdim=True)
        # rough - (max - reach) >= 0 exactly where rough >= max - reach (IEEE subtraction keeps the order), so one
        # maximum over the rows finds every column that is a candidate in some row.
        rough -= rough.amax(-1, keepdim=True) - reach
        near = (rough.amax(0) >= 0).nonzero().squeeze(-1)
        if not near.numel():
            near = torch.arange(self.weight.shape[0], device=x.device)
        return Shortlist(x @ self.weight[near].T, near)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        return self.shortlist(flat).dense(self.weight.shape[0]).reshape(*x.shape[:-1], self.weight.shape[0])

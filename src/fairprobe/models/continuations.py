"""log P(continuation | prompt) on a local model, batched, with the prompt's key/value cache shared by its continuations.

Each continuation is tokenized on its own (no special tokens, no space added) and its tokens follow the prompt's.
The first token's log-probability is read from the distribution right after the prompt (the same one the first
generation step uses); a continuation of several tokens adds its later tokens' conditional log-probabilities
(chain rule), fed after the prompt's cached keys and values, so the prompt is never run twice: on a model whose
attention takes a mask of its own, every continuation's tokens at once as one tree (a node per distinct start, each
seeing the prompt and its ancestors), else one pass per row width. Everything is one torch graph, so Debias Tuning
trains on exactly the numbers the metrics read.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Any

import torch
from transformers import Cache, DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from fairprobe.errors import ModelError
from fairprobe.models.base import ContinuationScore, Scores
from fairprobe.models.reserved import repeat_rows


@dataclass(frozen=True)
class TailGroup:
    """One tail pass: `feed` (R, W) rows of tokens fed after the prompt at depths `depth` (W,) past its end, and the
    entries read from its output: entry e is the log-probability of token `tokens[e]` at position `positions[e]`
    (row * W + column) and belongs to continuation column `owners[e]`.

    Without `ancestors` each row is a chain: a continuation's tokens but its last, each token seeing the prompt and
    the row's earlier tokens. A continuation whose row is the start of a longer one's reads from that longer row
    (causal attention: the same numbers), so continuations that share their first tokens (" x" + "em",
    " x" + "em" + "self") cost one row. With `ancestors` (W, W) the one row is a tree (`tail_tree`): token i sees
    the prompt and the tokens j where `ancestors[i, j]`.
    """

    feed: torch.Tensor
    depth: torch.Tensor
    positions: torch.Tensor
    tokens: torch.Tensor
    owners: torch.Tensor
    columns: torch.Tensor
    ancestors: torch.Tensor | None = None


def tail_groups(ids: list[tuple[int, ...]]) -> tuple[TailGroup, ...]:
    """The tail passes of the continuations of several tokens: one per row width, the rows without padding."""
    feeds = {ids[k][:-1] for k in range(len(ids)) if len(ids[k]) > 1}
    rows = sorted(f for f in feeds if not any(len(g) > len(f) and g[: len(f)] == f for g in feeds))
    groups = []
    for width in sorted({len(r) for r in rows}):
        mine = [r for r in rows if len(r) == width]
        entries = []
        for k, tokens in enumerate(ids):
            feed = tokens[:-1]
            if len(tokens) < 2:
                continue
            home = next((i for i, r in enumerate(mine) if r[: len(feed)] == feed), None)
            if home is None or min(len(r) for r in rows if r[: len(feed)] == feed) != width:
                continue  # its row is in a pass of another width (the shortest row that holds it)
            entries += [(home * width + w, tokens[w + 1], k) for w in range(len(feed))]
        feed_rows = torch.tensor(mine, dtype=torch.long)
        groups.append(group_of(feed_rows, torch.arange(width), entries))
    return tuple(groups)


def tail_tree(ids: list[tuple[int, ...]]) -> tuple[TailGroup, ...]:
    """The tail pass of the continuations of several tokens as one tree (none when every continuation is one
    token): a node for each distinct start of a continuation (its tokens but its last, and each shorter start of
    them), fed once at its depth after the prompt and seeing the prompt and its own ancestors. Every token a
    continuation reads is the model's distribution after exactly the prompt and that continuation's earlier tokens,
    as in the per-width chains, in one pass with one copy of the prompt's cache instead of one per row."""
    starts = sorted({tokens[: w + 1] for tokens in ids for w in range(len(tokens) - 1)})
    if not starts:
        return ()
    node = {start: i for i, start in enumerate(starts)}  # sorted: every start after its own shorter starts
    ancestors = torch.zeros((len(starts), len(starts)), dtype=torch.bool)
    for start, i in node.items():
        ancestors[i, [node[start[: d + 1]] for d in range(len(start))]] = True
    entries = [
        (node[tokens[: w + 1]], tokens[w + 1], k) for k, tokens in enumerate(ids) for w in range(len(tokens) - 1)
    ]
    feed = torch.tensor([[start[-1] for start in starts]], dtype=torch.long)
    depth = torch.tensor([len(start) - 1 for start in starts], dtype=torch.long)
    return (group_of(feed, depth, entries, ancestors),)


def group_of(
    feed: torch.Tensor, depth: torch.Tensor, entries: list[tuple[int, int, int]], ancestors: torch.Tensor | None = None
) -> TailGroup:
    """A TailGroup of the rows `feed` at `depth` from its entries (position, token, continuation column)."""
    positions, tokens, owners = (torch.tensor(column, dtype=torch.long) for column in zip(*entries, strict=True))
    columns = torch.tensor(sorted(set(owners.tolist())), dtype=torch.long)
    return TailGroup(feed, depth, positions, tokens, owners, columns, ancestors)


@dataclass(frozen=True)
class ContinuationTable:
    """Continuations tokenized for one tokenizer.

    `ids` holds each continuation's tokens and `first` (C,) their first tokens; `tails` are the passes that feed the
    continuations of several tokens after the prompt: one tree (`tail_tree`) for a model whose attention takes a
    mask of its own (`takes_tree`), else one pass per row width (`tail_groups`), so that no row is padded.
    """

    ids: tuple[tuple[int, ...], ...]
    first: torch.Tensor
    tails: tuple[TailGroup, ...]

    @classmethod
    def build(
        cls, tokenizer: PreTrainedTokenizerBase, continuations: tuple[str, ...], tree: bool = False
    ) -> ContinuationTable:
        """Tokenize every continuation exactly as given, without special tokens; with `tree`, its tail pass is
        one tree."""
        ids = []
        for text in continuations:
            tokens = tuple(tokenizer.encode(text, add_special_tokens=False))
            if not tokens:
                raise ModelError(f"continuation {text!r} tokenizes to nothing: a scored continuation needs a token")
            ids.append(tokens)
        first = torch.tensor([t[0] for t in ids], dtype=torch.long)
        return cls(ids=tuple(ids), first=first, tails=tail_tree(ids) if tree else tail_groups(ids))

    @property
    def tail_rows(self) -> int:
        """Copies of the prompt's cache the tail passes hold at most (each pass repeats it once per row)."""
        return sum(int(group.feed.shape[0]) for group in self.tails)

    @property
    def tail_positions(self) -> int:
        """Positions a prompt's largest tail pass feeds (whose logits it holds at once)."""
        return max((int(group.feed.numel()) for group in self.tails), default=0)


@dataclass
class TableScores:
    """Log-probabilities (B, C) of every continuation after every prompt and, when asked, whether each is greedy."""

    log_probs: torch.Tensor
    greedy: torch.Tensor | None = None


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids for left-padded rows: 0 at each row's first real token."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def score_continuations(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    table: ContinuationTable,
    first_log_probs: torch.Tensor | None = None,
    prompt_cache: Cache | None = None,
    greedy: bool = False,
) -> TableScores:
    """log P(continuation | prompt), shape (B, C), for left-padded prompts; exact and differentiable.

    `first_log_probs` (B, V) together with `prompt_cache` (the key/value cache of exactly the prompts, e.g. cut from
    generation) skip the prompt pass; the cache is used up. With `greedy`, also whether each continuation is the
    greedy one (every token the argmax).
    """
    if first_log_probs is None or (table.tails and prompt_cache is None):
        out = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=positions_from_mask(attention_mask),
            logits_to_keep=1,
            use_cache=bool(table.tails),
        )
        first_log_probs = out.logits[:, -1, :].float().log_softmax(-1)
        prompt_cache = kv_cache(out)
    device = first_log_probs.device
    first = table.first.to(device)
    lp = first_log_probs[:, first]
    is_greedy = (first_log_probs.argmax(-1, keepdim=True) == first) if greedy else None
    if not table.tails:
        return TableScores(lp, is_greedy)
    # Each tail pass feeds its rows after the prompt's keys and values: a fresh cache of the same tensors each.
    layers = [(layer.keys, layer.values) for layer in prompt_cache.layers]  # type: ignore[union-attr]
    for k, group in enumerate(table.tails):
        cache = prompt_cache if k == 0 else DynamicCache(ddp_cache_data=layers)
        tail, tail_greedy = tail_log_probs(model, attention_mask, group, cache)
        columns = group.columns.to(device)
        lp[:, columns] = lp[:, columns] + tail
        if is_greedy is not None:
            is_greedy[:, columns] &= tail_greedy
    return TableScores(lp, is_greedy)


def tail_log_probs(
    model: PreTrainedModel, attention_mask: torch.Tensor, group: TailGroup, prompt_cache: Cache
) -> tuple[torch.Tensor, torch.Tensor]:
    """For each continuation the pass serves, the log-probability (B, M) of its tokens after the first, given the
    prompt, and whether each of those tokens is the argmax (M = len(group.columns), in that order).

    Each (prompt, row) feeds the row's tokens after the prompt's cached keys and values (repeated per row into
    buffers with room for the row, reserved.repeat_rows), so the prompt is never run twice.
    """
    batch = attention_mask.shape[0]
    n_rows, width = group.feed.shape
    device = attention_mask.device
    repeat_rows(prompt_cache, n_rows, width)
    prompt_mask = attention_mask.repeat_interleave(n_rows, 0)
    feed = group.feed.to(device).repeat(batch, 1)
    if group.ancestors is None:
        mask = torch.cat([prompt_mask, torch.ones_like(feed)], dim=1)
    else:  # (B, 1, W, L + W): the prompt's real positions and the token's ancestors
        seen = group.ancestors.to(device)[None, None].expand(batch, 1, width, width)
        mask = torch.cat([prompt_mask.bool()[:, None, None, :].expand(-1, 1, width, -1), seen], dim=-1)
    out = model(
        input_ids=feed,
        attention_mask=mask,
        position_ids=prompt_mask.sum(-1, keepdim=True) + group.depth.to(device),
        **cache_argument(model, prompt_cache),
        use_cache=True,
    )
    logits = out.logits.reshape(batch, n_rows * width, -1)
    positions, tokens = group.positions.to(device), group.tokens.to(device)
    picked = logits.float().log_softmax(-1)[:, positions, tokens]
    missed = (logits.argmax(-1)[:, positions] != tokens).float()
    owners = torch.searchsorted(group.columns.to(device), group.owners.to(device))
    shape = (batch, len(group.columns))
    summed = torch.zeros(shape, dtype=picked.dtype, device=device).index_add(1, owners, picked)
    misses = torch.zeros(shape, device=device).index_add(1, owners, missed)
    return summed, misses == 0


def takes_tree(model: PreTrainedModel) -> bool:
    """Whether a tail pass may be a tree on `model`: its attention is SDPA (which reads a boolean 4-D mask as given)
    and every layer attends to every earlier position (no sliding window, no chunked or linear layers), so the
    tree's mask stands for the same positions as the per-width chains' masks. Any other model takes the chains."""
    config = model.config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if getattr(text, "_attn_implementation", None) != "sdpa" or getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    kinds = getattr(text, "layer_types", None)
    if kinds is not None:
        return all(kind == "full_attention" for kind in kinds)
    return getattr(text, "sliding_window", None) is None


def prompt_part(cache: Cache | None, prompt_len: int) -> Cache | None:
    """A generation cache cut back to the prompt's keys and values; None where that is not exact.

    Only a DynamicCache whose every layer still holds every position can be cut (a sliding-window
    layer past its window has dropped the start of the prompt).
    """
    if not isinstance(cache, DynamicCache) or not cache.layers:
        return None
    lengths = {int(getattr(layer, "keys", torch.empty(0)).shape[-2]) for layer in cache.layers}
    if len(lengths) != 1 or lengths != {cache.get_seq_length()}:
        return None
    (length,) = lengths
    if length < prompt_len:
        return None
    cache.crop(prompt_len - length)
    return cache


def as_scores(result: TableScores, table: ContinuationTable) -> list[Scores]:
    """One Scores per prompt. Each logprob is the log of the float32 probability the model's softmax gives, so
    exp(logprob) is that probability to float64 rounding (an underflowed probability keeps its float32 logprob)."""
    probs = result.log_probs.exp().cpu().numpy().astype("float64")
    raw = result.log_probs.detach().cpu().numpy().astype("float64")
    greedy = None if result.greedy is None else result.greedy.cpu().numpy()
    lengths = [len(t) for t in table.ids]
    out = []
    for row in range(probs.shape[0]):
        scores = tuple(
            ContinuationScore(
                logprob=math.log(p) if p > 0 else float(raw[row, k]),
                tokens=lengths[k],
                greedy=None if greedy is None else bool(greedy[row, k]),
            )
            for k, p in enumerate(probs[row])
        )
        out.append(Scores(scores))
    return out


def kv_cache(output: Any) -> Cache:
    """The keys and values a forward or generate call returned (`cache` since transformers 5.24, before it
    `past_key_values`)."""
    found = getattr(output, "cache", None)
    return found if found is not None else output.past_key_values


def cache_keyword(model: PreTrainedModel) -> str:
    """The keyword the model's forward takes its cache by: `cache` since transformers 5.24 (where the old name,
    `past_key_values`, warns on every call), `past_key_values` before."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # a PEFT model takes **kwargs
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def cache_argument(model: PreTrainedModel, cache: Cache) -> dict[str, Cache]:
    """`cache` as the keyword argument the model's forward takes (cache_keyword)."""
    return {cache_keyword(model): cache}

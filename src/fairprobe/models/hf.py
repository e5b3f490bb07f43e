"""Hugging Face causal-LM backend: batched left-padded generation plus exact next-word probabilities."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    Cache,
    DynamicCache,
    LogitsProcessor,
    LogitsProcessorList,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers import GenerationConfig as HFGenerationConfig
from transformers.utils import logging as transformers_logging

from fairprobe.errors import ModelError, first_line
from fairprobe.models.base import Completion, GenerationConfig, Prompt
from fairprobe.records import message_dicts
from fairprobe.threads import ThreadChooser, apply_threads

transformers_logging.set_verbosity_error()
transformers_logging.disable_progress_bar()


@dataclass(frozen=True)
class WordTable:
    """Attribute word pairs tokenized for one tokenizer (each word with its leading space).

    `first` (N, 2) holds each word's first token; `multi` lists the words of several tokens as
    (pair index, column, token ids) for the chain rule. For those words, `tail_feed` (M, W) holds the
    tokens to feed after the prompt (all but the last, right-padded) and `tail_targets` (M, W) the
    tokens whose conditional probabilities they give (-1 on padding).
    """

    first: torch.Tensor
    multi: tuple[tuple[int, int, tuple[int, ...]], ...]
    tail_feed: torch.Tensor
    tail_targets: torch.Tensor

    @classmethod
    def build(cls, tokenizer: PreTrainedTokenizerBase, word_pairs: list[tuple[str, str]]) -> WordTable:
        """Tokenize every word as the model sees it after a prompt: with a leading space."""
        first = torch.empty((len(word_pairs), 2), dtype=torch.long)
        multi: list[tuple[int, int, tuple[int, ...]]] = []
        for i, pair in enumerate(word_pairs):
            for j, word in enumerate(pair):
                ids = tokenizer.encode(" " + word, add_special_tokens=False)
                if not ids:
                    raise ModelError(f"attribute word {word!r} tokenizes to nothing")
                first[i, j] = ids[0]
                if len(ids) > 1:
                    multi.append((i, j, tuple(ids)))
        width = max((len(ids) - 1 for _, _, ids in multi), default=0)
        feed = torch.zeros((len(multi), width), dtype=torch.long)
        targets = torch.full((len(multi), width), -1, dtype=torch.long)
        for k, (_, _, ids) in enumerate(multi):
            feed[k, : len(ids) - 1] = torch.tensor(ids[:-1])
            targets[k, : len(ids) - 1] = torch.tensor(ids[1:])
        return cls(first=first, multi=tuple(multi), tail_feed=feed, tail_targets=targets)


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids for left-padded rows: 0 at each row's first real token."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def word_log_probs(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    table: WordTable,
    first_log_probs: torch.Tensor | None = None,
    pad_id: int = 0,
    prompt_cache: Cache | None = None,
) -> torch.Tensor:
    """Log-probabilities (B, N, 2) that each attribute word comes next after each left-padded prompt.

    Exact: read from the full softmax after the prompt, and for a word of several tokens the sum
    of its tokens' conditional log-probabilities (chain rule). Differentiable, so Debias Tuning
    trains on the same numbers the metrics read. `first_log_probs` (B, V) together with
    `prompt_cache` (the key/value cache of exactly the prompt, e.g. cut from generation) skip the
    prompt pass; the cache is used up. `pad_id` fills the masked slots after shorter words.
    """
    if first_log_probs is None or (table.multi and prompt_cache is None):
        out = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=positions_from_mask(attention_mask),
            logits_to_keep=1,
            use_cache=bool(table.multi),
        )
        first_log_probs = out.logits[:, -1, :].float().log_softmax(-1)
        prompt_cache = out.past_key_values
    device = first_log_probs.device
    lp = first_log_probs[:, table.first.to(device).reshape(-1)].reshape(input_ids.shape[0], -1, 2)
    if not table.multi:
        return lp
    rows = torch.tensor([i for i, _, _ in table.multi], device=device)
    cols = torch.tensor([j for _, j, _ in table.multi], device=device)
    lp[:, rows, cols] = lp[:, rows, cols] + tail_log_probs(model, attention_mask, table, prompt_cache, pad_id)
    return lp


def tail_log_probs(
    model: PreTrainedModel, attention_mask: torch.Tensor, table: WordTable, prompt_cache: Cache, pad_id: int = 0
) -> torch.Tensor:
    """For each multi-token word, the log-probability (B, M) of its tokens after the first, given the prompt.

    One row per (prompt, word) feeds only the word's tokens after the prompt's cached keys and values
    (repeated in place per word), so the prompt is never run twice.
    """
    batch = attention_mask.shape[0]
    n_words, width = table.tail_feed.shape
    device = attention_mask.device
    prompt_cache.batch_repeat_interleave(n_words)
    prompt_mask = attention_mask.repeat_interleave(n_words, 0)
    targets = table.tail_targets.to(device).repeat(batch, 1)
    known = targets >= 0
    out = model(
        input_ids=torch.where(known, table.tail_feed.to(device).repeat(batch, 1), pad_id),
        attention_mask=torch.cat([prompt_mask, known.long()], dim=1),
        position_ids=prompt_mask.sum(-1, keepdim=True) + torch.arange(width, device=device),
        past_key_values=prompt_cache,
        use_cache=True,
    )
    picked = out.logits.float().log_softmax(-1).gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return torch.where(known, picked, torch.zeros_like(picked)).sum(-1).reshape(batch, n_words)


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


class _FirstStepCapture(LogitsProcessor):
    """Keeps the log-softmax of the raw logits at the first generation step (the next-word distribution)."""

    def __init__(self, prompt_len: int) -> None:
        self.prompt_len = prompt_len
        self.log_probs: torch.Tensor | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.shape[1] == self.prompt_len and self.log_probs is None:
            self.log_probs = scores.float().log_softmax(-1)
        return scores


class HFBackend:
    """Any transformers causal LM; all implicit metrics are exact (full softmax)."""

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        name: str,
        info: dict[str, Any],
        batch_size: int = 32,
    ) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name
        self.info = info
        self.batch_size = batch_size
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.has_chat_template = bool(getattr(tokenizer, "chat_template", None))
        self._tables: dict[tuple[tuple[str, str], ...], WordTable] = {}
        # On CPU the thread count follows the CPUs free right now (fairprobe.threads), checked per batch.
        self._threads = ThreadChooser() if self.device.type == "cpu" else None
        # Only the settings fairprobe passes apply: no repetition penalty or sampling from the model's file.
        self.model.generation_config = HFGenerationConfig(
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=model.generation_config.eos_token_id or tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )

    @property
    def device(self) -> torch.device:
        """The device the model's weights are on."""
        return next(self.model.parameters()).device

    def identity(self) -> dict[str, Any]:
        """Model id, source, sha, dtype and device for the manifest."""
        return {
            **self.info,
            "backend": "hf",
            "dtype": str(self.model.dtype).removeprefix("torch."),
            "device": str(self.device),
        }

    def adapt_threads(self) -> None:
        """On CPU, set torch's threads to the CPUs free right now (called before every batch)."""
        if self._threads is not None:
            apply_threads(self._threads)

    def context_length(self) -> int | None:
        """The longest input the model takes (max_position_embeddings), None when the config does not say."""
        value = getattr(self.model.config, "max_position_embeddings", None)
        return int(value) if isinstance(value, int) and value > 0 else None

    def word_table(self, word_pairs: list[tuple[str, str]]) -> WordTable:
        """The tokenized word pairs, built once per list."""
        key = tuple(tuple(p) for p in word_pairs)
        if key not in self._tables:
            self._tables[key] = WordTable.build(self.tokenizer, list(word_pairs))
        return self._tables[key]

    def render(self, prompt: Prompt) -> str:
        """A prompt as text: strings as they are, chat messages through the chat template."""
        if isinstance(prompt, str):
            return prompt
        messages = message_dicts(prompt)
        if not self.has_chat_template:
            return "\n".join(m["content"] for m in messages) + "\n"
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def encode(self, prompts: list[Prompt]) -> dict[str, torch.Tensor]:
        """Left-padded token ids and attention mask for a batch of prompts."""
        self.adapt_threads()
        texts = [self.render(p) for p in prompts]
        chat = any(not isinstance(p, str) for p in prompts)
        context = self.context_length()
        for text in texts:  # a token has at least one character: refuse huge prompts before tokenizing them
            if context and len(text) > 16 * context:
                raise ModelError(
                    f"a prompt of {len(text):,} characters is longer than {self.name}'s context ({context:,} tokens): {text[:60]!r}..."
                )
        enc = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=not chat)
        if context and enc["input_ids"].shape[1] > context:
            raise ModelError(
                f"a prompt of {enc['input_ids'].shape[1]:,} tokens is longer than {self.name}'s context ({context:,} tokens)"
            )
        return {k: v.to(self.device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}

    @torch.inference_mode()
    def generate(
        self,
        prompts: list[Prompt],
        config: GenerationConfig,
        word_pairs: list[tuple[str, str]] | None = None,
    ) -> list[Completion]:
        """Continue prompts in batches of `batch_size`; word probabilities come from the same pass."""
        out: list[Completion] = []
        for start in range(0, len(prompts), self.batch_size):
            out.extend(self._generate_batch(prompts[start : start + self.batch_size], config, word_pairs))
        return out

    def _generate_batch(
        self, prompts: list[Prompt], config: GenerationConfig, word_pairs: list[tuple[str, str]] | None
    ) -> list[Completion]:
        enc = self.encode(prompts)
        prompt_len = enc["input_ids"].shape[1]
        capture = _FirstStepCapture(prompt_len)
        torch.manual_seed(config.seed)
        sampling: dict[str, Any] = {"do_sample": not config.greedy}
        if not config.greedy:
            sampling.update(temperature=config.temperature, top_p=config.top_p, top_k=config.top_k or None)
        generated = self.model.generate(
            **enc,
            max_new_tokens=config.max_new_tokens,
            logits_processor=LogitsProcessorList([capture]),
            return_dict_in_generate=True,
            **sampling,
        )
        texts = self.tokenizer.batch_decode(generated.sequences[:, prompt_len:], skip_special_tokens=True)
        probs = None
        if word_pairs:
            lp = word_log_probs(
                self.model,
                enc["input_ids"],
                enc["attention_mask"],
                self.word_table(word_pairs),
                first_log_probs=capture.log_probs,
                pad_id=self.tokenizer.pad_token_id,
                prompt_cache=prompt_part(generated.past_key_values, prompt_len),
            )
            probs = lp.exp().cpu().numpy().astype(np.float64)
        return [Completion(text=text, word_probs=None if probs is None else probs[i]) for i, text in enumerate(texts)]

    @torch.inference_mode()
    def next_word_probs(self, prompts: list[Prompt], word_pairs: list[tuple[str, str]]) -> np.ndarray:
        """Next-word probabilities (B, N, 2) without generating: one forward pass per batch."""
        table = self.word_table(word_pairs)
        chunks = []
        for start in range(0, len(prompts), self.batch_size):
            enc = self.encode(prompts[start : start + self.batch_size])
            lp = word_log_probs(
                self.model, enc["input_ids"], enc["attention_mask"], table, pad_id=self.tokenizer.pad_token_id
            )
            chunks.append(lp.exp().cpu().numpy().astype(np.float64))
        return np.concatenate(chunks, axis=0)


def resolve_device(device: str) -> str:
    """'auto' means CUDA when present, else CPU."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        torch.device(device)
    except (RuntimeError, ValueError):
        raise ModelError(f"unknown --device {device!r}: use auto, cpu, cuda, cuda:N or mps") from None
    return device


def resolve_dtype(dtype: str, device: str) -> torch.dtype:
    """'auto' means bfloat16 on CUDA and float32 on CPU."""
    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    try:
        return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    except KeyError:
        raise ModelError(f"unknown dtype {dtype!r}: use auto, float32, float16 or bfloat16") from None


def load_hf(
    path_or_id: str,
    name: str,
    info: dict[str, Any],
    device: str = "auto",
    dtype: str = "auto",
    batch_size: int = 32,
    adapter: str | None = None,
    **kwargs: Any,
) -> HFBackend:
    """Load a causal LM and its tokenizer from a folder or hub id (optionally with a LoRA adapter)."""
    dev = resolve_device(device)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path_or_id, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(path_or_id, dtype=resolve_dtype(dtype, dev), **kwargs)
    except (OSError, ValueError) as exc:
        first = first_line(str(exc)) or type(exc).__name__
        raise ModelError(f"cannot load model {path_or_id!r}: {first}") from exc
    model.to(dev)
    if adapter:
        from fairprobe.models.adapters import attach_adapter

        model, adapter_info = attach_adapter(model, adapter, base_info=info)
        info = {**info, "adapter": adapter_info}
    return HFBackend(model, tokenizer, name=name, info=info, batch_size=batch_size)

"""Hugging Face causal-LM backend: batched left-padded generation plus exact next-word probabilities."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LogitsProcessor,
    LogitsProcessorList,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers import GenerationConfig as HFGenerationConfig
from transformers.utils import logging as transformers_logging

from fairprobe.errors import ModelError
from fairprobe.models.base import Completion, GenerationConfig, Prompt
from fairprobe.records import ChatMessage

transformers_logging.set_verbosity_error()
transformers_logging.disable_progress_bar()


@dataclass(frozen=True)
class WordTable:
    """Attribute word pairs tokenized for one tokenizer (each word with its leading space).

    `first` (N, 2) holds each word's first token; `multi` lists the words of several tokens as
    (pair index, column, token ids) for the chain rule.
    """

    first: torch.Tensor
    multi: tuple[tuple[int, int, tuple[int, ...]], ...]

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
        return cls(first=first, multi=tuple(multi))


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
) -> torch.Tensor:
    """Log-probabilities (B, N, 2) that each attribute word comes next after each left-padded prompt.

    Exact: read from the full softmax after the prompt, and for a word of several tokens the sum
    of its tokens' conditional log-probabilities (chain rule). Differentiable, so Debias Tuning
    trains on the same numbers the metrics read. `first_log_probs` (B, V) skips the prompt pass.
    """
    if first_log_probs is None:
        out = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=positions_from_mask(attention_mask),
            logits_to_keep=1,
        )
        first_log_probs = out.logits[:, -1, :].float().log_softmax(-1)
    device = first_log_probs.device
    lp = first_log_probs[:, table.first.to(device).reshape(-1)].reshape(input_ids.shape[0], -1, 2)
    if not table.multi:
        return lp
    lp = lp.clone()
    batch = input_ids.shape[0]
    tails = [ids[1:] for _, _, ids in table.multi]
    width = max(len(t) for t in tails)
    # One row per (prompt, multi-token word): prompt + word tokens but the last, right-aligned tails.
    rows = []
    masks = []
    targets = torch.full((len(tails), width), -1, dtype=torch.long)
    for k, (_, _, ids) in enumerate(table.multi):
        feed = torch.tensor(ids[:-1], dtype=torch.long)
        pad = width - feed.numel()
        rows.append(torch.cat([torch.full((pad,), pad_id, dtype=torch.long), feed]))
        masks.append(torch.cat([torch.zeros(pad, dtype=torch.long), torch.ones(feed.numel(), dtype=torch.long)]))
        targets[k, pad:] = torch.tensor(ids[1:], dtype=torch.long)
    word_feed = torch.stack(rows).to(device)
    word_mask = torch.stack(masks).to(device)
    n_words = len(tails)
    seq = torch.cat([input_ids.repeat_interleave(n_words, 0), word_feed.repeat(batch, 1)], dim=1)
    mask = torch.cat([attention_mask.repeat_interleave(n_words, 0), word_mask.repeat(batch, 1)], dim=1)
    # The padding between prompt and tail is masked out; positions stay contiguous for real tokens.
    out = model(input_ids=seq, attention_mask=mask, position_ids=positions_from_mask(mask), logits_to_keep=width)
    tail_lp = out.logits[:, -width:, :].float().log_softmax(-1)
    tgt = targets.to(device).repeat(batch, 1)
    picked = tail_lp.gather(-1, tgt.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    picked = torch.where(tgt >= 0, picked, torch.zeros_like(picked)).sum(-1).reshape(batch, n_words)
    for k, (i, j, _) in enumerate(table.multi):
        lp[:, i, j] = lp[:, i, j] + picked[:, k]
    return lp


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
        messages = [m.model_dump() if isinstance(m, ChatMessage) else dict(m) for m in prompt]
        if not self.has_chat_template:
            return "\n".join(m["content"] for m in messages) + "\n"
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def encode(self, prompts: list[Prompt]) -> dict[str, torch.Tensor]:
        """Left-padded token ids and attention mask for a batch of prompts."""
        texts = [self.render(p) for p in prompts]
        chat = any(not isinstance(p, str) for p in prompts)
        enc = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=not chat)
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
            **sampling,
        )
        texts = self.tokenizer.batch_decode(generated[:, prompt_len:], skip_special_tokens=True)
        probs = None
        if word_pairs:
            lp = word_log_probs(
                self.model,
                enc["input_ids"],
                enc["attention_mask"],
                self.word_table(word_pairs),
                first_log_probs=capture.log_probs,
                pad_id=self.tokenizer.pad_token_id,
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


def file_sha256(path: Path) -> str:
    """sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def resolve_device(device: str) -> str:
    """'auto' means CUDA when present, else CPU."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
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
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"cannot load model {path_or_id!r}: {first}") from exc
    model.to(dev)
    if adapter:
        from fairprobe.mitigation.adapters import attach_adapter

        model, adapter_info = attach_adapter(model, adapter, base_info=info)
        info = {**info, "adapter": adapter_info}
    return HFBackend(model, tokenizer, name=name, info=info, batch_size=batch_size)

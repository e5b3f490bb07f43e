"""A backend wrapper that answers from the shared cache and asks the wrapped model only for the rest."""

from __future__ import annotations

from typing import Any

import numpy as np

from fairprobe.cache import Cache, cache_key
from fairprobe.models.base import Completion, GenerationConfig, ModelBackend, Prompt
from fairprobe.models.content import model_content
from fairprobe.records import message_dicts

# -M settings of how to reach a model, not of what it answers: never part of a key (nor is the API key).
TRANSPORT_ARGS = frozenset({"api_key", "base_url", "concurrency", "timeout", "retry", "limits"})


def prompt_json(prompt: Prompt) -> str | list[dict[str, str]]:
    """A prompt as plain JSON (chat messages as role/content dicts) for hashing."""
    if isinstance(prompt, str):
        return prompt
    return message_dicts(prompt)


def decoding_key(config: GenerationConfig) -> dict[str, Any]:
    """The decoding parameters that change an answer: greedy answers do not depend on the seed."""
    params = config.model_dump()
    if config.greedy:
        params.pop("seed")
    return params


def completion_to_json(c: Completion) -> dict[str, Any]:
    """What the cache stores of a completion (never an error: see `cacheable`)."""
    return {
        "text": c.text,
        "word_probs": None if c.word_probs is None else np.asarray(c.word_probs, dtype=np.float64).tolist(),
        "word_probs_mask": None if c.word_probs_mask is None else np.asarray(c.word_probs_mask, dtype=bool).tolist(),
        "extra": c.extra,
    }


def completion_from_json(obj: dict[str, Any]) -> Completion:
    """Inverse of completion_to_json."""
    probs = obj.get("word_probs")
    mask = obj.get("word_probs_mask")
    return Completion(
        text=obj["text"],
        word_probs=None if probs is None else np.asarray(probs, dtype=np.float64),
        word_probs_mask=None if mask is None else np.asarray(mask, dtype=bool),
        extra=dict(obj.get("extra") or {}),
    )


def usable_entry(obj: Any, word_pairs: list[tuple[str, str]] | None) -> Completion | None:
    """A cached completion, or None when the entry is absent or of the wrong shape (then it is asked again)."""
    if obj is None:
        return None
    try:
        completion = completion_from_json(obj)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if not isinstance(completion.text, str):
        return None
    shape = None if word_pairs is None else (len(word_pairs), 2)
    for array in (completion.word_probs, completion.word_probs_mask):
        if array is not None and (shape is None or array.shape != shape):
            return None
    probs = completion.word_probs
    if probs is not None and not (np.isfinite(probs).all() and (probs >= 0).all() and (probs <= 1).all()):
        return None
    return completion


def cacheable(c: Completion) -> bool:
    """Only whole answers are stored: a failed call or a malformed scoring answer is asked again next time."""
    return c.error is None and "scoring_error" not in c.extra


class CachedBackend:
    """Wraps any backend: cached prompts cost no model call; fresh answers are stored as they arrive.

    A wrapped backend that sets `streams_results = True` takes an `on_result(index, completion)`
    callback, so answers already paid for are kept even when a later request of the batch fails.
    """

    def __init__(self, inner: ModelBackend, cache: Cache, model_args: dict[str, Any] | None = None) -> None:
        self.inner = inner
        self.cache = cache
        # -M model args may change the answers (a revision, a chat template); a key leaves out the endpoint's own.
        self._model_args = {k: v for k, v in sorted((model_args or {}).items()) if k not in TRANSPORT_ARGS}
        self.name = inner.name
        self.has_chat_template = inner.has_chat_template
        self._identity = inner.identity()
        self._content = model_content(self._identity)
        self._model_label = str(self._identity.get("id", inner.name))
        self.hits = 0
        self.misses = 0

    def identity(self) -> dict[str, Any]:
        """The wrapped model's identity (the cache changes no answer)."""
        return self._identity

    def keys(
        self, prompts: list[Prompt], config: GenerationConfig, word_pairs: list[tuple[str, str]] | None
    ) -> list[str]:
        """One content address per prompt: the model by content and its args, decoding, prompt and word pairs."""
        base: dict[str, Any] = {
            "model": self._content,
            "decoding": decoding_key(config),
            "word_pairs": None if word_pairs is None else [list(p) for p in word_pairs],
        }
        if self._model_args:
            base["model_args"] = self._model_args
        return [cache_key({**base, "prompt": prompt_json(p)}) for p in prompts]

    def generate(
        self,
        prompts: list[Prompt],
        config: GenerationConfig,
        word_pairs: list[tuple[str, str]] | None = None,
    ) -> list[Completion]:
        """Answer from the cache where possible; ask the wrapped model for the misses only."""
        keys = self.keys(prompts, config, word_pairs)
        stored = self.cache.get_many(keys)
        out: list[Completion | None] = [usable_entry(stored.get(k), word_pairs) for k in keys]
        self.cache.discard([k for k, c in zip(keys, out, strict=True) if c is None and k in stored])
        missing = [i for i, c in enumerate(out) if c is None]
        self.hits += len(prompts) - len(missing)
        self.misses += len(missing)
        if not missing:
            return out  # type: ignore[return-value]
        asked = [prompts[i] for i in missing]
        if getattr(self.inner, "streams_results", False):

            def keep(index: int, completion: Completion) -> None:
                if cacheable(completion):
                    self.cache.put(
                        keys[missing[index]], completion_to_json(completion), "generation", self._model_label
                    )

            fresh = self.inner.generate(asked, config, word_pairs, on_result=keep)  # type: ignore[call-arg]
        else:
            fresh = self.inner.generate(asked, config, word_pairs)
            self.cache.put_many(
                [(keys[i], completion_to_json(c)) for i, c in zip(missing, fresh, strict=True) if cacheable(c)],
                "generation",
                self._model_label,
            )
        for i, completion in zip(missing, fresh, strict=True):
            out[i] = completion
        return out  # type: ignore[return-value]

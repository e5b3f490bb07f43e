"""A backend wrapper that answers from the shared cache and asks the wrapped model only for the rest.

Generations (with the scores read in the same call) and `loglikelihood` answers are both stored, keyed by the
model's content (models/content.py: never a path or an endpoint) and args, the prompt, the decoding parameters
(generations only) and the continuations scored.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fairprobe.cache import Cache, cache_key
from fairprobe.models.base import (
    Completion,
    GenerationCall,
    GenerationConfig,
    ModelBackend,
    Prompt,
    ScoreRequest,
    Scores,
    generate_call,
    row_seeds,
)
from fairprobe.models.content import model_content
from fairprobe.models.server_scoring import ScoringAnswerError, check_total
from fairprobe.records import message_dicts

STATUSES = ("exact", "upper_bound", "unavailable")
# -M settings of how to reach a model, not of what it answers: never part of a key (nor is the API key).
TRANSPORT_ARGS = frozenset({"api_key", "base_url", "concurrency", "timeout", "retry", "limits"})


def prompt_json(prompt: Prompt) -> str | list[dict[str, str]]:
    """A prompt as plain JSON (chat messages as role/content dicts) for hashing."""
    if isinstance(prompt, str):
        return prompt
    return message_dicts(prompt)


def decoding_key(config: GenerationConfig, seed: int | None = None) -> dict[str, Any]:
    """The decoding parameters that change an answer: a sampled answer's own seed (`seed`, else the config's);
    greedy answers do not depend on the seed."""
    params = config.model_dump()
    if config.greedy:
        params.pop("seed")
    elif seed is not None:
        params["seed"] = seed
    return params


def usable_scores(obj: Any, continuations: tuple[str, ...]) -> Scores | None:
    """Cached scores of these continuations, or None when the entry is damaged (then they are asked again): checked
    as a live answer is, each logprob and the disjoint continuations' total probability (at most 1)."""
    try:
        scores = Scores.from_json(obj)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError):
        return None
    if len(scores.continuations) != len(continuations) or scores.error is not None:
        return None
    for c in scores.continuations:
        if c.status not in STATUSES or (c.logprob is None) != (c.status == "unavailable"):
            return None
        if c.logprob is not None and not (isinstance(c.logprob, float) and math.isfinite(c.logprob) and c.logprob <= 0):
            return None
    try:
        check_total(continuations, list(scores.continuations))
    except ScoringAnswerError:
        return None
    return scores


def usable_completion(obj: Any, continuations: tuple[str, ...]) -> Completion | None:
    """A cached completion (with its scores when continuations were asked), or None when absent or damaged; a
    generation whose scoring failed comes back without scores (`scores` None), to be scored again."""
    if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
        return None
    if not continuations:
        return Completion(text=obj["text"])
    stored = obj.get("scores")
    if isinstance(stored, dict) and isinstance(stored.get("error"), str):
        return Completion(text=obj["text"])
    scores = usable_scores(stored, continuations)
    return None if scores is None else Completion(text=obj["text"], scores=scores)


def cacheable(c: Completion) -> bool:
    """A generation is stored once it came (its scores too, or their failure, which is asked again next time);
    a failed call is not."""
    return c.error is None


def completion_json(c: Completion) -> dict[str, Any]:
    """What the cache stores of a completion."""
    return {"text": c.text, "scores": None if c.scores is None else c.scores.to_json()}


@dataclass
class Lookup:
    """A generation call's answers found in the cache (None where missing), their keys and each prompt's seed."""

    call: GenerationCall
    found: list[Completion | None]
    keys: list[str]
    drawn: list[int] | None

    def _missing(self) -> list[int]:
        return [i for i, c in enumerate(self.found) if c is None]

    def missed(self) -> GenerationCall:
        """The call of the prompts the cache lacks (the prompts' seeds as in the whole call; greedy calls none)."""
        missing, call = self._missing(), self.call
        return GenerationCall(
            [call.prompts[i] for i in missing],
            call.config,
            None if call.score is None else [tuple(call.score[i]) for i in missing],
            None if self.drawn is None else [self.drawn[i] for i in missing],
        )

    def missing_keys(self) -> list[str]:
        """The keys of the prompts the cache lacks."""
        return [self.keys[i] for i in self._missing()]

    def filled(self, fresh: list[Completion]) -> list[Completion]:
        """The call's answers: the cached ones, and `fresh` in the places of the missing ones."""
        out = list(self.found)
        for i, completion in zip(self._missing(), fresh, strict=True):
            out[i] = completion
        return [c for c in out if c is not None]


class CachedBackend(ModelBackend):
    """Wraps any backend: cached prompts cost no model call; fresh answers are stored as they arrive.

    A wrapped backend that sets `streams_results` answers through `generate_streamed`, each answer stored as it
    arrives, so answers already paid for are kept even when a later request of the batch fails.
    """

    def __init__(self, inner: ModelBackend, cache: Cache, model_args: dict[str, Any] | None = None) -> None:
        self.inner = inner
        self.cache = cache
        self.name = inner.name
        self.has_chat_template = inner.has_chat_template
        self._identity = inner.identity()
        self._content = model_content(self._identity)
        # -M model args may change the answers (a revision, a chat template): a key holds those the identity does not
        # already say (its resolved dtype), and never how the model is reached (endpoint, timeouts, the API key).
        args = (model_args or {}).items()
        self._model_args = {k: v for k, v in sorted(args) if k not in TRANSPORT_ARGS and k not in self._identity}
        self._model_label = str(self._identity.get("id", inner.name))
        self.hits = 0
        self.misses = 0

    def identity(self) -> dict[str, Any]:
        """The wrapped model's identity (the cache changes no answer)."""
        return self._identity

    @property
    def notices(self) -> list[str]:
        """The wrapped backend's notices."""
        return self.inner.notices

    def scoring_mode(self) -> str | None:
        """How the wrapped backend scores (the cache keeps what it answered)."""
        return self.inner.scoring_mode()

    def scoring_info(self) -> dict[str, Any] | None:
        """The wrapped backend's record of how it scored."""
        return self.inner.scoring_info()

    def answer_fingerprint(self) -> dict[str, Any] | None:
        """The wrapped backend's answer to the fixed probe prompt (never cached: it names the model served now)."""
        return self.inner.answer_fingerprint()

    def _key(self, fields: dict[str, Any]) -> str:
        """A content address: the model by content (never a path or endpoint) and its args, plus the call's fields."""
        base: dict[str, Any] = {"model": self._content, **fields}
        if self._model_args:
            base["model_args"] = self._model_args
        return cache_key(base)

    def scoring(self) -> dict[str, str]:
        """How the wrapped server scores continuations ("exact" or "topk"), for the keys of answers that carry
        scores: bounds from a top-k endpoint never answer for an exact one of the same model. Empty for a local
        model (exact by construction)."""
        mode = self.inner.scoring_mode()
        return {"scoring": mode} if mode is not None else {}

    def keys(
        self,
        prompts: list[Prompt],
        config: GenerationConfig,
        score: Sequence[tuple[str, ...]],
        seeds: Sequence[int] | None = None,
    ) -> list[str]:
        """One content address per prompt: the model by content and its args, decoding (a sampled prompt's own
        seed), prompt, continuations (and how a server scores them)."""
        drawn: Sequence[int | None] = [None] * len(prompts) if config.greedy else row_seeds(config, len(prompts), seeds)
        scoring = self.scoring() if any(score) else {}
        return [
            self._key(
                {
                    "decoding": decoding_key(config, seed),
                    "score": list(s) or None,
                    "prompt": prompt_json(p),
                    **(scoring if s else {}),
                }
            )
            for p, s, seed in zip(prompts, score, drawn, strict=True)
        ]

    def _lookup(self, keys: list[str], read: Callable[[Any, int], Any]) -> list[Any]:
        """Cached answers by key (None where absent or damaged; damaged entries are dropped)."""
        stored = self.cache.get_many(keys)
        out = [None if stored.get(k) is None else read(stored[k], i) for i, k in enumerate(keys)]
        self.cache.discard([k for k, c in zip(keys, out, strict=True) if c is None and k in stored])
        missing = sum(1 for c in out if c is None)
        self.hits += len(keys) - missing
        self.misses += missing
        return out

    @property
    def pools_calls(self) -> bool:  # type: ignore[override]
        """Whether the wrapped backend pools calls (the cache passes its misses on as one pooled call)."""
        return bool(getattr(self.inner, "pools_calls", False))

    def generate(
        self,
        prompts: list[Prompt],
        config: GenerationConfig,
        score: Sequence[tuple[str, ...]] | None = None,
        seeds: Sequence[int] | None = None,
    ) -> list[Completion]:
        """Answer from the cache where possible; ask the wrapped model for the misses only (`generate_pooled` of this
        one call)."""
        return self.generate_pooled([GenerationCall(prompts, config, score, seeds)])[0]

    def generate_pooled(self, calls: Sequence[GenerationCall]) -> list[list[Completion]]:
        """Each call answered from the cache where possible; the misses of all calls asked of the wrapped model in
        one pooled call (`calls[0]`'s first, so its answers are the ones told to the progress), a sampled prompt with
        the seed it has in its whole call, so a hit and a fresh answer are drawn alike."""
        found = [self._found(call) for call in calls]
        asked = [f.missed() for f in found]
        if self.inner.streams_results or not self.pools_calls or not any(call.prompts for call in asked):
            fresh = [self._ask(call, f.missing_keys()) for call, f in zip(asked, found, strict=True)]
        else:
            fresh = self.inner.generate_pooled(asked)
            for f, answers in zip(found, fresh, strict=True):
                self._store(f.missing_keys(), answers)
        return [f.filled(answers) for f, answers in zip(found, fresh, strict=True)]

    def _found(self, call: GenerationCall) -> Lookup:
        """A call's cached answers (a generation kept while its scoring failed is scored again here) and misses."""
        wanted = [tuple(s) for s in call.score] if call.score is not None else [()] * len(call.prompts)
        drawn = None if call.config.greedy else row_seeds(call.config, len(call.prompts), call.seeds)
        keys = self.keys(call.prompts, call.config, wanted, drawn)
        out: list[Completion | None] = self._lookup(keys, lambda obj, i: usable_completion(obj, wanted[i]))
        unscored = [i for i, c in enumerate(out) if c is not None and wanted[i] and c.scores is None]
        if unscored:  # generations kept while their scoring failed: only the scoring is asked again
            requests = [ScoreRequest(call.prompts[i], wanted[i]) for i in unscored]
            for i, scores in zip(unscored, self.loglikelihood(requests), strict=True):
                out[i].scores = scores  # type: ignore[union-attr]
        return Lookup(call, out, keys, drawn)

    def _ask(self, call: GenerationCall, keys: list[str]) -> list[Completion]:
        """The wrapped model's answers to one call, each stored as it arrives (streaming backends) or with the
        batch."""
        if not call.prompts:
            return []
        if self.inner.streams_results:

            def keep(index: int, completion: Completion) -> None:
                if cacheable(completion):
                    self.cache.put(keys[index], completion_json(completion), "generation", self._model_label)

            return self.inner.generate_streamed(call.prompts, call.config, call.score, keep, call.seeds)
        fresh = generate_call(self.inner, call)
        self._store(keys, fresh)
        return fresh

    def _store(self, keys: list[str], fresh: list[Completion]) -> None:
        """Fresh answers stored under their keys (a failed call is not)."""
        stored = [(k, completion_json(c)) for k, c in zip(keys, fresh, strict=True) if cacheable(c)]
        self.cache.put_many(stored, "generation", self._model_label)

    def loglikelihood(self, requests: list[ScoreRequest]) -> list[Scores]:
        """Scores from the cache where possible; the wrapped model scores the misses only."""
        scoring = self.scoring() if requests else {}
        keys = [
            self._key({"loglikelihood": list(r.continuations), "prompt": prompt_json(r.prompt), **scoring})
            for r in requests
        ]
        out: list[Scores | None] = self._lookup(keys, lambda obj, i: usable_scores(obj, requests[i].continuations))
        missing = [i for i, s in enumerate(out) if s is None]
        if missing:
            fresh = self.inner.loglikelihood([requests[i] for i in missing])
            stored = [(keys[i], s.to_json()) for i, s in zip(missing, fresh, strict=True) if s.error is None]
            self.cache.put_many(stored, "loglikelihood", self._model_label)
            for i, scores in zip(missing, fresh, strict=True):
                out[i] = scores
        return [s for s in out if s is not None]

"""The one backend interface every model implements (Hugging Face, embedded GGUF, HTTP servers)."""

from __future__ import annotations

import hashlib
import inspect
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from fairprobe.errors import ConfigError
from fairprobe.records import ChatMessage

Prompt = str | list[ChatMessage]


class GenerationConfig(BaseModel):
    """Decoding parameters; greedy with 50 new tokens is the paper's default."""

    model_config = ConfigDict(allow_inf_nan=False)

    max_new_tokens: int = Field(50, ge=1, le=4096)
    temperature: float = Field(0.0, ge=0.0, le=5.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0)
    seed: int = 0

    @model_validator(mode="after")
    def _check(self) -> GenerationConfig:
        if self.temperature == 0.0 and (self.top_p != 1.0 or self.top_k != 0):
            raise ConfigError("top-p / top-k need sampling: set --temperature above 0")
        return self

    @property
    def greedy(self) -> bool:
        """True when decoding is greedy (temperature 0)."""
        return self.temperature == 0.0

    @property
    def drawn_by(self) -> tuple[float, float, int]:
        """What a decode step draws its token by (temperature, top-p, top-k): calls alike in these can share their
        decode steps, whatever their most new tokens."""
        return self.temperature, self.top_p, self.top_k


def stable_seed(*fields: Any) -> int:
    """A 63-bit sampling seed from JSON-able fields (blake2b of their JSON): the same in every process and Python,
    and unrelated between any two lists of fields, so requests seeded this way draw independent random streams."""
    text = json.dumps(fields, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") >> 1


def row_seeds(config: GenerationConfig, count: int, seeds: Sequence[int] | None) -> list[int]:
    """Each prompt's own sampling seed: `seeds` as given, else one derived from `config.seed` and the prompt's
    place in the call (never one seed shared by every prompt, which would draw them all with the same numbers)."""
    if seeds is not None:
        if len(seeds) != count:
            raise ValueError(f"{len(seeds)} seeds for {count} prompts")
        return list(seeds)
    return [stable_seed(config.seed, i) for i in range(count)]


def takes_seeds(backend: Any) -> bool:
    """Whether a backend's `generate` takes a seed per prompt (`seeds=`): fairprobe's own do; a model written
    before they did (a plugin, a model passed in memory) may not."""
    try:
        parameters = inspect.signature(backend.generate).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "seeds" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def generate_seeded(
    backend: Any,
    prompts: list[Prompt],
    config: GenerationConfig,
    score: Sequence[tuple[str, ...]] | None,
    seeds: Sequence[int],
    **kwargs: Any,
) -> list[Completion]:
    """Sampled completions, prompt i drawn from `seeds[i]`: in one call where the backend takes `seeds`, else one
    call per prompt with the prompt's seed as `config.seed` (never one seed for every prompt of a call)."""
    if takes_seeds(backend):
        return backend.generate(prompts, config, score, seeds=list(seeds), **kwargs)
    out: list[Completion] = []
    on_result = kwargs.pop("on_result", None)
    for i, (prompt, seed) in enumerate(zip(prompts, seeds, strict=True)):
        one = None if score is None else [score[i]]
        if on_result is not None:  # the answer's index in the whole call, not in this one-prompt call
            kwargs["on_result"] = lambda _, completion, at=i: on_result(at, completion)
        out.extend(backend.generate([prompt], config.model_copy(update={"seed": seed}), one, **kwargs))
    return out


@dataclass(frozen=True)
class GenerationCall:
    """The arguments of one `generate` call: its prompts, decoding, the continuations scored after each prompt (None:
    none) and each sampled prompt's seed (None: derived with `row_seeds`)."""

    prompts: list[Prompt]
    config: GenerationConfig
    score: Sequence[tuple[str, ...]] | None = None
    seeds: Sequence[int] | None = None


def generate_call(backend: Any, call: GenerationCall) -> list[Completion]:
    """`backend.generate` on one call's arguments, a sampled call's prompts with their seeds (`generate_seeded`)."""
    if call.config.greedy or call.seeds is None:
        return backend.generate(call.prompts, call.config, call.score)
    return generate_seeded(backend, call.prompts, call.config, call.score, call.seeds)


ScoreStatus = Literal["exact", "upper_bound", "unavailable"]


@dataclass(frozen=True)
class ScoreRequest:
    """A loglikelihood request: a prompt and the continuations to score after it.

    A chat prompt (a list of messages) is rendered with the model's chat template and its generation prompt, exactly
    as before generating. Each continuation is scored exactly as given (no space is added: the paper's words are
    " she", an option may be "(a)"); it is tokenized on its own, without special tokens, and its tokens follow the
    prompt's, so the boundary between them is the same on every backend.
    """

    prompt: Prompt
    continuations: tuple[str, ...]


@dataclass(frozen=True)
class ContinuationScore:
    """log P(continuation | prompt), summed over the continuation's tokens, and how well it is known.

    `status`: "exact" (`logprob` is the sum); "upper_bound" (a server that gives only its top-k logprobs: the
    log-probability is at most `logprob`; a continuation whose first token is outside the list has at most the
    smallest listed probability, one of several tokens at most its first token's); "unavailable" (`logprob` is None).
    `tokens` counts the continuation's tokens and `greedy` says whether greedy decoding would produce exactly them
    (None where the backend cannot tell).
    """

    logprob: float | None
    tokens: int | None = None
    greedy: bool | None = None
    status: ScoreStatus = "exact"

    @property
    def prob(self) -> float | None:
        """P(continuation | prompt) (an upper bound on it when `status` is upper_bound); None when unavailable."""
        return None if self.logprob is None else math.exp(self.logprob)


UNAVAILABLE = ContinuationScore(logprob=None, status="unavailable")


@dataclass(frozen=True)
class Scores:
    """The answer to one scoring request: one ContinuationScore per continuation, in the order asked.

    `error` is set when the answer was malformed or refused (then no number of it is used). `mode` says how a
    server read them ("exact": prompt-token logprobs; "topk": bounds from its `top_logprobs` top logprobs);
    None on a local model, whose full distribution is at hand.
    """

    continuations: tuple[ContinuationScore, ...]
    error: str | None = None
    mode: str | None = None
    top_logprobs: int | None = None

    @classmethod
    def failed(cls, count: int, error: str, mode: str) -> Scores:
        """The answer to a scoring request that failed: `count` unavailable scores and why."""
        return cls(tuple(UNAVAILABLE for _ in range(count)), error=error, mode=mode)

    def logprobs(self) -> np.ndarray:
        """Each continuation's logprob (its bound where only bounded), NaN where unavailable."""
        return np.array([np.nan if c.logprob is None else c.logprob for c in self.continuations], dtype=np.float64)

    def exact(self) -> np.ndarray:
        """Which continuations are known exactly (a boolean array)."""
        return np.array([c.status == "exact" for c in self.continuations], dtype=bool)

    def to_json(self) -> dict[str, Any]:
        """What the cache stores (see `from_json`)."""
        rows = [[c.logprob, c.tokens, c.greedy, c.status] for c in self.continuations]
        return {"continuations": rows, "error": self.error, "mode": self.mode, "top_logprobs": self.top_logprobs}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Scores:
        """Inverse of `to_json`; a malformed entry raises ValueError, TypeError or KeyError."""
        rows = [ContinuationScore(logprob=r[0], tokens=r[1], greedy=r[2], status=r[3]) for r in obj["continuations"]]
        return cls(tuple(rows), obj.get("error"), obj.get("mode"), obj.get("top_logprobs"))


@dataclass
class Completion:
    """A model's reply to one prompt: its text and, when asked in the same call, the scores of continuations.

    `scores` answers the `score` tuple given to `ModelBackend.generate` for this prompt (read from the same forward
    pass as the generation); `error` is set when the call failed (then `text` is empty). `prompt_tokens` and
    `new_tokens` are the model's work on it, where the backend knows them (a local model; a server's `usage`), so
    progress can show tokens a second; None otherwise (and on a cached answer, which cost no model work).
    """

    text: str
    scores: Scores | None = None
    error: str | None = None
    prompt_tokens: int | None = None
    new_tokens: int | None = None


@runtime_checkable
class ModelBackend(Protocol):
    """What every model offers (lm-eval's `generate_until` and `loglikelihood`): continue prompts, score continuations.

    `generate` continues each prompt (a string, or chat messages rendered with the model's chat template and its
    generation prompt). When sampling it draws prompt i with its own random stream, seeded by `seeds[i]` (else
    `row_seeds`): the draw of one prompt depends on nothing else in the call (not on the other prompts, the batch
    size or a resume); greedy calls are given no seeds. Given `score` (one tuple of continuations per prompt), it also scores those continuations
    after the prompt in the same call: one forward pass locally, one request per prompt on a server. `loglikelihood`
    scores continuations without generating. Exact on local models and on servers that score prompt tokens; bounded
    on servers that give only top-k logprobs; a server that gives neither is a one-line error naming the endpoint.

    The optional abilities the runner and the cache ask of every backend have defaults here, which a backend that
    subclasses this protocol inherits (a local model: exact scores, no notices, answers returned with the batch):
    `scoring_mode`, `scoring_info`, `answer_fingerprint`, `notices`, `streams_results`, `generate_streamed`,
    `pools_calls` and `generate_pooled`.
    """

    name: str
    has_chat_template: bool
    streams_results: bool = False
    pools_calls: bool = False  # whether `generate_pooled` answers several calls in fewer passes than one by one

    def generate_pooled(self, calls: Sequence[GenerationCall]) -> list[list[Completion]]:
        """The completions of several `generate` calls asked together, each call's in its prompts' order, each
        answer as its own call would give it. By default (`pools_calls` False) the calls are asked one after another.
        Only the answers of `calls[0]` are told to the progress as they come (`answers_came`): the others are asked
        ahead of their turn (the runner's `Lookahead`), and counted when their turn comes."""
        return [generate_call(self, call) for call in calls]

    @property
    def notices(self) -> list[str]:
        """Lines the run prints once the backend is ready (an endpoint dropped, scores bounded); none by default."""
        return []

    def scoring_mode(self) -> str | None:
        """How continuations are scored: "exact" or "topk" on a server (asked once), None on a local model, whose
        full distribution is at hand (exact by construction)."""
        return None

    def scoring_info(self) -> dict[str, Any] | None:
        """What the manifest records of how scores were read (a server's endpoints and modes); None locally."""
        return None

    def answer_fingerprint(self) -> dict[str, Any] | None:
        """A server's answers to a fixed probe prompt (a short greedy continuation with its top logprobs, and where
        it echoes, the prompt's token ids and logprobs; models/fingerprint.py compares two), so a resumed run can
        tell the model behind a name changed; None for a local model (known by content)."""
        return None

    def generate_streamed(
        self,
        prompts: list[Prompt],
        config: GenerationConfig,
        score: Sequence[tuple[str, ...]] | None,
        on_result: Callable[[int, Completion], None],
        seeds: Sequence[int] | None = None,
    ) -> list[Completion]:
        """`generate`, calling `on_result(index, completion)` for each answer as it arrives, so answers already
        paid for are kept when a later one fails. By default (`streams_results` False) they arrive with the batch."""
        drawn = {} if seeds is None else {"seeds": seeds}
        completions = self.generate(prompts, config, score, **drawn)
        for index, completion in enumerate(completions):
            on_result(index, completion)
        return completions

    def identity(self) -> dict[str, Any]:
        """What the manifest records about the model (id, revision or sha, dtype, device)."""
        ...

    def generate(
        self,
        prompts: list[Prompt],
        config: GenerationConfig,
        score: Sequence[tuple[str, ...]] | None = None,
        seeds: Sequence[int] | None = None,
    ) -> list[Completion]:
        """Continue each prompt (sampling prompt i from seed `seeds[i]`); with `score`, also score `score[i]` after
        `prompts[i]` (Completion.scores)."""
        ...

    def loglikelihood(self, requests: list[ScoreRequest]) -> list[Scores]:
        """log P(continuation | prompt) of every continuation of every request, without generating."""
        ...


@dataclass(frozen=True)
class LoraSettings:
    """A LoRA adapter's shape: rank, alpha, dropout, the modules it wraps, and the seed of its initial weights."""

    rank: int
    alpha: float
    dropout: float
    target_modules: tuple[str, ...]
    seed: int = 0


@dataclass(frozen=True)
class Window:
    """Next-token log-probabilities over the first K positions after each prompt, for the tuned and the frozen model.

    `tuned` and `base` have shape (B, K, V): position 0 is the distribution right after the prompt, position k
    the one after the frozen model's first k greedy continuation tokens (fed to both models). `valid` (B, K)
    is False after the continuation has ended. `tuned` carries gradients in training mode.
    """

    tuned: Any
    base: Any
    valid: Any


@runtime_checkable
class ScoringBackend(Protocol):
    """A backend with its weights at hand: it scores given text exactly (perplexity, drift fluency).

    Implemented by `fairprobe.models.hf.HFBackend`; API backends do not score arbitrary text.
    """

    def text_log_probs(self, prefixes: list[str], texts: list[str], batch_size: int = 32) -> list[np.ndarray]:
        """Log-probability of each token of `texts[i]` after `prefixes[i]` (prefix '': every token after the first)."""
        ...


@runtime_checkable
class TrainableBackend(ModelBackend, ScoringBackend, Protocol):
    """What Debias Tuning needs of a local model: LoRA on it, its frozen base, and differentiable scores.

    Everything training reads goes through these methods, never through the backend's model or tokenizer.
    """

    def add_lora(self, settings: LoraSettings) -> list[Any]:
        """Wrap the model in a fresh LoRA adapter; returns the trainable parameters."""
        ...

    def train_mode(self, on: bool) -> None:
        """Dropout on (training) or off (evaluation)."""
        ...

    def frozen_base(self) -> Any:
        """A context manager under which the model answers without its adapter (the frozen base model)."""
        ...

    def continuation_log_probs(self, prompts: list[str], continuations: tuple[str, ...], max_length: int) -> Any:
        """log P(continuation | prompt), shape (B, C), for plain prompts cut to max_length; differentiable in
        training mode (the same numbers `loglikelihood` gives, so Debias Tuning trains on what the metrics read)."""
        ...

    def first_token_ids(self, continuations: tuple[str, ...]) -> Any:
        """The distinct first tokens of the continuations (a 1-D tensor): what the KL term leaves out."""
        ...

    def continuation_window(self, prompts: list[str], positions: int, max_length: int) -> Window:
        """The tuned and frozen next-token distributions over the first `positions` continuation positions."""
        ...

    def generate_texts(self, prompts: list[str], max_new_tokens: int) -> list[str]:
        """Greedy continuations of plain-text prompts with the model as it is now (adapter on)."""
        ...

    def save_adapter(self, folder: Any) -> None:
        """Write the adapter (adapter_config.json and adapter_model.safetensors) to `folder`."""
        ...

    def load_adapter_weights(self, folder: Any) -> None:
        """Load adapter weights saved by `save_adapter` into the adapter added by `add_lora`."""
        ...

    def architecture(self) -> dict[str, Any]:
        """model_type, hidden_size, num_hidden_layers, vocab_size and whether the weights are 4-bit."""
        ...

    def adapt_threads(self) -> None:
        """Follow the free CPUs before a batch (a no-op off CPU)."""
        ...

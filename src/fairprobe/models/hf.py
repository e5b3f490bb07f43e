"""Hugging Face causal-LM backend: batched left-padded generation and exact scores of continuations (loglikelihood)."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    DynamicCache,
    LogitsProcessor,
    LogitsProcessorList,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers import GenerationConfig as HFGenerationConfig
from transformers.cache_utils import DynamicLayer
from transformers.utils import logging as transformers_logging

from fairprobe.errors import ConfigError, ModelError, first_line
from fairprobe.models import llama_step
from fairprobe.models.base import (
    Completion,
    GenerationCall,
    GenerationConfig,
    LoraSettings,
    ModelBackend,
    Prompt,
    ScoreRequest,
    Scores,
    Window,
    row_seeds,
)
from fairprobe.models.continuations import (
    ContinuationTable,
    as_scores,
    positions_from_mask,
    prompt_part,
    score_continuations,
    takes_tree,
)
from fairprobe.models.decode import Step, chooser, continue_decoding, first_step, model_step, scoring_copy
from fairprobe.models.engine import (
    CUDA_ATTENTION,
    PackedLinears,
    Shape,
    attention_without_cudnn,
    even_parts,
    prefill_alone,
    prefill_chunk,
    rows_within,
)
from fairprobe.models.heap import release_freed, released_after_forwards, releasing
from fairprobe.models.hub import quiet_hub
from fairprobe.models.mapped import MappedWeights
from fairprobe.models.reserved import ReservedPool, repeat_rows
from fairprobe.models.sampling import RowSampler
from fairprobe.models.settings import LocalSettings, parse_memory
from fairprobe.progress import answers_came
from fairprobe.records import message_dicts
from fairprobe.redact import clip
from fairprobe.threads import ThreadChooser, apply_threads

transformers_logging.set_verbosity_error()
transformers_logging.disable_progress_bar()


class _FirstStepCapture(LogitsProcessor):
    """Keeps the log-softmax of the raw logits at the first generation step (the next-word distribution)."""

    def __init__(self, prompt_len: int) -> None:
        self.prompt_len = prompt_len
        self.log_probs: torch.Tensor | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.shape[1] == self.prompt_len and self.log_probs is None:
            self.log_probs = scores.float().log_softmax(-1)
        return scores


@dataclass(frozen=True)
class PromptPass:
    """One prompt pass of a generation: prompts of call `call` and their encoding (`enc`, left-padded), their
    decoding, the continuations scored after each (None: none), each row's sampling seed, and what its scoring
    passes hold at most: copies of the prompts' cache, and positions of logits a row."""

    call: int
    config: GenerationConfig
    prompts: list[Prompt]
    enc: dict[str, torch.Tensor]
    score: list[tuple[str, ...]] | None
    seeds: list[int]
    copies: int
    scored: int

    @property
    def rows(self) -> int:
        """Its prompts."""
        return int(self.enc["input_ids"].shape[0])

    @property
    def length(self) -> int:
        """Its padded prompt length."""
        return int(self.enc["input_ids"].shape[1])


Slice = tuple[PromptPass, int, int]  # rows of a batch in a decode pool: the batch, its first row, how many


class HFBackend(ModelBackend):
    """Any transformers causal LM: generation and exact scores of continuations (full softmax)."""

    pools_calls = True  # several calls' decode steps run as one (generate_pooled)

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        name: str,
        info: dict[str, Any],
        batch_size: int = 32,
        memory: int | None = None,
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
        self._tables: dict[tuple[str, ...], ContinuationTable] = {}
        self.shape = Shape.of(model)
        self.memory = memory or self.shape.default_budget()
        self.memory_given = memory is not None
        self._packed: tuple[int, PackedLinears] | None = None
        self._mapped: tuple[tuple[int, int], MappedWeights] | None = None
        # On CPU the thread count follows the CPUs free right now (fairprobe.threads), checked per batch.
        self._threads = ThreadChooser() if self.device.type == "cpu" else None
        on_cuda = self.device.type == "cuda"
        self.restore_attention: Callable[[], None] = attention_without_cudnn(model) if on_cuda else lambda: None
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
        """Model id, source, sha, dtype and device for the manifest (and on CUDA the attention kernels, which
        decide the numbers too)."""
        return {
            **self.info,
            "backend": "hf",
            "dtype": str(self.model.dtype).removeprefix("torch."),
            "device": str(self.device),
            **({"attention": ", ".join(CUDA_ATTENTION).lower()} if self.device.type == "cuda" else {}),
            "memory": f"{self.memory / 1e9:.2f} GB" + ("" if self.memory_given else " (default: the weights' size)"),
        }

    def packed_linears(self) -> PackedLinears | None:
        """Packed decode weights of the current model (CPU float32), built once per model object."""
        if not PackedLinears.usable(self.model):
            return None
        if self._packed is None or self._packed[0] != id(self.model):
            self._packed = (id(self.model), PackedLinears(self.model))
        return self._packed[1]

    def mapped_weights(self) -> MappedWeights:
        """The model's parameters that lie in a mapped file (models/mapped.py), found again when the model or its
        weights' storage changed."""
        key = (id(self.model), next(self.model.parameters()).data_ptr())
        if self._mapped is None or self._mapped[0] != key:
            self._mapped = (key, MappedWeights.of(self.model))
        return self._mapped[1]

    def _budget(self, passes: Sequence[PromptPass]) -> int:
        """The memory budget of pools of `passes`: the set budget, and where they read no probabilities and run on
        packed weights, the mapped weights' bytes too (their pages are given back while such a pool runs,
        `_on_packed_weights`)."""
        if reads_nothing(passes) and self.packed_linears() is not None:
            return self.memory + self.mapped_weights().size
        return self.memory

    def _on_packed_weights(self, packed: PackedLinears) -> None:
        """Every Linear on its packed weight from now until `packed.decoding()` ends (a Llama model's products as
        its decode step stacks them, so that no other copy is packed), and the mapped weights' pages given back."""
        packed.start(groups=llama_step.products(self.model) if llama_step.fits(self.model) else ())
        self.mapped_weights().release()

    def rows_per_pass(
        self, enc: dict[str, torch.Tensor], new_tokens: int, copies: int = 1, chunked: bool = True, scored: int = 0
    ) -> int:
        """Rows of this batch one pass may take within the memory budget (engine.rows_within), evened out over
        the parts the batch needs (engine.even_parts)."""
        length = enc["input_ids"].shape[1]
        most = rows_within(self.shape, self.memory, length, new_tokens, copies, chunked, scored)
        return even_parts(enc["input_ids"].shape[0], most)

    def adapt_threads(self) -> None:
        """On CPU, set torch's threads to the CPUs free right now (called before every batch)."""
        if self._threads is not None:
            apply_threads(self._threads)

    def context_length(self) -> int | None:
        """The longest input the model takes (max_position_embeddings), None when the config does not say."""
        value = getattr(self.model.config, "max_position_embeddings", None)
        return int(value) if isinstance(value, int) and value > 0 else None

    def table(self, continuations: tuple[str, ...]) -> ContinuationTable:
        """The tokenized continuations, built once per tuple; their tail pass one tree where the model takes it."""
        if continuations not in self._tables:
            with torch.inference_mode(False):  # plain tensors: training reads the same table with autograd on
                tree = takes_tree(self.model)
                self._tables[continuations] = ContinuationTable.build(self.tokenizer, continuations, tree)
        return self._tables[continuations]

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
                    f"a prompt of {len(text):,} characters is longer than {self.name}'s context ({context:,} tokens): {clip(repr(text), 60)}"
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
        score: Sequence[tuple[str, ...]] | None = None,
        seeds: Sequence[int] | None = None,
    ) -> list[Completion]:
        """Continue prompts, with the scores of `score[i]` read from the same pass: `generate_pooled` of this one
        call."""
        return self.generate_pooled([GenerationCall(prompts, config, score, seeds)])[0]

    @torch.inference_mode()
    def generate_pooled(self, calls: Sequence[GenerationCall]) -> list[list[Completion]]:
        """Several calls' completions. Each call goes in batches of `batch_size`; the decode steps of consecutive
        batches with the same sampling settings run pooled, as many rows at once as the memory budget holds
        (`_pools`), so that one step reads every weight once for all their rows, and each batch's part in a pool has
        its own prompt pass and scoring passes (the whole batch's when it is not split). A sampled prompt is drawn
        from its own generator (`seeds[i]`, else `row_seeds`), so its reply does not depend on the prompts batched or
        pooled with it, nor on the parts a batch is split into. The answers of `calls[0]` are told to the progress."""
        out: list[list[Completion]] = [[] for _ in calls]
        for pool in self._pools(calls):
            for job, completions in zip(pool, self._generate_pool(pool), strict=True):
                out[job.call].extend(came(completions) if job.call == 0 else completions)
            release_freed()  # the pool's caches and activations, before the next pool allocates its own
        return out

    def _batches(self, index: int, call: GenerationCall) -> Iterator[PromptPass]:
        """Call `index`'s batches of `batch_size` prompts, each encoded whole with its scorings, its rows' seeds and
        what its scoring passes hold at most (`_scoring_holds`)."""
        drawn = row_seeds(call.config, len(call.prompts), call.seeds)
        for start in range(0, len(call.prompts), self.batch_size):
            batch = call.prompts[start : start + self.batch_size]
            chunk = None if call.score is None else [tuple(s) for s in call.score[start : start + self.batch_size]]
            seeds = drawn[start : start + self.batch_size]
            yield PromptPass(index, call.config, batch, self.encode(batch), chunk, seeds, *self._scoring_holds(chunk))

    def _scoring_holds(self, scored: Sequence[tuple[str, ...] | None] | None) -> tuple[int, int]:
        """What the scoring passes of rows that score `scored` hold at most a row: copies of the prompt's cache (the
        pass's own and its tail passes' repeats), and positions of logits of its largest tail pass."""
        tables = [self.table(tuple(c)) for c in scored or () if c]
        return 1 + max((t.tail_rows for t in tables), default=0), max((t.tail_positions for t in tables), default=0)

    def _part(self, batch: PromptPass, start: int, rows: int) -> PromptPass:
        """Rows `start`.. of a batch as a prompt pass of their own (encoded apart: less padding), or the batch."""
        if start == 0 and rows >= batch.rows:
            return batch
        end = start + rows
        return PromptPass(
            batch.call,
            batch.config,
            batch.prompts[start:end],
            self.encode(batch.prompts[start:end]),
            None if batch.score is None else batch.score[start:end],
            batch.seeds[start:end],
            batch.copies,
            batch.scored,
        )

    def _parts(self, batch: PromptPass, start: int, rows: int) -> list[PromptPass]:
        """A pool's slice of a batch as its prompt passes: a pass a row where its prompts are long (`_alone`), each
        encoded with no padding (see engine.prefill_chunk); else one pass (`_part`)."""
        if self._alone(batch, rows):
            return [self._part(batch, row, 1) for row in range(start, start + rows)]
        return [self._part(batch, start, rows)]

    def _alone(self, batch: PromptPass, rows: int) -> bool:
        """Whether `rows` rows of `batch` are prefilled a row at a time: a single row, or rows of long prompts
        (engine.prefill_alone) on a model whose passes share a pool (a pool's passes decode together whatever
        their number; a model that is not poolable decodes each batch as one pass)."""
        return rows == 1 or (prefill_alone(batch.length) and self.poolable())

    def _pools(self, calls: Sequence[GenerationCall]) -> Iterator[list[PromptPass]]:
        """The prompt passes whose decode steps run together, in the calls' order: each run of consecutive batches
        with the same sampling settings planned into pools within the memory budget (`_plan`). A model whose cache
        has layers of its own kind (a sliding window) decodes each batch alone, so each batch is a run of its own."""
        batches = [batch for index, call in enumerate(calls) for batch in self._batches(index, call)]
        if self.poolable():
            runs = [list(alike) for _, alike in itertools.groupby(batches, key=lambda batch: batch.config.drawn_by)]
        else:
            runs = [[batch] for batch in batches]
        for run in runs:
            planned = self._plan(run, self._budget(run))
            yield from ([part for piece in pool for part in self._parts(*piece)] for pool in planned)

    def _plan(self, run: list[PromptPass], budget: int) -> list[list[Slice]]:
        """A run's rows in pools, as slices (batch, first row, rows): filled row by row within the budget (`_fill`),
        a batch split between two pools where one is full, so that a batch's remainder decodes with the next batch's
        rows instead of in a small pool of its own; then evened out where as many even pools hold the same rows
        (for a single batch, `engine.even_parts`)."""
        filled = self._fill(run, None, budget)
        even = self._fill(run, -(-sum(batch.rows for batch in run) // len(filled)), budget)
        return even if len(even) == len(filled) else filled

    def _fill(self, run: list[PromptPass], cap: int | None, budget: int) -> list[list[Slice]]:
        """`run`'s rows in pools, in order, each pool taking as many rows as `budget` bytes (and `cap`) allow."""
        pools: list[list[Slice]] = []
        pool: list[Slice] = []
        for batch in run:
            start = 0
            while start < batch.rows:
                take = self._room(pool, batch, batch.rows - start, cap, budget)
                if take:
                    pool.append((batch, start, take))
                    start += take
                else:
                    pools.append(pool)
                    pool = []
        return [*pools, pool] if pool else pools

    def _room(self, pool: list[Slice], batch: PromptPass, most: int, cap: int | None, budget: int) -> int:
        """The most of `batch`'s next `most` rows that `pool` can take within `budget` bytes and `cap` rows (at least
        one row when the pool is empty). A slice is counted at its batch's padded length (a part encoded apart is
        no longer)."""
        held, taken = sum(rows for _, _, rows in pool), [(part, rows) for part, _, rows in pool]
        for rows in range(min(most, most if cap is None else cap - held), 0, -1):
            if self._pool_bytes([*taken, (batch, rows)]) <= budget:
                return rows
        return 0 if pool else 1

    def _pool_bytes(self, passes: list[tuple[PromptPass, int]]) -> int:
        """Peak working memory of a pool of prompt passes, each with the rows of it the pool takes (counted at its
        padded length): while a pass prefills, the prompts' keys and values of the whole pool (its buffers reach the
        longest prompt) and the pass's own activations, scoring copies and scoring logits; while the pool decodes,
        every row's keys and values at the longest prompt and most new tokens, and a step's logits and draw.
        Whichever is larger."""
        shape, longest = self.shape, max(job.length for job, _ in passes)
        rows, most = sum(r for _, r in passes), max(job.config.max_new_tokens for job, _ in passes)
        own = max(self._prefill_own(job, r) for job, r in passes)
        return max(shape.kv_per_token * rows * longest + own, rows * shape.decode_bytes(longest, most))

    def _prefill_own(self, job: PromptPass, rows: int) -> int:
        """What the prompt pass of `rows` rows of `job` holds besides the prompts' keys and values: activations,
        scoring copies and logits, of one row when they are prefilled a row at a time (`_alone`)."""
        alone = self._alone(job, rows)
        held = self.shape.prefill_bytes(job.length, job.copies, scored=job.scored, alone=alone)
        return (1 if alone else rows) * (held - self.shape.kv_per_token * job.length)

    def poolable(self) -> bool:
        """Whether the model's generation cache is of plain dynamic layers only (what `generate` builds from its
        config), so that passes can share one `ReservedPool`."""
        return all(type(layer) is DynamicLayer for layer in DynamicCache(config=self.model.config).layers)

    def _generate_pool(self, pool: list[PromptPass]) -> list[list[Completion]]:
        """Each pass's completions: its prompt pass and scoring passes (`_prompt_passes`), then one decode loop over
        every row of the pool on packed weights where they apply. A pool that reads no probabilities runs its prompt
        passes on the packed weights too (`_on_packed_weights`); any other on the plain kernels, so that every
        probability read is the model's own forward's."""
        room = max(j.config.max_new_tokens for j in pool)
        packed = self.packed_linears()
        with packed.decoding() if packed is not None else contextlib.nullcontext():
            if packed is not None and reads_nothing(pool):
                self._on_packed_weights(packed)
            # the decode step reads keys position-last in place; transformers' passes would need a copy of them
            position_last = packed is not None and reads_nothing(pool) and llama_step.fits(self.model)
            firsts, masks, generators, completions, cache = self._prompt_passes(pool, room, position_last)
            config = pool[0].config
            limits = torch.tensor([j.config.max_new_tokens for j in pool for _ in range(j.rows)])
            choose = chooser(config, generators or None)
            step = releasing(self._decode_step(packed, config.greedy))  # the heap stays flat over long replies
            new = continue_decoding(step, cache, torch.cat(firsts), torch.cat(masks), limits, self._stop(), choose)
        start = 0
        for job, done in zip(pool, completions, strict=True):
            self._finish(done, job, new[start : start + job.rows, : job.config.max_new_tokens])
            start += job.rows
        return completions

    def _prompt_passes(
        self, pool: list[PromptPass], room: int, position_last: bool = False
    ) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Generator], list[list[Completion]], Any]:
        """Each pass's prompt pass in turn (`_prompt_pass`): into its block of the pool's reserved buffers (a
        `ReservedPool`, its keys `position_last` when asked), or into its own cache then given `room` for the
        replies. Their first tokens, attention masks at the pool's longest prompt, row generators and completions,
        and the pool's cache."""
        longest = max(j.length for j in pool)
        reserved = None
        if self.poolable():
            like = self.model.get_input_embeddings().weight  # the dtype and device of the keys and values
            rows = sum(j.rows for j in pool)
            reserved = ReservedPool(rows, longest, room, self.shape.cache, like, position_last)
        firsts, masks, generators, completions, start = [], [], [], [], 0
        for job in pool:
            into = None if reserved is None else reserved.block(start, job.rows, job.length)
            first, cache, scored, sampler = self._prompt_pass(job, into)
            completions.append(scored)
            firsts.append(first)
            masks.append(torch.nn.functional.pad(job.enc["attention_mask"], (longest - job.length, 0)))
            generators.extend(sampler.generators if sampler is not None else [])
            start += job.rows
            release_freed()  # the pass's activations and scoring copies, before the next pass
        pooled = repeat_rows(cache, 1, room) if reserved is None else reserved.cache()
        return firsts, masks, generators, completions, pooled

    def _prompt_pass(
        self, job: PromptPass, into: Any = None
    ) -> tuple[torch.Tensor, Any, list[Completion], RowSampler | None]:
        """A pass's first tokens, its prompts' cache (`into`, when given, filled) and its completions with their
        scores read (on the plain kernels, before any decode step uses the cache), and the sampler that drew its
        first tokens (None when greedy)."""
        capture = _FirstStepCapture(job.length)
        processors: list[LogitsProcessor] = [capture]
        sampler = None if job.config.greedy else RowSampler(job.seeds, job.config, self.device)
        if sampler is not None:  # sampled row by row (models/sampling.py), then decoded greedily
            processors.append(sampler)
        chunk = prefill_chunk(job.length, alone=job.rows == 1)
        with released_after_forwards(self.model) if chunk else contextlib.nullcontext():
            first, cache = first_step(self.model, job.enc, LogitsProcessorList(processors), chunk, into)
        completions = [Completion(text="") for _ in range(len(first))]
        if job.score and any(job.score):
            prompt_cache = prompt_part(scoring_copy(cache), job.length)
            for rows, scores in self._score_rows(job.enc, job.score, capture.log_probs, prompt_cache):
                for row, scored in zip(rows, scores, strict=True):
                    completions[row].scores = scored
            del prompt_cache  # its copies of the prompt's keys and values are not needed while decoding
        return first, cache, completions, sampler

    def _finish(self, completions: list[Completion], job: PromptPass, new: torch.Tensor) -> None:
        """A pass's completions given their reply tokens (rows, its most new tokens): texts and token counts."""
        texts = self.tokenizer.batch_decode(new, skip_special_tokens=True)
        read, made = job.enc["attention_mask"].sum(1).tolist(), self.until_end(new).sum(1).tolist()
        for completion, text, n, m in zip(completions, texts, read, made, strict=True):
            completion.text, completion.prompt_tokens, completion.new_tokens = text, int(n), int(m)

    def _decode_step(self, packed: PackedLinears | None, greedy: bool) -> Step:
        """The decode step on packed weights when they apply: a Llama model's own operations called directly
        (llama_step.LlamaStep), any other model's forward with its Linears on the packed weights; else the
        model's forward as it is."""
        if packed is None:
            return model_step(self.model)
        if llama_step.fits(self.model):
            return llama_step.LlamaStep(self.model, packed, greedy)
        packed.start(greedy=greedy)
        return model_step(self.model)

    def _stop(self) -> tuple[list[int], int]:
        """The end-of-sequence ids and the pad id of generation."""
        eos = self.model.generation_config.eos_token_id
        return [int(e) for e in (eos if isinstance(eos, list) else [eos]) if e is not None], int(
            self.tokenizer.pad_token_id
        )

    def _score_rows(
        self,
        enc: dict[str, torch.Tensor],
        score: list[tuple[str, ...]],
        first_log_probs: torch.Tensor | None = None,
        cache: Any = None,
    ) -> list[tuple[list[int], list[Scores]]]:
        """Scores of each row's continuations, one pass per distinct tuple of continuations (rows that share it).

        With one tuple for every row (the usual case) the prompts' cache and first-step log-probabilities are used
        as they are; otherwise each group of rows takes its part of them (and the cache is not shared between
        groups: each group after the first runs its prompts again).
        """
        groups: dict[tuple[str, ...], list[int]] = {}
        for row, continuations in enumerate(score):
            if continuations:
                groups.setdefault(tuple(continuations), []).append(row)
        out = []
        for continuations, rows in groups.items():
            whole = len(rows) == len(score)
            pick = torch.tensor(rows, device=self.device)
            result = score_continuations(
                self.model,
                enc["input_ids"] if whole else enc["input_ids"][pick],
                enc["attention_mask"] if whole else enc["attention_mask"][pick],
                self.table(continuations),
                first_log_probs=None
                if first_log_probs is None
                else first_log_probs[pick]
                if not whole
                else first_log_probs,
                prompt_cache=cache if whole else None,
                greedy=True,
            )
            out.append((rows, as_scores(result, self.table(continuations))))
        return out

    @torch.inference_mode()
    def loglikelihood(self, requests: list[ScoreRequest]) -> list[Scores]:
        """log P(continuation | prompt) of every request's continuations: one prompt pass per batch, exact. The passes
        read the plain weights, so the packed copy is let go first (`PackedLinears.drop`): a pool before them on the
        packed weights gave the mapped ones back, and these passes map them again."""
        if (packed := self.packed_linears()) is not None:
            packed.drop()
        out: list[Scores] = []
        for start in range(0, len(requests), self.batch_size):
            batch = requests[start : start + self.batch_size]
            enc = self.encode([r.prompt for r in batch])
            copies, scored = self._scoring_holds([tuple(r.continuations) for r in batch])
            rows = self.rows_per_pass(enc, 0, copies, chunked=False, scored=scored)
            for part in range(0, len(batch), rows):
                chunk = batch[part : part + rows]
                out.extend(self._score_requests(chunk, enc if rows >= len(batch) else None))
                release_freed()  # the pass's caches and logits, before the next pass allocates its own
                answers_came(len(chunk))
        return out

    def _score_requests(self, chunk: list[ScoreRequest], enc: dict[str, torch.Tensor] | None) -> list[Scores]:
        """Scores of one pass's requests (`enc` their encoding when already made)."""
        enc = enc or self.encode([r.prompt for r in chunk])
        scores: list[Scores] = [Scores(())] * len(chunk)
        for rows, scored in self._score_rows(enc, [r.continuations for r in chunk]):
            for row, one in zip(rows, scored, strict=True):
                scores[row] = one
        return scores

    # The scoring and training interface (models.base.ScoringBackend, TrainableBackend): Debias Tuning,
    # perplexity and the drift metrics use only these methods, never the model or tokenizer.

    def _pack(self, prefixes: list[str], texts: list[str], max_length: int) -> tuple[torch.Tensor, ...]:
        """Left-padded ids of prefix + text (tokenized apart, so the boundary is exact) and the scored targets."""
        rows: list[tuple[list[int], int]] = []
        for prefix, text in zip(prefixes, texts, strict=True):
            head = self.tokenizer(prefix)["input_ids"] if prefix else []
            tail = self.tokenizer(text, add_special_tokens=not prefix)["input_ids"] if text else []
            ids = (head + tail)[-max_length:]
            rows.append((ids, max(0, min(len(tail) - (0 if prefix else 1), len(ids) - 1))))
        width = max(2, *(len(ids) for ids, _ in rows))
        pad = self.tokenizer.pad_token_id
        ids = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        scored = torch.zeros((len(rows), width - 1), dtype=torch.bool)
        for i, (row, n_scored) in enumerate(rows):
            if row:
                ids[i, width - len(row) :] = torch.tensor(row)
                mask[i, width - len(row) :] = 1
            scored[i, width - 1 - n_scored :] = n_scored > 0
        return ids.to(self.device), mask.to(self.device), scored.to(self.device)

    @torch.inference_mode()
    def text_log_probs(self, prefixes: list[str], texts: list[str], batch_size: int = 32) -> list[np.ndarray]:
        """Log-probability of each token of `texts[i]` after `prefixes[i]` (prefix '': every token after the first)."""
        was_training = self.model.training
        self.model.eval()
        out: list[np.ndarray] = []
        try:
            for start in range(0, len(texts), batch_size):
                self.adapt_threads()
                ids, mask, scored = self._pack(
                    prefixes[start : start + batch_size], texts[start : start + batch_size], 4096
                )
                logits = self.model(input_ids=ids, attention_mask=mask, position_ids=positions_from_mask(mask)).logits
                lp = logits[:, :-1].float().log_softmax(-1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
                lp, scored = lp.double().cpu().numpy(), scored.cpu().numpy()
                out.extend(lp[i][scored[i]] for i in range(len(lp)))
        finally:
            self.model.train(was_training)
        return out

    def add_lora(self, settings: LoraSettings) -> list[torch.nn.Parameter]:
        """Wrap the model in a fresh peft LoRA adapter (after k-bit preparation when 4-bit); the trainable parameters."""
        from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

        from fairprobe.models.adapters import quiet_peft_warnings

        names = {name.rsplit(".", 1)[-1] for name, _ in self.model.named_modules()}
        missing = [t for t in settings.target_modules if t not in names]
        if missing:
            raise ConfigError(
                f"LoRA target modules {', '.join(missing)} are not in model {self.name}; "
                f"set --targets to module names it has (e.g. {', '.join(sorted(n for n in names if 'proj' in n)[:7])})"
            )
        model = self.model
        if getattr(model, "is_loaded_in_4bit", False):
            model = prepare_model_for_kbit_training(model)
        torch.manual_seed(settings.seed)
        quiet_peft_warnings()
        lora = LoraConfig(
            r=settings.rank,
            lora_alpha=settings.alpha,
            lora_dropout=settings.dropout,
            target_modules=list(settings.target_modules),
            bias="none",
            task_type="CAUSAL_LM",
        )
        self.model = get_peft_model(model, lora)
        return [p for p in self.model.parameters() if p.requires_grad]

    def train_mode(self, on: bool) -> None:
        """Dropout on (training) or off (evaluation)."""
        self.model.train(on)

    def frozen_base(self) -> contextlib.AbstractContextManager[None]:
        """The model without its adapter (a no-op before `add_lora`)."""
        disable = getattr(self.model, "disable_adapter", None)
        return disable() if disable is not None else contextlib.nullcontext()

    def _encode_training(self, prompts: list[str], max_length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Left-padded plain prompts cut to max_length from the left (the prompt's end is what matters)."""
        self.adapt_threads()
        side = self.tokenizer.truncation_side
        self.tokenizer.truncation_side = "left"
        try:
            enc = self.tokenizer(prompts, return_tensors="pt", padding=True, truncation=True, max_length=max_length)
        finally:
            self.tokenizer.truncation_side = side
        return enc["input_ids"].to(self.device), enc["attention_mask"].to(self.device)

    def continuation_log_probs(
        self, prompts: list[str], continuations: tuple[str, ...], max_length: int
    ) -> torch.Tensor:
        """log P(continuation | prompt) (B, C) for plain prompts cut to max_length; differentiable outside inference mode."""
        ids, mask = self._encode_training(prompts, max_length)
        table = self.table(tuple(continuations))
        return score_continuations(self.model, ids, mask, table).log_probs

    def first_token_ids(self, continuations: tuple[str, ...]) -> torch.Tensor:
        """The distinct first tokens of the continuations."""
        return torch.unique(self.table(tuple(continuations)).first)

    def continuation_window(self, prompts: list[str], positions: int, max_length: int) -> Window:
        """Tuned and frozen next-token log-probabilities over the frozen model's first `positions` greedy tokens."""
        ids, mask = self._encode_training(prompts, max_length)
        training = self.model.training
        with torch.no_grad(), self.frozen_base():
            self.model.eval()
            generated = self.model.generate(
                input_ids=ids, attention_mask=mask, max_new_tokens=positions, do_sample=False
            )
            self.model.train(training)
            cont = generated[:, ids.shape[1] :]
            positions = cont.shape[1]
            full, full_mask = torch.cat([ids, cont], 1), torch.cat([mask, torch.ones_like(cont)], 1)
            base = self._window_logits(full, full_mask, ids.shape[1], positions)
        valid = self.until_end(cont)
        tuned = self._window_logits(full, full_mask, ids.shape[1], positions)
        return Window(tuned=tuned, base=base, valid=valid[:, :positions])

    def until_end(self, generated: torch.Tensor) -> torch.Tensor:
        """Which generated positions the model made (B, T): those up to its first end token, that one included
        (the rest is padding after the row ended)."""
        eos = torch.as_tensor(self.model.generation_config.eos_token_id or [], device=generated.device).reshape(-1)
        ended = torch.isin(generated, eos).long().cumsum(-1)
        return torch.cat([torch.zeros_like(ended[:, :1]), ended[:, :-1]], 1) == 0

    def _window_logits(self, ids: torch.Tensor, mask: torch.Tensor, prompt_len: int, positions: int) -> torch.Tensor:
        logits = self.model(input_ids=ids, attention_mask=mask, position_ids=positions_from_mask(mask)).logits
        return logits[:, prompt_len - 1 : prompt_len - 1 + positions].float().log_softmax(-1)

    @torch.inference_mode()
    def generate_texts(self, prompts: list[str], max_new_tokens: int) -> list[str]:
        """Greedy continuations of plain prompts with the model as it is now (with its adapter)."""
        config = GenerationConfig(max_new_tokens=max_new_tokens)
        training = self.model.training
        self.model.eval()
        try:
            return [c.text for c in self.generate(list(prompts), config)]
        finally:
            self.model.train(training)

    def save_adapter(self, folder: Path) -> None:
        """peft's adapter files in `folder`."""
        self.model.save_pretrained(folder)

    def load_adapter_weights(self, folder: Path) -> None:
        """Adapter weights saved by `save_adapter` back into the current adapter."""
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        set_peft_model_state_dict(self.model, load_file(str(Path(folder) / "adapter_model.safetensors")))

    def architecture(self) -> dict[str, Any]:
        """The config fields an adapter records about its base model, and whether the weights are 4-bit."""
        config = self.model.config
        return {
            "config": {
                k: getattr(config, k, None) for k in ("model_type", "hidden_size", "num_hidden_layers", "vocab_size")
            },
            "quantized_4bit": bool(getattr(self.model, "is_loaded_in_4bit", False)),
        }


def reads_nothing(passes: Sequence[PromptPass]) -> bool:
    """Whether no pass of `passes` reads the probabilities of any continuation."""
    return not any(job.score and any(job.score) for job in passes)


def came(completions: list[Completion]) -> list[Completion]:
    """A pass's completions, told to the progress of the step under way (`answers_came`) as they come."""
    read = sum(c.prompt_tokens or 0 for c in completions)
    answers_came(len(completions), (read, sum(c.new_tokens or 0 for c in completions)))
    return completions


def resolve_device(device: str) -> str:
    """'auto' means CUDA when present, else CPU; a device this machine does not have is a ModelError, before any
    weight is loaded."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        torch.device(device)
    except (RuntimeError, ValueError):
        raise ModelError(f"unknown --device {device!r}: use auto, cpu, cuda, cuda:N or mps") from None
    kind, _, index = device.partition(":")
    if kind == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ModelError(f"--device {device}: torch sees no CUDA device on this machine (use --device cpu)")
        if index and int(index) >= count:
            raise ModelError(f"--device {device}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}")
    if kind == "mps" and not torch.backends.mps.is_available():
        raise ModelError(f"--device {device}: Apple's MPS is not available here (use --device cpu)")
    return device


def resolve_dtype(dtype: str, device: str) -> torch.dtype:
    """'auto' means bfloat16 on CUDA and float32 on CPU."""
    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    try:
        return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    except KeyError:
        raise ModelError(f"unknown dtype {dtype!r}: use auto, float32, float16 or bfloat16") from None


def four_bit() -> dict[str, Any]:
    """from_pretrained arguments for NF4 4-bit weights with double quantization (QLoRA), loaded onto the GPU."""
    from transformers import BitsAndBytesConfig

    config = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.bfloat16,
    )
    # bitsandbytes quantizes while loading onto the GPU, so the weights are placed there directly.
    return {"quantization_config": config, "device_map": {"": torch.cuda.current_device()}}


def load_hf(
    path_or_id: str,
    name: str,
    info: dict[str, Any],
    settings: LocalSettings | None = None,
    adapter: str | None = None,
    hub_args: dict[str, Any] | None = None,
) -> HFBackend:
    """Load a causal LM and its tokenizer from a folder or hub id (optionally with a LoRA adapter); `hub_args` are
    from_pretrained's extra arguments for a hub id (models/hub.py)."""
    settings = settings or LocalSettings()
    dev = resolve_device(settings.device)
    hub = {"revision": settings.revision} if settings.revision else {}
    hub.update(hub_args or {})
    try:
        with quiet_hub():
            tokenizer = AutoTokenizer.from_pretrained(path_or_id, **hub)
            weights = {**hub, **four_bit()} if settings.quantize == "4bit" else hub
            model = AutoModelForCausalLM.from_pretrained(
                path_or_id, dtype=resolve_dtype(settings.dtype, dev), **weights
            )
    except (OSError, ValueError) as exc:
        first = first_line(str(exc)) or type(exc).__name__
        raise ModelError(f"cannot load model {path_or_id!r}: {first}") from exc
    if settings.quantize != "4bit":  # bitsandbytes has placed 4-bit weights on the GPU already
        model.to(dev)
    if adapter:
        from fairprobe.models.adapters import attach_adapter

        model, adapter_info = attach_adapter(model, adapter, base_info=info)
        info = {**info, "adapter": adapter_info}
    memory = parse_memory(settings.memory) if settings.memory else None
    return HFBackend(model, tokenizer, name=name, info=info, batch_size=settings.batch_size, memory=memory)

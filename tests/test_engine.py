"""The local engine (fairprobe.models.engine): continuations identical to `transformers.generate` and every
probability within 1e-6 of the model's own forward pass, on real prompts of every family; batches split by a
memory budget give the same answers; packed decode weights; the memory setting and its sizes."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fairprobe.errors import ConfigError
from fairprobe.families import Request, RunContext, Scoring, all_families, load_probe_set
from fairprobe.families.base import PROBE_SETS
from fairprobe.models import Completion, GenerationConfig, ScoreRequest, engine, heap, llama_step, load_model
from fairprobe.models import hf as hf_module
from fairprobe.models.base import GenerationCall
from fairprobe.models.continuations import (
    ContinuationTable,
    cache_argument,
    kv_cache,
    score_continuations,
    tail_groups,
    tail_tree,
    takes_tree,
)
from fairprobe.models.decode import compaction, continue_decoding, model_step
from fairprobe.models.engine import (
    PackedLinears,
    ScreenedHead,
    Shape,
    Shortlist,
    attention_without_cudnn,
    even_parts,
    packed_product,
    prefill_chunk,
    rows_within,
)
from fairprobe.models.hf import HFBackend
from fairprobe.models.mapped import MappedWeights, mapping_sizes
from fairprobe.models.reserved import ReservedLayer, ReservedPool
from fairprobe.models.settings import parse_memory
from fairprobe.runner import ask
from test_genderbench_data import gest_csv
from test_training_protocol import tiny_backend

NEW_TOKENS = 10


def first_requests(family_name: str, tmp_path: Path) -> list[tuple[str, Request | Scoring]]:
    """The first probe of the family's first set: its first generation request and first scoring request, greedy
    and of NEW_TOKENS tokens (the runner's `ask` fuses a scoring request into a generation of the same prompt)."""
    name = next(n for n, entry in PROBE_SETS.items() if entry.family == family_name)
    family = next(f for f in all_families() if f.name == family_name)
    options = {"gest_file": str(gest_csv(tmp_path))} if name.startswith("gest") else {}
    data_dir = Path(__file__).resolve().parents[2] / "shared" / "data" / "debias_llms" if name == "template" else None
    ps = load_probe_set(name, data_dir=data_dir, limit=1, **options)
    requests = family.requests(ps, ps.probes[0], RunContext(), family.parse_options(options, ps.name))
    picked = [next((r for r in requests if isinstance(r, kind)), None) for kind in (Request, Scoring)]
    return [
        (ps.probes[0].id, dataclasses.replace(r, max_new_tokens=None, seed=0) if isinstance(r, Request) else r)
        for r in picked
        if r is not None
    ]


def forward_logprobs(backend: HFBackend, prompt: object, texts: tuple[str, ...]) -> list[float]:
    """log P(text | prompt) of each text as transformers decodes: one unpadded pass of the prompt reading its last
    position (as generate's prompt pass does), then each text's tokens but its last fed after the prompt's cache
    (cropped back to the prompt after each text)."""
    ids = backend.encode([prompt])["input_ids"]
    out = []
    with torch.inference_mode():
        prompt_pass = backend.model(input_ids=ids, logits_to_keep=1, use_cache=True)
        cache = kv_cache(prompt_pass)
        for text in texts:
            tokens = backend.tokenizer.encode(text, add_special_tokens=False)
            logits = prompt_pass.logits[0, -1:]
            if len(tokens) > 1:
                fed = torch.tensor([tokens[:-1]])
                tail = backend.model(input_ids=fed, **cache_argument(backend.model, cache), use_cache=True)
                logits = torch.cat([logits, tail.logits[0]])
                cache.crop(-(len(tokens) - 1))
            out.append(float(logits.float().log_softmax(-1)[torch.arange(len(tokens)), tokens].sum()))
    return out


def transformers_reply(backend: HFBackend, prompt: object) -> str:
    """The greedy reply of NEW_TOKENS tokens that `transformers.generate` gives to the prompt alone."""
    enc = backend.encode([prompt])
    with torch.inference_mode():
        out = backend.model.generate(**enc, do_sample=False, max_new_tokens=NEW_TOKENS)
    return backend.tokenizer.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)


@pytest.mark.slow
def test_every_family_generates_as_transformers_and_scores_within_1e6(
    embedded_backend: HFBackend, tmp_path: Path
) -> None:
    config = GenerationConfig(max_new_tokens=NEW_TOKENS)
    families = [f.name for f in all_families()]
    assert len(families) >= 17
    for family in families:
        asked = first_requests(family, tmp_path)
        replies = ask(embedded_backend, asked, config)
        for probe, request in asked:
            if isinstance(request, Request):
                text = transformers_reply(embedded_backend, request.prompt)
                assert replies[probe].completions[request.key].text == text, family
                continue
            scores = replies[probe].scores[request.key]
            wanted = forward_logprobs(embedded_backend, request.prompt, tuple(request.continuations))
            for continuation, got, logprob in zip(request.continuations, scores.continuations, wanted, strict=True):
                want = math.exp(logprob)
                # A word of several tokens is read from a pass that feeds every such word's row at once, so its
                # products sum in another order than this one-row reference: 1.2e-6 apart at most, measured.
                tolerance = 1e-6 if got.tokens == 1 else 2e-6
                assert abs(math.exp(got.logprob) - want) <= tolerance, (family, continuation)


@pytest.mark.slow
def test_a_batch_split_by_the_memory_budget_gives_the_same_answers(
    embedded_backend: HFBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, tokenizer = embedded_backend.model, embedded_backend.tokenizer
    tight = HFBackend(model, tokenizer, name="tight", info={"id": "tight"}, batch_size=16, memory=1)
    released: list[int] = []
    monkeypatch.setattr(heap, "MALLOC_TRIM", released.append)
    prompts = ["My friend is a nurse, and", "My friend plays the guitar in a jazz band, and", "The doctor said"]
    words = (" she", " he", " xem", " xemself")
    assert tight.rows_per_pass(tight.encode(prompts), NEW_TOKENS) == 1
    config = GenerationConfig(max_new_tokens=NEW_TOKENS)
    whole = embedded_backend.generate(prompts, config, [words] * 3)
    released.clear()
    parts = tight.generate(prompts, config, [words] * 3)
    assert [c.text for c in parts] == [c.text for c in whole]
    assert len(released) == 3 * 2  # the heap given back after each part's scoring pass and after the part
    # A row alone has no padding: its probabilities move as much as padding moves them (about 1e-5), no more.
    whole_probs = np.exp([c.scores.logprobs() for c in whole])
    np.testing.assert_allclose(np.exp([c.scores.logprobs() for c in parts]), whole_probs, atol=1e-5)
    released.clear()
    scored = tight.loglikelihood([ScoreRequest(p, words) for p in prompts])
    assert len(released) == 3  # after each pass
    np.testing.assert_allclose(np.exp([s.logprobs() for s in scored]), whole_probs, atol=1e-5)
    assert tight.identity()["memory"] == "0.00 GB"
    assert embedded_backend.identity()["memory"] == "0.54 GB (default: the weights' size)"


@pytest.mark.slow
def test_chunked_prefill_gives_the_continuation_of_one_pass(
    embedded_backend: HFBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    prompt = "My friend plays the guitar in a small jazz band downtown every Friday night, and"
    config = GenerationConfig(max_new_tokens=NEW_TOKENS)
    one_pass = embedded_backend.generate([prompt], config, [(" she", " he")])[0]
    monkeypatch.setattr("fairprobe.models.engine.PREFILL_CHUNK", 4)
    monkeypatch.setattr("fairprobe.models.engine.ONE_PASS_ALONE", 8)  # a row alone is chunked beyond 8 tokens
    assert prefill_chunk(19) == 4 and prefill_chunk(8, alone=True) is None and prefill_chunk(9, alone=True) == 4
    released: list[int] = []
    monkeypatch.setattr(heap, "MALLOC_TRIM", released.append)
    chunked = embedded_backend.generate([prompt], config, [(" she", " he")])[0]
    assert chunked.text == one_pass.text
    # The heap given back after each of the prompt's 4 chunks, after the scoring pass and after the batch.
    assert len(embedded_backend.encode([prompt])["input_ids"][0]) == 16 and len(released) == 4 + 2
    np.testing.assert_allclose(np.exp(chunked.scores.logprobs()), np.exp(one_pass.scores.logprobs()), atol=1e-6)


def test_memory_sizes_and_the_setting() -> None:
    assert parse_memory("2GB") == 2_000_000_000
    assert parse_memory("512MiB") == 512 * 2**20
    assert parse_memory("1.5g") == 1_500_000_000
    assert parse_memory(4096) == 4096
    for bad in ("lots", "-1GB", "0", "2 TB"):
        with pytest.raises(ValueError, match="is not a memory size"):
            parse_memory(bad)
    with pytest.raises(ConfigError, match=r"^-M memory='lots' for the local backend: Value error, 'lots' is not"):
        load_model("smollm2-135m-instruct", memory="lots")


def test_row_sizes_follow_the_model_shape() -> None:
    # SmolLM2-135M's shape: 30 layers, 3 key/value heads of 64, hidden 576, 9 heads, MLP 1536, vocab 49152.
    names = ("hidden_size", "num_attention_heads", "head_dim", "num_key_value_heads", "num_hidden_layers")
    config = SimpleNamespace(**dict(zip(names, (576, 9, 64, 3, 30), strict=True)), intermediate_size=1536)
    config.vocab_size = 49152
    model = torch.nn.Linear(10, 10)
    model.config = config  # type: ignore[assignment]
    shape = Shape.of(model)
    assert shape.kv_per_token == 2 * 30 * 3 * 64 * 4 == 46080
    assert shape.activations_per_token == (4 * 576 + 576 + 384 + 3 * 1536) * 4 == 31488
    assert shape.weights == 110 * 4
    assert shape.default_budget() == 2**28
    assert shape.logits_per_row == 6 * 49152 * 4 == 1_179_648
    # A HiringBloomberg prompt of 3,000 tokens and 300 new ones: its prefill (the prompt's keys and values, one
    # chunk's activations, the logits) 46080 * 3000 + 31488 * 512 + 1179648 bytes, over its decoding's 46080 * 3300
    # + 1179648 = 153_243_648.
    assert shape.prefill_bytes(3000) == shape.row_bytes(3000, 300) == 155_541_504
    assert rows_within(shape, 10**9, 3000, 300) == 6
    # A GenderBench letter (55 prompt tokens, 300 new): decoding's 46080 * 355 + 1179648 over prefill's
    # 46080 * 55 + 31488 * 55 + 1179648 = 5_445_888; with ten copies of its prompt's cache (a scoring pass's
    # rows) and nothing to decode, the prefill's.
    assert shape.decode_bytes(55, 300) == shape.row_bytes(55, 300) == 17_538_048
    assert shape.row_bytes(55, 0, copies=10) == 46080 * 550 + 31488 * 55 + 1179648 == 28_255_488
    # An ISEAR prompt's 24 emotions as one tree of 26 positions: two copies of its cache (the prompt's, the tree's)
    # and the tree's float32 logits and log-softmax, 2 * 49152 * 4 bytes a position.
    assert shape.logits_per_position == 393_216
    assert shape.row_bytes(55, 0, copies=2, scored=26) == 46080 * 110 + 31488 * 55 + 1179648 + 393216 * 26
    assert rows_within(shape, 538_060_032, 55, 300) == 30
    assert rows_within(shape, 10**9, 10, 50) == 10**9 // (46080 * 60 + 1179648) == 253
    assert rows_within(shape, 1, 10, 50) == 1


def test_a_split_batch_goes_in_even_parts() -> None:
    # 32 rows at most 28 a part: two parts of 16, not 28 + 4; 33 at most 16: three of 11; a batch that fits: one.
    assert even_parts(32, 28) == 16
    assert even_parts(33, 16) == 11
    assert even_parts(30, 7) == 6
    assert even_parts(32, 40) == 32
    assert even_parts(5, 1) == 1
    assert even_parts(4, 0) == 1


def test_packed_linears_decode_like_the_plain_ones_and_follow_weight_changes() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4, bias=False))
    x = torch.randn(3, 5, 8)
    plain = model(x)
    packed = PackedLinears(model)
    assert PackedLinears.usable(model)
    with torch.inference_mode(), packed.decoding():
        assert torch.equal(model(x), plain)  # plain kernels until start()
        packed.start()
        assert torch.allclose(model(x), plain, atol=1e-5)
    assert all("forward" not in linear.__dict__ for linear in model)
    with torch.no_grad():
        model[1].weight.mul_(2)
    with torch.inference_mode(), packed.decoding():
        packed.start()
        assert torch.allclose(model(x), 2 * plain, atol=1e-5)


def test_a_fused_packed_product_gives_the_separate_products_columns_bitwise() -> None:
    torch.manual_seed(0)
    linears = [torch.nn.Linear(16, 24), torch.nn.Linear(16, 8, bias=False), torch.nn.Linear(16, 8)]
    x = torch.randn(5, 1, 16)
    packed = PackedLinears(torch.nn.Sequential(*linears))
    with torch.inference_mode():
        apart = torch.cat([packed_product(x, *packed.fused([linear])) for linear in linears], -1)
        together = packed_product(x, *packed.fused(linears))
        assert together.shape == (5, 1, 40)
        assert torch.equal(together, apart)  # the bias-free middle one's columns get zeros added: no change
        assert torch.allclose(together, torch.cat([linear(x) for linear in linears], -1), atol=1e-5)
    with torch.no_grad():
        linears[1].weight.mul_(2)
    with torch.inference_mode():
        assert torch.allclose(packed_product(x, *packed.fused(linears))[..., 24:32], 2 * apart[..., 24:32], atol=1e-5)


def test_linears_called_in_turn_on_one_input_share_one_product_and_another_input_computes_it_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch.manual_seed(0)
    linears = [torch.nn.Linear(16, 24), torch.nn.Linear(16, 8, bias=False), torch.nn.Linear(16, 8)]
    packed = PackedLinears(torch.nn.Sequential(*linears))
    x, y = torch.randn(2, 3, 16), torch.randn(2, 3, 16)
    with torch.inference_mode():
        fused_x, fused_y = (packed_product(z, *packed.fused(linears)) for z in (x, y))
        plain = [linear(y) for linear in linears]
    products: list[int] = []
    monkeypatch.setattr(engine, "packed_product", lambda *a: products.append(1) or packed_product(*a))
    with torch.inference_mode(), packed.decoding():
        packed.start(groups=[linears])
        assert torch.equal(torch.cat([linear(x) for linear in linears], -1), fused_x)
        assert len(products) == 1  # one product for the three
        assert torch.equal(linears[2](y), fused_y[..., 32:])
        assert len(products) == 2  # the last one on another input: the product again
        assert torch.equal(torch.cat([linears[0](y), linears[1](y)], -1), fused_y[..., :32])
        assert len(products) == 2  # the others' parts of that product
        assert torch.equal(linears[1](y), fused_y[..., 24:32]) and len(products) == 3  # its part was taken: again
        for linear, want in zip(linears, plain, strict=True):
            assert torch.allclose(linear(y), want, atol=1e-5)
    assert all("forward" not in linear.__dict__ for linear in linears)


def tiny_llama(**config_fields: object) -> torch.nn.Module:
    """A 2-layer Llama with grouped key/value heads (4 query heads on 2) and random weights."""
    fields = {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 4, **config_fields}
    return tiny_backend(**fields).model.eval()


def step_logits(model: torch.nn.Module, lean: bool, steps: int = 5, keys_last: bool = False) -> list[torch.Tensor]:
    """Decode-step logits after three left-padded prompts (lengths 6, 3, 1) prefilled into a `ReservedPool` (its keys
    position-last with `keys_last`), fed the argmax of each step; the middle row leaves after the second step.
    `lean`: LlamaStep, else the model's forward with packed Linears."""
    ids = torch.randint(2, model.config.vocab_size, (3, 6))
    mask = torch.tensor([[1] * 6, [0] * 3 + [1] * 3, [0] * 5 + [1]])
    packed, out = PackedLinears(model), []
    pool = ReservedPool(3, 6, steps, Shape.of(model).cache, model.get_input_embeddings().weight, keys_last)
    with torch.inference_mode(), packed.decoding():
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        block = cache_argument(model, pool.block(0, 3, 6))
        prompt = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **block)
        cache = pool.cache()
        last, positions = prompt.logits[:, -1].argmax(-1), mask.sum(-1)
        if lean:
            step = llama_step.LlamaStep(model, packed, greedy=False)
        else:
            packed.start()
            step = model_step(model)
        masks = torch.cat([mask, mask.new_ones((3, steps))], 1)
        for index in range(1, steps):
            if index == 3:
                keep = torch.tensor([0, 2])
                cache.batch_select_indices(keep)
                last, positions, masks = last[keep], positions[keep], masks[keep]
            out.append(step(last, positions + index - 1, masks[:, : 6 + index], cache))
            last = out[-1].argmax(-1)
    return out


@pytest.mark.parametrize("bias", [False, True])
def test_the_llama_step_gives_the_model_forward_logits(bias: bool) -> None:
    model = tiny_llama(attention_bias=bias, mlp_bias=bias)
    assert llama_step.fits(model)
    torch.manual_seed(1)
    want = step_logits(model, lean=False)
    torch.manual_seed(1)
    got = step_logits(model, lean=True)
    vocab = model.config.vocab_size
    assert [tuple(g.shape) for g in got] == [(3, vocab), (3, vocab), (2, vocab), (2, vocab)]
    for a, b in zip(got, want, strict=True):
        assert torch.allclose(a, b, atol=1e-5, rtol=0)  # attention summed in another order: float32 roundings
        assert torch.equal(a.argmax(-1), b.argmax(-1))
    torch.manual_seed(1)
    keys_last = step_logits(model, lean=True, keys_last=True)  # the keys read in place: summed in another order
    for a, b in zip(keys_last, got, strict=True):
        assert torch.allclose(a, b, atol=1e-6, rtol=0) and torch.equal(a.argmax(-1), b.argmax(-1))


@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.*:FutureWarning")  # peft calls the old name
def test_only_a_plain_transformers_llama_takes_the_llama_step() -> None:
    from peft import LoraConfig, get_peft_model

    assert llama_step.fits(tiny_llama())
    assert not llama_step.fits(tiny_llama(_attn_implementation="eager"))
    assert not llama_step.fits(tiny_llama(hidden_act="gelu"))
    assert not llama_step.fits(get_peft_model(tiny_llama(), LoraConfig(r=2, target_modules=["q_proj"])))
    lora_inside = tiny_llama()
    get_peft_model(lora_inside, LoraConfig(r=2, target_modules=["v_proj"]))  # peft swaps v_proj in the model
    assert not llama_step.fits(lora_inside)


def tiny_causal_lm(kind: str, **config_fields: object) -> torch.nn.Module:
    """A 2-layer causal LM of transformers' architecture `kind` (its model type) with random weights, SDPA attention."""
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = {"vocab_size": 40, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2}
    fields |= {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 4, "max_position_embeddings": 64}
    config = AutoConfig.for_model(kind, **fields | config_fields)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").float().eval()


# Continuations sharing starts at several depths: (5, 6) under (5,), (8, 9, 11) beside (8, 10), two of four tokens.
TREE_IDS = [(5,), (5, 6), (5, 6, 7), (8, 9), (8, 10), (8, 9, 11, 12), (13, 6), (5, 6, 7, 3)]


@pytest.mark.parametrize(
    ("kind", "fields"), [("llama", {}), ("qwen2", {}), ("gemma", {}), ("mistral", {"sliding_window": None})]
)
def test_a_tree_tail_pass_scores_as_the_per_width_chains(kind: str, fields: dict[str, object]) -> None:
    model = tiny_causal_lm(kind, **fields)
    assert takes_tree(model)
    chains = ContinuationTable(tuple(TREE_IDS), torch.tensor([t[0] for t in TREE_IDS]), tail_groups(TREE_IDS))
    tree = dataclasses.replace(chains, tails=tail_tree(TREE_IDS))
    assert [tuple(g.feed.shape) for g in chains.tails] == [(1, 1), (2, 3)]  # (13,); (5, 6, 7) and (8, 9, 11)
    [one] = tree.tails  # nodes (5,) (5,6) (5,6,7) (8,) (8,9) (8,9,11) (13,): one copy of the prompt's cache
    assert one.feed.tolist() == [[5, 6, 7, 8, 9, 11, 13]] and one.depth.tolist() == [0, 1, 2, 0, 1, 2, 0]
    torch.manual_seed(1)
    ids = torch.randint(2, 40, (3, 6))
    mask = torch.tensor([[1] * 6, [0] * 2 + [1] * 4, [0] * 5 + [1]])
    with torch.inference_mode():
        want = score_continuations(model, ids, mask, chains, greedy=True)
        got = score_continuations(model, ids, mask, tree, greedy=True)
    assert torch.allclose(got.log_probs, want.log_probs, atol=1e-6, rtol=0), kind
    assert want.greedy is not None and got.greedy is not None and torch.equal(got.greedy, want.greedy)


def test_only_a_model_whose_layers_all_attend_everywhere_by_sdpa_takes_the_tree() -> None:
    assert takes_tree(tiny_llama())
    assert not takes_tree(tiny_llama(_attn_implementation="eager"))  # eager attention adds a float mask
    assert not takes_tree(tiny_causal_lm("mistral", sliding_window=4))
    assert not takes_tree(tiny_causal_lm("gemma3_text"))  # five of every six layers slide
    assert takes_tree(tiny_causal_lm("qwen2", use_sliding_window=False))


def sdpa_choices_during(model: torch.nn.Module, call: Callable[[], object]) -> list[tuple[bool, ...]]:
    """torch's SDPA kernel switches (cuDNN, flash, memory-efficient, math) as the first layer's attention saw them
    during `call`, once per forward."""
    seen: list[tuple[bool, ...]] = []
    flags = torch.backends.cuda
    attention = model.get_base_model() if hasattr(model, "get_base_model") else model
    hook = attention.model.layers[0].self_attn.register_forward_pre_hook(
        lambda *_: seen.append(
            (
                flags.cudnn_sdp_enabled(),
                flags.flash_sdp_enabled(),
                flags.mem_efficient_sdp_enabled(),
                flags.math_sdp_enabled(),
            )
        )
    )
    try:
        call()
    finally:
        hook.remove()
    return seen


@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.*:FutureWarning")  # peft calls the old name
def test_attention_without_cudnn_holds_in_every_forward_and_is_put_back() -> None:
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    model = tiny_llama()
    ids = torch.randint(2, model.config.vocab_size, (2, 5))
    mask = torch.tensor([[1] * 5, [0, 0, 1, 1, 1]])

    def generate(m: torch.nn.Module) -> Callable[[], torch.Tensor]:
        def call() -> torch.Tensor:
            with torch.inference_mode():
                return m.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=3)

        return call

    without, own = [(False, True, True, True)] * 3, [(True, True, True, True)] * 3  # prompt pass, two steps
    plain = generate(model)()
    restore = attention_without_cudnn(model)
    assert attention_without_cudnn(model)() is None  # wrapped already: left as it is, nothing to put back
    assert sdpa_choices_during(model, generate(model)) == without
    assert torch.backends.cuda.cudnn_sdp_enabled()  # torch's own choice again after each call
    assert torch.equal(generate(model)(), plain)  # the arguments generate passes reach the model as before
    restore()
    assert sdpa_choices_during(model, generate(model)) == own
    peft_model = get_peft_model(tiny_llama(), LoraConfig(r=2, target_modules=["q_proj"]))
    attention_without_cudnn(peft_model)
    assert sdpa_choices_during(peft_model, generate(peft_model)) == without  # reached under peft too


@pytest.mark.skipif(not torch.ops.mkldnn._is_mkldnn_bf16_supported(), reason="no bfloat16 oneDNN kernels here")
def test_the_screened_head_gives_the_float32_argmax_and_its_logit() -> None:
    # Logits of h = (2, 1): 2, 1, 3, 1.5. |h| max|W_v| = sqrt(5) sqrt(2), so the screen keeps the tokens within
    # 2 * 2^-7 * 3.162 = 0.049 of the rough maximum: token 2 alone, with its float32 logit.
    weight = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.5, 0.5]])
    out = ScreenedHead(weight)(torch.tensor([[[2.0, 1.0]]]))
    assert out.shape == (1, 1, 4)
    assert out[0, 0].tolist() == [-math.inf, -math.inf, 3.0, -math.inf]
    # 1.001 and 1.0 are the same number in bfloat16 (spacing 2^-7 near 1): both stay, float32 tells them apart.
    near = ScreenedHead(torch.tensor([[1.0, 0.0], [1.001, 0.0], [0.0, 1.0]]))(torch.tensor([[1.0, 0.0]]))
    assert near[0, :2].tolist() == [1.0, torch.tensor(1.001).item()]
    assert int(near.argmax()) == 1
    assert near[0, 2].item() == -math.inf


@pytest.mark.skipif(not torch.ops.mkldnn._is_mkldnn_bf16_supported(), reason="no bfloat16 oneDNN kernels here")
def test_the_screened_head_shortlists_only_the_tokens_that_can_win_and_every_token_when_logits_are_not_numbers() -> (
    None
):
    weight = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.5, 0.5]])
    # Row 1's logits 2, 1, 3, 1.5 keep token 2; row 2's (h = (0, 2)) 0, 2, 2, 1 keep tokens 1 and 2.
    shortlist = ScreenedHead(weight).shortlist(torch.tensor([[2.0, 1.0], [0.0, 2.0]]))
    assert shortlist.ids.tolist() == [1, 2]
    assert shortlist.logits.tolist() == [[1.0, 3.0], [2.0, 2.0]]
    assert shortlist.argmax().tolist() == [2, 1]  # row 2's tie goes to the first token, as a full argmax takes it
    broken = ScreenedHead(weight).shortlist(torch.tensor([[math.nan, 1.0]]))
    assert broken.ids.tolist() == [0, 1, 2, 3]


def test_a_shortlist_reads_the_argmax_of_its_dense_logits() -> None:
    shortlist = Shortlist(torch.tensor([[1.0, 3.0, 3.0], [2.0, -1.0, 0.5]]), torch.tensor([4, 7, 9]))
    dense = shortlist.dense(10)
    inf = -math.inf
    assert dense.tolist() == [[inf] * 4 + [1.0, inf, inf, 3.0, inf, 3.0], [inf] * 4 + [2.0, inf, inf, -1.0, inf, 0.5]]
    assert shortlist.argmax().tolist() == dense.argmax(-1).tolist() == [7, 4]


def test_a_reserved_layer_writes_in_place_and_drops_rows() -> None:
    keys = torch.tensor([1.0, 2.0, 10.0, 20.0]).reshape(2, 1, 2, 1)  # 2 rows, 1 head, 2 positions, dim 1
    layer = ReservedLayer(keys, -keys, room=2)
    buffer = layer.key_buffer.data_ptr()
    got_keys, got_values = layer.update(torch.tensor([[[[3.0]]], [[[30.0]]]]), torch.zeros(2, 1, 1, 1))
    assert got_keys[:, 0, :, 0].tolist() == [[1.0, 2.0, 3.0], [10.0, 20.0, 30.0]]
    assert got_values[:, 0, :, 0].tolist() == [[-1.0, -2.0, 0.0], [-10.0, -20.0, 0.0]]
    assert layer.key_buffer.data_ptr() == buffer and layer.get_seq_length() == 3
    layer.batch_select_indices(torch.tensor([1]))
    layer.update(torch.tensor([[[[40.0]]]]), torch.ones(1, 1, 1, 1))
    assert layer.keys[:, 0, :, 0].tolist() == [[10.0, 20.0, 30.0, 40.0]]
    assert layer.values[:, 0, :, 0].tolist() == [[-10.0, -20.0, 0.0, 1.0]]


def test_a_reserved_layer_holds_each_row_repeated_next_to_each_other() -> None:
    keys = torch.tensor([1.0, 2.0, 10.0, 20.0]).reshape(2, 1, 2, 1)  # 2 rows, 1 head, 2 positions, dim 1
    layer = ReservedLayer(keys, -keys, room=1, repeats=3)
    assert layer.key_buffer.shape == (6, 1, 3, 1) and layer.get_seq_length() == 2
    assert layer.keys[:, 0, :, 0].tolist() == [[1.0, 2.0]] * 3 + [[10.0, 20.0]] * 3
    assert torch.equal(layer.values, -keys.repeat_interleave(3, 0))
    buffer = layer.key_buffer.data_ptr()
    got_keys, _ = layer.update(torch.arange(6.0).reshape(6, 1, 1, 1), torch.zeros(6, 1, 1, 1))
    assert got_keys[:, 0, :, 0].tolist() == [[1.0, 2.0, k] for k in (0.0, 1.0, 2.0)] + [
        [10.0, 20.0, k] for k in (3.0, 4.0, 5.0)
    ]
    assert got_keys.is_contiguous() and got_keys.data_ptr() == buffer  # filled to the end: the whole buffer


def test_rows_that_stay_fill_the_places_of_rows_that_left_and_only_they_move() -> None:
    going = torch.tensor([False, True, True, False, True, True])
    assert compaction(going).tolist() == [4, 1, 2, 5]  # rows 4 and 5 take the places of rows 0 and 3
    assert compaction(torch.tensor([True, True, False])).tolist() == [0, 1]
    keys = torch.arange(4.0).reshape(4, 1, 1, 1)  # 4 rows, 1 head, 1 position, dim 1: row r holds r
    layer = ReservedLayer(keys, -keys, room=1)
    buffer = layer.key_buffer.data_ptr()
    layer.batch_select_indices(compaction(torch.tensor([False, True, False, True])))
    assert layer.keys[:, 0, 0, 0].tolist() == [3.0, 1.0] and layer.values[:, 0, 0, 0].tolist() == [-3.0, -1.0]
    assert layer.key_buffer.data_ptr() == buffer  # in place: row 3 copied into row 0's buffers
    layer.batch_select_indices(torch.tensor([1, 0]))  # any other order: the buffers copied in that order
    assert layer.keys[:, 0, 0, 0].tolist() == [1.0, 3.0] and layer.key_buffer.data_ptr() != buffer
    layer.update(torch.tensor([[[[7.0]]], [[[8.0]]]]), torch.zeros(2, 1, 1, 1))
    assert layer.keys[:, 0, :, 0].tolist() == [[1.0, 7.0], [3.0, 8.0]]


@pytest.mark.slow
def test_rows_that_end_leave_the_batch_and_the_others_continue_as_transformers(embedded_backend: HFBackend) -> None:
    prompts: list[object] = [
        [{"role": "user", "content": "Answer yes or no: is the sky blue?"}],
        [{"role": "user", "content": "Say hello."}],
        "My friend is a nurse, and",
    ]
    enc = embedded_backend.tokenizer(
        [embedded_backend.render(p) for p in prompts], return_tensors="pt", padding=True, add_special_tokens=False
    )
    with torch.inference_mode():
        out = embedded_backend.model.generate(**enc, do_sample=False, max_new_tokens=24)
    new = out[:, enc["input_ids"].shape[1] :]
    assert new[0, 2] == embedded_backend.tokenizer.eos_token_id  # "No." ends at the third step, the others go on
    want = embedded_backend.tokenizer.batch_decode(new, skip_special_tokens=True)
    assert want[0] == "No."
    got = embedded_backend.generate(prompts, GenerationConfig(max_new_tokens=24))  # type: ignore[arg-type]
    assert [c.text for c in got] == want


def test_a_reserved_pool_holds_each_pass_right_aligned_after_zeros_and_grows_in_place() -> None:
    pool = ReservedPool(rows=3, length=2, room=1, cache=(1, 1, 1), like=torch.zeros(1))  # 1 layer, 1 head, dim 1
    longer, shorter = pool.block(0, rows=1, length=2), pool.block(1, rows=2, length=1)  # two passes prefill
    longer.layers[0].update(torch.tensor([1.0, 2.0]).reshape(1, 1, 2, 1), torch.ones(1, 1, 2, 1))
    shorter.layers[0].update(torch.tensor([5.0, 6.0]).reshape(2, 1, 1, 1), torch.ones(2, 1, 1, 1))
    assert (longer.get_seq_length(), shorter.get_seq_length()) == (2, 1)
    layer = pool.cache().layers[0]
    assert isinstance(layer, ReservedLayer) and layer.get_seq_length() == 2
    assert layer.keys[:, 0, :, 0].tolist() == [[1.0, 2.0], [0.0, 5.0], [0.0, 6.0]]  # zeros where the mask is 0
    assert layer.values[:, 0, :, 0].tolist() == [[1.0, 1.0], [0.0, 1.0], [0.0, 1.0]]
    buffer = layer.key_buffer.data_ptr()
    got, _ = layer.update(torch.tensor([7.0, 8.0, 9.0]).reshape(3, 1, 1, 1), torch.zeros(3, 1, 1, 1))
    assert got[:, 0, :, 0].tolist() == [[1.0, 2.0, 7.0], [0.0, 5.0, 8.0], [0.0, 6.0, 9.0]]
    assert layer.key_buffer.data_ptr() == buffer


def test_a_pool_may_hold_its_keys_position_last_and_gives_transformers_them_in_the_usual_layout() -> None:
    pool = ReservedPool(rows=2, length=2, room=2, cache=(1, 1, 2), like=torch.zeros(1), keys_position_last=True)
    key_buffer, value_buffer = pool.buffers[0]  # 2 rows, 1 head, 4 positions, dim 2
    assert key_buffer.shape == value_buffer.shape == (2, 1, 4, 2)
    assert key_buffer.stride() == (8, 8, 1, 4) and value_buffer.stride() == (8, 8, 2, 1)
    keys = torch.arange(8.0).reshape(2, 1, 2, 2)
    got, _ = pool.block(0, rows=2, length=2).layers[0].update(keys, -keys)
    assert torch.equal(got, keys) and got.is_contiguous()  # what SDPA reads at its speed
    layer = pool.cache().layers[0]
    assert isinstance(layer, ReservedLayer)
    layer.write(torch.tensor([8.0, 9.0, 10.0, 11.0]).reshape(2, 1, 1, 2), torch.zeros(2, 1, 1, 2))
    assert layer.keys.data_ptr() == key_buffer.data_ptr() and layer.keys.stride() == (8, 8, 1, 4)  # in place
    assert layer.keys[:, 0].tolist() == [[[0.0, 1.0], [2.0, 3.0], [8.0, 9.0]], [[4.0, 5.0], [6.0, 7.0], [10.0, 11.0]]]
    layer.batch_select_indices(torch.tensor([1, 0]))  # a new order: copied, position-last still
    assert layer.key_buffer.data_ptr() != key_buffer.data_ptr() and layer.key_buffer.stride() == (8, 8, 1, 4)
    assert layer.keys[:, 0, :, 0].tolist() == [[4.0, 6.0, 10.0], [0.0, 2.0, 8.0]]
    moved = layer.key_buffer.data_ptr()
    layer.batch_select_indices(torch.tensor([1]))  # the second row takes the first's place, in place
    assert layer.key_buffer.data_ptr() == moved and layer.key_buffer.stride() == (8, 8, 1, 4)
    assert layer.keys[0, 0].tolist() == [[0.0, 1.0], [2.0, 3.0], [8.0, 9.0]]
    assert layer.values[0, 0, :, 0].tolist() == [-0.0, -2.0, 0.0]


class RowsCache:
    """The cache interface the decode loop uses, recording which rows it keeps."""

    def __init__(self) -> None:
        self.kept: list[list[int]] = []

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.kept.append(indices.tolist())


def test_each_row_stops_at_its_own_limit_or_its_end_of_sequence() -> None:
    # A vocabulary of 5, end of sequence 0, pad 4: each row's step picks the token it was fed, except row 1 at
    # position 3 (its third token), which ends there. Limits of 4, 3 and 2 new tokens.
    def step(tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: object) -> torch.Tensor:
        logits = torch.zeros(tokens.shape[0], 5)
        logits[torch.arange(tokens.shape[0]), tokens] = 1.0
        logits[(positions == 3) & (tokens == 2), 0] = 2.0
        return logits

    cache = RowsCache()
    mask = torch.tensor([[1, 1, 1], [0, 1, 1], [0, 0, 1]])
    first = torch.tensor([1, 2, 3])
    out = continue_decoding(step, cache, first, mask, torch.tensor([4, 3, 2]), ([0], 4), lambda x, _: x.argmax(-1))
    assert out.tolist() == [[1, 1, 1, 1], [2, 2, 0, 4], [3, 3, 4, 4]]
    assert cache.kept == [[0, 1], [0]]  # row 2 leaves at its limit, then row 1 after its end of sequence


@pytest.mark.slow
def test_pooled_calls_answer_as_each_call_alone_in_one_decode_loop_a_sampling_setting(
    embedded_backend: HFBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    short, long = (
        ["My friend is a nurse, and", "The doctor said"],
        [
            "My friend plays the guitar in a small jazz band downtown every Friday night, and",
            "Yesterday my neighbour, who works as an engineer, told me that",
        ],
    )
    words = (" she", " he", " xem", " xemself")
    calls = [
        GenerationCall(short, GenerationConfig(max_new_tokens=12), [words] * 2),
        GenerationCall(long, GenerationConfig(max_new_tokens=6), [words] * 2),
        GenerationCall(long, GenerationConfig(temperature=1.0, max_new_tokens=9), None, [11, 12]),
        GenerationCall(short, GenerationConfig(temperature=1.0, max_new_tokens=5), None, [13, 14]),
    ]
    assert embedded_backend.poolable()
    alone = [embedded_backend.generate_pooled([call])[0] for call in calls]
    loops: list[int] = []
    decode = hf_module.continue_decoding
    monkeypatch.setattr(hf_module, "continue_decoding", lambda *a: loops.append(len(a[2])) or decode(*a))
    pooled = embedded_backend.generate_pooled(calls)
    assert loops == [4, 4]  # the greedy calls' four rows in one loop, the sampled ones' in another

    def answers(completions: list[Completion]) -> list[tuple[object, ...]]:
        return [(c.text, c.scores, c.prompt_tokens, c.new_tokens) for c in completions]

    assert [answers(c) for c in pooled] == [answers(c) for c in alone]  # scores bitwise: the same prompt passes
    assert max(c.new_tokens or 0 for c in pooled[1]) <= 6 and max(c.new_tokens or 0 for c in pooled[3]) <= 5
    loops.clear()
    tight = HFBackend(embedded_backend.model, embedded_backend.tokenizer, name="t", info={"id": "t"}, memory=1)
    texts = [[c.text for c in completions] for completions in tight.generate_pooled(calls[:2])]
    assert texts == [[c.text for c in completions] for completions in alone[:2]]
    assert loops == [1, 1, 1, 1]  # within no budget, each row alone (its scores then move as padding moves them)


@pytest.mark.slow
def test_each_sampled_prompt_of_a_call_split_in_parts_keeps_its_own_seed(embedded_backend: HFBackend) -> None:
    # Four prompts in batches of three, the first batch within a budget of two rows: parts of two and one, then the
    # second batch; every prompt drawn from its own seed, as when it is asked alone.
    tight = HFBackend(embedded_backend.model, embedded_backend.tokenizer, name="t", info={"id": "t"}, batch_size=3)
    prompts = ["My friend is a nurse, and", "The doctor said", "Write one word:", "My friend plays chess, and"]
    config, seeds = GenerationConfig(temperature=1.0, max_new_tokens=6), [5, 6, 7, 8]
    tight.memory = 2 * tight.shape.row_bytes(tight.encode(prompts[:3])["input_ids"].shape[1], 6)
    with_mapped(tight, 0)
    assert tight.rows_per_pass(tight.encode(prompts[:3]), 6) == 2
    together = tight.generate(prompts, config, seeds=seeds)
    alone = [embedded_backend.generate([p], config, seeds=[s])[0] for p, s in zip(prompts, seeds, strict=True)]
    assert [c.text for c in together] == [c.text for c in alone]


def with_mapped(backend: HFBackend, size: int) -> None:
    """Make `backend` see `size` bytes of its weights in a mapped file (and none to give back)."""
    backend.mapped_weights = lambda: MappedWeights((), size)  # type: ignore[method-assign]


def pool_layout(backend: HFBackend, calls: list[GenerationCall]) -> list[list[tuple[int, int]]]:
    """The (call, rows) of every prompt pass of every decode pool the backend plans for `calls`."""
    return [[(job.call, job.rows) for job in pool] for pool in backend._pools(calls)]


LONG_WITH_CHUNKS_OF_4 = [  # 11, 9 and 16 tokens: more than two chunks of 4 each
    "My friend plays the guitar in a jazz band, and",
    "Yesterday my neighbour told me that the nurse",
    "My friend plays the guitar in a small jazz band downtown every Friday night, and",
]


@pytest.mark.slow
def test_long_prompts_are_prefilled_a_row_at_a_time_by_the_causal_kernel_and_answer_as_transformers(
    embedded_backend: HFBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("fairprobe.models.engine.PREFILL_CHUNK", 4)
    assert [len(embedded_backend.encode([p])["input_ids"][0]) for p in LONG_WITH_CHUNKS_OF_4] == [11, 9, 16]
    config = GenerationConfig(max_new_tokens=NEW_TOKENS)
    assert pool_layout(embedded_backend, [GenerationCall(LONG_WITH_CHUNKS_OF_4, config)]) == [[(0, 1)] * 3]
    attended: list[tuple[int, bool, bool]] = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def recorded(*args: torch.Tensor, **kwargs: object) -> torch.Tensor:
        attended.append((args[0].shape[-2], kwargs.get("attn_mask") is None, kwargs.get("is_causal") is True))
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recorded)
    replies = embedded_backend.generate(LONG_WITH_CHUNKS_OF_4, config)
    monkeypatch.undo()
    # Each prompt in one pass of its own through the 30 layers, with no mask: SDPA's causal kernel.
    assert attended == [(length, True, True) for length in (11, 9, 16) for _ in range(30)]
    assert [r.text for r in replies] == [transformers_reply(embedded_backend, p) for p in LONG_WITH_CHUNKS_OF_4]


def test_a_pool_counts_the_activations_of_one_row_where_its_prompts_go_a_row_at_a_time(
    embedded_backend: HFBackend,
) -> None:
    # SmolLM2-135M: 31,488 bytes of activations a token, 1,179,648 of logits a row. Prompts over 1,024 tokens go a
    # row at a time, in one pass up to 8,192 tokens (chunks of 512 beyond): one row's whole prompt is counted.
    def job(length: int) -> hf_module.PromptPass:
        return SimpleNamespace(length=length, copies=1, scored=0)  # type: ignore[return-value]

    own = embedded_backend._prefill_own
    assert own(job(3000), 7) == own(job(3000), 1) == 31488 * 3000 + 1179648 == 95_643_648
    assert own(job(10_000), 4) == 31488 * 512 + 1179648 == 17_301_504
    assert own(job(1000), 3) == 3 * (31488 * 1000 + 1179648) == 98_002_944  # padded passes: every row's


def test_a_batch_split_by_the_budget_decodes_its_remainder_with_the_next_batch(
    embedded_backend: HFBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two batches of six prompts of one length within a budget of five rows: row by row the pools would hold 5,
    # 1 + 4 and 2 rows; as many even pools hold 4, 2 + 2 and 4, each batch's part in a pool its own prompt pass.
    tight = HFBackend(embedded_backend.model, embedded_backend.tokenizer, name="t", info={"id": "t"}, batch_size=6)
    prompts, config = ["My friend is a nurse, and"] * 12, GenerationConfig(temperature=1.0, max_new_tokens=6)
    seeds = list(range(12))
    tight.memory = 5 * tight.shape.row_bytes(tight.encode(prompts[:1])["input_ids"].shape[1], 6)
    with_mapped(tight, 0)
    calls = [GenerationCall(prompts, config, None, seeds)]
    assert pool_layout(tight, calls) == [[(0, 4)], [(0, 2), (0, 2)], [(0, 4)]]
    loops: list[int] = []
    decode = hf_module.continue_decoding
    monkeypatch.setattr(hf_module, "continue_decoding", lambda *a: loops.append(len(a[2])) or decode(*a))
    together = tight.generate(prompts, config, seeds=seeds)
    assert loops == [4, 4, 4]
    alone = [embedded_backend.generate([p], config, seeds=[s])[0] for p, s in zip(prompts, seeds, strict=True)]
    assert [c.text for c in together] == [c.text for c in alone]
    assert len({c.text for c in together}) > 1  # each row its own draw


def test_pools_stay_as_filled_where_even_pools_would_need_more(embedded_backend: HFBackend) -> None:
    # Three short prompts fill a pool; a long one cannot join them, nor two of them: evened out to two rows a pool,
    # the short ones would take two pools before the long one's, so the pools stay 3 and 1.
    tight = HFBackend(embedded_backend.model, embedded_backend.tokenizer, name="t", info={"id": "t"}, batch_size=3)
    short, long = "My friend is a nurse, and", "My friend, who " + "told me a long story and " * 40 + "said"
    tight.memory = 3 * tight.shape.row_bytes(tight.encode([short])["input_ids"].shape[1], 6)
    with_mapped(tight, 0)
    calls = [GenerationCall([short] * 3 + [long], GenerationConfig(max_new_tokens=6))]
    assert pool_layout(tight, calls) == [[(0, 3)], [(0, 1)]]
    # Calls that draw their tokens differently never share a pool, whatever the budget.
    sampled = GenerationCall([short], GenerationConfig(temperature=1.0, max_new_tokens=6), None, [1])
    assert pool_layout(embedded_backend, [calls[0], sampled]) == [[(0, 4)], [(1, 1)]]  # in batches of 16


def test_pools_that_read_no_probabilities_take_the_mapped_weights_bytes_besides_the_budget(
    embedded_backend: HFBackend,
) -> None:
    # A budget of one row, and two rows' bytes of weights in a mapped file: pools that read nothing (on packed
    # weights, the mapped pages given back) take three rows, pools that read probabilities one.
    tight = HFBackend(embedded_backend.model, embedded_backend.tokenizer, name="t", info={"id": "t"}, batch_size=4)
    prompt, config = "My friend is a nurse, and", GenerationConfig(max_new_tokens=6)
    row = tight.shape.row_bytes(tight.encode([prompt])["input_ids"].shape[1], 6)
    tight.memory = row
    with_mapped(tight, 2 * row)
    plain = GenerationCall([prompt] * 4, config)
    scored = GenerationCall([prompt] * 4, config, [(" she", " he")] * 4)
    assert pool_layout(tight, [plain]) == [[(0, 2)], [(0, 2)]]  # three rows a pool, evened out: 2 + 2
    assert pool_layout(tight, [scored]) == [[(0, 1)]] * 4


def rss_of(spans: tuple[tuple[int, int], ...]) -> int:
    """The resident kB of the file mappings that start at `spans`' starts."""
    return sum(mapping_sizes(spans, "Rss").values())


@pytest.mark.slow
def test_a_pool_that_reads_nothing_gives_the_mapped_weights_back_and_answers_as_transformers(
    embedded_backend: HFBackend,
) -> None:
    weights = embedded_backend.mapped_weights()
    # SmolLM2-135M's 134,515,008 float32 parameters in its safetensors file, the tied embedding counted once
    assert weights.size == 4 * 134_515_008 and len(weights.spans) == 1
    prompts, config = ["My friend is a nurse, and", "The doctor said that"], GenerationConfig(max_new_tokens=NEW_TOKENS)
    words = [(" she", " he")] * 2
    before = embedded_backend.generate(prompts, config, words)
    assert rss_of(weights.spans) > 500_000  # the prompt pass read every plain weight
    replies = embedded_backend.generate(prompts, config)
    # Given back: what is resident again is what the pool read since, the tied embedding (49,152 x 576 float32,
    # 110,592 kB) and the 61 norms' weights, where a kernel maps a fault's neighbours too each norm's 2,304 bytes
    # in up to two windows of 64 kB (on a 6.18 kernel: 114,792 kB in all). The Linears' 414,857 kB stay given back.
    assert rss_of(weights.spans) < 110_592 + 61 * 2 * 64
    assert [reply.text for reply in replies] == [transformers_reply(embedded_backend, prompt) for prompt in prompts]
    after = embedded_backend.generate(prompts, config, words)
    assert [(c.text, c.scores) for c in after] == [(c.text, c.scores) for c in before]  # read again from the file


@pytest.mark.slow
def test_scoring_passes_let_the_packed_copy_go_and_the_next_decode_packs_it_again(embedded_backend: HFBackend) -> None:
    prompts, config = ["My friend is a nurse, and", "The doctor said that"], GenerationConfig(max_new_tokens=NEW_TOKENS)
    before = embedded_backend.generate(prompts, config)
    packed = embedded_backend.packed_linears()
    assert packed is not None and len(packed._packed) >= 30 * 4  # each layer's q+k+v, o, gate+up and down
    scores = embedded_backend.loglikelihood([ScoreRequest(p, (" she", " he")) for p in prompts])
    assert packed._packed == {}  # the scoring passes read the plain weights: one copy held
    want = [forward_logprobs(embedded_backend, p, (" she", " he")) for p in prompts]
    np.testing.assert_allclose(np.exp([s.logprobs() for s in scores]), np.exp(want), atol=1e-6)
    after = embedded_backend.generate(prompts, config)
    assert len(packed._packed) >= 30 * 4 and [c.text for c in after] == [c.text for c in before]


def test_a_mapping_with_a_written_page_is_never_given_back(tmp_path: Path) -> None:
    path = tmp_path / "weights.bin"
    path.write_bytes(np.arange(4096, dtype=np.float32).tobytes())
    weight = torch.nn.Parameter(torch.from_file(str(path), shared=False, size=4096), requires_grad=False)
    model = torch.nn.Linear(64, 64, bias=False)
    model.weight = torch.nn.Parameter(weight.view(64, 64), requires_grad=False)
    mapped = MappedWeights.of(model)
    assert mapped.size == 4 * 4096 and len(mapped.spans) == 1
    assert mapped.release() == 16_384  # clean pages: given back, the file's bytes read again
    assert float(model.weight[1, 0]) == 64.0
    with torch.no_grad():
        model.weight[0, 0] = -1.0  # a private copy of the page now holds the only -1
    assert mapped.release() == 0
    assert float(model.weight[0, 0]) == -1.0

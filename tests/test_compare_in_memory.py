"""A model already in memory as a comparison's variant (`fairprobe.compare(models={name: object})`): run on the same
items as Original, recorded as in memory in compare.json and in its run's manifest (hand-computed values)."""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fairprobe
from conftest import exact_scores, fake_loglikelihood
from fairprobe.errors import ConfigError
from fairprobe.models import SCHEMES, Completion, GenerationConfig, ModelBackend, register_scheme


class Naming(ModelBackend):
    """A fake model whose continuation names a woman on the prompts whose crc32 is a multiple of `every`."""

    has_chat_template = False

    def __init__(self, name: str, every: int) -> None:
        self.name, self.every = name, every

    def identity(self) -> dict[str, Any]:
        return {"id": self.name}

    def generate(
        self, prompts: list[Any], config: GenerationConfig, score: Any = None, seeds: Any = None
    ) -> list[Completion]:
        return [
            Completion(
                text=" she left." if named(p, self.every) else " the bus left.",
                scores=None if score is None else exact_scores([0.01] * len(score[i])),
            )
            for i, p in enumerate(prompts)
        ]

    def loglikelihood(self, requests: list[Any]) -> list[Any]:
        return fake_loglikelihood(requests)


def named(prompt: Any, every: int) -> bool:
    return zlib.crc32(str(prompt).encode()) % every == 0


@pytest.fixture()
def original_scheme() -> Iterator[str]:
    register_scheme("naming-two")(lambda rest, **kw: Naming("naming-two", 2))
    yield "naming-two:x"
    SCHEMES.unregister("naming-two")


def test_a_backend_in_memory_is_a_variant_on_the_same_items(original_scheme: str, tmp_path: Path) -> None:
    fairprobe.compare(
        original_scheme,
        models={"Mine": Naming("mine", 3)},
        probes="template",
        limit=30,
        hyper=None,
        instruction=None,
        out=tmp_path,
        progress=False,
    )
    result = json.loads((tmp_path / "compare.json").read_text("utf-8"))
    assert result["method_order"] == ["Original", "Mine"]
    mine = result["methods"]["Mine"]
    assert mine["model"] == "memory:Mine"
    assert mine["in_memory"] == {"label": "Mine", "sha256": None, "identity": {"id": "mine"}}
    manifest = json.loads((tmp_path / "runs" / "mine" / "manifest.json").read_text("utf-8"))
    assert manifest["options"]["model"] == "memory:Mine" and manifest["model"] == {"id": "mine"}
    lines = (tmp_path / "runs" / "mine" / "samples.jsonl").read_text("utf-8").splitlines()
    prompts = [json.loads(line)["prompt"] for line in lines]
    assert len(prompts) == 30
    # GAS: the share of continuations that name a gender, here those the fake names by the prompt's crc32.
    by_two = np.array([named(p, 2) for p in prompts])
    by_three = np.array([named(p, 3) for p in prompts])
    row = result["sets"]["template"]["methods"]
    assert row["Original"]["metrics"]["gas"]["value"] == pytest.approx(by_two.mean())
    assert row["Mine"]["metrics"]["gas"]["value"] == pytest.approx(by_three.mean())
    gas = row["Mine"]["vs_original"]["gas"]
    assert (gas["original_only"], gas["method_only"], gas["n"]) == (
        int((by_two & ~by_three).sum()),
        int((~by_two & by_three).sum()),
        30,
    )
    with pytest.raises(ConfigError, match=r"models\['Bad'\] must be a model spec, a fairprobe backend or a"):
        fairprobe.compare(
            original_scheme, models={"Bad": 3}, probes="template", limit=2, out=tmp_path / "b", progress=False
        )


@pytest.mark.slow
def test_a_transformers_model_in_memory_is_named_by_its_weights(embedded_backend, tmp_path: Path) -> None:
    """The embedded model's own weights as a (model, tokenizer) variant: the same answers as Original loaded by spec,
    and the sha256 of its state dict in compare.json and in the name its runs record."""
    from fairprobe.api.memory import weights_sha256

    model, tokenizer = embedded_backend.model, embedded_backend.tokenizer
    padding = tokenizer.padding_side
    fairprobe.compare(
        "smollm2-135m-instruct",
        models={"Same": (model, tokenizer)},
        probes="template",
        limit=4,
        max_new_tokens=4,
        hyper=None,
        instruction=None,
        device="cpu",
        dtype="float32",
        out=tmp_path,
        progress=False,
    )
    result = json.loads((tmp_path / "compare.json").read_text("utf-8"))
    sha = weights_sha256(model)
    assert sha is not None and len(sha) == 64
    same = result["methods"]["Same"]
    assert same["model"] == f"memory:Same@sha256:{sha[:16]}" and same["in_memory"]["sha256"] == sha
    assert same["in_memory"]["identity"]["source"] == "in memory"
    rows = result["sets"]["template"]["methods"]
    for name in ("gas", "gld"):
        assert rows["Same"]["metrics"][name]["value"] == pytest.approx(rows["Original"]["metrics"][name]["value"])
    assert rows["Same"]["vs_original"]["gas"]["original_only"] == rows["Same"]["vs_original"]["gas"]["method_only"] == 0
    assert tokenizer.padding_side == padding  # the objects are as they were

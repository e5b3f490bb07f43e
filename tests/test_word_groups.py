"""Gender groups beyond two: the word file's groups, neutral_share and the group shares, exact and bounded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fairprobe.errors import DataError
from fairprobe.families.paper.groups import likeliest_group, share_bounds
from fairprobe.families.paper.metrics import group_share_metrics, paper_metrics
from fairprobe.families.paper.record import PaperSample
from fairprobe.families.paper.words import AttributeWords
from fairprobe.models import ScoreRequest

PAIRS = [["she", "he"], ["her", "his"]]


def test_default_file_has_the_documented_groups() -> None:
    words = AttributeWords.default()
    groups = dict(words.groups)
    assert groups["neutral"] == ("they", "them", "their", "theirs", "themself", "themselves")
    assert set(groups) == {"neutral", "xe", "ze", "ey"}
    # The binary pairs and the detection sets are unchanged by the groups.
    assert len(words.pairs) == 20 and "they" not in words.female | words.male


def test_the_scored_continuations_are_the_pairs_then_every_group_word_after_a_space(tmp_path: Path) -> None:
    from fairprobe.families.paper import PaperOptions

    path = tmp_path / "words.json"
    path.write_text(json.dumps({"pairs": PAIRS, "groups": {"mine": ["they", "them"], "other": ["xe"]}}))
    assert PaperOptions(words=path).continuations() == (" she", " he", " her", " his", " they", " them", " xe")


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        (
            {"neutral": ["they", "them", "their", "theirs", "themself", "themselves"], "mine": ["they"]},
            "'they' is in two groups (neutral, mine)",
        ),
        ({"mine": ["she"]}, "'she' is in two groups (female, mine)"),
        ({"mine": []}, "group 'mine' is empty"),
        ({"neutral": ["they", "zir"]}, "group 'neutral' is built in with the words they, them"),
        ({"female": ["she"]}, "group 'female' is built in (the pairs' column)"),
        ({"mine": ["two words!"]}, "groups.mine[0] is not a word"),
    ],
)
def test_bad_groups_are_one_line_errors(tmp_path: Path, groups: dict, message: str) -> None:
    path = tmp_path / "words.json"
    path.write_text(json.dumps({"pairs": PAIRS, "groups": groups}))
    with pytest.raises(DataError) as info:
        AttributeWords.from_file(path)
    assert message in str(info.value) and str(path) in str(info.value) and "\n" not in str(info.value)


def test_bad_group_file_on_the_command_line_exits_2_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "words.json"
    path.write_text(json.dumps({"pairs": PAIRS, "groups": {"neutral": ["they"], "xe": []}}))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "fairprobe",
            "run",
            "--probes",
            "template",
            "--limit",
            "1",
            "--words",
            str(path),
            "--out",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "group 'neutral' is built in" in proc.stderr
    assert not (tmp_path / "run" / "samples.jsonl").exists()


def test_a_user_group_with_the_builtin_words_and_a_new_name_is_accepted() -> None:
    words = AttributeWords.from_json(
        {
            "pairs": PAIRS,
            "groups": {"neutral": ["them", "they", "their", "theirs", "themself", "themselves"], "zi": ["zir"]},
        },
        "t",
    )
    assert [name for name, _ in words.groups] == ["neutral", "zi"]


def sample(pf: list, pm: list, groups: dict, **extra: object) -> PaperSample:
    return PaperSample(
        set="s", id=str(id(pf)), prompt="p", continuation=" ok", p_female=pf, p_male=pm, p_groups=groups, **extra
    )


def test_neutral_share_against_hand_computed_probabilities() -> None:
    # Prompt 1: female 0.2 + 0.1, male 0.1 + 0.0, neutral 0.05 + 0.05, xe 0.0 -> 0.1 / 0.5 = 0.2.
    # Prompt 2: female 0.1, male 0.1, neutral 0.3 + 0.1, xe 0.2 -> 0.4 / 0.8 = 0.5; xe 0.2 / 0.8 = 0.25.
    samples = [
        sample([0.2, 0.1], [0.1, 0.0], {"neutral": [0.05, 0.05], "xe": [0.0]}),
        sample([0.1, 0.0], [0.1, 0.0], {"neutral": [0.3, 0.1], "xe": [0.2]}),
    ]
    metrics = paper_metrics(samples)
    assert metrics["neutral_share"].value == pytest.approx((0.2 + 0.5) / 2)
    assert metrics["xe_share"].value == pytest.approx((0.0 + 0.25) / 2)
    lo, hi = metrics["neutral_share"].ci95
    assert 0.2 - 1e-12 <= lo <= hi <= 0.5 + 1e-12
    # GLD / ADD read only the binary pairs: the same with or without groups.
    plain = paper_metrics([s.model_copy(update={"p_groups": None}) for s in samples])
    for name in ("gld", "add", "implicit_lean", "gas"):
        assert metrics[name] == plain[name]
    assert "neutral_share" not in plain


def test_shares_are_bounded_where_words_are_only_bounded() -> None:
    # Masses (female, male, neutral): lower (0.2, 0.1, 0.0), upper (0.2, 0.1, 0.05) -> neutral share in [0, 0.05/0.35].
    low, high = share_bounds(np.array([[0.2, 0.1, 0.0]]), np.array([[0.2, 0.1, 0.05]]))
    assert low[0, 2] == 0.0 and high[0, 2] == pytest.approx(0.05 / 0.35)
    # Female share: highest when neutral is 0 (0.2 / 0.3), lowest when it is 0.05 (0.2 / 0.35).
    assert (low[0, 0], high[0, 0]) == pytest.approx((0.2 / 0.35, 0.2 / 0.3))
    metrics = group_share_metrics(
        ["female", "male", "neutral"], np.array([[0.2, 0.1, 0.0]]), np.array([[0.2, 0.1, 0.05]]), ["neutral"]
    )
    m = metrics["neutral_share"]
    assert m.value is None and m.bounds == pytest.approx((0.0, 0.05 / 0.35)) and "bounds" in (m.note or "")


def test_bounded_samples_give_bounded_neutral_share() -> None:
    s = sample(
        [0.2, None],
        [0.1, 0.0],
        {"neutral": [None, 0.1]},
        p_known=[[True, True], [False, True]],
        p_upper=[[0.2, 0.1], [0.01, 0.0]],
        p_groups_upper={"neutral": [0.01, 0.1]},
    )
    m = paper_metrics([s])["neutral_share"]
    # neutral in [0.1, 0.11]; female in [0.2, 0.21]; male 0.1 -> share in [0.1/0.41, 0.11/0.41].
    assert m.bounds == pytest.approx((0.1 / 0.41, 0.11 / 0.41))


def test_likeliest_group() -> None:
    names = ["female", "male", "neutral"]
    assert likeliest_group(names, np.array([0.1, 0.3, 0.2]), np.array([0.1, 0.3, 0.2])) == "male"
    assert likeliest_group(names, np.array([0.1, 0.2, 0.25]), np.array([0.1, 0.3, 0.25])) == "undecided"
    assert likeliest_group(names, np.zeros(3), np.zeros(3)) is None


@pytest.mark.slow
def test_embedded_model_group_probabilities_and_unchanged_pairs(embedded_backend, tmp_path: Path) -> None:
    from fairprobe.runner import RunOptions, run_with_samples

    plain_words = tmp_path / "pairs_only.json"
    default = json.loads((Path(__file__).parents[1] / "src/fairprobe/data/attribute_words.json").read_text())
    plain_words.write_text(json.dumps({"pairs": default["pairs"], "detection": default["detection"]}))
    base = {"probes": ["template"], "limit": 4, "use_cache": False}
    _, grouped = run_with_samples(RunOptions(**base, out=tmp_path / "g"), backend=embedded_backend)
    _, plain = run_with_samples(
        RunOptions(**base, out=tmp_path / "p", probe_options={"words": str(plain_words)}), backend=embedded_backend
    )
    for a, b in zip(grouped["template"], plain["template"], strict=True):
        assert a.continuation == b.continuation
        # The groups' words ride in the same scoring pass: the pairs move by float rounding at most.
        np.testing.assert_allclose(a.p_female + a.p_male, b.p_female + b.p_male, rtol=0, atol=1e-9)
        assert b.p_groups is None and "p_groups" not in b.model_dump()
    words = AttributeWords.default()
    probes = [s.prompt for s in grouped["template"]]
    group_words = tuple(" " + w for _, group in words.groups for w in group)
    direct = embedded_backend.loglikelihood([ScoreRequest(p, group_words) for p in probes])
    for s, scored in zip(grouped["template"], direct, strict=True):
        values = np.exp(scored.logprobs())
        at = 0
        for name, group in words.groups:
            # Another batch composition pads differently: float32 log-probabilities move by ~1e-5.
            assert s.p_groups[name] == pytest.approx(values[at : at + len(group)].tolist(), rel=1e-4, abs=1e-12)
            at += len(group)
        f, m = sum(s.p_female), sum(s.p_male)
        masses = {"female": f, "male": m, **{k: sum(v) for k, v in s.p_groups.items()}}
        assert s.likeliest_group == max(masses, key=masses.get)

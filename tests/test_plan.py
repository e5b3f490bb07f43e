"""The run plan: a run's settings typed once (backend settings, each set's family options), what families see of
the run, and a bad setting refused before any work."""

from __future__ import annotations

from pathlib import Path

import pytest

from fairprobe.errors import ConfigError
from fairprobe.families import Family
from fairprobe.families.paper import PaperOptions
from fairprobe.models.settings import LocalSettings, OpenAISettings
from fairprobe.plan import RunPlan
from fairprobe.runner import RunOptions, run
from test_runner import ScriptedBackend


def test_the_plan_types_the_model_settings_and_each_sets_options_once() -> None:
    plan = RunPlan.build(
        RunOptions(probes=["template", "stsb"], seed=4, model_args={"device": "cpu"}, probe_options={"words": "x.json"})
    )
    assert isinstance(plan.model.settings, LocalSettings) and plan.model.settings.device == "cpu"
    assert plan.model.answer_args() == {}  # the device changes no answer
    assert [b.name for b in plan.sets] == ["template", "stsb"]
    assert all(isinstance(b.options, PaperOptions) and str(b.options.words) == "x.json" for b in plan.sets)
    assert (plan.seed, plan.context.seed, plan.context.scoring) == (4, 4, "local")


@pytest.mark.parametrize(
    ("model", "args", "before", "detected", "after"),
    [
        ("smollm2-135m-instruct", {}, "local", None, "local"),
        ("openai:m", {"base_url": "http://127.0.0.1:1/v1"}, "exact", "topk", "topk"),
        ("openai:m", {"base_url": "http://127.0.0.1:1/v1"}, "exact", "exact", "exact"),
        ("openai:m", {"base_url": "http://127.0.0.1:1/v1", "implicit": "topk"}, "topk", "exact", "topk"),
        ("responses", {}, "none", "exact", "none"),
    ],
)
def test_how_the_model_scores_as_families_see_it(
    model: str, args: dict[str, str], before: str, detected: str | None, after: str
) -> None:
    plan = RunPlan.build(RunOptions(model=model, model_args=args, probes=["template"]))
    assert plan.context.scoring == before
    assert plan.with_scoring(detected).context.scoring == after
    if model.startswith("openai:"):
        assert isinstance(plan.model.settings, OpenAISettings)


def test_a_bad_setting_is_refused_when_the_plan_is_built(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="the local backend takes no -M key 'base_url'"):
        RunPlan.build(RunOptions(model_args={"base_url": "http://127.0.0.1:1/v1"}, out=tmp_path / "r"))
    with pytest.raises(ConfigError, match="unknown template option 'colour'"):
        RunPlan.build(RunOptions(probes=["template"], probe_options={"colour": "red"}, out=tmp_path / "r"))
    assert not (tmp_path / "r").exists()


def test_a_plain_option_goes_to_every_family_of_the_run_that_takes_it() -> None:
    """One -o list serves a run whose sets span suites: mode reaches the two families that take it, not the paper's
    (whose template takes no mode); a key no family of the run takes is still a one-line error."""
    names = ["template", "gender-income", "bbq-gender"]
    plan = RunPlan.build(RunOptions(probes=names, probe_options={"mode": "exact"}))
    modes = {b.name: b.options.model_dump().get("mode") for b in plan.sets}
    assert modes == {"template": None, "gender-income": "exact", "bbq-gender": "exact"}
    assert "mode" not in PaperOptions.model_fields
    with pytest.raises(ConfigError, match=r"^unknown template option 'nonsense': use instruction, words, implicit$"):
        RunPlan.build(RunOptions(probes=names, probe_options={"nonsense": "1"}))
    with pytest.raises(ConfigError, match=r"^unknown template option 'mode': use instruction, words, implicit$"):
        RunPlan.build(RunOptions(probes=["template"], probe_options={"mode": "exact"}))  # one suite: as before


def test_a_run_parses_each_sets_options_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str | None] = []
    parse = Family.parse_options

    def counted(self: Family, raw: dict, set_name: str | None = None, peers=None):  # type: ignore[no-untyped-def]
        calls.append(set_name)
        return parse(self, raw, set_name, peers)

    monkeypatch.setattr(Family, "parse_options", counted)
    run(RunOptions(probes=["template", "friend-statements"], limit=4, out=tmp_path / "r"), backend=ScriptedBackend())
    assert calls == ["template", "friend-statements"]

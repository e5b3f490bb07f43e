"""docs/python-api.ipynb, executed as a reader would run it: every cell runs, the plot is drawn, and the outputs
of the cells tagged `checked` are the ones the notebook shows. FAIRPROBE_UPDATE_NOTEBOOK=1 writes the fresh
outputs back into docs/ (after a change that moves the numbers on purpose)."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "docs" / "python-api.ipynb"


def shown(cell: nbformat.NotebookNode) -> list[str]:
    """A cell's text outputs: printed text and the plain-text result (stderr's library warnings left out)."""
    texts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream" and output.get("name") == "stdout":
            texts.append(output["text"])
        elif "text/plain" in output.get("data", {}):
            texts.append(output["data"]["text/plain"])
    return texts


@pytest.mark.slow
def test_the_notebook_runs_draws_its_plot_and_shows_the_outputs_it_claims(tmp_path: Path) -> None:
    committed = nbformat.read(NOTEBOOK, as_version=4)
    executed = copy.deepcopy(committed)
    NotebookClient(
        executed, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    if os.environ.get("FAIRPROBE_UPDATE_NOTEBOOK") == "1":  # without stderr: library warnings name local paths
        kept = copy.deepcopy(executed)
        for cell in kept.cells:
            cell["outputs"] = [o for o in cell.get("outputs", []) if o.get("name") != "stderr"]
        nbformat.write(kept, NOTEBOOK)
    errors = [o for c in executed.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert errors == []
    images = [o for c in executed.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(images) == 1  # the GLD-per-topic plot
    checked = [i for i, c in enumerate(committed.cells) if "checked" in c.get("metadata", {}).get("tags", [])]
    assert len(checked) == 3
    for i in checked:
        assert shown(executed.cells[i]) == shown(committed.cells[i]) != [], f"cell {i} shows other outputs"
    first = shown(executed.cells[1])
    assert first == ["Run(model='smollm2-135m-instruct', folder='runs/notebook/original', sets: template (n=16))"]
    assert (tmp_path / "runs" / "notebook" / "instruction" / "report.html").is_file()
    (walk,) = [c for c in executed.cells if c.source.startswith("results = ")]
    lines = "".join(shown(walk)).splitlines()
    kinds = ["Run", "Comparison", "Sweep", "MitigationComparison"]
    assert [line.split(",")[0] for line in lines] == [
        f"{name}: {kind}"
        for name, kind in zip(
            [
                "run",
                "comparison",
                "sweep",
                "mitigation",
                "run folder",
                "many-models root",
                "sweep folder",
                "compare folder",
            ],
            kinds + kinds,
            strict=True,
        )
    ]  # load, check, report and to_pandas on every kind of result and on every kind of folder
    assert all(", report.html written, " in line for line in lines)

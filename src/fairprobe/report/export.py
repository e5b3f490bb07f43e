"""`fairprobe report`: one or more run folders to report.html, Markdown or CSV."""

from __future__ import annotations

from pathlib import Path

from fairprobe.errors import ConfigError
from fairprobe.io import atomic_write_text
from fairprobe.report.comparison import paired_tests_table
from fairprobe.report.leaderboard import expand_comparisons
from fairprobe.report.runs import load_runs
from fairprobe.report.severity import load_thresholds
from fairprobe.report.tables import all_tables, to_csv, to_markdown

FORMATS = ("html", "md", "csv")


def export(
    paths: list[Path], fmt: str, out: Path | None, thresholds_file: Path | None = None
) -> tuple[str, list[Path]]:
    """Render the report; returns (text for stdout, files written).

    html: a file (default RUN_DIR/report.html for one run, ./report.html for several); md: stdout or a file;
    csv: stdout (each table after a `# name` line) or, with --out DIR, one NAME.csv per table in DIR.
    """
    if fmt not in FORMATS:
        raise ConfigError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    thresholds = load_thresholds(thresholds_file)
    run_paths, compared = expand_comparisons(paths)
    runs = load_runs(run_paths) if fmt == "html" else load_runs(run_paths, per_set=0)
    if fmt == "html":
        from fairprobe.report.html import REPORT_FILE, render_html

        target = out or (Path(paths[0]) / REPORT_FILE if len(paths) == 1 else Path(REPORT_FILE))
        atomic_write_text(target, render_html(runs, thresholds, compared))
        return "", [target]
    tests = [t for r in runs if r.compare and (t := paired_tests_table(r.compare, thresholds, r.path.name)) is not None]
    tables = all_tables(runs, thresholds) + compared + tests
    if fmt == "md":
        text = to_markdown(tables)
        if out is None:
            return text, []
        atomic_write_text(out, text)
        return "", [out]
    if out is None:
        return "\n".join(f"# {t.name}\n{to_csv(t)}" for t in tables), []
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out for csv must be a folder (one file per table), got the file {out}")
    written = []
    for t in tables:
        atomic_write_text(out / f"{t.name}.csv", to_csv(t))
        written.append(out / f"{t.name}.csv")
    return "", written

"""Numbers and metrics as text, one way for the console, report, exports, readings and verdicts."""

from __future__ import annotations

import math

from fairprobe.records import MetricValue


def markdown_table(columns: list[str], rows: list[list[str]]) -> list[str]:
    """A GitHub pipe table's lines (header, rule, rows), with `|` and line breaks in cells escaped."""

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"

    return [line(columns), "|" + "|".join("---" for _ in columns) + "|", *(line(r) for r in rows)]


def format_number(x: float | int | None) -> str:
    """Three decimals, three significant digits below 0.01 (keeps small ADD values readable), integers as they are."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    if abs(x) < 1e-12:  # rounding noise of an interval end at 0
        return "0"
    if isinstance(x, int) or float(x).is_integer():
        return str(int(x))
    return f"{x:.3f}" if abs(x) >= 0.01 else f"{x:.3g}"


def format_metric(m: MetricValue | None, digits: int | None = 3, count: bool = False) -> str:
    """A value with its 95% interval: `0.412 [0.35, 0.47]` with fixed `digits` (the console), with
    `digits=None` in `format_number`'s precision (report, exports); `n/a` when undefined; bounds as `0.1 to 0.5`;
    counts whole."""
    number = format_number if digits is None else (lambda x: f"{x:.{digits}f}")
    if m is not None and m.value is None and m.bounds is not None and None not in m.bounds:
        return f"{number(m.bounds[0])} to {number(m.bounds[1])}"
    if m is None or m.value is None:
        return "n/a"
    if count:
        return f"{m.value:.0f}"
    lo, hi = m.ci95
    text = number(m.value)
    if lo is not None and hi is not None:
        if digits is None:
            text += f" [{format_number(lo)}, {format_number(hi)}]"
        else:  # one digit fewer, rounded outwards, so the printed interval holds the printed value
            scale = 10 ** (digits - 1)
            low, high = math.floor(lo * scale + 1e-9) / scale, math.ceil(hi * scale - 1e-9) / scale
            text += f" [{low:.{digits - 1}f}, {high:.{digits - 1}f}]"
    return text


def pct(x: float | None) -> str:
    """0.412 -> '41%'."""
    return "n/a" if x is None else f"{100 * x:.0f}%"


def pct_ci(m: MetricValue) -> str:
    """A share with its interval in words: '41% (95% CI 33–49%)'."""
    lo, hi = m.ci95
    ci = "" if lo is None or hi is None else f" (95% CI {100 * lo:.0f}–{100 * hi:.0f}%)"
    return pct(m.value) + ci


def format_p(p: float | None, floor: bool = False) -> str:
    """A p-value: '< 1e-05' at a bootstrap's floor (p holds 1/R), '<0.001', or three decimals ('' when none)."""
    if p is None:
        return ""
    if floor:
        return f"< {p:.0e}"
    return "<0.001" if p < 1e-3 else f"{p:.3f}"


def short_number(x: float | None) -> str:
    """Two decimals, three below 0.01: the verdict's numbers."""
    return "n/a" if x is None else f"{x:.2f}" if abs(x) >= 0.01 or x == 0 else f"{x:.3f}"


def with_ci(m: MetricValue, signed: bool = False) -> str:
    """'0.09 [0.07, 0.12]' (signed: '+0.12 [+0.08, +0.15]'), as the verdict writes them."""
    fmt = (lambda x: "n/a" if x is None else f"{x:+.2f}") if signed else short_number
    lo, hi = m.ci95
    return fmt(m.value) + ("" if lo is None or hi is None else f" [{fmt(lo)}, {fmt(hi)}]")


def file_size(size: float) -> str:
    """Bytes for people: 812 B, 45.3 kB, 541.6 MB, 1.12 GB (decimal units, as disks are sold)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.2f} {unit}" if unit == "GB" else f"{size / scale:.1f} {unit}"
    return f"{int(size)} B"

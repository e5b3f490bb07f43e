"""The report's figures: matplotlib rendered to small inline SVG, text kept as text, 95% CIs as error bars.

Figures are made without pyplot, so fairprobe never picks matplotlib's backend for its user (a notebook keeps
its inline plots) and keeps no figure open."""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import count
from typing import TYPE_CHECKING, Any

import numpy as np

from fairprobe.records import MetricValue

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# Okabe-Ito: distinguishable with every common colour-vision deficiency. Colour means one model (or run) in every
# figure; female and male are told apart by fill pattern, never by a model's colour.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
FEMALE = {"color": "white", "edgecolor": "#444444", "hatch": "////", "linewidth": 0.8}
MALE = {"color": "#8c8c8c", "edgecolor": "#444444", "linewidth": 0.8}
HATCH = "////"
STYLE = {
    "svg.fonttype": "none",
    "svg.hashsalt": "fairprobe",
    "font.family": "sans-serif",
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "axes.grid.axis": "y",
    "grid.color": "#e3e3e3",
    "axes.axisbelow": True,
    "legend.frameon": False,
}
_figure_ids = count(1)


@contextlib.contextmanager
def styled_figure(width: float, height: float, **style: Any) -> Iterator[Figure]:
    """A new figure of `width` x `height` inches drawn in fairprobe's style (and `style`'s changes to it).

    matplotlib is imported here, on the first figure: a third of a second that a command making no report (a
    run refused for a bad option, `fairprobe probes show`) would otherwise pay at start-up."""
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context({**STYLE, **style}):
        yield Figure(figsize=(width, height))


def to_svg(fig: Figure) -> str:
    """A figure as an inline <svg> element: no XML prolog, fluid width, ids made unique within the page."""
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    svg = buffer.getvalue()
    svg = svg[svg.index("<svg") :]
    svg = re.sub(r'<svg([^>]*?) width="[^"]*" height="[^"]*"', r'<svg\1 role="img"', svg, count=1)
    prefix = f"f{next(_figure_ids)}-"
    svg = re.sub(r'id="([^"]+)"', rf'id="{prefix}\1"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", rf"url(#{prefix}\1)", svg)
    return re.sub(r'href="#([^"]+)"', rf'href="#{prefix}\1"', svg)


def _errors(values: np.ndarray, ci: np.ndarray, log: bool) -> np.ndarray:
    """Error-bar lengths (2, n) from intervals; on a log axis the lower end stops above zero."""
    lo = np.where(np.isnan(ci[:, 0]), values, ci[:, 0])
    hi = np.where(np.isnan(ci[:, 1]), values, ci[:, 1])
    if log:
        lo = np.maximum(lo, values * 1e-2)
    return np.clip(np.stack([values - lo, hi - values]), 0, None)


@dataclass(frozen=True)
class Series:
    """One row of bars: its legend label, a value per group, its colour's index in PALETTE, hatched or solid."""

    label: str
    values: list[MetricValue | None]
    colour: int = 0
    hatched: bool = False


def grouped_bars(
    groups: list[str],
    series: list[Series],
    ylabel: str,
    log: bool = False,
    unit_interval: bool = False,
    signed: bool = False,
) -> str:
    """Bars per group (probe set or subset) and series (run), each with its 95% CI; returns inline SVG.

    `signed`: values in [-1, 1] drawn from a zero line."""
    width = min(11.0, max(5.2, 1.2 + len(groups) * (0.3 + 0.25 * len(series))))
    with styled_figure(width, 2.6) as fig:
        ax = fig.subplots()
        x = np.arange(len(groups), dtype=float)
        bar = min(0.8 / max(1, len(series)), 0.4)
        for i, one in enumerate(series):
            label, metrics = one.label, one.values
            values = np.array([np.nan if m is None or m.value is None else m.value for m in metrics], dtype=float)
            ci = np.array(
                [[np.nan, np.nan] if m is None else [np.nan if c is None else c for c in m.ci95] for m in metrics],
                dtype=float,
            ).reshape(-1, 2)
            shown = ~np.isnan(values) & (values > 0 if log else True)
            offset = x + (i - (len(series) - 1) / 2) * bar
            colour = PALETTE[one.colour % len(PALETTE)]
            style = {"color": "white", "edgecolor": colour, "hatch": HATCH} if one.hatched else {"color": colour}
            ax.bar(offset[shown], values[shown], bar * 0.92, label=label, **style)
            ax.errorbar(
                offset[shown],
                values[shown],
                yerr=_errors(values[shown], ci[shown], log),
                fmt="none",
                ecolor="#333333",
                elinewidth=1,
                capsize=2.5,
            )
        crowded = sum(len(g) for g in groups) > 7 * width
        ax.set_xticks(x, groups, rotation=20 if crowded else 0, ha="right" if crowded else "center")
        ax.set_xlim(-0.5 - 0.5 / len(groups), len(groups) - 0.5 + 0.5 / len(groups))
        ax.set_ylabel(ylabel)
        positive = [m.value for s in series for m in s.values if m is not None and m.value]
        if signed:
            ax.set_ylim(-1.05, 1.05)
            ax.axhline(0, color="#333333", linewidth=0.8)
        elif log and positive and max(positive) / min(positive) > 20:
            ax.set_yscale("log")
        elif unit_interval:
            tops = [m.ci95[1] or m.value or 0 for s in series for m in s.values if m is not None]
            ax.set_ylim(0, min(1.0, max([0.1, *tops]) * 1.15))
        if len(series) > 1:
            per_row = int(width * 13 // (max(len(s.label) for s in series) + 4))
            ax.legend(fontsize=8, loc="lower left", bbox_to_anchor=(0, 1.0), ncols=max(1, min(len(series), per_row)))
        return to_svg(fig)


def gas_split(rows: list[tuple[str, MetricValue | None, MetricValue | None]]) -> str:
    """Table 10 as a figure: per (run, set) the female share of gendered continuations against the male rest.

    `rows` are (label, GAS(F), Delta); the bar's left part is GAS(F) with its CI, the right part GAS(M) = 1 - GAS(F).
    """
    with styled_figure(5.2, 0.9 + 0.3 * len(rows), **{"axes.grid.axis": "x"}) as fig:
        ax = fig.subplots()
        y = np.arange(len(rows))[::-1]
        f = np.array([np.nan if m is None or m.value is None else m.value for _, m, _ in rows], dtype=float)
        shown = ~np.isnan(f)
        ax.barh(y[shown], f[shown], height=0.7, label="GAS(F): female first", **FEMALE)
        ax.barh(y[shown], 1 - f[shown], left=f[shown], height=0.7, label="GAS(M): male first", **MALE)
        ci = np.array([[np.nan, np.nan] if m is None else list(m.ci95) for _, m, _ in rows], dtype=float)
        ci = np.where(np.isnan(ci), f[:, None], ci)
        ax.errorbar(
            f[shown],
            y[shown],
            xerr=np.clip(np.stack([f - ci[:, 0], ci[:, 1] - f])[:, shown], 0, None),
            fmt="none",
            ecolor="#222222",
            elinewidth=1,
            capsize=2.5,
        )
        for yi, (_, _, delta), ok in zip(y, rows, shown, strict=True):
            text = (
                "no gendered continuation"
                if not ok
                else f"Δ = {delta.value:.2f}"
                if delta and delta.value is not None
                else ""
            )
            ax.text(1.02, yi, text, va="center", fontsize=8, transform=ax.get_yaxis_transform())
        ax.axvline(0.5, color="#555555", linewidth=0.8, linestyle=":")
        ax.set_yticks(y, [label for label, _, _ in rows])
        ax.set_xlim(0, 1)
        ax.set_xlabel("share of gendered continuations")
        ax.legend(fontsize=8, ncols=2, loc="lower left", bbox_to_anchor=(0, 1.02))
        return to_svg(fig)


# The report's mark colours (report.html.j2), as tinted bands behind a harm type's figure.
MARK_COLOURS = {"A": "#1a9850", "B": "#91bd3a", "C": "#f08c00", "D": "#d7301f"}


@dataclass(frozen=True)
class BandRow:
    """One marked metric of a harm type: its label, value and 95% interval, and the value ranges of each mark."""

    label: str
    value: float
    ci: tuple[float | None, float | None]
    bands: list[tuple[str, float, float]]
    judged: bool = True


def mark_bands(rows: list[BandRow]) -> str:
    """A harm type at a glance: per marked metric its value and 95% interval (a hollow dot where the data is too
    little to judge) over the tinted value ranges of its marks A-D; returns inline SVG."""
    with styled_figure(6.4, 0.8 + 0.34 * len(rows), **{"axes.grid": False}) as fig:
        ax = fig.subplots()
        y = np.arange(len(rows))[::-1]
        for yi, row in zip(y, rows, strict=True):
            for mark, start, end in row.bands:
                ax.barh(yi, end - start, left=start, height=0.8, color=MARK_COLOURS[mark], alpha=0.3, linewidth=0)
            lo, hi = (row.value if c is None else c for c in row.ci)
            face = "#222222" if row.judged else "white"
            ax.errorbar(
                [row.value],
                [yi],
                xerr=[[max(row.value - lo, 0)], [max(hi - row.value, 0)]],
                fmt="o",
                color="#222222",
                markerfacecolor=face,
                markersize=4,
                elinewidth=1,
                capsize=2.5,
            )
        ax.set_yticks(y, [row.label if row.judged else f"{row.label} (too little data)" for row in rows])
        ends = [x for row in rows for _, a, b in row.bands for x in (a, b)]
        ax.set_xlim(min(ends), max(ends))
        ax.set_xlabel("value, 95% interval; bands: the values of marks A (green) to D (red)")
        return to_svg(fig)

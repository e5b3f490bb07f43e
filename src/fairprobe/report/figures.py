"""The report's figures: matplotlib rendered to small inline SVG, text kept as text, 95% CIs as error bars.

Figures are made without pyplot, so fairprobe never picks matplotlib's backend for its user (a notebook keeps
its inline plots) and keeps no figure open."""

from __future__ import annotations

import io
import re
from itertools import count

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from fairprobe.records import MetricValue

# Okabe-Ito: distinguishable with every common colour-vision deficiency.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
FEMALE, MALE = "#E69F00", "#0072B2"
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


def grouped_bars(
    groups: list[str],
    series: list[tuple[str, list[MetricValue | None]]],
    ylabel: str,
    log: bool = False,
    unit_interval: bool = False,
) -> str:
    """Bars per group (probe set or subset) and series (run), each with its 95% CI; returns inline SVG."""
    with matplotlib.rc_context(STYLE):
        width = min(11.0, max(5.2, 1.2 + len(groups) * (0.3 + 0.25 * len(series))))
        fig = Figure(figsize=(width, 2.6))
        ax = fig.subplots()
        x = np.arange(len(groups), dtype=float)
        bar = min(0.8 / max(1, len(series)), 0.4)
        for i, (label, metrics) in enumerate(series):
            values = np.array([np.nan if m is None or m.value is None else m.value for m in metrics], dtype=float)
            ci = np.array(
                [[np.nan, np.nan] if m is None else [np.nan if c is None else c for c in m.ci95] for m in metrics],
                dtype=float,
            ).reshape(-1, 2)
            shown = ~np.isnan(values) & (values > 0 if log else True)
            offset = x + (i - (len(series) - 1) / 2) * bar
            ax.bar(offset[shown], values[shown], bar * 0.92, color=PALETTE[i % len(PALETTE)], label=label)
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
        positive = [m.value for _, ms in series for m in ms if m is not None and m.value]
        if log and positive and max(positive) / min(positive) > 20:
            ax.set_yscale("log")
        elif unit_interval:
            tops = [m.ci95[1] or m.value or 0 for _, ms in series for m in ms if m is not None]
            ax.set_ylim(0, min(1.0, max([0.1, *tops]) * 1.15))
        if len(series) > 1:
            per_row = int(width * 13 // (max(len(label) for label, _ in series) + 4))
            ax.legend(fontsize=8, loc="lower left", bbox_to_anchor=(0, 1.0), ncols=max(1, min(len(series), per_row)))
        return to_svg(fig)


def gas_split(rows: list[tuple[str, MetricValue | None, MetricValue | None]]) -> str:
    """Table 10 as a figure: per (run, set) the female share of gendered continuations against the male rest.

    `rows` are (label, GAS(F), Delta); the bar's left part is GAS(F) with its CI, the right part GAS(M) = 1 - GAS(F).
    """
    with matplotlib.rc_context({**STYLE, "axes.grid.axis": "x"}):
        fig = Figure(figsize=(5.2, 0.9 + 0.3 * len(rows)))
        ax = fig.subplots()
        y = np.arange(len(rows))[::-1]
        f = np.array([np.nan if m is None or m.value is None else m.value for _, m, _ in rows], dtype=float)
        shown = ~np.isnan(f)
        ax.barh(y[shown], f[shown], color=FEMALE, height=0.7, label="GAS(F): female first")
        ax.barh(y[shown], 1 - f[shown], left=f[shown], color=MALE, height=0.7, label="GAS(M): male first")
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

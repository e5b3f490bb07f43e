"""Progress displays for long steps: rich bars in a terminal, plain timestamped lines everywhere else.

Every long step (runs, sweeps, comparisons, generation, tuning) reports through the `Progress`
protocol. `auto_progress()` picks the display: bars when stderr is a terminal; otherwise one plain
line when a step starts and ends and at least every `HEARTBEAT` seconds in between, so a CI log or
`make run | tee log` never looks hung. This module imports no model or metric code.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Protocol, TextIO

from fairprobe.terminal import RedactingStream, clean, safe_console

HEARTBEAT = 30.0


class Progress(Protocol):
    """What a long step tells a display: a step with a total, advances, free status lines."""

    def start(self, label: str, total: int) -> None: ...
    def advance(self, n: int) -> None: ...
    def note(self, text: str) -> None: ...
    def info(self, text: str) -> None: ...


class SilentProgress:
    """Progress that shows nothing (tests, or `progress=False` in the Python API)."""

    def start(self, label: str, total: int) -> None:
        """Ignore."""

    def advance(self, n: int) -> None:
        """Ignore."""

    def note(self, text: str) -> None:
        """Ignore."""

    def info(self, text: str) -> None:
        """Ignore."""


class Labelled:
    """Prefixes every step label, so a comparison's bars say which method (or setting) they belong to."""

    def __init__(self, inner: Progress, prefix: str) -> None:
        self.inner = inner
        self.prefix = prefix

    def start(self, label: str, total: int) -> None:
        """Start the inner step as 'PREFIX · label'."""
        self.inner.start(f"{self.prefix} · {label}", total)

    def advance(self, n: int) -> None:
        """Pass through."""
        self.inner.advance(n)

    def note(self, text: str) -> None:
        """Pass through."""
        self.inner.note(text)

    def info(self, text: str) -> None:
        """Pass through."""
        self.inner.info(text)


def _clock(seconds: float) -> str:
    """72.4 -> '1m12s'."""
    seconds = round(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def rate_text(done: float, seconds: float) -> str:
    """Work per second, or per minute when slower than one a second: '3.2/s', '12/min'."""
    per_second = done / seconds if seconds > 0 else 0.0
    return f"{per_second:.1f}/s" if per_second >= 1 else f"{per_second * 60:.1f}/min"


class WorkClock:
    """A run's model work over all its steps: what it totals, what is done, and the time left at the pace of the
    work asked in this session (work found already saved, on a resume, counts as done but not in the pace)."""

    def __init__(self, total: int, unit: str = "model calls") -> None:
        self.total, self.unit = total, unit
        self.done = self.asked = 0
        self.started = time.monotonic()
        self.asking = 0.0  # seconds spent on asked work

    def skipped(self, n: int) -> None:
        """Work found done (saved by an earlier run)."""
        self.done += n

    def asked_for(self, n: int, seconds: float) -> None:
        """Work asked of the model, and how long it took."""
        self.done += n
        self.asked += n
        self.asking += seconds

    def line(self) -> str:
        """'run: 120/900 model calls (13%), 2m10s elapsed, 55.4/min, about 14m05s left'."""
        elapsed = time.monotonic() - self.started
        share = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
        text = f"run: {self.done:,}/{self.total:,} {self.unit}{share}, {_clock(elapsed)} elapsed"
        if self.asked and self.done < self.total:
            pace = self.asked / self.asking if self.asking > 0 else 0.0
            left = (self.total - self.done) / pace if pace > 0 else 0.0
            text += f", {rate_text(self.asked, self.asking)}, about {_clock(left)} left"
        return text


class PlainProgress:
    """Plain progress lines for logs: at a step's start and end, and at least every `heartbeat` seconds."""

    def __init__(self, stream: TextIO | None = None, heartbeat: float = HEARTBEAT) -> None:
        self.stream = stream or sys.stderr
        self.heartbeat = heartbeat
        self.label = ""
        self.extra = ""
        self.total = 0
        self.done = 0
        self.started = time.monotonic()
        self.last_line = self.started
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _write(self, text: str) -> None:
        self.stream.write(f"[{time.strftime('%H:%M:%S')}] {clean(text)}\n")
        self.stream.flush()
        self.last_line = time.monotonic()

    def _status(self) -> str:
        elapsed = time.monotonic() - self.started
        text = f"{self.label}: {self.done}/{self.total}"
        if self.total:
            text += f" ({100 * self.done / self.total:.0f}%)"
        text += f", {_clock(elapsed)} elapsed"
        if self.done and elapsed >= 1:  # under a second: work found saved (a resume), no pace to tell
            text += f", {rate_text(self.done, elapsed)}"
        if 0 < self.done < self.total:
            text += f", about {_clock(elapsed / self.done * (self.total - self.done))} left"
        return text + (f", {self.extra}" if self.extra else "")

    def start(self, label: str, total: int) -> None:
        """Begin a step and print its first line."""
        with self._lock:
            self.label, self.total, self.done, self.extra = label, total, 0, ""
            self.started = time.monotonic()
            self._write(self._status())

    def advance(self, n: int) -> None:
        """Count work done; print a line at the step's end or when the last line is `heartbeat` s old."""
        with self._lock:
            self.done += n
            if self.done >= self.total or time.monotonic() - self.last_line >= self.heartbeat:
                self._write(self._status())

    def note(self, text: str) -> None:
        """Print a status line (model loading, cache use ...)."""
        with self._lock:
            self._write(text)

    def info(self, text: str) -> None:
        """Extra text for the next status lines (e.g. the training loss)."""
        with self._lock:
            self.extra = text

    def _beat(self) -> None:
        # A batch can take longer than the heartbeat: say that the step is still running.
        while not self._stop.wait(min(self.heartbeat, 5.0)):
            with self._lock:
                if time.monotonic() - self.last_line >= self.heartbeat:
                    self._write(self._status() if self.label else "working")

    def __enter__(self) -> PlainProgress:
        self._thread = threading.Thread(target=self._beat, name="fairprobe-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


class RichProgress:
    """Rich progress bars, one per step; `fields` set extra columns such as the training loss."""

    def __init__(self, bars: Any) -> None:
        self.bars = bars
        self.task: Any = None

    def start(self, label: str, total: int) -> None:
        """Open a bar for one step."""
        self.task = self.bars.add_task(label, total=total, info="")

    def advance(self, n: int) -> None:
        """Move the current bar."""
        if self.task is not None:
            self.bars.advance(self.task, n)

    def note(self, text: str) -> None:
        """Print a status line above the bars."""
        self.bars.console.print(text, style="dim", markup=False, highlight=False)

    def info(self, text: str) -> None:
        """Set the current bar's extra text (e.g. the training loss)."""
        if self.task is not None:
            self.bars.update(self.task, info=text)


# The display of the command (or API call) under way, for steps deep below it such as a model's first conversion.
_CURRENT: ContextVar[Progress | None] = ContextVar("fairprobe_progress", default=None)


def current_progress() -> Progress:
    """The progress display of the step under way (silent outside any)."""
    return _CURRENT.get() or SilentProgress()


@contextmanager
def showing(progress: Progress) -> Iterator[Progress]:
    """Make `progress` the display that deep steps (model conversion) report to, for the `with` block."""
    token = _CURRENT.set(progress)
    try:
        yield progress
    finally:
        _CURRENT.reset(token)


# Libraries' own progress-bar switches: (module, whether its bars are on, switch off, switch on).
LIBRARY_BARS: tuple[tuple[str, Callable[[Any], bool], str, str], ...] = (
    (
        "huggingface_hub.utils",
        lambda m: not m.are_progress_bars_disabled(),
        "disable_progress_bars",
        "enable_progress_bars",
    ),
    (
        "transformers.utils.logging",
        lambda m: m.is_progress_bar_enabled(),
        "disable_progress_bar",
        "enable_progress_bar",
    ),
)


@contextmanager
def no_library_bars() -> Iterator[None]:
    """No carriage-return bars from the libraries fairprobe drives (hub downloads, transformers) while progress
    goes to a log: their bars redraw with \\r, which a log keeps as one endless line. Restored afterwards.

    A library imported inside the block reads the environment variable; one already imported is switched."""
    before = os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS")
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    switched = []
    for name, bars_on, off, on in LIBRARY_BARS:
        module = sys.modules.get(name)
        if module is not None and bars_on(module):
            getattr(module, off)()
            switched.append(getattr(module, on))
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
        else:
            os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = before
        for switch_on in switched:
            switch_on()


def is_terminal(stream: TextIO | None = None) -> bool:
    """Whether progress goes to an interactive terminal."""
    stream = stream or sys.stderr
    return bool(getattr(stream, "isatty", lambda: False)())


@contextmanager
def auto_progress(stream: TextIO | None = None, console: Any = None) -> Iterator[Progress]:
    """Rich bars on a terminal, plain lines otherwise; used by every command and by `fairprobe.run`."""
    stream = stream or sys.stderr
    if not is_terminal(stream):
        with PlainProgress(stream) as plain, showing(plain), no_library_bars():
            yield plain
        return
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
    from rich.progress import Progress as Bars

    bars = Bars(
        TextColumn("{task.description}", style="bold blue", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[info]}"),
        console=console or safe_console(file=RedactingStream(lambda: stream)),
        transient=False,
    )
    with bars, showing(RichProgress(bars)) as shown:
        yield shown

"""Outside text made safe for a terminal: control characters escaped, secrets redacted, in everything printed.

A server's error body, a probe file or a model's reply may hold ESC sequences (clear the screen, set the window
title, OSC 52 writes to the clipboard), a carriage return that overwrites a line, or bidirectional overrides
that reorder what a reader sees. `escape_controls` shows each such character as its escape (`\\x1b`,
`\\u202e`), so it is printed as text and never acted on. `safe_console` is the rich Console every fairprobe
console is: it escapes the text of everything it renders (tables, JSON, progress lines) while keeping rich's
own styling, and writes through `RedactingStream`, which removes every secret.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import IO, Any

from fairprobe.redact import escape_controls, escape_json_controls, redact

__all__ = ["RedactingStream", "clean", "escape_controls", "escape_json_controls", "safe_console"]


def clean(text: str) -> str:
    """Outside text ready for a console or a log line: secrets redacted, control characters escaped."""
    return escape_controls(redact(text))


class RedactingStream:
    """A text stream that writes to the current sys.stdout/sys.stderr (looked up at each write), secrets redacted."""

    def __init__(self, stream: Callable[[], IO[str]]) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        """Write the redacted text."""
        return self._stream().write(redact(text))

    def flush(self) -> None:
        """Flush the underlying stream."""
        self._stream().flush()

    def isatty(self) -> bool:
        """Whether the underlying stream is a terminal."""
        return self._stream().isatty()

    def fileno(self) -> int:
        """The underlying stream's file descriptor."""
        return self._stream().fileno()

    @property
    def encoding(self) -> str:
        """The underlying stream's encoding."""
        return getattr(self._stream(), "encoding", "utf-8") or "utf-8"


def safe_console(**kwargs: Any) -> Any:
    """A rich Console that escapes control characters in all it renders; `file` defaults to redacted stderr."""
    import sys

    from rich.console import Console
    from rich.segment import Segment

    class SafeConsole(Console):
        """rich's Console whose rendered text segments have their control characters escaped (rich's own
        control segments, which move the cursor for progress bars, pass unchanged)."""

        def render(self, renderable: Any, options: Any = None) -> Iterable[Segment]:
            for segment in super().render(renderable, options):
                if segment.control is None and segment.text:
                    yield Segment(escape_controls(segment.text), segment.style)
                else:
                    yield segment

    kwargs.setdefault("file", RedactingStream(lambda: sys.stderr))
    return SafeConsole(**kwargs)

"""User-facing errors: one line that says what went wrong and where."""

from __future__ import annotations

from pathlib import Path


class FairprobeError(Exception):
    """An error caused by bad input or environment; the CLI prints it as one line, no traceback."""


class DataError(FairprobeError):
    """A data file is missing, empty, malformed or fails its checksum."""


class ModelError(FairprobeError):
    """A model spec is unknown or a model cannot be loaded or reached."""


class ConfigError(FairprobeError):
    """An option value is out of range or inconsistent."""


class RunInterrupted(Exception):
    """Ctrl-C during a run: samples so far are saved and the same command resumes."""

    def __init__(self, out: Path, done: int) -> None:
        super().__init__(f"interrupted: {done} samples saved in {out}; run the same command again to resume")
        self.out = out
        self.done = done

"""fairprobe: disclose, measure and mitigate gender bias in large language models."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fairprobe.threads import quiet_openmp

__version__ = "0.1.0"

quiet_openmp()  # before torch loads OpenMP: on a busy machine waiting threads sleep instead of spinning

if TYPE_CHECKING:
    from fairprobe.records import Summary


def run(progress: bool = True, **kwargs: Any) -> Summary:
    """Run a suite on a model and write its run directory; returns the same summary the CLI prints.

    Keyword arguments are those of `fairprobe.runner.RunOptions` (model, suite, probes, data_dir,
    out, limit, seed, generation, instruction, ...). Progress goes to stderr (bars in a terminal,
    plain lines in notebooks' logs and CI) unless `progress=False`.
    """
    from fairprobe.progress import SilentProgress, auto_progress
    from fairprobe.runner import run as _run

    if not progress:
        return _run(progress=SilentProgress(), **kwargs)
    with auto_progress() as shown:
        return _run(progress=shown, **kwargs)


__all__ = ["__version__", "run"]

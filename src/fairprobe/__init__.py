"""fairprobe: disclose, measure and mitigate gender bias in large language models.

The Python API (`fairprobe.run`, `compare`, `sweep`, `tune`, `score`, `check`, `load`, `report`) lives in `fairprobe.api`
and is imported on first use, so `import fairprobe` and the command line stay quick.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from fairprobe.threads import quiet_openmp

__version__ = "0.1.0"

quiet_openmp()  # before torch loads OpenMP: on a busy machine waiting threads sleep instead of spinning

if TYPE_CHECKING:
    from fairprobe.api import (
        Adapter,
        ArgumentError,
        Comparison,
        FailedItems,
        MitigationComparison,
        Run,
        Sweep,
        check,
        compare,
        load,
        report,
        run,
        score,
        sweep,
        tune,
    )

__all__ = [
    "Adapter",
    "ArgumentError",
    "Comparison",
    "FailedItems",
    "MitigationComparison",
    "Run",
    "Sweep",
    "__version__",
    "check",
    "compare",
    "load",
    "report",
    "run",
    "score",
    "sweep",
    "tune",
]
API = frozenset(__all__) - {"__version__"}


def __getattr__(name: str) -> Any:
    """The API's names, imported from fairprobe.api on first use."""
    if name in API:
        # Imported by name: the root package (which every module imports for __version__) depends on no layer.
        return getattr(importlib.import_module("fairprobe.api"), name)
    raise AttributeError(f"module 'fairprobe' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public names (tab completion in a notebook offers the API)."""
    return sorted(__all__)

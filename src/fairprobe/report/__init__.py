"""Reports: console tables, report.html (figures, A-D summary, sample browser), Markdown/CSV exports, the CI check.

Once imported, this package is the attribute `fairprobe.report`, the name of the Python API's `report` function
too; so the package is callable: `fairprobe.report(result)` calls `fairprobe.api.report` (looked up by name, as
the root package does: a report module imports no layer above it).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any


class CallableReport(types.ModuleType):
    """This package, callable as the Python API's `report`."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """`fairprobe.api.report(*args, **kwargs)`: the report of a result or folder."""
        return importlib.import_module("fairprobe.api").report(*args, **kwargs)


sys.modules[__name__].__class__ = CallableReport

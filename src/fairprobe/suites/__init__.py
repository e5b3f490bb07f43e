"""Suites wire probe sets to detectors and metrics: `paper` (GAS, GLD, ADD)."""

from fairprobe.suites import paper  # noqa: F401  (registers the suite)
from fairprobe.suites.base import Request, Suite, get_suite, register_suite, suite_names

__all__ = ["Request", "Suite", "get_suite", "register_suite", "suite_names"]

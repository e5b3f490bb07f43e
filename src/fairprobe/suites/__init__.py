"""Suites wire probe sets to detectors and metrics: `paper` (GAS, GLD, ADD) and `fairness` (pairs, coreference)."""

from fairprobe.suites import fairness, paper  # noqa: F401  (registers the suites)
from fairprobe.suites.base import Request, Suite, get_suite, register_suite, suite_names

__all__ = ["Request", "Suite", "get_suite", "register_suite", "suite_names"]

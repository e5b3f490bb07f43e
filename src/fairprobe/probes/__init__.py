"""Probe sets: the paper's five, fairprobe's built-in sets, and the pipelines that build new ones."""

from fairprobe.probes import builtin, fairness, paper  # noqa: F401  (registers the loaders)
from fairprobe.probes.registry import load_probe_set, probe_set, registered, suite_sets

__all__ = ["load_probe_set", "probe_set", "registered", "suite_sets"]

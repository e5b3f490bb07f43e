"""Metrics aggregate detector results over a probe set, each with a 95% confidence interval."""

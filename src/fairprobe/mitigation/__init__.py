"""Mitigation: decoding sweeps, instruction guiding and Debias Tuning."""

"""GenderBench's Direct probe. See README.md."""

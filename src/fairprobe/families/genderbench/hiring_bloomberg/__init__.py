"""GenderBench's HiringBloomberg probe. See README.md."""

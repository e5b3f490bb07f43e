"""GenderBench's JobsLum probe. See README.md."""

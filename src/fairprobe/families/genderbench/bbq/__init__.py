"""GenderBench's Bbq probe. See README.md."""

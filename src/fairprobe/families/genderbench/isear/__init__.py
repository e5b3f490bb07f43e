"""GenderBench's Isear probe. See README.md."""

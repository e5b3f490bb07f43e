"""GenderBench's Inventories probe. See README.md."""

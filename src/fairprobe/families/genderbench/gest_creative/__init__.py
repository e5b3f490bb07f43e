"""GenderBench's GestCreative probe. See README.md."""

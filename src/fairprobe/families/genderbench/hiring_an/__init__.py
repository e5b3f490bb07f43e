"""GenderBench's HiringAn probe. See README.md."""

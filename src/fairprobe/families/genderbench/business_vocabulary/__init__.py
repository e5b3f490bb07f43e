"""GenderBench's BusinessVocabulary probe. See README.md."""

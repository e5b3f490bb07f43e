"""GenderBench's RelationshipLevy probe. See README.md."""

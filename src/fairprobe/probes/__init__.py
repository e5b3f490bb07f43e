"""Pipelines that build new probe sets (natural predicates, generated statements); the sets live in families/."""

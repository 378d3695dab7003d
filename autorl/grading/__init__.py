"""Grading: checks and scoring of the models an agent submits (SPEC §5)."""

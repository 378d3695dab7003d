"""Grading: checks and scoring of the models an agent submits (docs/design.md#the-grading-api)."""

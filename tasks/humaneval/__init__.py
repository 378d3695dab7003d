"""humaneval (grader side here; agent side in ``agent/``)."""

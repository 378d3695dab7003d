"""humaneval (grader side: builders, fixture generator, evaluator; agent side in ``agent/``)."""

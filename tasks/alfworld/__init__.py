"""alfworld (grader side: builders, fixture generator, evaluator, environment; agent side in
``agent/``)."""

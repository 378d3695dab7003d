"""Live tracking of a sweep: Ray dashboard metrics (:mod:`.metrics`), W&B (:mod:`.wandb_runs`) and
the end-of-sweep outputs (:mod:`.sweep_end`). Importing it imports neither Ray nor W&B."""

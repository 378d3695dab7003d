"""Inference engines used by the grader (HF transformers here; vLLM on GPU hosts)."""

"""Generic LLM-as-judge machinery that judge-based tasks build on.

- :mod:`autorl.judge.client`: OpenAI-compatible judge client (driver configs, disk cache, bounded
  concurrency).
- :mod:`autorl.judge.cache`: the on-disk cache of judge answers, keyed by judge identity and
  request.
- :mod:`autorl.judge.server`: a local OpenAI-compatible server for judging models (callables from
  chat messages to a reply), so an offline judge exercises the same client path as a remote one.

Task-specific judging (prompts, scoring rules, local judging models) lives in the task's folder.
"""

"""LLM-as-judge machinery for judge-based tasks (alpacaeval).

- :mod:`autorl.judge.client`: OpenAI-compatible judge client (driver configs, disk cache, bounded concurrency).
- :mod:`autorl.judge.pairwise`: AlpacaEval's pairwise comparison prompt and answer parsing.
- :mod:`autorl.judge.lc`: AlpacaEval 2.0's win rate and length-controlled win rate.
- :mod:`autorl.judge.server`: a local OpenAI-compatible server for judging models.
- :mod:`autorl.judge.rules`: the alpacaeval fixture's instructions and rule-based judging model.
"""

"""Scripted recipe for webshop: SFT on a shopping expert's sessions, then online RL in the EnvPool.

The expert is :mod:`.shopper`, which decides from the page text alone, not the built-in shop's
``info["expert_action"]``: that one knows the goal's product, searches its exact title (a brand
the instruction never names) and clicks its id among look-alikes, so a policy imitating it learns
to guess. The prompts are the evaluator's chat prompts (:mod:`.protocol`).
"""

from __future__ import annotations

import argparse

from agent_kit.scripted.common import log, remaining_s, submit, with_overrides
from agent_kit.scripted.interactive import InteractiveRecipe, run_recipe

from .protocol import WebShopProtocol
from .shopper import next_action


def run(args: argparse.Namespace) -> int:
    """SFT → submit v1 → RL → submit v2.

    SFT batches of at most 4 actions at lr 1e-3: every prompt is a whole page (about 600 tokens), so
    the agent's default 32 a step took 18 s and SFT got 24 steps of its budget share.
    """
    recipe = InteractiveRecipe(WebShopProtocol(max_new_tokens=24, history_window=1), next_action, max_steps=10,
                               max_length=1024, expert_episodes=60)
    knobs = with_overrides(args, sft_batch_size=min(4, args.sft_batch_size), sft_lr=1e-3)
    return run_recipe(knobs, recipe, log, submit, remaining_s)

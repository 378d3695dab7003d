"""Scripted recipe for webshop: SFT on the built-in shop's expert sessions, then online RL in the EnvPool.

The expert (a shopper who knows the goal's product: search its title, open it, pick the goal's
options, buy) arrives with every training step as ``info["expert_action"]``; the prompts are the
evaluator's chat prompts (:mod:`.protocol`).
"""

from __future__ import annotations

import argparse

from agent_kit.rollout import Episode
from agent_kit.scripted.common import log, remaining_s, submit
from agent_kit.scripted.interactive import InteractiveRecipe, run_recipe

from .protocol import WebShopProtocol


def expert(episode: Episode) -> str | None:
    """The expert's action as the assistant reply."""
    action = episode.current.info.get("expert_action")
    return str(action) if action else None


def run(args: argparse.Namespace) -> int:
    """SFT → submit v1 → RL → submit v2."""
    recipe = InteractiveRecipe(WebShopProtocol(max_new_tokens=24, history_window=1), expert, max_steps=10, max_length=1024,
                               expert_episodes=60)
    return run_recipe(args, recipe, log, submit, remaining_s)

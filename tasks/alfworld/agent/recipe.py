"""Scripted recipe for alfworld: SFT on the PDDL planner's trajectories, then online RL in the EnvPool.

The planner's next command arrives with every training step (``info["expert_action"]``); the
prompts are the evaluator's ReAct prompts (``protocol.py`` next to this file).
"""

from __future__ import annotations

import argparse

from agent_kit.rollout import Episode
from agent_kit.scripted.common import log, remaining_s, submit
from agent_kit.scripted.interactive import InteractiveRecipe, run_recipe

from .protocol import AlfworldProtocol

MAX_PROMPT_CHARS = 1800  # the tiny model's 1024-token window; the eval truncates the same way (conf/task/alfworld.yaml)


def expert(episode: Episode) -> str | None:
    """The planner's command as a completion of the ReAct prompt (``" <command>\\n"``)."""
    action = episode.current.info.get("expert_action")
    return f" {action}\n" if action else None


def run(args: argparse.Namespace) -> int:
    """SFT → submit v1 → RL → submit v2."""
    recipe = InteractiveRecipe(AlfworldProtocol(max_new_tokens=16, max_prompt_chars=MAX_PROMPT_CHARS), expert,
                               max_steps=12, max_length=1024, expert_episodes=40)
    return run_recipe(args, recipe, log, submit, remaining_s)

"""Scripted recipe for webshop: SFT on a shopping expert's sessions, then online RL in the EnvPool.

The expert is :mod:`.shopper`, which decides from the page text alone, not the built-in shop's
``info["expert_action"]``: that one knows the goal's product, searches its exact title (a brand
the instruction never names) and clicks its id among look-alikes, so a policy imitating it learns
to guess. The prompts are the evaluator's chat prompts for the fixture (:mod:`.protocol`,
multi-turn).
"""

from __future__ import annotations

from agent_kit.scripted.common import log, remaining_s, submit
from agent_kit.scripted.interactive import InteractiveRecipe, run_recipe
from agent_kit.scripted.settings import ScriptedSettings

from .protocol import WebShopProtocol
from .shopper import next_action

#: The fixture's eval prompt (``options.py`` ``Eval``), multi-turn: every expert session packs into
#: one sequence of 950 to 1,500 tokens (about 4 actions). All the default build's 300 training
#: sessions. Training rollouts stop after 6 actions (the expert needs 5 at most): longer ones
#: outgrow the 2,048-token window.
RECIPE = InteractiveRecipe(
    WebShopProtocol(max_new_tokens=24, history_window=5, multi_turn=True),
    next_action,
    max_steps=6,
    max_length=2048,
    expert_episodes=300,
)


def run(settings: ScriptedSettings) -> int:
    """SFT → submit v1 → RL → submit v2.

    SFT batches of at most 16 actions (4 packed sessions, about 2.6 s a step on 2 threads) at lr
    1e-3.
    """
    knobs = settings.with_sft(
        per_device_train_batch_size=min(16, settings.sft.per_device_train_batch_size),
        learning_rate=1e-3,
    )
    return run_recipe(knobs, RECIPE, log, submit, remaining_s)

"""The scripted agent's training: packed episodes learn what their steps learn apart; stages stop at
their deadline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent_kit.scripted.policy import LocalPolicy, Sample, pack


def _weights(policy: LocalPolicy) -> Any:
    """All the model's weights as one vector."""
    import torch

    return torch.cat([p.detach().flatten() for p in policy.model.parameters()])


def test_packed_episode_loss_equals_its_steps_losses(tiny_model_dir: Path) -> None:
    """One forward pass over a packed episode gives each action the log-probability it gets in its
    own
    prompt (a causal LM), so the packed loss is the token-weighted mean of the per-step losses."""
    policy = LocalPolicy(tiny_model_dir, max_length=512)
    first = "Your task is to: put a pen in desk.\n>"
    steps = [
        (" go to desk 1\n", "You arrive at desk 1. On the desk 1, you see a pen 1.\n>"),
        (" take pen 1 from desk 1\n", "You pick up the pen 1 from the desk 1.\n>"),
        (" move pen 1 to desk 1\n", ""),
    ]
    prompts, prompt = [], first
    for action, observation in steps:
        prompts.append(prompt)
        prompt += action + observation
    completions = [action for action, _ in steps]
    (packed,) = pack(prompts, completions)
    assert len(packed.turns()) == 3
    apart = [
        policy._batch_loss([Sample(p, c)]).item() for p, c in zip(prompts, completions, strict=True)
    ]
    tokens = [len(policy.tokenizer(c, add_special_tokens=False)["input_ids"]) for c in completions]
    expected = sum(loss * n for loss, n in zip(apart, tokens, strict=True)) / sum(tokens)
    assert policy._batch_loss([packed]).item() == pytest.approx(expected, rel=1e-4)


def test_an_rl_update_takes_every_rollout_once_in_micro_batches(tiny_model_dir: Path) -> None:
    """One REINFORCE step uses each weighted sample exactly once, so accumulating micro-batches
    moves the weights as one batch does; a positive advantage makes its completion likelier, a
    negative one
    less."""
    import torch

    batch = [
        Sample("Q: 2+2?\nA:", " 4", 1.0),
        Sample("Q: 3+3?\nA:", " 9", -1.0),
        Sample("Q: 1+1?\nA:", " 2", 0.5),
    ]
    moved = []
    for micro_batch in (1, 3):
        policy = LocalPolicy(tiny_model_dir, max_length=64)
        before = [policy._batch_loss([Sample(s.prompt, s.completion)]).item() for s in batch]
        policy.update(
            batch, torch.optim.SGD(policy.model.parameters(), lr=0.5), micro_batch=micro_batch
        )
        after = [policy._batch_loss([Sample(s.prompt, s.completion)]).item() for s in batch]
        # The loss is the negative log-likelihood.
        assert after[0] < before[0] and after[1] > before[1]
        moved.append(_weights(policy))
    assert torch.allclose(moved[0], moved[1], atol=1e-6)


def test_a_truncated_step_starts_a_new_sequence() -> None:
    """A prompt that is not its predecessor plus new text (the protocol dropped old steps) is not
    packed."""
    samples = pack(["abc>", "abc> x|def>", "c> x|def> y|g>"], [" x|", " y|", " z|"], weight=-0.5)
    assert [s.turns() for s in samples] == [
        [("abc>", " x|"), ("def>", " y|")],
        [("c> x|def> y|g>", " z|")],
    ]
    assert {s.weight for s in samples} == {-0.5}


def test_the_first_clipped_step_is_the_reinforce_step(tiny_model_dir: Path) -> None:
    """At the rollout policy the probability ratio is 1 and nothing is clipped: GRPO's first step on
    a batch
    moves the weights exactly as REINFORCE's (:meth:`LocalPolicy.update`) does."""
    import torch

    batch = [
        Sample("Q: 2+2?\nA:", " 4", 0.75),
        Sample("Q: 3+3?\nA:", " 9", -0.25),
        Sample("Q: 1+1?\nA:", " 2", -0.5),
    ]
    moved = []
    for clipped in (False, True):
        policy = LocalPolicy(tiny_model_dir, max_length=64)
        optimizer = torch.optim.SGD(policy.model.parameters(), lr=0.5)
        if clipped:
            policy.clipped_update(batch, optimizer, epochs=1, clip=0.2, micro_batch=2)
        else:
            policy.update(batch, optimizer, micro_batch=2)
        moved.append(_weights(policy))
    assert torch.allclose(moved[0], moved[1], atol=1e-6)


def test_rollouts_reuse_prompt_prefixes_until_the_weights_change(tiny_model_dir: Path) -> None:
    """The policy's generation reuses an episode's encoded prompt for its next one (the texts are
    those of generating without the cache), and an update empties the cache: key/values of the old
    weights are
    never read again."""
    import torch

    cached, plain = (
        LocalPolicy(tiny_model_dir, max_length=256),
        LocalPolicy(tiny_model_dir, max_length=256),
    )
    plain.prefix = None
    assert cached.prefix is not None
    for policy in (cached, plain):
        policy.sample = False
    prompts = ["Q: 12 apples and 7 more?\nA:", "Q: 3 boxes of 4 pens?\nA:"]
    first = cached.generate_text(prompts, max_new_tokens=6, stop=["\n"])
    assert first == plain.generate_text(prompts, max_new_tokens=6, stop=["\n"])
    longer = [p + t + "\nQ: and then 5 more?\nA:" for p, t in zip(prompts, first, strict=True)]
    second = cached.generate_text(longer, max_new_tokens=6, stop=["\n"])
    assert cached.prefix.reused_tokens > 0
    assert second == plain.generate_text(longer, max_new_tokens=6, stop=["\n"])
    for policy in (cached, plain):
        policy.update(
            [Sample(longer[0], " 24")], torch.optim.SGD(policy.model.parameters(), lr=1.0)
        )
    assert not cached.prefix._entries
    assert cached.generate_text(longer, max_new_tokens=6, stop=["\n"]) == plain.generate_text(
        longer, max_new_tokens=6, stop=["\n"]
    )


def test_only_completion_tokens_are_scored_each_by_the_logits_before_it(
    tiny_model_dir: Path,
) -> None:
    """A packed sample's learned log-probabilities are exactly its completions' tokens, each scored
    by the
    full forward pass's logits at the position before it (the LM head runs only there), in order."""
    import torch

    policy = LocalPolicy(tiny_model_dir, max_length=128)
    sample = Sample("Q: 2+2?\nA:", " 4\n", more=[("Q: 3+3?\nA:", " 6\n")])
    ids, learned = [], []
    for context, completion in sample.turns():
        for text, is_learned in ((context, False), (completion, True)):
            tokens = policy.tokenizer(text, add_special_tokens=False)["input_ids"]
            ids += tokens
            learned += [is_learned] * len(tokens)
    with torch.no_grad():
        logits = policy.model(input_ids=torch.tensor([ids])).logits[0]
        expected = [
            torch.log_softmax(logits[i - 1] / 0.7, -1)[ids[i]]
            for i in range(1, len(ids))
            if learned[i]
        ]
        scored = policy._completion_logps(sample, temperature=0.7)
    assert len(scored) == sum(learned) >= 2
    assert torch.allclose(scored, torch.stack(expected), atol=1e-5)


@pytest.mark.parametrize("advantage", [1.0, -1.0])
def test_clipping_bounds_how_far_several_steps_move_a_rollout(
    tiny_model_dir: Path, advantage: float
) -> None:
    """Many steps on one rollout: unclipped, its likelihood keeps moving in its advantage's
    direction; clipped, a token stops pulling once its probability ratio leaves [1 - clip, 1 + clip]
    that
    way."""
    import torch

    sample = Sample("Q: 2+2?\nA:", " four, I think", advantage)
    # clip -> geometric mean over the completion's tokens of the ratio, in the advantage's direction
    moved = {}
    for clip in (0.2, 1e9):
        policy = LocalPolicy(tiny_model_dir, max_length=64)
        with torch.no_grad():
            before = policy._completion_logps(sample)
        rollout = policy.clipped_update(
            [sample], torch.optim.SGD(policy.model.parameters(), lr=0.05), epochs=12, clip=clip
        )
        # Scored before the update, not after.
        assert rollout == pytest.approx([float(before.sum())], abs=1e-4)
        with torch.no_grad():
            after = policy._completion_logps(sample)
        moved[clip] = float(torch.exp((after - before).mean() * advantage))
    assert moved[1e9] > 4
    # Shared weights still carry a clipped token a little further while the others pull: not exactly
    # 1.2.
    assert 1.1 < moved[0.2] < 2.5


def test_sft_stops_at_its_share_of_the_budget(
    tiny_model_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A stage slower than planned stops at its deadline and still saves the model it has."""
    from agent_kit.scripted import common
    from agent_kit.scripted.settings import (
        GrpoSettings,
        OnlineGrpoSettings,
        ScriptedSettings,
        SftSettings,
    )

    monkeypatch.chdir(tmp_path)
    # The budget is spent: the deadline is now.
    monkeypatch.setattr(common, "remaining_s", lambda: 0.0)
    settings = ScriptedSettings(
        "task_agent",
        "recipe:run",
        0,
        SftSettings(50, 2, 1e-3, 64),
        GrpoSettings(1, 2, 2, 1e-5, 8, 0.0, 1.0),
        OnlineGrpoSettings(1, 2, 2, 1e-4, 1, 0.2, 0.7, 0, 0, 0.0, 0),
    )
    chat = [
        [
            {"role": "user", "content": f"What is {n} + 1?"},
            {"role": "assistant", "content": str(n + 1)},
        ]
        for n in range(8)
    ]
    common.sft(settings, chat, str(tiny_model_dir), tmp_path / "v1")
    assert "SFT done: 1 of 50 steps" in capsys.readouterr().out
    assert (tmp_path / "v1" / "model.safetensors").is_file()


def test_alfworld_rl_judges_each_action_against_the_list_before_it() -> None:
    """ALFWorld's recipe counts a hallucinated receptacle and a ``think:`` (which the expert never
    plays) as inadmissible; a recipe whose env lists templates (DeepSearchQA's) cannot be given a
    penalty by
    mistake."""
    import dataclasses

    from agent_kit.protocol import StepResult
    from agent_kit.rollout import Episode
    from agent_kit.scripted.interactive import inadmissible_share
    from autorl.task_code.alfworld.agent.recipe import make_recipe as alfworld_recipe

    listed = ["go to desk 1", "go to shelf 1"]
    episode = Episode(
        "train/0", "h", StepResult("You are in the middle of a room.", 0.0, False, listed, {})
    )
    for action, observation in [
        ("go to drawer 7", "Nothing happens."),
        ("think: try the desk", "OK."),
        ("go to desk 1", "On the desk 1, you see a pen 1."),
        ("go to shelf 1", "…"),
    ]:
        episode.record(f" {action}\n", action, StepResult(observation, 0.0, False, listed, {}))
    assert alfworld_recipe().literal_admissible
    assert inadmissible_share(episode) == 0.5
    with pytest.raises(ValueError, match="invalid_penalty needs literal_admissible"):
        dataclasses.replace(alfworld_recipe(), literal_admissible=False, invalid_penalty=0.5)


class _OneStepEnvs:
    """An env of one-step episodes in the shape of ``ApiEpisodes``: an action that starts with a
    vowel wins
    (every action with ``win_all``)."""

    def __init__(self, win_all: bool = False) -> None:
        self.handles, self.win_all = 0, win_all

    def reset(self, episode_ids: list[str]) -> list[tuple[str, Any]]:
        from agent_kit.protocol import StepResult

        self.handles += len(episode_ids)
        return [
            (f"h{self.handles}-{i}", StepResult(f"Say a word ({e}).", 0.0, False, [], {}))
            for i, e in enumerate(episode_ids)
        ]

    def step(self, moves: list[tuple[str, str]]) -> list[Any]:
        from agent_kit.protocol import StepResult

        return [
            StepResult("", float(self.win_all or action[:1].lower() in "aeiou"), True, [], {})
            for _, action in moves
        ]

    def close(self, handles: list[str]) -> None:
        pass


class _WordProtocol:
    mode, max_new_tokens, stop = "text", 3, None

    def render(self, episode: Any) -> str:
        return episode.first.observation + "\n"

    def parse(self, episode: Any, output: str) -> str:
        return output.strip()


@pytest.mark.parametrize("reward_all", [False, True])
def test_rl_iteration_mixes_sft_sequences_into_an_update_and_reports_only_its_rollouts(
    tiny_model_dir: Path, reward_all: bool
) -> None:
    """The mixed SFT sequence is trained on with the rollouts (its likelihood rises) but the
    reported shifts are the rollouts' alone; when every group's returns are equal there is no update
    at all, mixed sequences
    or not."""
    import torch

    from agent_kit.scripted.interactive import InteractiveRecipe, rl_iteration

    torch.manual_seed(0)
    envs = _OneStepEnvs(win_all=reward_all)
    recipe = InteractiveRecipe(
        _WordProtocol(), lambda episode: None, max_steps=1, max_length=64, expert_episodes=0
    )
    policy = LocalPolicy(tiny_model_dir, max_length=64)
    policy.temperature = 1.0
    mixed = Sample("Say a word (sft).\n", " apple", 0.5)
    before_weights, (before_mixed,) = _weights(policy), policy.sequence_logps([mixed])
    stats = rl_iteration(
        recipe,
        envs,
        [f"train/{i}" for i in range(6)],
        4,
        policy,
        policy.optimizer(1e-3),
        epochs=2,
        clip=0.2,
        mixed=[mixed],
    )
    if reward_all:
        assert (
            stats.reward == 1.0 and stats.reinforced_shift is None and stats.penalized_shift is None
        )
        assert torch.equal(_weights(policy), before_weights)
    else:
        assert (
            0 < stats.reward < 1
            and stats.reinforced_shift is not None
            and stats.penalized_shift is not None
        )
        assert stats.reinforced_shift > 0 > stats.penalized_shift
        assert policy.sequence_logps([mixed])[0] > before_mixed


def test_the_probe_replays_its_rollouts_and_shows_what_an_update_changed(
    tiny_model_dir: Path,
) -> None:
    """Played twice with the same weights the probe's rollouts are the same, whatever was sampled in
    between; after
    SFT steps that make one winning word likelier, the rollouts that differ are those that now write
    it, and they win."""
    import torch

    from agent_kit.scripted.interactive import InteractiveRecipe, ProbeResult, probe, rl_iteration

    recipe = InteractiveRecipe(
        _WordProtocol(), lambda episode: None, max_steps=1, max_length=64, expert_episodes=0
    )
    policy = LocalPolicy(tiny_model_dir, max_length=64)
    policy.temperature = 1.0
    ids = [f"train/{i}" for i in range(4)]
    before = probe(recipe, _OneStepEnvs(), ids, 4, policy, "probe/0", 16)
    rl_iteration(
        recipe,
        _OneStepEnvs(win_all=True),
        ids,
        4,
        policy,
        policy.optimizer(1e-3),
        epochs=1,
        clip=0.2,
    )
    # All returns equal: no update.
    assert probe(recipe, _OneStepEnvs(), ids, 4, policy, "probe/0", 16) == before
    assert policy.noise is None and policy.sample is False
    torch.manual_seed(0)
    policy.train(
        [Sample(f"Say a word ({e}).\n", " apple") for e in ids], steps=25, batch_size=4, lr=3e-3
    )
    after = probe(recipe, _OneStepEnvs(), ids, 4, policy, "probe/0", 16)
    result = ProbeResult(before, after)
    assert sum(after) > sum(before), result.text()
    assert "0 fell" in result.text()

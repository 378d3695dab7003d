"""Measurement: the scripted recipe's online-RL update, side by side under several settings (issue
#14).

Issue #14 asks for an online-RL reward that rises over training. From one SFT policy, RL runs once
per ``--setting``: every iteration plays ``--group`` sampled rollouts of each of ``--per-iteration``
training episodes through the task's env and trains on them with
:func:`agent_kit.scripted.interactive.rl_iteration` (GRPO: group-mean baseline, ``epochs`` optimizer
steps, PPO-clipped after the first). The iterations take their episodes in turn from a fixed pool of
``--pool`` training episodes, so a pool of one iteration's episodes replays the same ones every time
(the rise then compares like with like) and a large pool gives every iteration fresh ones, as the
recipe does. It prints and writes each setting's rollout reward per iteration and the greedy reward
before and after RL, and plots the curves.

- ``--task deepsearchqa`` (default): a small fixture (``--train-size`` questions), SFT on the
  recipe's expert trajectories here; greedy reward on the training questions.
- ``--task alfworld --policy DIR``: the default fixture (seed 0), RL from a saved SFT policy such as
  a cell's ``workspace/output/v1`` (the recipe's SFT takes ~500 steps, too long to repeat per run);
  greedy reward on the 36 eval games, which is what the grader scores.

    python bench/online_rl_curve.py                                     # the settings below python
    bench/online_rl_curve.py --setting adam:1e-4 adam:3e-4:epochs=4:temp=0.7 sgd:0.05 --iterations
    40 python bench/online_rl_curve.py --task alfworld --policy <cell>/workspace/output/v1 --pool 8
    \
        --iterations 8 --setting adam:1.5e-4:epochs=4:temp=0.7
        adam:1.5e-4:epochs=4:temp=0.7:positive

A setting is ``optimizer:lr`` (``adam``: :meth:`LocalPolicy.optimizer`, the recipe's; ``sgd``: plain
SGD), then optionally ``epochs=N`` (optimizer steps per batch), ``clip=X`` (their clip range),
``temp=T`` (rollout sampling temperature), ``invalid=X`` (the return's penalty per share of
inadmissible actions, :attr:`InteractiveRecipe.invalid_penalty`; default the recipe's), ``mix=N`` (N
of the expert's sequences on training episodes outside the pool join each update, as the recipe's
``online_grpo.sft_mix`` does, with its ``online_grpo.sft_mix_weight``) and ``positive`` (drop the
rollouts with a negative advantage). The last default is the recipe's (``conf/agent/scripted.yaml``
``online_grpo``). The env is the grader-side env the grading API's endpoints serve, in-process (no
Ray, no HTTP): this measures the learning update, not the plumbing, which
``tests/integration/test_online_rl.py`` covers. CPU, `small` model.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_SETTINGS = [
    "adam:1e-4",
    "adam:3e-4:epochs=4",
    "adam:3e-4:epochs=4:temp=0.7",
    "adam:1.5e-4:epochs=4:temp=0.7",
]


@dataclass
class Setting:
    """One RL configuration: optimizer, learning rate, update steps per batch (PPO-clipped after the
    first), and whether negative-advantage rollouts are kept."""

    optimizer: str
    lr: float
    epochs: int = 1
    clip: float = 0.2
    temperature: float = 1.0
    positive_only: bool = False
    invalid_penalty: float | None = None
    sft_mix: int = 0

    @classmethod
    def parse(cls, text: str) -> Setting:
        """``optimizer:lr`` then optional ``epochs=N``, ``clip=X``, ``temp=T`` (sampling
        temperature), ``invalid=X`` (inadmissible-action penalty), ``mix=N`` (SFT sequences per
        update), ``positive``.

        >>> Setting.parse("adam:1e-3:epochs=4:invalid=0.5:mix=16:positive").label
        'adam:0.001:epochs=4:clip=0.2:invalid=0.5:mix=16:positive'
        """
        usage = (
            f"--setting {text!r}: expected "
            "adam|sgd:<lr>[:epochs=N][:clip=X][:temp=T][:invalid=X][:mix=N][:positive], e.g. "
            "adam:3e-4:epochs=4"
        )
        optimizer, _, rest = text.partition(":")
        lr, *options = rest.split(":")
        if optimizer not in ("adam", "sgd"):
            raise SystemExit(usage)
        try:
            setting = cls(optimizer, float(lr))
            for option in options:
                key, _, value = option.partition("=")
                if key == "positive" and not value:
                    setting.positive_only = True
                elif key == "epochs":
                    setting.epochs = int(value)
                elif key == "clip":
                    setting.clip = float(value)
                elif key == "temp":
                    setting.temperature = float(value)
                elif key == "invalid":
                    setting.invalid_penalty = float(value)
                elif key == "mix":
                    setting.sft_mix = int(value)
                else:
                    raise SystemExit(usage)
        except ValueError:
            raise SystemExit(usage) from None
        return setting

    @property
    def label(self) -> str:
        """The setting in the command line's form (``adam:0.001:epochs=4:positive``)."""
        extra = f":epochs={self.epochs}:clip={self.clip:g}" if self.epochs > 1 else ""
        extra += f":temp={self.temperature:g}" if self.temperature != 1 else ""
        extra += f":invalid={self.invalid_penalty:g}" if self.invalid_penalty is not None else ""
        extra += f":mix={self.sft_mix}" if self.sft_mix else ""
        return f"{self.optimizer}:{self.lr:g}{extra}{':positive' if self.positive_only else ''}"


class LocalEnvs:
    """The task's env in-process, shaped like :class:`agent_kit.scripted.policy.ApiEpisodes`."""

    def __init__(self, client: Any) -> None:
        self.client, self.calls = client, 0

    def reset(self, episode_ids: list[str]) -> Any:
        self.calls += len(episode_ids)
        return self.client.reset(episode_ids)

    def step(self, moves: list[tuple[str, str]]) -> Any:
        self.calls += len(moves)
        return self.client.step(moves)

    def close(self, handles: list[str]) -> Any:
        return self.client.close(handles)


def greedy_reward(policy: Any, envs: Any, ids: list[str], recipe: Any) -> float:
    """Mean reward of greedy play over ``ids`` in the recipe's protocol and step limit."""
    from agent_kit.rollout import play

    policy.sample = False
    played = play(
        policy, envs, ids, recipe.protocol, max_steps=recipe.max_steps, concurrency=len(ids)
    )
    return sum(e.current.reward for e in played) / len(played)


def run_setting(
    setting: Setting,
    sft_dir: Path,
    recipe: Any,
    envs: Any,
    batches: list[list[str]],
    greedy_ids: list[str],
    mix_samples: list[Any],
    args: argparse.Namespace,
) -> dict[str, Any]:
    """RL from the SFT weights under ``setting`` with the task recipe's ``rl_iteration``, an
    iteration per entry of ``batches`` (each update with ``setting.sft_mix`` of ``mix_samples``);
    its curve and the greedy reward on ``greedy_ids`` after RL."""
    import random

    import torch

    from agent_kit.scripted.interactive import rl_iteration
    from agent_kit.scripted.policy import LocalPolicy

    torch.manual_seed(args.seed)
    if setting.invalid_penalty is not None:
        recipe = dataclasses.replace(recipe, invalid_penalty=setting.invalid_penalty)
    policy = LocalPolicy(sft_dir, recipe.max_length)
    policy.temperature = setting.temperature
    optimizer = (
        torch.optim.SGD(policy.model.parameters(), lr=setting.lr)
        if setting.optimizer == "sgd"
        else policy.optimizer(setting.lr)
    )
    if setting.positive_only:
        update = policy.clipped_update

        def positive_update(batch: list[Any], optimizer: Any, **options: Any) -> list[float]:
            # The rollout policy's scores of the whole batch, as rl_iteration expects: the dropped
            # ones' too.
            dropped = iter(policy.sequence_logps([s for s in batch if s.weight <= 0]))
            trained = iter(update([s for s in batch if s.weight > 0], optimizer, **options))
            return [next(trained) if s.weight > 0 else next(dropped) for s in batch]

        policy.clipped_update = positive_update  # type: ignore[method-assign]
    curve, inadmissible, started, calls = [], [], time.monotonic(), envs.calls
    from omegaconf import OmegaConf

    weight = float(
        OmegaConf.load(ROOT / "conf" / "agent" / "scripted.yaml").online_grpo.sft_mix_weight
    )
    draw = random.Random(args.seed)
    for iteration, batch in enumerate(batches):
        mixed = [
            dataclasses.replace(s, weight=weight) for s in draw.sample(mix_samples, setting.sft_mix)
        ]
        stats = rl_iteration(
            recipe,
            envs,
            batch,
            args.group,
            policy,
            optimizer,
            epochs=setting.epochs,
            clip=setting.clip,
            mixed=mixed,
        )
        curve.append(stats.reward)
        inadmissible.append(stats.inadmissible)
        print(
            f"  {iteration + 1}/{len(batches)}: mean rollout reward {stats.reward:.3f}, "
            f"inadmissible actions {100 * stats.inadmissible:.0f} %",
            flush=True,
        )
    rl_s, rl_env_calls = time.monotonic() - started, envs.calls - calls
    after = greedy_reward(policy, envs, greedy_ids, recipe)
    return {
        "setting": setting.label,
        "curve": curve,
        "inadmissible": inadmissible,
        "greedy_after": after,
        "rl_s": rl_s,
        "rl_env_calls": rl_env_calls,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--setting",
        nargs="+",
        default=DEFAULT_SETTINGS,
        help="optimizer:lr[:epochs=N][:clip=X][:temp=T][:invalid=X][:mix=N][:positive], one run "
        "each",
    )
    parser.add_argument("--task", choices=["deepsearchqa", "alfworld"], default="deepsearchqa")
    parser.add_argument(
        "--policy", type=Path, help="start RL from this saved SFT policy (required for alfworld)"
    )
    parser.add_argument(
        "--train-size", type=int, default=8, help="deepsearchqa: training questions (two per town)"
    )
    parser.add_argument(
        "--sft-steps",
        type=int,
        default=70,
        help="deepsearchqa: SFT steps before RL (the recipe's expert trajectories)",
    )
    parser.add_argument("--sft-batch", type=int, default=8, help="packed episodes per SFT step")
    parser.add_argument("--sft-lr", type=float, default=3e-3)
    parser.add_argument("--iterations", type=int, default=20, help="RL iterations per setting")
    parser.add_argument(
        "--group", type=int, default=4, help="sampled rollouts per episode per iteration"
    )
    parser.add_argument(
        "--per-iteration",
        type=int,
        default=8,
        help="training episodes per iteration (the recipe's 32 rollouts / 4)",
    )
    parser.add_argument(
        "--pool",
        type=int,
        help="training episodes the iterations take in turn, a seeded draw; default: all, in order",
    )
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--seed", type=int, default=0, help="the fixture's seed and the torch seed")
    parser.add_argument(
        "--pool-seed", type=int, help="the seed of the pool's draw (default: --seed)"
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=Path(os.environ.get("AUTORL_CACHE_DIR", Path.home() / ".cache/autorl")),
    )
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--plot", type=Path, help="write a PNG of the curves here")
    args = parser.parse_args()
    settings = [Setting.parse(s) for s in args.setting]
    if args.task == "alfworld" and args.policy is None:
        raise SystemExit(
            "--task alfworld needs --policy DIR: a saved SFT policy, e.g. a cell's "
            "workspace/output/v1 (python -m autorl.sweep task=alfworld model=small writes one)"
        )

    import random

    import torch

    from agent_kit.scripted.interactive import expert_samples, iteration_batches
    from agent_kit.scripted.policy import LocalPolicy
    from autorl.envs.host import local_episode_client
    from autorl.envs.training import training_episode_ids
    from autorl.models.small import ensure_small_model
    from autorl.task_spec import get_task
    from autorl.tasks import build_task_data, eval_options

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    spec = get_task(args.task)
    options = (
        {"train_size": args.train_size, "eval_size": 4, "distractor_towns": 4}
        if args.task == "deepsearchqa"
        else {}
    )
    data = build_task_data(
        spec, "fixture", args.cache_dir / "tasks", seed=args.seed, options=options
    )
    os.environ["DATA_PATH"] = str(
        data.public_dir
    )  # the DeepSearchQA expert reads the public gold answers there
    recipe_module = importlib.import_module(f"autorl.task_code.{args.task}.agent.recipe")
    recipe = recipe_module.make_recipe()
    client = local_episode_client(
        args.task, args.task, data.private_dir, eval_options(spec, "fixture", {})
    )
    envs: Any = LocalEnvs(client)
    ids = training_episode_ids(
        data.public_dir
    )  # what the grading API's env endpoints list to the recipe
    pool_seed = args.seed if args.pool_seed is None else args.pool_seed
    pool = random.Random(pool_seed).sample(ids, min(args.pool, len(ids))) if args.pool else ids
    batches = iteration_batches(pool, min(args.per_iteration, len(pool)), args.iterations)
    mix_samples: list[Any] = []
    if any(
        s.sft_mix for s in settings
    ):  # the expert's sequences of (up to 200) training episodes outside the pool
        in_pool = set(pool)
        outside = [i for i in ids if i not in in_pool] or ids
        mix_samples, _ = expert_samples(
            recipe,
            envs,
            outside[:200],
            LocalPolicy(args.policy or ensure_small_model(args.cache_dir), recipe.max_length),
            deadline=time.monotonic() + 3600,
        )
    if args.task == "deepsearchqa":
        greedy_ids = ids
    else:  # ALFWorld's eval games, as the grader plays them
        from autorl.task_code.alfworld.env import load_episodes

        greedy_ids = list(load_episodes(data.private_dir))
    with tempfile.TemporaryDirectory(prefix="rl-curve-") as work:
        start_dir = args.policy
        if start_dir is None:
            start_dir = Path(work)
            sft(args, recipe, envs, ids, start_dir)
        # Every setting starts from these weights, so greedy play before RL is the same for all
        # (played once).
        before = greedy_reward(LocalPolicy(start_dir, recipe.max_length), envs, greedy_ids, recipe)
        results = []
        for setting in settings:
            print(f"RL {setting.label}", flush=True)
            results.append(
                {"greedy_before": before}
                | run_setting(
                    setting, start_dir, recipe, envs, batches, greedy_ids, mix_samples, args
                )
            )
    report(
        results,
        args,
        title=f"{args.task}, pool of {len(pool)} training episodes, {len(batches[0])} x "
        f"{args.group} rollouts an iteration, greedy on {len(greedy_ids)}",
    )


def sft(args: argparse.Namespace, recipe: Any, envs: Any, ids: list[str], target: Path) -> None:
    """SFT ``small`` on the recipe's expert trajectories of ``ids`` and save it to ``target``."""
    from agent_kit.scripted.interactive import expert_samples
    from agent_kit.scripted.policy import LocalPolicy
    from autorl.models.small import ensure_small_model

    policy = LocalPolicy(ensure_small_model(args.cache_dir), recipe.max_length)
    samples, _ = expert_samples(recipe, envs, ids, policy, deadline=time.monotonic() + 3600)
    started = time.monotonic()
    loss, _ = policy.train(
        samples, steps=args.sft_steps, batch_size=args.sft_batch, lr=args.sft_lr, seed=args.seed
    )
    print(
        f"{len(ids)} training episodes; SFT {args.sft_steps} steps, last loss {loss:.3f} "
        f"({time.monotonic() - started:.0f} s)",
        flush=True,
    )
    policy.save(target)


def report(results: list[dict[str, Any]], args: argparse.Namespace, title: str) -> None:
    """Print the settings' table; write ``--json`` and plot ``--plot`` (reward and inadmissible
    share) when given.
    """

    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    width = max(len("setting"), *(len(r["setting"]) for r in results))
    print(
        f"\n{'setting':<{width}} {'greedy before':>13} {'greedy after':>12} {'first 5 mean':>12} "
        f"{'last 5 mean':>11} {'inadm. first 5':>14} {'last 5':>6} {'RL s':>6} {'env calls':>9}"
    )
    for r in results:
        curve, inadmissible = r["curve"], r["inadmissible"]
        print(
            f"{r['setting']:<{width}} {r['greedy_before']:>13.3f} {r['greedy_after']:>12.3f} "
            f"{mean(curve[:5]):>12.3f} {mean(curve[-5:]):>11.3f} {mean(inadmissible[:5]):>14.3f} "
            f"{mean(inadmissible[-5:]):>6.3f} {r['rl_s']:>6.0f} {r['rl_env_calls']:>9}"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {"args": {k: str(v) for k, v in vars(args).items()}, "results": results}, indent=2
            )
        )
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        figure, (rewards, shares) = plt.subplots(1, 2, figsize=(11, 4))
        for r in results:
            iterations = range(1, len(r["curve"]) + 1)
            rewards.plot(
                iterations,
                r["curve"],
                marker=".",
                label=(
                    f"{r['setting']} (greedy {r['greedy_before']:.2f} -> {r['greedy_after']:.2f})"
                ),
            )
            shares.plot(iterations, r["inadmissible"], marker=".", label=r["setting"])
        rewards.set(xlabel="RL iteration", ylabel="mean rollout reward", ylim=(0, 1), title=title)
        shares.set(xlabel="RL iteration", ylabel="share of inadmissible actions", ylim=(0, 1))
        rewards.title.set_fontsize(9)
        rewards.legend(fontsize=7)
        figure.tight_layout()
        figure.savefig(args.plot, dpi=120)


if __name__ == "__main__":
    main()

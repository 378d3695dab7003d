"""Measurement: the scripted recipe's online-RL update, side by side under several settings (issue #14).

Issue #14 asks for an online-RL reward that rises over training. This trains one SFT policy on a small
DeepSearchQA fixture (``--train-size`` questions, the recipe's expert trajectories), then runs RL from
that same policy once per ``--setting``: every iteration plays ``--group`` sampled rollouts of every
training question through the task's env and trains on them with
:func:`agent_kit.scripted.interactive.rl_iteration` (GRPO: group-mean baseline, ``epochs`` optimizer
steps, PPO-clipped after the first). It prints and writes each setting's rollout reward per iteration
and the greedy reward on the training questions before and after RL, and plots the curves.

    python bench/online_rl_curve.py                                     # the settings below
    python bench/online_rl_curve.py --setting adam:1e-4 adam:3e-4:epochs=4:temp=0.7 sgd:0.05 --iterations 40

A setting is ``optimizer:lr`` (``adam``: :meth:`LocalPolicy.optimizer`, the recipe's; ``sgd``: plain
SGD), then optionally ``epochs=N`` (optimizer steps per batch), ``clip=X`` (their clip range),
``temp=T`` (rollout sampling temperature) and ``positive`` (drop the rollouts with a negative advantage).
The last default is the recipe's (``conf/agent/scripted.yaml`` ``online_grpo``). The env is the
grader-side env the grading API's endpoints serve, in-process (no Ray, no HTTP): this measures the
learning update, not the plumbing, which ``tests/integration/test_online_rl.py`` covers. CPU, `small` model.
"""

from __future__ import annotations

import argparse
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

DEFAULT_SETTINGS = ["adam:1e-4", "adam:3e-4:epochs=4", "adam:3e-4:epochs=4:temp=0.7", "adam:1.5e-4:epochs=4:temp=0.7"]


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

    @classmethod
    def parse(cls, text: str) -> Setting:
        """``optimizer:lr`` then optional ``epochs=N``, ``clip=X``, ``temp=T`` (sampling temperature), ``positive``.

        >>> Setting.parse("adam:1e-3:epochs=4:positive")
        Setting(optimizer='adam', lr=0.001, epochs=4, clip=0.2, temperature=1.0, positive_only=True)
        """
        usage = f"--setting {text!r}: expected adam|sgd:<lr>[:epochs=N][:clip=X][:temp=T][:positive], e.g. adam:3e-4:epochs=4"
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
    played = play(policy, envs, ids, recipe.protocol, max_steps=recipe.max_steps, concurrency=len(ids))
    return sum(e.current.reward for e in played) / len(played)


def run_setting(setting: Setting, sft_dir: Path, recipe: Any, envs: Any, ids: list[str],
                args: argparse.Namespace) -> dict[str, Any]:
    """RL from the SFT weights under ``setting`` with the task recipe's ``rl_iteration``; its curve and greedy rewards."""
    import torch

    from agent_kit.scripted.interactive import rl_iteration
    from agent_kit.scripted.policy import LocalPolicy

    torch.manual_seed(args.seed)
    policy = LocalPolicy(sft_dir, recipe.max_length)
    before = greedy_reward(policy, envs, ids, recipe)
    policy.temperature = setting.temperature
    optimizer = (torch.optim.SGD(policy.model.parameters(), lr=setting.lr) if setting.optimizer == "sgd"
                 else policy.optimizer(setting.lr))
    if setting.positive_only:
        update = policy.clipped_update

        def positive_update(batch: list[Any], optimizer: Any, **options: Any) -> float:
            return update([s for s in batch if s.weight > 0], optimizer, **options)

        policy.clipped_update = positive_update  # type: ignore[method-assign]
    curve, started, calls = [], time.monotonic(), envs.calls
    for iteration in range(args.iterations):
        curve.append(rl_iteration(recipe, envs, ids, args.group, policy, optimizer, epochs=setting.epochs,
                                  clip=setting.clip))
        print(f"  {iteration + 1}/{args.iterations}: mean rollout reward {curve[-1]:.3f}", flush=True)
    rl_s, rl_env_calls = time.monotonic() - started, envs.calls - calls
    after = greedy_reward(policy, envs, ids, recipe)
    return {"setting": setting.label, "curve": curve, "greedy_before": before, "greedy_after": after,
            "rl_s": rl_s, "rl_env_calls": rl_env_calls}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--setting", nargs="+", default=DEFAULT_SETTINGS, help="optimizer:lr[:epochs=N][:clip=X][:temp=T][:positive], one run each")
    parser.add_argument("--train-size", type=int, default=8, help="training questions (two per town)")
    parser.add_argument("--sft-steps", type=int, default=70, help="SFT steps before RL (the recipe's expert trajectories)")
    parser.add_argument("--sft-batch", type=int, default=8, help="packed episodes per SFT step")
    parser.add_argument("--sft-lr", type=float, default=3e-3)
    parser.add_argument("--iterations", type=int, default=20, help="RL iterations per setting")
    parser.add_argument("--group", type=int, default=4, help="sampled rollouts per question per iteration")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dir", type=Path, default=Path(os.environ.get("AUTORL_CACHE_DIR", Path.home() / ".cache/autorl")))
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--plot", type=Path, help="write a PNG of the curves here")
    args = parser.parse_args()
    settings = [Setting.parse(s) for s in args.setting]

    import torch

    from agent_kit.scripted.interactive import expert_samples
    from agent_kit.scripted.policy import LocalPolicy
    from autorl.envs.host import local_episode_client
    from autorl.models.small import ensure_small_model
    from autorl.task_spec import get_task
    from autorl.tasks import build_task_data, eval_options

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    spec = get_task("deepsearchqa")
    options = {"train_size": args.train_size, "eval_size": 4, "distractor_towns": 4}
    data = build_task_data(spec, "fixture", args.cache_dir / "tasks", seed=args.seed, options=options)
    os.environ["DATA_PATH"] = str(data.public_dir)  # the recipe's expert reads the public gold answers there
    from autorl.task_code.deepsearchqa.agent.recipe import make_recipe  # type: ignore[import-not-found]

    client = local_episode_client("deepsearchqa", "deepsearchqa", data.private_dir, eval_options(spec, "fixture", {}))
    envs: Any = LocalEnvs(client)
    rows = (data.public_dir / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    ids = [json.loads(line)["episode_id"] for line in rows if line.strip()]
    recipe = make_recipe()
    policy = LocalPolicy(ensure_small_model(args.cache_dir), recipe.max_length)
    samples, _ = expert_samples(recipe, envs, ids, policy, deadline=time.monotonic() + 3600)
    started = time.monotonic()
    loss, _ = policy.train(samples, steps=args.sft_steps, batch_size=args.sft_batch, lr=args.sft_lr, seed=args.seed)
    print(f"{len(ids)} training questions; SFT {args.sft_steps} steps, last loss {loss:.3f} "
          f"({time.monotonic() - started:.0f} s)", flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="rl-curve-") as work:
        policy.save(Path(work))
        for setting in settings:
            print(f"RL {setting.label}", flush=True)
            results.append(run_setting(setting, Path(work), recipe, envs, ids, args))
    print(f"\n{'setting':<20} {'greedy before':>13} {'greedy after':>12} {'first 5 mean':>12} {'last 5 mean':>11} "
          f"{'RL s':>6} {'env calls':>9}")
    for r in results:
        curve = r["curve"]
        print(f"{r['setting']:<20} {r['greedy_before']:>13.3f} {r['greedy_after']:>12.3f} "
              f"{sum(curve[:5]) / len(curve[:5]):>12.3f} {sum(curve[-5:]) / len(curve[-5:]):>11.3f} "
              f"{r['rl_s']:>6.0f} {r['rl_env_calls']:>9}")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results}, indent=2))
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        figure, axes = plt.subplots(figsize=(7, 4))
        for r in results:
            axes.plot(range(1, len(r["curve"]) + 1), r["curve"], marker=".",
                      label=f"{r['setting']} (greedy {r['greedy_before']:.2f} -> {r['greedy_after']:.2f})")
        axes.set(xlabel="RL iteration", ylabel="mean rollout reward", ylim=(0, 1),
                 title=f"DeepSearchQA, {len(ids)} questions, SFT {args.sft_steps} steps, {args.group} rollouts each")
        axes.legend(fontsize=8)
        figure.tight_layout()
        figure.savefig(args.plot, dpi=120)


if __name__ == "__main__":
    main()

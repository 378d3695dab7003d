"""A plugin folder outside the repo with copies of gsm8k, alpacaeval (judged) and webshop
(interactive),
renamed: one sweep runs all three through the plugin path, and ``autorl.ls tasks`` lists them."""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from autorl.plugins import PLUGIN_PATH_ENV
from autorl.registry import CONF_DIR
from autorl.task_code import TASKS_DIR
from tests.integration.conftest import query, sweep_command, sweep_env

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
# copy of -> (new id, the defaults to shrink in its options.py so that the sweep takes minutes on 2
# cores)
COPIES: dict[str, tuple[str, dict[str, Any]]] = {
    "gsm8k": ("mymath", {"build": {"train_size": 200, "eval_size": 20}, "eval": {}}),
    "alpacaeval": ("myjudged", {"build": {"train_size": 60, "eval_size": 12}, "eval": {}}),
    "webshop": (
        "myshop",
        {
            "build": {"catalogue_size": 60, "train_size": 40, "eval_size": 6},
            "eval": {"max_steps": 3, "max_new_tokens": 8},
        },
    ),
}
SMALL = [
    "agent.sft.max_steps=4",
    "agent.sft.per_device_train_batch_size=2",
    "agent.grpo.max_steps=1",
    "agent.grpo.per_device_train_batch_size=2",
    "agent.grpo.num_generations=2",
    "agent.online_grpo.batches=1",
    "agent.online_grpo.per_device_train_batch_size=2",
    "agent.online_grpo.num_generations=2",
    "agent.online_grpo.num_iterations=2",
    "budget.seconds=240",
]


def shrink_default(options_py: Path, name: str, value: int) -> None:
    """Set the first default of option ``name`` in a task's ``options.py``: the fixture's, whose
    classes come before the hub's."""
    text = options_py.read_text()
    pattern = rf"(\n    {name}: [^=\n]+= option\(\s*)[^,]+,"
    shrunk, count = re.subn(pattern, rf"\g<1>{value},", text, count=1)
    assert count == 1, f"{options_py} has no option {name}"
    options_py.write_text(shrunk)


def make_plugin(plugin: Path) -> None:
    """Copy each task folder into ``plugin``, renamed and with smaller defaults: the folder is the
    whole task (no conf/ file)."""
    for source, (new_id, shrink) in COPIES.items():
        folder = plugin / "tasks" / new_id
        shutil.copytree(TASKS_DIR / source, folder, ignore=shutil.ignore_patterns("__pycache__"))
        manifest = folder / "task.yaml"
        text = manifest.read_text().replace(f"id: {source}\n", f"id: {new_id}\n", 1)
        manifest.write_text(
            re.sub(r"(?m)^(\s+actors:) \d+", r"\1 1", text)
        )  # one env actor on 2 cores
        for name, value in {**shrink["build"], **shrink["eval"]}.items():
            shrink_default(folder / "options.py", name, value)


def add_plugin_agent(plugin: Path) -> None:
    """A plugin agent: ``conf/agent/myscripted.yaml`` names an adapter in the plugin's own
    package."""
    package = plugin / "my_plugin_agents"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "from autorl.agents.scripted import ScriptedAgent\n\n\n"
        "class PluginScriptedAgent(ScriptedAgent):\n"
        '    """The scripted agent under a plugin\'s name, imported from the plugin on the '
        'worker."""\n'
    )
    conf = yaml.safe_load((CONF_DIR / "agent" / "scripted.yaml").read_text())
    conf |= {"name": "myscripted", "adapter": "my_plugin_agents:PluginScriptedAgent"}
    (plugin / "conf" / "agent").mkdir(parents=True, exist_ok=True)
    (plugin / "conf" / "agent" / "myscripted.yaml").write_text(
        yaml.safe_dump(conf, sort_keys=False)
    )


def test_plugin_tasks_run_in_one_sweep_and_are_listed(
    tmp_path: Path, ray_tmp: Path, cache_dir: Path
) -> None:
    plugin = tmp_path / "my_plugin"
    make_plugin(plugin)
    assert not plugin.resolve().is_relative_to(ROOT)
    assert [p.name for p in plugin.iterdir()] == ["tasks"]  # task folders only: nothing under conf/
    ids = [new_id for new_id, _ in COPIES.values()]

    listed = subprocess.run(
        [sys.executable, "-m", "autorl.ls", "tasks"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ) | {PLUGIN_PATH_ENV: str(plugin)},
    )
    assert listed.returncode == 0, listed.stderr
    lines = {line.split()[0]: line for line in listed.stdout.splitlines()}
    for task_id in ids:
        assert lines[task_id].endswith(f"(plugin {plugin})"), listed.stdout
    assert "gsm8k" in lines

    command = [
        sys.executable,
        "-m",
        "autorl.sweep",
        f"task={','.join(ids)}",
        f"plugins=[{plugin}]",
        *SMALL,
        f"out_dir={tmp_path / 'out'}",
        "cluster.include_dashboard=false",
        "cluster.num_cpus=4",
        f"cluster.temp_dir={ray_tmp}",
        "progress=false",
    ]
    env = sweep_env(cache_dir)
    env.pop(PLUGIN_PATH_ENV, None)  # the plugins come from the command line alone
    done = subprocess.run(
        command, check=False, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (sweep_dir,) = [p for p in (tmp_path / "out").iterdir() if p.is_dir()]
    with open(sweep_dir / "results.csv") as handle:
        rows = {r["task"]: r for r in csv.DictReader(handle)}
    assert set(rows) == set(ids)
    for task_id, row in rows.items():
        assert row["status"] == "completed" and row["task_source"] == "fixture", (task_id, row)
        assert row["baseline"] != "" and row["best_score"] != "", (task_id, row)
        # The scripted recipe submits after SFT and again after RL; alpacaeval's has no rule
        # reward, so no RL.
        stages = 1 if task_id == "myjudged" else 2
        submitted = int(row["submissions"]), int(row["valid_submissions"])
        assert min(submitted) >= stages, (task_id, row)
        log = (sweep_dir / "cells" / row["cell_id"] / "agent.log").read_text()
        scored = re.search(rf"submitted output/v{stages}: status=(scored|duplicate)", log)
        assert "SFT done" in log and scored, (task_id, log[-2000:])
        # Built by the plugin's own builder.
        assert (cache_dir / "tasks" / task_id).is_dir(), task_id
    shop_log = (sweep_dir / "cells" / rows["myshop"]["cell_id"] / "agent.log").read_text()
    played = re.search(r"expert played (\d+) \(mean reward ([\d.]+)\)", shop_log)
    # At most sft.steps x sft.batch_size sessions.
    assert played and 2 <= int(played.group(1)) <= 4 * 2, shop_log[-2000:]
    # Bought through the plugin env's endpoints: the recipe's shopper buys a product of the
    # instruction's kind (reward 0.25 to 1 a session on this build; 0 would mean it bought nothing
    # or the wrong kind).
    assert float(played.group(2)) >= 0.25, shop_log[-2000:]
    sql = "SELECT cell_id, status, details_json FROM submissions"
    subs = query(sweep_dir / "records.sqlite", sql)
    assert {s[1] for s in subs} <= {"scored", "duplicate"}
    shop = [s for s in subs if s[0] == rows["myshop"]["cell_id"] and s[1] == "scored"]
    # Played in envpool:myshop.
    assert shop and all('"env_client": "PoolEnvClient"' in s[2] for s in shop)
    judged = [s for s in subs if s[0] == rows["myjudged"]["cell_id"] and s[1] == "scored"]
    # Judged by the plugin's rule judge.
    assert judged and all('"length_controlled_winrate"' in s[2] for s in judged)


def test_a_plugin_agent_and_task_reach_the_workers_of_a_joined_cluster(
    tmp_path: Path, ray_tmp: Path, cache_dir: Path, external_ray_head: str
) -> None:
    """Workers of a cluster started with `ray start` inherit nothing from the sweep: the plugin
    reaches them through the job's runtime env (AUTORL_PLUGIN_PATH, and PYTHONPATH for the
    adapter)."""
    plugin = tmp_path / "my_plugin"
    make_plugin(plugin)
    add_plugin_agent(plugin)
    command = sweep_command(
        tmp_path / "out",
        ray_tmp,
        "agent=myscripted",
        "task=mymath",
        *SMALL,
        f"cluster.address={external_ray_head}",
        "progress=false",
    )
    done = subprocess.run(
        command,
        check=False,
        env=sweep_env(cache_dir) | {PLUGIN_PATH_ENV: str(plugin)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (sweep_dir,) = [p for p in (tmp_path / "out").iterdir() if p.is_dir()]
    with open(sweep_dir / "results.csv") as handle:
        (row,) = list(csv.DictReader(handle))
    assert row["cell_id"] == "mymath.myscripted.none.tiny.s0" and row["status"] == "completed", row
    assert row["baseline"] != "" and int(row["valid_submissions"]) >= 2, row

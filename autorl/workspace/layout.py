"""The agent's workspace folder (docs/design.md#a-cells-life, step 3).

```
workspace/
  code/  output/  data/ (public split, read-only)  models/<base> (read-only link)
  description.md  instructions.md  run_meta.json
```

Private eval data, grader outputs and logs never enter it: they live in the cache and in the
cell folder next to it.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import agent_kit
from agent_kit.scripted.__main__ import AGENT_PACKAGE
from autorl.tasks import TaskSpec
from autorl.workspace.environment import CellEnvironment

INSTRUCTIONS = """\
# Instructions

You are an autonomous post-training agent. Improve the score of the base model on the task in
`description.md` within the time budget, by training it and submitting trained models to the
grading API. You may submit as often as you like; the best valid submission counts.

## Budget
- {budget_s:.0f} seconds of wall-clock time, counted from `start_time` in `run_meta.json`
  (`GET $GRADING_SERVER_URL/time` returns `remaining`). At the end every process you started is
  stopped.

{environment}

## Your workspace (the current directory)
- `code/`: put your scripts here (it is snapshotted at every submission).
- `output/`: save models here, one folder per version (`output/v1`, `output/v2`, ...).
- `data/`: the training data (read-only). `models/{model_name}/`: the base model (read-only).
- Environment: `TASK`, `BASE_MODEL`, `WORKSPACE`, `MODEL_PATH`, `DATA_PATH`, `OUTPUT_DIR`,
  `GRADING_SERVER_URL`, `GRADING_TOKEN`.

## Grading API (send `Authorization: Bearer $GRADING_TOKEN`)
- `POST /submit {{"model_path": "output/v1"}}`: scores the model and returns
  `{{submission_id, status, score, baseline_score, improvement, best, total_submissions}}`.
  Add `"wait": false` to get `202 {{submission_id, status: "queued"}}` at once, then poll
  `GET /submissions/<id>`.
- `GET /submissions`, `GET /time`, `GET /health`.

```bash
curl -s -X POST "$GRADING_SERVER_URL/submit" -H "Authorization: Bearer $GRADING_TOKEN" \\
     -H 'Content-Type: application/json' -d '{{"model_path": "output/v1"}}'
```

## Rules
- Submit a full model folder under `output/` (config.json, weights, tokenizer files).
- A copy of the base model scores the baseline. Identical weights return the earlier score.
- The baseline score is {baseline:.2f}; nothing you do changes it.

## Evaluation settings of this run
```json
{eval_settings}
```
"""


@dataclass(frozen=True)
class WorkspacePaths:
    """Where the parts of a workspace are."""

    root: Path
    code: Path
    output: Path
    data: Path
    model: Path
    run_meta: Path


def _copy_read_only(src: Path, dest: Path) -> None:
    shutil.copytree(src, dest)
    _mark_read_only(dest)


def _mark_read_only(dest: Path) -> None:
    for path in [*dest.rglob("*"), dest]:
        mode = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
        os.chmod(path, mode | (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH if path.is_dir() else 0))


def _make_writable(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            os.chmod(path, stat.S_IRWXU)


def build_workspace(
    cell_dir: Path, *, public_dir: Path, description_md: Path, base_model_dir: Path, model_name: str
) -> WorkspacePaths:
    """Create a fresh workspace under ``cell_dir`` (an earlier attempt's workspace is replaced)."""
    root = cell_dir / "workspace"
    if root.exists():
        _make_writable(root)
        shutil.rmtree(root)
    (root / "code").mkdir(parents=True)
    (root / "output").mkdir()
    (root / "models").mkdir()
    _copy_read_only(public_dir, root / "data")
    # A link, not a copy: hub models are gigabytes. Submitting it is rejected anyway, because
    # a submission must resolve inside output/.
    (root / "models" / model_name).symlink_to(base_model_dir, target_is_directory=True)
    shutil.copyfile(description_md, root / "description.md")
    return WorkspacePaths(
        root,
        root / "code",
        root / "output",
        root / "data",
        root / "models" / model_name,
        root / "run_meta.json",
    )


def agent_variables(
    paths: WorkspacePaths,
    *,
    home: Path,
    task: str,
    model: str,
    cpus: float,
    grading: tuple[str, str],
    omp_wait_policy: str,
) -> dict[str, str]:
    """The benchmark's variables in the agent's environment: its HOME, task, model, workspace
    folders, the grading API's URL and token (``grading``) and its thread settings."""
    url, token = grading
    return {
        "HOME": str(home),
        "TASK": task,
        "BASE_MODEL": model,
        "WORKSPACE": str(paths.root),
        "MODEL_PATH": str(paths.model),
        "DATA_PATH": str(paths.data),
        "OUTPUT_DIR": str(paths.output),
        "GRADING_SERVER_URL": url,
        "GRADING_TOKEN": token,
        "OMP_NUM_THREADS": str(max(1, int(cpus))),
        # Idle OpenMP threads sleep instead of spinning: cells share a node's cores (Ray's CPUs
        # are counted, not pinned), and spinning threads took a neighbour's cycles
        # (bench/omp_wait_policy.py). The agent may set its own (the caller passes it on).
        "OMP_WAIT_POLICY": omp_wait_policy,
        "PYTHONUNBUFFERED": "1",
    }


def copy_agent_code(spec: TaskSpec, dest: Path) -> Path | None:
    """Copy the agent-side code to ``dest``, read-only, and return the task's package folder in it.

    ``dest`` gets two packages: ``agent_kit/`` (what the scripted runner and the task's agent code
    import) and ``task_agent/`` (the task's ``tasks/<id>/agent``)::

        dest/agent_kit/...  dest/task_agent/__init__.py, recipe.py, ...

    so ``PYTHONPATH=<dest>`` makes both importable, in the agent's toolchain too, and nothing of the
    grader side is beside them. The returned ``dest/task_agent`` is what
    ``LaunchContext.task_agent_dir`` takes (its parent is ``dest``). ``None`` (and nothing copied)
    when the task has no agent side.
    """
    if not spec.agent_dir.is_dir():
        return None
    if dest.exists():
        _make_writable(dest)
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(Path(agent_kit.__file__).parent, dest / "agent_kit", ignore=ignore)
    shutil.copytree(spec.agent_dir, dest / AGENT_PACKAGE, ignore=ignore)
    _mark_read_only(dest)
    return dest / AGENT_PACKAGE


def write_instructions(
    paths: WorkspacePaths,
    *,
    budget_s: float,
    baseline: float,
    model_name: str,
    eval_settings: dict[str, Any],
    environment: CellEnvironment,
) -> None:
    """Write ``instructions.md`` with this run's budget, machine, API, baseline and eval
    settings."""
    text = INSTRUCTIONS.format(
        budget_s=budget_s,
        model_name=model_name,
        baseline=baseline,
        eval_settings=json.dumps(eval_settings, indent=2),
        environment=environment.markdown(),
    )
    (paths.root / "instructions.md").write_text(text)

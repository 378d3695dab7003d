"""What a sweep submitted as a Ray Job consists of: its entry point, runtime env, ids and archive
name.

Pure functions of the plan and the command line, so that they are tested without a cluster.
"""

from __future__ import annotations

import re
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from autorl.errors import ConfigError
from autorl.schema import ClusterConfig

# The project's folder: the job's working_dir (code, conf/, tasks/), as the checkout holds it.
PROJECT_DIR = Path(__file__).resolve().parents[2]
# Never uploaded (gitignore syntax, relative to the project folder): results, virtual environments,
# caches (models, agent CLIs, the agent toolchain), git history and the interactive environments'
# data.
EXCLUDES = [
    "/outputs/",
    ".venv*",
    ".cache/",
    "caches/",
    ".git/",
    "environments/",
    ".hypothesis/",
    ".pytest_cache/",
    ".mypy_cache/",
    ".ruff_cache/",
    ".gpu_carry/",
    "*.egg-info/",
    "__pycache__/",
]
# Overrides the client sets for the job itself: the user's values are replaced, not passed through.
_IN_JOB_KEYS = (
    "out_dir",
    "sweep_id",
    "plugins",
    "cluster.address",
    "cluster.jobs_address",
    "cluster.auth_token_path",
)
METADATA_SWEEP = "autorl_sweep_id"
METADATA_ARCHIVE = "autorl_archive"
# The uploaded plugin folders' names (autorl.jobs.entry finds them).
PLUGINS_ENV = "AUTORL_JOB_PLUGINS"


@dataclass(frozen=True)
class JobOptions:
    """The sweep command's job-only arguments: not config, so they never reach the cells.

    ``detach=true`` submits and returns at once; ``attach=<job_id>`` follows a job submitted
    earlier.
    """

    detach: bool = False
    attach: str | None = None


def take_job_options(argv: Sequence[str]) -> tuple[JobOptions, list[str]]:
    """Split ``detach=`` and ``attach=`` off a sweep command line.

    >>> take_job_options(["task=gsm8k", "detach=true"])
    (JobOptions(detach=True, attach=None), ['task=gsm8k'])

    Raises:
        ConfigError: ``detach`` is not true/false, or ``attach`` names no job.
    """
    detach, attach, rest = False, None, []
    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep and key == "detach":
            if value.lower() not in ("true", "false"):
                raise ConfigError(f"{arg!r}: detach takes true or false")
            detach = value.lower() == "true"
        elif sep and key == "attach":
            if not value:
                raise ConfigError(
                    "attach= needs a job id, e.g. attach=autorl-default-20260101-120000"
                )
            attach = value
        else:
            rest.append(arg)
    return JobOptions(detach, attach), rest


def submission_id(sweep_id: str, now: float | None = None) -> str:
    """A new job id for a sweep: ``autorl-<sweep_id>-<UTC time>`` (Ray refuses a reused id).

    >>> submission_id("default", 0.0)
    'autorl-default-19700101-000000'
    """
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if now is None else now))
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"autorl-{sweep_id}-{stamp}")


def archive_name(job_id: str) -> str:
    """The sweep folder's archive in the job driver's log folder (fetched through the log API)."""
    return f"{job_id}.tar.gz"


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def in_job_overrides(argv: Sequence[str], cluster: ClusterConfig, sweep_id: str) -> list[str]:
    """The sweep command the job runs: the user's overrides, then where the job's sweep runs and
    writes.

    Its driver joins the cluster it runs on (``address=auto``; the job sets ``RAY_ADDRESS``),
    submits nothing (``jobs_address=null``), uses the cluster's own token (the head's environment),
    keeps the sweep id of this command and writes under ``cluster.job_out_dir`` on the cluster.

    >>> from autorl.schema import ClusterConfig
    >>> c = ClusterConfig(name="x", description="", address=None, num_cpus=None, num_gpus=None,
    ...     include_dashboard=False, dashboard_port=8265, temp_dir=None, namespace_prefix="autorl",
    ...     auth_mode="token", auth_token_path=None, jobs_address="http://h:8265",
    ...     job_out_dir="/data/out")
    >>> argv = ["cluster=jobs-local", "task=gsm8k", "out_dir=here"]
    >>> for override in in_job_overrides(argv, c, "s1")[-5:]:
    ...     print(override)
    cluster.address=auto
    cluster.jobs_address=null
    cluster.auth_token_path=null
    out_dir=/data/out
    sweep_id=s1
    """
    kept = [arg for arg in argv if _key(arg) not in _IN_JOB_KEYS]
    return [
        *kept,
        "cluster.address=auto",
        "cluster.jobs_address=null",
        "cluster.auth_token_path=null",
        f"out_dir={cluster.job_out_dir}",
        f"sweep_id={sweep_id}",
    ]


def entrypoint(argv: Sequence[str], cluster: ClusterConfig, sweep_id: str, job_id: str) -> str:
    """The job's shell command: :mod:`autorl.jobs.entry` with the in-job sweep overrides.

    The interpreter is an absolute path (``cluster.python``, else this one): a bare ``python`` would
    be whatever comes first on the PATH of whoever ran ``ray start``.
    """
    python = cluster.python or sys.executable
    sweep_dir = f"{cluster.job_out_dir.rstrip('/')}/{sweep_id}"
    words = [
        python,
        "-m",
        "autorl.jobs.entry",
        "--sweep-dir",
        sweep_dir,
        "--archive",
        archive_name(job_id),
        "--",
        *in_job_overrides(argv, cluster, sweep_id),
    ]
    return shlex.join(words)


def runtime_env(
    cluster: ClusterConfig, plugins: Sequence[Path], project_dir: Path = PROJECT_DIR
) -> dict[str, object]:
    """The job's runtime env: the project folder as working_dir, plugin folders as py_modules.

    Plugin folders travel as ``py_modules`` (each unpacked on the cluster under its own name; the
    entry point finds them there and activates them, see :mod:`autorl.jobs.entry`).
    ``RAY_JOB_STOP_WAIT_TIME_S`` is read by the job's supervisor: a stopped job's sweep gets that
    long after SIGTERM to cancel its cells and pack its folder before SIGKILL (Ray's default is 3
    s).
    """
    env_vars = {
        "RAY_JOB_STOP_WAIT_TIME_S": str(int(cluster.job_stop_wait_s)),
        "HYDRA_FULL_ERROR": "1",
    }
    names = [folder.name for folder in plugins]
    if len(set(names)) != len(names):
        raise ConfigError(
            f"plugin folders {', '.join(map(str, plugins))}: a job needs plugin folders with "
            "distinct names"
        )
    env: dict[str, object] = {
        "working_dir": str(project_dir),
        "excludes": list(EXCLUDES),
        "env_vars": env_vars,
    }
    if plugins:
        env["py_modules"] = [str(folder) for folder in plugins]
        env_vars[PLUGINS_ENV] = ":".join(names)
    return env

"""The live grading cell the fuzz tests send requests to: the real :class:`GradingServer` (uvicorn
on a real socket) over the real :class:`SubmissionService`, a real :class:`RecordStore` as its
sink, the in-process grader, and the env endpoints of the webshop fixture; its output/ holds the
models the generated submissions name."""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from autorl.envs.base import EnvSource
from autorl.envs.host import LocalEnvClient, cache_resolver
from autorl.envs.training import TrainingEnvs
from autorl.grading.api import GradingServer
from autorl.grading.service import SubmissionService
from autorl.records.store import RecordStore
from autorl.tasks import build_task_data, eval_options, get_task
from tests.helpers.grading_cell import GatedScorer, save_variant, start_grading_cell

TOKEN = "fuzz-token"
CELL = "cell-fuzz"
MAX_BODY = (
    65536  # conf/config.yaml's grading_api.max_body_bytes: the 5,000 nested [ fit under it
)
MAX_QUEUED = 3
ENV_BUILD = {"catalogue_size": 24, "train_size": 6, "eval_size": 4}


@dataclass
class Cell:
    """The live server and what the test checks behind it."""

    server: GradingServer
    service: SubmissionService
    store: RecordStore
    scorer: GatedScorer
    sent: Counter[str] = field(default_factory=Counter)  # requests sent, per phase
    statuses: Counter[int] = field(default_factory=Counter)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.server.sock.getsockname()[:2]
        return host, port


def live_cell(
    tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path, cache_dir: Path
) -> Iterator[Cell]:
    """The live cell server, with a copy of the base, a variant, corrupt weights, hostile configs, a
    file and a link under output/."""
    root = tmp_path_factory.mktemp("fuzz-cell")
    spec = get_task("webshop")
    data = build_task_data(spec, "fixture", cache_dir / "tasks", seed=0, options=ENV_BUILD)
    source = EnvSource("webshop", "fixture", 0, ENV_BUILD, eval_options(spec, "fixture"))
    envs = TrainingEnvs(
        "webshop",
        source,
        data.public_dir,
        lambda: LocalEnvClient("webshop", cache_resolver(cache_dir)),
        max_sessions=4,
    )
    live = start_grading_cell(
        root,
        tiny_model_dir,
        cache_dir,
        token=TOKEN,
        cell_id=CELL,
        max_queued=MAX_QUEUED,
        max_body_bytes=MAX_BODY,
        submit_timeout_s=60.0,
        budget_s=3600,
        envs=envs,
    )
    workspace, output = live.workspace, live.workspace / "output"
    try:
        # What the generated submissions name: a copy of the base, a variant to score, corrupt
        # weights (recorded invalid), folders without or with a hostile config.json (422), a file
        # and a link out of output/ (400).
        shutil.copytree(tiny_model_dir, output / "copy")
        save_variant(tiny_model_dir, output / "v1", noise_seed=7)
        shutil.copytree(output / "v1", output / "broken")
        weights = output / "broken" / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:100])
        shutil.copytree(tiny_model_dir, output / "no_config")
        (output / "no_config" / "config.json").unlink()
        (output / "file").write_text("not a model")
        # config.json as an agent could write it to crash the checks: nested past the parser's
        # recursion limit, and an integer past int()'s 4,300 digits (422, not a 500).
        for name, config in (
            ("deep_config", "[" * 100_000),
            ("huge_int_config", '{"vocab_size": ' + "9" * 5000 + "}"),
        ):
            shutil.copytree(tiny_model_dir, output / name)
            (output / name / "config.json").write_text(config)
        (output / "link").symlink_to(workspace / "models" / "tiny")
        yield Cell(live.server, live.service, live.store, live.scorer)
    finally:
        live.close()

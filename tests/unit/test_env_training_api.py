"""The grading API's env endpoints over real HTTP: agents play training episodes, never eval
ones."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from autorl.envs.base import EnvSource
from autorl.envs.host import LocalEnvClient, cache_resolver
from autorl.envs.training import TrainingEnvs
from autorl.grading.api import GradingServer, create_app
from autorl.grading.service import CellGradingContext, SubmissionService
from autorl.tasks import build_task_data, eval_options, get_task
from autorl.workspace.run_meta import RunMeta

TOKEN = "env-token"
BUILD = {"catalogue_size": 24, "train_size": 6, "eval_size": 4}


class _NoScorer:
    def __call__(
        self, model_dir: Path, digest: str
    ) -> None:  # never called: nothing is submitted here
        raise AssertionError("no submissions in this test")


class _NoSink:
    def record_submission(self, record: object) -> None:
        raise AssertionError("no submissions in this test")


@pytest.fixture()
def client(tmp_path: Path, cache_dir: Path) -> Iterator[httpx.Client]:
    spec = get_task("webshop")
    data = build_task_data(spec, "fixture", cache_dir / "tasks", seed=0, options=BUILD)
    # Training episodes get the task's eval options, complete, as a sweep's cell does.
    source = EnvSource("webshop", "fixture", 0, BUILD, eval_options(spec, "fixture"))
    envs = TrainingEnvs(
        "webshop",
        source,
        data.public_dir,
        lambda: LocalEnvClient("webshop", cache_resolver(cache_dir)),
        max_sessions=2,
    )
    run_meta = RunMeta(tmp_path / "run_meta.json", 600, tmp_path)
    run_meta.update(start_time=time.time())
    service = SubmissionService(
        CellGradingContext("cell-env", tmp_path, "h", 0.0, 1),
        _NoScorer(),
        _NoSink(),
        run_meta,
        tmp_path / "copies",
    )
    app = create_app(
        service,
        run_meta,
        token=TOKEN,
        task_id="webshop",
        max_body_bytes=4096,
        submit_timeout_s=lambda: 10.0,
        envs=envs,
    )
    server = GradingServer(app)
    server.start()
    http = httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60
    )
    try:
        yield http
    finally:
        http.close()
        server.stop()
        service.close()


def test_agent_plays_a_training_episode_to_the_end(client: httpx.Client) -> None:
    episodes = client.get("/env/episodes").json()
    assert (
        episodes["kind"] == "webshop"
        and episodes["episodes"][0] == "train/4"
        and len(episodes["episodes"]) == 6
    )
    assert all(e.startswith("train/") for e in episodes["episodes"])
    first = client.post("/env/reset", json={"episode_id": "train/4"})
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["done"] is False and body["observation"].startswith("WebShop [SEP] Instruction:")
    assert body["admissible_actions"] == ["search[<your query>]"]
    session, steps = body["session_id"], 0
    while not body["done"]:
        body = client.post(
            "/env/step", json={"session_id": session, "action": body["info"]["expert_action"]}
        ).json()
        steps += 1
    assert body["reward"] == pytest.approx(1.0) and steps >= 3
    over = client.post("/env/step", json={"session_id": session, "action": "click[buy now]"})
    assert over.status_code == 409 and "over" in over.json()["error"]
    assert client.post("/env/close", json={"session_id": session}).status_code == 200


def test_agent_cannot_reset_or_step_an_evaluation_episode(client: httpx.Client) -> None:
    refused = client.post("/env/reset", json={"episode_id": "eval/0"})
    assert refused.status_code == 403
    assert (
        "evaluation split" in refused.json()["error"]
        and "training episodes" in refused.json()["error"]
    )
    # No session was made for it, so there is nothing to step: guessing session ids gets 404.
    stepped = client.post("/env/step", json={"session_id": "s1", "action": "search[anything]"})
    assert stepped.status_code == 404 and "POST /env/reset" in stepped.json()["error"]
    assert "eval/0" not in client.get("/env/episodes").json()["episodes"]


def test_bad_env_requests_get_clear_errors(client: httpx.Client) -> None:
    assert client.post("/env/reset", json={"episode_id": "train/999"}).status_code == 404
    assert client.post("/env/reset", json={"episode_id": "nope"}).status_code == 404
    assert (
        "unknown field"
        in client.post("/env/reset", json={"episode_id": "train/4", "x": 1}).json()["error"]
    )
    assert client.post("/env/reset", content=b"{not json").status_code == 400
    session = client.post("/env/reset", json={"episode_id": "train/5"}).json()["session_id"]
    assert "action" in client.post("/env/step", json={"session_id": session}).json()["error"]
    assert client.post("/env/step", json={"session_id": session, "action": 3}).status_code == 409
    client.post("/env/reset", json={"episode_id": "train/6"})
    full = client.post("/env/reset", json={"episode_id": "train/7"})
    assert full.status_code == 429 and "close" in full.json()["error"]
    no_token = httpx.post(str(client.base_url) + "/env/episodes")
    assert no_token.status_code == 401

"""deepsearchqa: the hub split on a local stand-in, search backends, the judge, and ReAct with real
searches."""

# No `from __future__ import annotations`: FastAPI must see the stand-in handler's Request
# annotation.

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from autorl.envs.base import EnvError
from autorl.task_code.deepsearchqa.judge import LOCAL_JUDGES, judge_answers, open_judge
from autorl.task_code.deepsearchqa.search import Bm25Search, WebSearch
from autorl.tasks import (
    EvalContext,
    TaskData,
    build_task_data,
    eval_options,
    get_task,
    load_evaluator,
)

SPEC = get_task("deepsearchqa")
BUILD = {"train_size": 8, "eval_size": 6, "distractor_towns": 6}
EVAL = eval_options(
    SPEC, "fixture", {"judge_concurrency": 2}
)  # complete: what a hand-made context must pass


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> TaskData:
    return build_task_data(SPEC, "fixture", tmp_path_factory.mktemp("dsqa"), seed=0, options=BUILD)


def _rows(path: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_hub_split_is_the_references_100_200_after_shuffle_seed_42(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    hub = tmp_path / "hub"
    (hub / "data").mkdir(parents=True)
    (hub / "README.md").write_text(
        "---\nconfigs:\n- config_name: default\n  data_files:\n"
        "  - split: eval\n    path: data/eval-*\n---\n"
    )
    problems = [f"Stand-in question number {i}?" for i in range(320)]
    pq.write_table(
        pa.table(
            {
                "problem": problems,
                "answer": [f"answer {i}" for i in range(320)],
                "answer_type": ["Set Answer" if i % 3 else "Single Answer" for i in range(320)],
            }
        ),
        hub / "data" / "eval-00000-of-00001.parquet",
    )
    built = build_task_data(
        SPEC,
        "hub",
        tmp_path / "cache",
        options={"train_size": 100, "eval_size": 200, "hub_path": str(hub)},
    )
    train, evals = (
        _rows(built.public_dir / "questions.jsonl"),
        _rows(built.private_dir / "questions.jsonl"),
    )
    shuffled = datasets.load_dataset(str(hub), split="eval").shuffle(seed=42)
    assert [r["problem"] for r in train] == shuffled["problem"][:100]
    assert [r["problem"] for r in evals] == shuffled["problem"][100:300]
    assert evals[0]["episode_id"] == "eval/0" and train[99]["episode_id"] == "train/99"
    assert not {r["problem"] for r in train} & {r["problem"] for r in evals}


def test_fixture_data_is_unchanged(data: TaskData) -> None:
    # The digest of the version-3 fixture build (hyphenated two-syllable names): the generator's
    # output is pinned.
    assert data.digest == "a2b7cd2d5cd29208486d6853623ca5f8f06838ef364e0b3f1865b05437b1a0ea"


def test_bm25_search_finds_the_town(data: TaskData) -> None:
    question = _rows(data.private_dir / "questions.jsonl")[0]
    town = question["problem"].rsplit("town of ", 1)[1].rstrip("?")
    result = Bm25Search(data.private_dir / "corpus.jsonl", 2).search(question["problem"])
    assert result.startswith(f"{town}: The town of {town}")
    assert Bm25Search(data.private_dir / "corpus.jsonl", 3).search("the of") == "No results found."


@pytest.fixture()
def serp() -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A local stand-in of SerpAPI's search endpoint that records the requests it gets."""
    import uvicorn
    from fastapi import FastAPI, Request

    seen: list[dict[str, str]] = []
    app = FastAPI()

    @app.get("/search")
    def search(request: Request) -> dict[str, object]:
        seen.append(dict(request.query_params))
        if request.query_params.get("api_key") != "secret":
            return {"error": "Invalid API key"}
        return {
            "organic_results": [
                {"snippet": "first hit"},
                {"title": "no snippet"},
                {"snippet": "second hit"},
                {"snippet": "fourth"},
            ]
        }

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/search", seen
    server.should_exit = True
    thread.join(10)


def test_web_search_client_against_a_local_stand_in(
    serp: tuple[str, list[dict[str, str]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, seen = serp
    monkeypatch.setenv("TEST_SERP_KEY", "secret")
    client = WebSearch(url, "TEST_SERP_KEY", num_results=3, timeout_s=10)
    assert client.search("varnholm rivers") == "first hit | second hit"
    assert seen[-1] == {"q": "varnholm rivers", "num": "3", "api_key": "secret", "engine": "google"}
    monkeypatch.setenv("TEST_SERP_KEY", "wrong")
    assert WebSearch(url, "TEST_SERP_KEY", 3, 10).search("x") == "No results found."
    assert (
        WebSearch("http://127.0.0.1:9/none", "TEST_SERP_KEY", 3, timeout_s=2)
        .search("x")
        .startswith("Search error:")
    )
    monkeypatch.delenv("TEST_SERP_KEY")
    with pytest.raises(EnvError, match="TEST_SERP_KEY"):
        WebSearch(url, "TEST_SERP_KEY", 3, 10)


def test_search_settings_are_all_required_per_backend(data: TaskData) -> None:
    from autorl.envs.base import EnvError
    from autorl.task_code.deepsearchqa.search import make_search

    assert isinstance(make_search(EVAL["search"], data.private_dir), Bm25Search)
    with pytest.raises(
        EnvError, match="search backend 'bm25' lacks num_results; it takes backend, num_results"
    ):
        make_search({"backend": "bm25"}, data.private_dir)
    with pytest.raises(EnvError, match="unknown search backend 'google'; valid: bm25, web"):
        make_search({"backend": "google", "num_results": 2}, data.private_dir)


def test_judge_never_accepts_an_empty_answer_a_hedge_or_a_missing_set_item() -> None:
    with open_judge(
        {"judge_driver": None, "judge_server": "rules", "judge_params": {}, "judge_concurrency": 2},
        None,
    ) as judge:
        verdicts = judge_answers(
            judge,
            [
                ("Single Answer", "1742", ""),
                ("Single Answer", "1742", "in 1742"),
                ("Set Answer", "Ostra, Lindel", "Lindel and Ostra"),
                ("Set Answer", "Ostra, Lindel", "Ostra"),
                ("Single Answer", "salt", "salt wool amber glass timber copper silk"),
                ("Set Answer", "Ostra, Lindel", "Ostra, Lindel, Varn"),
            ],
        )
        assert verdicts == [False, True, True, False, False, False]
        assert judge.usage.requests == 5  # the empty answer was never sent


class _SearchThenAnswer:
    """Searches the question, then answers with the gold answer found in the observation's town
    document."""

    def __init__(self, rows: list[dict[str, str]]) -> None:
        self.gold = {r["problem"]: r["answer"] for r in rows}
        self.calls = 0

    def generate_text(
        self, prompts: list[str], *, max_new_tokens: int, stop: list[str] | None = None
    ) -> list[str]:
        self.calls += 1
        assert stop is not None and "\nAction:" not in stop
        out = []
        for prompt in prompts:
            question = prompt.split("\nQuestion: ", 1)[1].split("\n", 1)[0]
            if "\nObservation: " not in prompt:
                out.append(f" I should search.\nAction: search[{question}]\nObservation: (made up)")
            else:
                assert (
                    self.gold[question].split(",")[0] in prompt
                )  # the real search result is in the prompt
                out.append(f" Found it.\nAction: answer[{self.gold[question]}]")
        return out


def test_react_searches_for_real_and_is_judged(data: TaskData) -> None:
    rows = _rows(data.private_dir / "questions.jsonl")
    engine = _SearchThenAnswer(rows)
    result = load_evaluator(SPEC)(engine, EvalContext(data.private_dir, options=EVAL))
    assert result.score == 100.0 and result.num_examples == 6 and engine.calls == 2
    assert result.details["searches"] == 6 and result.details["answered"] == 6


class _NeverAnswers:
    def generate_text(
        self, prompts: list[str], *, max_new_tokens: int, stop: list[str] | None = None
    ) -> list[str]:
        return ["Action: search[]" if i % 2 else "" for i, _ in enumerate(prompts)]


def test_unanswered_questions_are_incorrect(data: TaskData) -> None:
    result = load_evaluator(SPEC)(
        _NeverAnswers(), EvalContext(data.private_dir, options=EVAL | {"max_steps": 2})
    )
    assert result.score == 0.0 and result.details["answered"] == 0


def test_bad_judge_options_fail_before_generating(data: TaskData) -> None:
    from autorl.errors import ConfigError

    with pytest.raises(ConfigError, match="exactly one of"):
        load_evaluator(SPEC)(
            _NeverAnswers(), EvalContext(data.private_dir, options=EVAL | {"judge_server": None})
        )
    with pytest.raises(ConfigError, match="Did you mean: rules"):
        load_evaluator(SPEC)(
            _NeverAnswers(), EvalContext(data.private_dir, options=EVAL | {"judge_server": "rule"})
        )
    assert LOCAL_JUDGES.names() == ["rules"]

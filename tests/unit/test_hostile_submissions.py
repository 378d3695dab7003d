"""Hostile submissions through the real grading API: every file of a submission is the agent's.

Each row of :data:`HOSTILE` names the channel (the submitted file an attack goes through) and the
invariant the grader keeps (docs/threat-model.md has the same rows). The cell is the real one of
:mod:`tests.helpers.grading_cell` (uvicorn, :class:`SubmissionService`, a record store) whose scorer
is the real in-process grader with a warm HF engine, the cell's base for adapters and a short
chat-template time limit. Decoding (a submission's ``generation_config.json``) and the render child
are tested on the engine itself in ``test_hostile_decoding.py``, as the API scores a weights hash
once.
"""

from __future__ import annotations

import json
import resource
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from autorl.engine.warm import WarmEngines
from autorl.grading.scoring import ScoreOutcome, score_model
from autorl.tasks import build_task_data, get_task
from tests.helpers.grading_cell import TARGET, LiveGradingCell, save_variant, start_grading_cell
from tests.helpers.hostile_templates import (
    HUGE,
    LIMITS,
    LOOPING,
    RAISING,
    predictions,
    predictions_of,
)

TOKEN = "hostile-token"
MARKER = "remote_code_ran"  # a file the submitted Python would write, were it ever imported
EVIL_PY = (
    "import pathlib\n"
    f"pathlib.Path(__file__).with_name({MARKER!r}).write_text('ran')\n"
    "from transformers import PreTrainedTokenizerFast as EvilTokenizer\n"
    "from transformers import Qwen3Config as EvilConfig, Qwen3ForCausalLM as EvilModel\n"
)


class HostileScorer:
    """The real grader: :func:`score_model`, a warm engine, the cell's base and :data:`LIMITS`."""

    def __init__(self, cache_dir: Path, base_dir: Path) -> None:
        self.cache_dir = cache_dir
        self.base_dir = base_dir
        self.warm = WarmEngines({"hf": {"render_limits": LIMITS}})
        self.calls = 0

    def __call__(self, model_dir: Path, digest: str) -> tuple[ScoreOutcome, bool]:
        """Score ``model_dir`` on the cell's GSM8K fixture target."""
        self.calls += 1
        with self.warm.lock:
            return score_model(
                TARGET,
                model_dir,
                self.cache_dir,
                batch_size=16,
                base_dir=self.base_dir,
                warm=self.warm,
            ), False


@dataclass
class Cell:
    live: LiveGradingCell
    client: httpx.Client
    tiny: Path
    needles: list[str]
    seeds: Iterator[int]

    @property
    def output(self) -> Path:
        return self.live.workspace / "output"

    def variant(self, name: str) -> Path:
        """A copy of the base with weights of its own (the API scores each weights hash once)."""
        return save_variant(self.tiny, self.output / name, noise_seed=next(self.seeds))

    def submit(self, name: str) -> httpx.Response:
        return self.client.post("/submit", json={"model_path": f"output/{name}"})


@pytest.fixture(scope="module")
def cell(
    tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path, cache_dir: Path
) -> Iterator[Cell]:
    root = tmp_path_factory.mktemp("hostile-cell")
    live = start_grading_cell(
        root,
        tiny_model_dir,
        cache_dir,
        token=TOKEN,
        cell_id="hostile",
        max_queued=4,
        max_body_bytes=4096,
        submit_timeout_s=300.0,
        budget_s=3600,
    )
    scorer = HostileScorer(cache_dir, tiny_model_dir)
    live.service.scorer = scorer
    data = build_task_data(
        get_task("gsm8k"),
        TARGET.source,
        cache_dir / "tasks",
        seed=TARGET.seed,
        options=TARGET.build_options,
    )
    rows = [
        json.loads(line)
        for line in (data.private_dir / "eval.jsonl").read_text().splitlines()
        if line.strip()
    ]
    # Distinctive pieces of every private question and gold answer: none may reach the agent.
    needles = [row["question"][:40] for row in rows] + [
        row["answer"].split("####")[0][:40] for row in rows
    ]
    client = httpx.Client(
        base_url=live.server.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=300
    )
    try:
        yield Cell(live, client, tiny_model_dir, needles, iter(range(1000, 2000)))
    finally:
        client.close()
        scorer.warm.close()
        live.close()


# ---- the table: channel -> what the agent does -> the invariant ------------------------------


def _template_file(text: str) -> Callable[[Path], None]:
    def build(model: Path) -> None:
        (model / "chat_template.jinja").write_text(text)

    return build


def _template_in_tokenizer_config(text: str) -> Callable[[Path], None]:
    def build(model: Path) -> None:
        (model / "chat_template.jinja").unlink()
        config = json.loads((model / "tokenizer_config.json").read_text())
        (model / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": text}))

    return build


def _remote_tokenizer(model: Path) -> None:
    (model / "evil.py").write_text(EVIL_PY)
    config = json.loads((model / "tokenizer_config.json").read_text())
    config |= {
        "tokenizer_class": "EvilTokenizer",
        "auto_map": {"AutoTokenizer": ["evil.EvilTokenizer", None]},
    }
    (model / "tokenizer_config.json").write_text(json.dumps(config))


def _unknown_tokenizer_class(model: Path) -> None:
    config = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(
        json.dumps({**config, "tokenizer_class": "EvilTokenizer"})
    )


def _remote_model(model: Path) -> None:
    (model / "evil.py").write_text(EVIL_PY)
    config = json.loads((model / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}
    (model / "config.json").write_text(json.dumps(config))


def _huge_header(model: Path) -> None:
    # The 8-byte header length says 10^12 bytes; the file is 9 bytes.
    (model / "model.safetensors").write_bytes((10**12).to_bytes(8, "little") + b"{")


def _sparse(name: str, size: int) -> Callable[[Path], None]:
    def build(model: Path) -> None:
        with (model / name).open("ab") as handle:
            handle.truncate(size)  # a hole: no disk used

    return build


def _weights_link_outside(model: Path) -> None:
    outside = (
        model.parents[2] / "elsewhere"
    )  # beside the workspace: a host path the agent must not learn
    outside.mkdir(exist_ok=True)
    shutil.move(model / "model.safetensors", outside / f"{model.name}.safetensors")
    (model / "model.safetensors").symlink_to(outside / f"{model.name}.safetensors")


@dataclass(frozen=True)
class Hostile:
    """One hostile submission: the file it goes through, how it is made, what the grader says."""

    name: str
    channel: str
    build: Callable[[Path], None]
    status_code: int
    status: str | None = None  # the submission's final status (for a 200 answer)
    error_class: str | None = None
    file: str | None = None
    fragment: str | None = None  # in the error the agent reads


HOSTILE = [
    Hostile(
        "raising template",
        "chat_template.jinja",
        _template_file(RAISING),
        200,
        "invalid",
        "chat_template",
        "chat_template.jinja",
    ),
    Hostile(
        "raising template in tokenizer_config",
        "tokenizer_config.json",
        _template_in_tokenizer_config(RAISING),
        200,
        "invalid",
        "chat_template",
        "tokenizer_config.json",
    ),
    Hostile(
        "looping template",
        "chat_template.jinja",
        _template_file(LOOPING),
        200,
        "invalid",
        "chat_template",
        "chat_template.jinja",
    ),
    Hostile(
        "huge-output template",
        "chat_template.jinja",
        _template_file(HUGE),
        200,
        "invalid",
        "chat_template",
        "chat_template.jinja",
    ),
    Hostile(
        "tokenizer auto_map to remote code",
        "tokenizer_config.json",
        _remote_tokenizer,
        422,
        fragment="auto_map",
    ),
    Hostile(
        "unknown tokenizer_class", "tokenizer_config.json", _unknown_tokenizer_class, 200, "scored"
    ),
    Hostile(
        "config auto_map to remote code", "config.json", _remote_model, 422, fragment="auto_map"
    ),
    Hostile(
        "safetensors header of 10^12 bytes",
        "model.safetensors",
        _huge_header,
        200,
        "invalid",
        "corrupt_weights",
        "model.safetensors",
    ),
    Hostile(
        "sparse 100 GB weights",
        "model.safetensors",
        _sparse("model.safetensors", 100 << 30),
        422,
        fragment="model.safetensors",
    ),
    Hostile(
        "sparse 1 GiB extra file",
        "optimizer.pt",
        _sparse("optimizer.pt", 1 << 30),
        422,
        fragment="optimizer.pt is a sparse file",
    ),
    Hostile(
        "weights linked outside the folder",
        "model.safetensors",
        _weights_link_outside,
        400,
        fragment="a path outside it",
    ),
]


def _no_leak(cell: Cell, text: str) -> None:
    """No private eval text and no host path of the cell in an answer."""
    leaked = [n for n in cell.needles if n in text]
    assert not leaked, f"eval text in an answer: {leaked[:2]}"
    for host in {
        str(cell.live.workspace),
        str(cell.live.workspace.resolve()),
        str(cell.live.service.snapshot_root),
    }:
        assert host not in text, f"host path {host} in an answer: {text[:300]}"


@pytest.mark.parametrize("case", HOSTILE, ids=[c.name for c in HOSTILE])
def test_hostile_submission_keeps_its_invariant(cell: Cell, case: Hostile) -> None:
    name = case.name.replace(" ", "_").replace("^", "")
    model = cell.variant(name)
    case.build(model)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    response = cell.submit(name)
    elapsed = time.monotonic() - started
    _no_leak(cell, response.text)
    assert response.status_code == case.status_code, response.text
    body = response.json()
    if case.fragment is not None:
        assert case.fragment in body["error"], body
    if case.status is not None:
        assert body["status"] == case.status, body
    if case.error_class is not None:
        assert (body["error_class"], body["file"]) == (case.error_class, case.file), body
    if case.status == "invalid":
        assert "details" not in body or not any(
            isinstance(v, str) for v in body["details"].values()
        )
        listed = cell.client.get("/submissions")
        one = cell.client.get(f"/submissions/{body['submission_id']}")
        _no_leak(cell, listed.text + one.text)
    assert not list(cell.output.rglob(MARKER)), "submitted Python code ran"
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) < (1 << 20), (
        "over 1 GiB allocated"
    )
    if case.error_class == "chat_template":
        assert elapsed < LIMITS.call_timeout_s + 60, f"took {elapsed:.0f} s"


def test_a_raising_template_keeps_the_prompts_in_the_records_only(cell: Cell) -> None:
    """The channel is real: the template's error holds the eval questions, which the record
    keeps and the agent never sees."""
    model = cell.variant("raising_recorded")
    _template_file(RAISING)(model)
    body = cell.submit("raising_recorded").json()
    assert body["status"] == "invalid" and body["error_class"] == "chat_template"
    record = next(
        r
        for r in cell.live.store.list_submissions("hostile")
        if r.submission_id == body["submission_id"]
    )
    assert record.status == "invalid" and record.error is not None
    assert any(n in record.error for n in cell.needles), record.error[:300]
    assert json.loads(record.details_json)["error_class"] == "chat_template"


def test_the_grader_serves_the_next_submission_after_a_looping_template(cell: Cell) -> None:
    model = cell.variant("loop_then")
    _template_file(LOOPING)(model)
    started = time.monotonic()
    assert cell.submit("loop_then").json()["error_class"] == "chat_template"
    assert time.monotonic() - started < LIMITS.call_timeout_s + 60
    cell.variant("after_loop")
    after = cell.submit("after_loop").json()
    assert after["status"] == "scored" and after["score"] is not None, after
    _no_leak(cell, json.dumps(after))


def test_a_scored_answer_carries_no_eval_text(cell: Cell) -> None:
    cell.variant("plain")
    response = cell.submit("plain")
    body = response.json()
    assert body["status"] == "scored" and "samples" not in body["details"]
    _no_leak(cell, response.text)


def test_symlinks_out_of_output_are_400_without_host_paths(cell: Cell) -> None:
    (cell.live.workspace / "notes").mkdir()
    (cell.output / "to_notes").symlink_to(cell.live.workspace / "notes")
    (cell.output / "to_base").symlink_to(
        cell.live.workspace / "models" / "tiny"
    )  # itself a link out
    (cell.output / "to_etc").symlink_to("/etc")
    outside = "(to a path outside the workspace)"
    for name, shown in (("to_notes", "(to notes)"), ("to_base", outside), ("to_etc", outside)):
        response = cell.submit(name)
        assert response.status_code == 400 and shown in response.json()["error"], response.text
        _no_leak(cell, response.text)


@pytest.mark.parametrize("named_base", ["/etc", "Qwen/Qwen2.5-0.5B", "../../models/other"])
def test_an_adapter_naming_another_base_is_scored_on_the_cells_base(
    cell: Cell, tmp_path: Path, named_base: str, tiny_model_dir: Path, cache_dir: Path
) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    name = "adapter_" + named_base.strip("/.").replace("/", "_")
    folder = cell.output / name
    torch.manual_seed(next(cell.seeds))  # weights of its own: a hash the cell has not scored
    lora = LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir), lora).save_pretrained(
        folder
    )
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    expected = score_model(TARGET, folder, cache_dir, batch_size=16, base_dir=tiny_model_dir)
    (folder / "adapter_config.json").write_text(
        json.dumps({**config, "base_model_name_or_path": named_base})
    )
    body = cell.submit(name).json()
    assert body["status"] == "scored" and body["score"] == expected.score, body
    record = next(
        r
        for r in cell.live.store.list_submissions("hostile")
        if r.submission_id == body["submission_id"]
    )
    assert predictions_of(json.loads(record.details_json)) == predictions(
        expected
    )  # the same texts


# ---- decoding: the task's, whatever generation_config.json says ---------------------------------


class _FailingEnvs:
    """An env client whose environment fails as real ones do: naming its data and its server."""

    def reset(self, specs: list[Any]) -> list[Any]:
        from autorl.envs.base import EnvError

        raise EnvError(
            "ALFWorld game file /srv/cache/tasks/alfworld/v5/private/g7.tw is missing "
            "(server http://10.0.0.7:3000/reset)"
        )

    def step(self, moves: list[Any]) -> list[Any]:
        return []

    def close(self, handles: list[str]) -> None:
        return None


def test_env_errors_reach_the_agent_without_host_paths_or_urls(
    tmp_path: Path, tiny_model_dir: Path, cache_dir: Path
) -> None:
    from autorl.envs.base import EnvSource
    from autorl.envs.training import TrainingEnvs

    public = tmp_path / "public"
    public.mkdir()
    (public / "train.jsonl").write_text(json.dumps({"episode_id": "train/0"}) + "\n")
    source = EnvSource("alfworld", "fixture")
    envs = TrainingEnvs("alfworld", source, public, _FailingEnvs)  # type: ignore[arg-type]
    live = start_grading_cell(
        tmp_path / "cell",
        tiny_model_dir,
        cache_dir,
        token=TOKEN,
        cell_id="env",
        max_queued=1,
        max_body_bytes=1024,
        submit_timeout_s=30.0,
        budget_s=600,
        envs=envs,
    )
    try:
        response = httpx.post(
            f"{live.server.url}/env/reset",
            json={"episode_id": "train/0"},
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=30,
        )
        assert response.status_code == 409, response.text
        error = response.json()["error"]
        assert "/srv/cache" not in error and "10.0.0.7" not in error and "<path>" in error, error
    finally:
        live.close()

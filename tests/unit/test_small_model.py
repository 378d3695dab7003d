"""`small`: built offline and deterministically, its tokenizer trained on public text only."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from autorl.integrity.eval_index import json_strings
from autorl.models.small import SMALL_BUILD_VERSION, SMALL_CONFIG, corpus_digest, ensure_small_model
from autorl.models.small_corpus import CORPUS_TASKS, public_corpus
from autorl.task_spec import get_task
from autorl.tasks import build_task_data


def _weights_digest(folder: Path) -> str:
    return hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()


def test_small_model_is_deterministic_and_vllm_shaped(tmp_path: Path, cache_dir: Path) -> None:
    from transformers import AutoConfig, AutoTokenizer

    first = ensure_small_model(cache_dir)
    assert ensure_small_model(cache_dir) == first  # cached: the second call reuses the folder
    other = ensure_small_model(tmp_path)  # a fresh cache: fixtures and model built again
    assert other.name == first.name and _weights_digest(other) == _weights_digest(first)
    config = AutoConfig.from_pretrained(first)
    assert (
        config.head_dim == 64 and config.hidden_size == SMALL_CONFIG.hidden_size
    )  # vLLM needs head_dim 64
    tokenizer = AutoTokenizer.from_pretrained(first)
    # The tasks' words are whole tokens (tiny's tokenizer spells "sinkbasin" in five pieces).
    assert tokenizer.tokenize(" sinkbasin") == ["Ġsinkbasin"]
    assert len(tokenizer) <= SMALL_CONFIG.vocab_size + 4
    # A generation prompt's tokens begin every training sequence that continues it: "\n" is never
    # merged with the indentation after it, so SFT on chats teaches what generation then reads.
    chat = [
        {"role": "user", "content": "def f(x):\n"},
        {"role": "assistant", "content": "    return x + 1\n"},
    ]
    prompt = tokenizer.apply_chat_template(chat[:1], tokenize=False, add_generation_prompt=True)
    full = tokenizer.apply_chat_template(chat, tokenize=False)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    assert tokenizer(full, add_special_tokens=False)["input_ids"][: len(prompt_ids)] == prompt_ids


def test_tokenizer_corpus_holds_no_private_split_text(cache_dir: Path) -> None:
    corpus = "\n".join(public_corpus(cache_dir))
    checked = 0
    for task_id in CORPUS_TASKS:
        data = build_task_data(get_task(task_id), "fixture", cache_dir / "tasks", seed=0)
        for path in sorted(data.private_dir.rglob("*.jsonl")):
            for line in path.read_text(encoding="utf-8").splitlines():
                for text in json_strings(json.loads(line)):
                    if len(text) >= 40:
                        checked += 1
                        assert text not in corpus, (
                            f"{task_id} private text in the tokenizer corpus: {text[:80]!r}"
                        )
    assert checked > 100


# What `small`'s tokenizer trains on, pinned as the fixtures' digests are: a change to what a task's
# prompt or public data says fails here; make it deliberately by bumping SMALL_BUILD_VERSION and
# pinning the new digest (cells recorded on the old build then run again on resume).
PINNED_SMALL_BUILD = (3, "7c1738f7fa64")


def test_tokenizer_corpus_is_pinned(cache_dir: Path) -> None:
    assert (SMALL_BUILD_VERSION, corpus_digest(public_corpus(cache_dir))) == PINNED_SMALL_BUILD


def test_tokenizer_corpus_is_rendered_text_not_source_code(cache_dir: Path) -> None:
    """Reformatting a task's code must not build a new `small`: no source file is in the corpus, but
    what the evaluators render from it is (a prompt head, an in-context example, an observation)."""
    texts = public_corpus(cache_dir)
    corpus = "\n".join(texts)
    for task_id in CORPUS_TASKS:
        folder = get_task(task_id).folder
        for source in sorted(folder.rglob("*.py")):
            assert source.read_text(encoding="utf-8") not in texts, source
    assert "Let's think step by step\nAnswer:" in corpus  # gsm8k's rendered question turn
    assert (
        "Here is the task.\nYou are in the middle of a room." in corpus
    )  # an ALFWorld first prompt
    assert "Available actions:\n  search[<your query>]" in corpus  # a WebShop first page

"""Data builder for alpacaeval: public/train.jsonl for the agent, private/eval.jsonl (+ LC prior) for the grader.

Train rows: ``instruction``, ``input``, ``output`` (Alpaca's fields), ``question`` (= instruction,
plus ``"\\n\\n" + input`` when there is an input) and ``answer`` (= output).
Eval rows: ``question`` (the instruction the model answers), ``reference`` (the baseline output the
judge compares against), ``generator`` (who wrote the reference) and ``dataset``.

Sources:
    hub: train = the first ``train_size`` (2,000) rows of ``tatsu-lab/alpaca``; eval = the 805
        AlpacaEval 2.0 instructions with GPT-4 Turbo's reference outputs
        (``alpaca_eval_gpt4_baseline.json`` of ``tatsu-lab/alpaca_eval``), plus that repo's
        ``df_gamed.csv`` (instruction difficulties, for the LC GLM) as ``private/lc_prior.csv``.
    fixture: generated instructions from :mod:`autorl.judge.rules` (list multiples, count, spell,
        ...); train answers list exactly the required items, eval references are deliberately
        partial, so a perfect answer beats the reference and an empty one loses to it.
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from autorl.judge.rules import all_instructions, ideal_answer, partial_answer

TRAIN_PATH = "tatsu-lab/alpaca"
EVAL_REPO = "tatsu-lab/alpaca_eval"
EVAL_FILE = "alpaca_eval_gpt4_baseline.json"
PRIOR_FILE = "df_gamed.csv"
TRAIN_FIELDS = ("instruction", "input", "output", "question", "answer")
EVAL_FIELDS = ("question", "reference", "generator", "dataset")


def alpaca_row(instruction: str, input_text: str, output: str) -> dict[str, str]:
    """A train row in the reference's format.

    >>> alpaca_row("Add the numbers.", "2 and 3", "5")["question"]
    'Add the numbers.\\n\\n2 and 3'
    """
    question = f"{instruction}\n\n{input_text}" if input_text else instruction
    return {"instruction": instruction, "input": input_text, "output": output, "question": question, "answer": output}


def _write_jsonl(path: Path, rows: Iterable[dict[str, Any]], fields: tuple[str, ...]) -> None:
    with path.open("w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            fh.write(json.dumps({k: row[k] for k in fields}, ensure_ascii=False) + "\n")


def _build_fixture(public: Path, private: Path, seed: int, options: dict[str, Any]) -> None:
    train_size = int(options.get("train_size", 600))
    eval_size = int(options.get("eval_size", 60))
    pool = all_instructions()
    if train_size + eval_size > len(pool):
        raise ValueError(f"the fixture has {len(pool)} instructions; train_size + eval_size = {train_size + eval_size}")
    rng = random.Random(seed)
    rng.shuffle(pool)
    evals = [{"question": q, "reference": partial_answer(q, rng), "generator": "fixture_reference",
              "dataset": "fixture"} for q in pool[:eval_size]]
    train = []
    for question in pool[eval_size: eval_size + train_size]:
        instruction, _, input_text = question.partition("\n\n")
        train.append(alpaca_row(instruction, input_text, ideal_answer(question)))
    public_text = "\n".join(r["question"] + "\n" + r["answer"] for r in train)
    for row in evals:
        if row["question"] in public_text or row["reference"] in public_text:
            raise ValueError(f"fixture bug: eval item {row['question']!r} leaks into train")
    _write_jsonl(private / "eval.jsonl", evals, EVAL_FIELDS)
    _write_jsonl(public / "train.jsonl", train, TRAIN_FIELDS)


def _hub_file(repo_or_dir: str, filename: str) -> Path:
    """``filename`` from a local folder, or downloaded from the dataset repo on the model hub."""
    local = Path(repo_or_dir)
    if local.is_dir():
        path = local / filename
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found (a local stand-in of {EVAL_REPO} needs {filename})")
        return path
    from huggingface_hub import hf_hub_download

    return Path(hf_hub_download(repo_id=repo_or_dir, filename=filename, repo_type="dataset"))


def _build_hub(public: Path, private: Path, options: dict[str, Any]) -> None:
    import datasets  # heavy; only the hub source needs it

    train_size = int(options.get("train_size", 2000))
    eval_repo = str(options.get("eval_path", EVAL_REPO))
    data = datasets.load_dataset(str(options.get("train_path", TRAIN_PATH)), split="train")
    data = data.select(range(min(train_size, len(data))))
    _write_jsonl(public / "train.jsonl",
                 (alpaca_row(r["instruction"], r["input"] or "", r["output"]) for r in data), TRAIN_FIELDS)

    items = json.loads(_hub_file(eval_repo, EVAL_FILE).read_text(encoding="utf-8"))
    if not isinstance(items, list) or not items or not all("instruction" in i and "output" in i for i in items):
        raise ValueError(f"{EVAL_FILE} of {eval_repo} is not a list of {{instruction, output, ...}} objects")
    _write_jsonl(private / "eval.jsonl", ({"question": i["instruction"], "reference": i["output"],
                                           "generator": i.get("generator", ""), "dataset": i.get("dataset", "")}
                                          for i in items), EVAL_FIELDS)
    if options.get("lc_prior", True):
        shutil.copyfile(_hub_file(eval_repo, PRIOR_FILE), private / "lc_prior.csv")


_BUILDERS: dict[str, Callable[[Path, Path, int, dict[str, Any]], None]] = {
    "fixture": _build_fixture,
    "hub": lambda public, private, seed, options: _build_hub(public, private, options),
}


def build(source: str, public: Path, private: Path, *, seed: int, options: dict[str, Any]) -> None:
    """Write ``public/train.jsonl`` and ``private/eval.jsonl`` (and ``private/lc_prior.csv`` for the hub).

    Args:
        source: ``"fixture"`` or ``"hub"``.
        public: Empty folder for what the agent may see.
        private: Empty folder for what only the evaluator reads.
        seed: Seed of the fixture (the hub data is fixed).
        options: fixture: ``train_size`` (600), ``eval_size`` (60). hub: ``train_size`` (2000),
            ``train_path`` (``tatsu-lab/alpaca`` or a local folder with its layout), ``eval_path``
            (``tatsu-lab/alpaca_eval`` or a local folder holding its json and csv files),
            ``lc_prior`` (true: fetch ``df_gamed.csv`` for the ``length_controlled_v1`` GLM).

    Raises:
        ValueError: Unknown source, impossible sizes or malformed hub files.
    """
    if source not in _BUILDERS:
        raise ValueError(f"unknown source '{source}'; valid: {', '.join(_BUILDERS)}")
    _BUILDERS[source](Path(public), Path(private), seed, options)

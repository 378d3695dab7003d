"""Data builders for alpacaeval: public/train.jsonl for the agent, private/eval.jsonl (+ LC prior)
for the grader.

Each source's builder is named in ``task.yaml`` (``sources``).

Train rows: ``instruction``, ``input``, ``output`` (Alpaca's fields), ``question`` (= instruction,
plus ``"\\n\\n" + input`` when there is an input) and ``answer`` (= output).
Eval rows: ``question`` (the instruction the model answers), ``reference`` (the baseline output the
judge compares against), ``generator`` (who wrote the reference) and ``dataset``.

Sources:
    hub: train = the first ``train_size`` (2,000) rows of ``tatsu-lab/alpaca``; eval = the 805
        AlpacaEval 2.0 instructions with GPT-4 Turbo's reference outputs
        (``alpaca_eval_gpt4_baseline.json`` of ``tatsu-lab/alpaca_eval``), plus that repo's
        ``df_gamed.csv`` (instruction difficulties, for the LC GLM) as ``private/lc_prior.csv``.
    fixture: generated instructions from :mod:`.fixture` (list multiples, count, spell,
        ...); train answers list exactly the required items, eval references are deliberately
        partial, so a perfect answer beats the reference and an empty one loses to it.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .fixture import fixture_split
from .options import FixtureBuild, HubBuild

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
    return {
        "instruction": instruction,
        "input": input_text,
        "output": output,
        "question": question,
        "answer": output,
    }


def _write_jsonl(path: Path, rows: Iterable[dict[str, Any]], fields: tuple[str, ...]) -> None:
    with path.open("w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            fh.write(json.dumps({k: row[k] for k in fields}, ensure_ascii=False) + "\n")


def build_fixture(public: Path, private: Path, *, seed: int, options: FixtureBuild) -> None:
    """Write generated instructions (:func:`.fixture.fixture_split`): ``options`` ``train_size`` /
    ``eval_size``.

    Raises:
        ValueError: More instructions asked for than the fixture holds.
    """
    evals, train_pairs = fixture_split(seed, options.train_size, options.eval_size)
    train = []
    for question, answer in train_pairs:
        instruction, _, input_text = question.partition("\n\n")
        train.append(alpaca_row(instruction, input_text, answer))
    _write_jsonl(private / "eval.jsonl", evals, EVAL_FIELDS)
    _write_jsonl(public / "train.jsonl", train, TRAIN_FIELDS)


def _hub_file(repo_or_dir: str, filename: str) -> Path:
    """``filename`` from a local folder, or downloaded from the dataset repo on the model hub."""
    local = Path(repo_or_dir)
    if local.is_dir():
        path = local / filename
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} not found (a local stand-in of the eval_path repo needs {filename})"
            )
        return path
    from huggingface_hub import hf_hub_download

    return Path(hf_hub_download(repo_id=repo_or_dir, filename=filename, repo_type="dataset"))


def build_hub(public: Path, private: Path, *, seed: int, options: HubBuild) -> None:
    """Write the hub data (the seed is unused: it is fixed).

    Args:
        public: Empty folder for what the agent may see (``train.jsonl``).
        private: Empty folder for what only the evaluator reads (``eval.jsonl``, ``lc_prior.csv``).
        seed: Unused.
        options: ``train_size``, ``train_path`` (``tatsu-lab/alpaca`` or a local folder with its
            layout), ``eval_path`` (``tatsu-lab/alpaca_eval`` or a local folder holding its json and
            csv files), ``lc_prior`` (true: fetch ``df_gamed.csv`` for the ``length_controlled_v1``
            GLM).

    Raises:
        ValueError: Malformed hub files.
        FileNotFoundError: A local stand-in lacks a file.
    """
    import datasets  # heavy; only the hub source needs it

    train_size, eval_repo = options.train_size, options.eval_path
    data = datasets.load_dataset(options.train_path, split="train")
    data = data.select(range(min(train_size, len(data))))
    _write_jsonl(
        public / "train.jsonl",
        (alpaca_row(r["instruction"], r["input"] or "", r["output"]) for r in data),
        TRAIN_FIELDS,
    )

    items = json.loads(_hub_file(eval_repo, EVAL_FILE).read_text(encoding="utf-8"))
    if (
        not isinstance(items, list)
        or not items
        or not all("instruction" in i and "output" in i for i in items)
    ):
        raise ValueError(
            f"{EVAL_FILE} of {eval_repo} is not a list of {{instruction, output, ...}} objects"
        )
    _write_jsonl(
        private / "eval.jsonl",
        (
            {
                "question": i["instruction"],
                "reference": i["output"],
                "generator": i.get("generator", ""),
                "dataset": i.get("dataset", ""),
            }
            for i in items
        ),
        EVAL_FIELDS,
    )
    if options.lc_prior:
        shutil.copyfile(_hub_file(eval_repo, PRIOR_FILE), private / "lc_prior.csv")

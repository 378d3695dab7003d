"""Protocol parity of the interactive tasks (alfworld, webshop, deepsearchqa) with the reference
benchmark.

- prompts: compared with the reference's own source, the pinned rdagent 1.0.0 wheel (``pip
download``ed
  into the test cache once; ``AUTORL_REFERENCE_WHEEL`` names a local copy instead).
- alfworld: the reset text is joined as the reference joins it.
- webshop: the ``textenv`` backend plays WebShop's text env as the reference made it.
- deepsearchqa: empty or unparseable judge replies raise; a driver judge's tiny token cap is
refused.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import types
import zipfile
from pathlib import Path
from typing import Any

import pytest

from autorl.envs.base import EnvData, EnvError, EnvSource, EpisodeSpec
from autorl.errors import ConfigError
from autorl.tasks import eval_options, get_task

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = "rdagent==1.0.0"  # the reference benchmark's own files ship in this wheel
BENCH = "rdagent/scenarios/rl/autorl_bench/benchmarks"


def _reference_wheel() -> Path:
    """The reference's wheel: ``AUTORL_REFERENCE_WHEEL``, else downloaded from the package registry
    once."""
    if named := os.environ.get("AUTORL_REFERENCE_WHEEL"):
        return Path(named)
    folder = (
        Path(os.environ.get("AUTORL_CACHE_DIR", Path.home() / ".cache" / "autorl"))
        / "reference-wheel"
    )
    found = sorted(folder.glob("rdagent-1.0.0-*.whl"))
    if not found:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                REFERENCE,
                "-d",
                str(folder),
            ],
            check=True,
            timeout=600,
        )
        found = sorted(folder.glob("rdagent-1.0.0-*.whl"))
    return found[0]


def _reference_value(relpath: str, name: str, **variables: Any) -> Any:
    """The value of the first assignment to ``name`` in a reference file, evaluated with
    ``variables``
    (string constants and f-strings only; nothing of the reference is imported or run)."""
    with zipfile.ZipFile(_reference_wheel()) as wheel:
        source = wheel.read(f"{BENCH}/{relpath}").decode("utf-8")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return eval(compile(ast.Expression(node.value), relpath, "eval"), {}, variables)  # noqa: S307 - constants
    raise AssertionError(f"no assignment to {name} in the reference's {relpath}")


# ---- prompts, verbatim
# -------------------------------------------------------------------------------


def test_webshop_prompt_is_the_reference_text() -> None:
    from autorl.task_code.webshop.agent.protocol import render_messages

    first = "WebShop [SEP] Instruction: [SEP] i need a red mug [SEP] Search"
    system, user = render_messages(first, [], first, ["search[<your query>]"], 5)
    assert system["content"] == _reference_value("webshop/eval.py", "system_msg")
    head = _reference_value(
        "webshop/eval.py",
        "prompt",
        instruction="i need a red mug",
        available_actions="  search[<your query>]",
    )
    assert (
        user["content"] == head + f"\nObservation 1: {first}\nAction 1:"
    )  # the reference's tail, no history


def test_deepsearchqa_prompts_are_the_reference_text() -> None:
    from autorl.task_code.deepsearchqa.agent.protocol import SYSTEM_PROMPT, first_prompt
    from autorl.task_code.deepsearchqa.judge import SYSTEM, judge_messages

    assert _reference_value("deepsearchqa/eval.py", "REACT_SYSTEM_PROMPT") == SYSTEM_PROMPT
    conversation = _reference_value(
        "deepsearchqa/eval.py", "conversation", question="Who?", answer_type="Set Answer"
    )
    assert (
        first_prompt("Question: Who?\nAnswer type: Set Answer")
        == f"{SYSTEM_PROMPT}\n\n{conversation}"
    )
    chat = judge_messages("Set Answer", "a, b", "b and a")
    assert chat[0]["content"] == SYSTEM == "You are a strict answer evaluator."
    assert chat[1]["content"] == _reference_value(
        "deepsearchqa/eval.py",
        "judge_prompt",
        answer_type="Set Answer",
        gold="a, b",
        predicted="b and a",
    )


def test_rule_judge_reads_the_reference_judge_prompt() -> None:
    from autorl.task_code.deepsearchqa.judge import RuleQAJudge, judge_messages

    judge = RuleQAJudge()
    assert judge(judge_messages("Set Answer", "Ostra, Lindel", "Lindel and Ostra")) == "correct"
    assert judge(judge_messages("Single Answer", "1742", "1743")) == "incorrect"


# ---- alfworld: reset text
# -----------------------------------------------------------------------------


def test_alfworld_reset_text_joins_paragraphs_with_one_newline() -> None:
    from autorl.task_code.alfworld.env import clean_reset_text

    raw = (
        "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room.\n\n"
        "Your task is to: put a pen in desk."
    )
    # the reference's eval.py expression
    assert clean_reset_text(raw) == "\n".join(raw.split("\n\n")[1:])
    assert (
        clean_reset_text(raw)
        == "You are in the middle of a room.\nYour task is to: put a pen in desk."
    )


# ---- webshop: the text env backend
# --------------------------------------------------------------------


class _FakeTextEnv:
    """A stand-in for ``web_agent_site``'s ``WebAgentTextEnv`` that records how it is used."""

    made: list[dict[str, Any]] = []

    def __init__(self, **kwargs: Any) -> None:
        self.made.append(kwargs)
        self.server = kwargs.get("server") or object()
        self.page = "search"

    def reset(self, session: Any = None) -> tuple[str, None]:
        self.session = session
        return f"WebShop [SEP] Instruction: [SEP] goal {session} [SEP] Search", None

    def get_available_actions(self) -> dict[str, Any]:
        if self.page == "search":
            return {"has_search_bar": True, "clickables": ["search"]}
        return {"has_search_bar": False, "clickables": ["back to search", "b000001"]}

    def step(self, action: str) -> tuple[str, float, bool, None]:
        if action.startswith("search["):
            self.page = "results"
            return "Back to Search [SEP] b000001 [SEP] A mug", 0.0, False, None
        return "Thank you for shopping with us!", 0.75, True, None

    def close(self) -> None:
        pass


@pytest.fixture
def fake_webshop(monkeypatch: pytest.MonkeyPatch) -> type[_FakeTextEnv]:
    from autorl.task_code.webshop import text_env

    module = types.ModuleType("web_agent_site.envs.web_agent_text_env")
    module.WebAgentTextEnv = _FakeTextEnv  # type: ignore[attr-defined]
    for name in ("web_agent_site", "web_agent_site.envs"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "web_agent_site.envs.web_agent_text_env", module)
    monkeypatch.setattr(text_env, "_SHARED", {})
    monkeypatch.setattr(_FakeTextEnv, "made", [])
    return _FakeTextEnv


def _episode(episode_id: str) -> EpisodeSpec:
    spec = get_task("webshop")
    return EpisodeSpec(
        EnvSource("webshop", "hub", 0, {}, eval_options(spec, "hub", {"backend": "textenv"})),
        episode_id,
    )


def test_webshop_textenv_plays_the_reference_sessions(
    fake_webshop: type[_FakeTextEnv], tmp_path: Path
) -> None:
    from autorl.task_code.webshop.env import WebShopEnv

    data = EnvData(tmp_path, tmp_path)
    env, other = WebShopEnv(), WebShopEnv()
    first = env.reset(_episode("eval/7"), data)
    assert fake_webshop.made[0] == {
        "observation_mode": "text",
        "num_products": 1000,
    }  # human_goals unset
    assert env.backend.env.session == 7  # type: ignore[union-attr]
    assert "goal 7" in first.observation and first.admissible_actions == [
        "search[<your query>]",
        "click[search]",
    ]
    step = env.step("search[mug]")
    assert step.admissible_actions == ["click[back to search]", "click[b000001]"] and not step.done
    bought = env.step("click[b000001]")
    assert bought.done and bought.reward == 0.75 and bought.admissible_actions == []
    other.reset(_episode("train/1500"), data)
    assert fake_webshop.made[1]["server"] is env.backend.env.server  # type: ignore[union-attr]  # one catalogue
    with pytest.raises(EnvError, match="goal indices"):
        other.reset(_episode("eval/x"), data)


def test_webshop_textenv_without_webshop_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from autorl.task_code.webshop.env import WebShopEnv

    monkeypatch.setitem(sys.modules, "web_agent_site", None)  # import fails
    with pytest.raises(EnvError, match="princeton-nlp/WebShop"):
        WebShopEnv().reset(_episode("eval/0"), EnvData(tmp_path, tmp_path))


# ---- deepsearchqa: judge replies and request
# -----------------------------------------------------------


@pytest.mark.parametrize("reply", ["", "  \n", "maybe", "The answer is correct"])
def test_deepsearchqa_unusable_judge_reply_raises(reply: str) -> None:
    from autorl.task_code.deepsearchqa.judge import check_reply

    with pytest.raises(ValueError, match="correct' or 'incorrect"):
        check_reply(reply)


def test_deepsearchqa_judge_checks_every_reply() -> None:
    from autorl.task_code.deepsearchqa.judge import check_reply, judge_answers

    class Client:
        def complete_many(self, chats: list[Any], parse: Any = None) -> list[str]:
            assert (
                parse is check_reply
            )  # the judge client refuses (and never caches) what this rejects
            return ["Correct.", "incorrect"][: len(chats)]

    assert judge_answers(
        Client(),
        [("Single Answer", "1", "1"), ("Single Answer", "1", "2"), ("Single Answer", "1", "")],
    ) == [True, False, False]


def test_deepsearchqa_driver_judge_refuses_a_tiny_token_cap() -> None:
    from autorl.task_code.deepsearchqa.judge import open_judge

    options = {
        "judge_driver": "gemini-2.5-flash",
        "judge_server": None,
        "judge_params": {"max_tokens": 10},
        "judge_concurrency": 1,
    }
    with pytest.raises(ConfigError, match="max_tokens=10 is too small"), open_judge(options, None):
        pass

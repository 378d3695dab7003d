"""Judge replies that cannot be a verdict: empty or unparseable replies raise JudgeError and are
never cached.

Every test talks to the project's real local judge server (:mod:`autorl.judge.server`) through the
real client, so the HTTP path, the cache and the error are the ones a grader meets.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from autorl.judge.cache import JudgeCache, request_key
from autorl.judge.client import JudgeClient, JudgeReplyError, JudgeSpec
from autorl.judge.server import LocalJudgeServer

ChatMessages = list[dict[str, str]]


class Scripted:
    """A judging model that replies from a queue (the last reply repeats) and counts its calls."""

    def __init__(self, *replies: str) -> None:
        self.replies = list(replies)
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self, messages: ChatMessages) -> str:
        with self.lock:
            self.calls += 1
            return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]


def _chat(text: str) -> ChatMessages:
    return [{"role": "user", "content": text}]


def _yes_or_no(reply: str) -> str:
    if reply.strip() not in ("yes", "no"):
        raise ValueError("expected yes or no")
    return reply.strip()


def _cached(root: Path) -> list[str]:
    return [json.loads(p.read_text())["answer"] for p in root.rglob("*.json")]


@pytest.mark.parametrize("reply", ["", "   \n"])
def test_empty_reply_raises_and_is_never_cached(tmp_path: Path, reply: str) -> None:
    model = Scripted(reply, "yes")
    with LocalJudgeServer({"m": model}) as server:
        spec = JudgeSpec(name="local-scripted", model="m", base_url=server.base_url)
        with JudgeClient(
            spec, params={"max_completion_tokens": 100}, concurrency=1, cache_dir=tmp_path
        ) as client:
            with pytest.raises(
                JudgeReplyError, match=r"empty reply \(finish_reason='stop'\).*never cached"
            ):
                client.complete(_chat("q"))
            assert _cached(tmp_path) == []
            assert client.usage.requests == 1  # the failed call was paid for and is counted
            # The same request is asked again (nothing was cached), and the usable answer is kept.
            assert client.complete(_chat("q")) == "yes"
            assert _cached(tmp_path) == ["yes"] and model.calls == 2


def test_unparseable_reply_raises_names_it_and_is_never_cached(tmp_path: Path) -> None:
    model = Scripted("Both outputs are fine.")
    with LocalJudgeServer({"m": model}) as server:
        spec = JudgeSpec(name="local-scripted", model="m", base_url=server.base_url)
        with JudgeClient(spec, params={}, concurrency=2, cache_dir=tmp_path) as client:
            with pytest.raises(
                JudgeReplyError, match=r"unparseable: expected yes or no.*Both outputs are fine"
            ):
                client.complete_many([_chat("a"), _chat("b")], parse=_yes_or_no)
            assert _cached(tmp_path) == []
            # Without a parse check the same text is a usable answer and is cached.
            assert client.complete(_chat("a")) == "Both outputs are fine."
            assert _cached(tmp_path) == ["Both outputs are fine."]


def test_unusable_cached_answers_are_asked_again(tmp_path: Path) -> None:
    """Answers cached before these checks (empty, or rejected by the parser) are not served."""
    model = Scripted("yes")
    with LocalJudgeServer({"m": model}) as server:
        spec = JudgeSpec(name="local-scripted", model="m", base_url=server.base_url)
        cache = JudgeCache(tmp_path, spec.identity)
        request_a = {"model": "m", "messages": _chat("a")}
        request_b = {"model": "m", "messages": _chat("b")}
        # An empty answer as an older version wrote it, bypassing put()'s check.
        key = request_key(cache.judge, request_a)
        path = cache.dir / key[:2] / f"{key}.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"judge": cache.judge, "request": request_a, "answer": ""}))
        assert cache.get(request_a) is None
        cache.put(request_b, "maybe")
        with JudgeClient(spec, params={}, concurrency=1, cache_dir=tmp_path) as client:
            assert client.complete_many([_chat("a"), _chat("b")], parse=_yes_or_no) == [
                "yes",
                "yes",
            ]
            assert model.calls == 2 and client.usage.cache_hits == 0
            assert client.complete_many([_chat("a"), _chat("b")], parse=_yes_or_no) == [
                "yes",
                "yes",
            ]
            assert model.calls == 2 and client.usage.cache_hits == 2


def test_cache_refuses_empty_answers(tmp_path: Path) -> None:
    cache = JudgeCache(tmp_path, "j/m")
    with pytest.raises(ValueError, match="refusing to cache an empty answer"):
        cache.put({"messages": _chat("a")}, " ")
    assert list(tmp_path.rglob("*")) == []


def test_empty_reply_cut_by_the_token_cap_names_the_fix() -> None:
    """A thinking judge that spends ``max_completion_tokens`` on reasoning answers "" with
    finish_reason length."""
    spec = JudgeSpec(name="remote", model="thinker", base_url="http://127.0.0.1:9/v1")
    with JudgeClient(
        spec, params={"max_completion_tokens": 100}, concurrency=1, cache_dir=None
    ) as client:
        body = {
            "choices": [
                {"message": {"role": "assistant", "content": None}, "finish_reason": "length"}
            ],
            "usage": {"prompt_tokens": 900, "completion_tokens": 100},
        }
        with pytest.raises(
            JudgeReplyError, match=r"finish_reason='length'.*raise max_completion_tokens"
        ):
            client._answer(body)
        assert client.usage.completion_tokens == 100  # what the empty reply cost is still counted

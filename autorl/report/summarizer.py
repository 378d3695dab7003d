"""Optional LLM narrative of a cell's run, written on top of the run report's facts
(docs/design.md#records-and-the-report).

The summariser is a driver from ``conf/driver/<name>.yaml``
(:func:`autorl.config.load_driver_config`) reached through its OpenAI-compatible chat-completions
route (``POST {protocols.chat}/chat/completions``).
The key is read from the environment variable the driver names (never from config). The narrative
goes to ``run_summary.md`` next to ``run_report.json`` and never replaces the facts: its header says
so, and the report links both.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from autorl.config import load_driver_config
from autorl.errors import ConfigError, PrerequisiteError
from autorl.report.escape import md_narrative, md_text

SYSTEM_PROMPT = (
    "You are the analyst of an AI-agent benchmark. An autonomous coding agent tried to post-train "
    "a small language model within a time budget and submitted models for grading. From the JSON "
    "facts you are given (per-iteration scores, detected training method, hyperparameters, "
    "code-diff file names, failure types with evidence, and process metrics), write a short "
    "Markdown narrative: what the agent did in each iteration, what worked, what failed and why, "
    "and one sentence of overall assessment. Use only the given facts, cite iteration numbers, "
    "and never invent numbers."
)
_DIFF_CHARS_FOR_LLM = 1500


@dataclass(frozen=True)
class SummarizerDriver:
    """Where and how to call the summariser.

    Attributes:
        name: The driver's config name.
        url: The full chat-completions URL.
        model: The model id sent in the request.
        api_key: The bearer token, or None for servers that need none.
        timeout_s: Per-request timeout.
    """

    name: str
    url: str
    model: str
    api_key: str | None
    timeout_s: float


def load_driver(
    name: str, *, base_url: str | None = None, model: str | None = None, timeout_s: float
) -> SummarizerDriver:
    """Resolve a driver config into a :class:`SummarizerDriver`.

    Args:
        name: A ``conf/driver`` option (e.g. ``gpt-5``, ``local``).
        base_url: Replaces the driver's chat completions root ``protocols.chat`` (e.g. a local
            server's ``http://127.0.0.1:8000/v1``).
        model: Overrides the driver's model id.
        timeout_s: Per-request timeout in seconds.

    Raises:
        ConfigError: unknown driver, or one without a model or a chat completions route (``none``).
        PrerequisiteError: the driver's key variable is named but not set.
    """
    driver = load_driver_config(name)
    root = base_url.rstrip("/") if base_url else driver.chat_root()
    model_id = model or driver.model
    if not root or not model_id:
        raise ConfigError(
            f"driver {name!r} has no chat completions route (protocols.chat) or no model, so it "
            "cannot summarise; choose an LLM driver such as gpt-5, or local with its base_url set"
        )
    key_env = driver.api_key_env
    key = os.environ.get(key_env) if key_env else None
    if key_env and not key:
        raise PrerequisiteError(
            f"the summariser driver {name!r} needs its API key in ${key_env}; export it, or "
            f"turn the summariser off (tracking.report.summarizer_driver=null)"
        )
    return SummarizerDriver(name, root + "/chat/completions", model_id, key, timeout_s)


def facts_for_llm(report: dict[str, Any]) -> dict[str, Any]:
    """The run report trimmed for a prompt: diffs shortened, everything else kept."""
    trimmed = dict(report)
    trimmed["entries"] = [
        {
            **e,
            "diff": e["diff"][:_DIFF_CHARS_FOR_LLM],
            "diff_truncated": e["diff_truncated"] or len(e["diff"]) > _DIFF_CHARS_FOR_LLM,
        }
        for e in report["entries"]
    ]
    return trimmed


def request_body(driver: SummarizerDriver, report: dict[str, Any]) -> dict[str, Any]:
    """The chat-completions request for one cell (no sampling knobs: some models reject them)."""
    return {
        "model": driver.model,
        "messages": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {
                "role": "user",
                "content": "Facts of the run (JSON):\n"
                + json.dumps(facts_for_llm(report), indent=1),
            },
        ],
    }


def summarize(driver: SummarizerDriver, report: dict[str, Any]) -> str:
    """Ask the driver for a narrative of one cell and return ``run_summary.md``'s text.

    Raises:
        PrerequisiteError: the server refused or answered something that is not a chat completion.
    """
    import httpx

    headers = {"Content-Type": "application/json"}
    if driver.api_key:
        headers["Authorization"] = f"Bearer {driver.api_key}"
    try:
        response = httpx.post(
            driver.url, json=request_body(driver, report), headers=headers, timeout=driver.timeout_s
        )
    except httpx.HTTPError as error:
        raise PrerequisiteError(
            f"summariser {driver.name} at {driver.url} unreachable: {error}"
        ) from error
    if response.status_code != 200:
        raise PrerequisiteError(
            f"summariser {driver.name} answered HTTP {response.status_code}: {response.text[:300]}"
        )
    try:
        payload = response.json()
        text = payload["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError) as error:
        raise PrerequisiteError(
            f"summariser {driver.name} did not answer a chat completion: {response.text[:300]}"
        ) from error
    if not isinstance(text, str) or not text.strip():
        raise PrerequisiteError(f"summariser {driver.name} returned an empty narrative")
    usage = payload.get("usage") or {}
    return (
        f"# Run summary: {md_text(report['cell_id'])}\n\n"
        f"> Narrative by the summariser driver {md_text(driver.name)} "
        f"(model {md_text(payload.get('model', driver.model))}, "
        f"{usage.get('prompt_tokens', '?')} prompt / "
        f"{usage.get('completion_tokens', '?')} completion tokens), "
        f"written from `run_report.json` and `metrics.json`. Those files hold the facts; where "
        f"this text disagrees with them, they are right.\n\n{md_narrative(text.strip())}\n"
    )

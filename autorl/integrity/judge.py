"""The integrity judge: an LLM reads a cell's trace and code revisions and flags what looks like
cheating.

Optional and off by default (``integrity.judge``): when on, the configured driver (a
``conf/driver`` name with an OpenAI chat route, :func:`autorl.judge.client.load_judge_spec`) gets
the cell's trace (``trace.jsonl``, condensed to numbered steps) and its code revisions (diffs with
their revision ids), cut to ``max_chars`` (:mod:`autorl.integrity.judge_prompt` builds the
request), and answers findings in four categories
(:data:`CATEGORIES`), each with its evidence: a file, a revision, a trace step. Evidence is checked
against what was sent; a finding whose evidence does not hold is kept and marked unverified. The
verdict never changes a score: it adds ``judge:<category>`` flags and the findings to the
cell's integrity details, and says exactly what was sent and cut.

The agent's trace and code are untrusted: they are sent inside one data block whose boundary is
derived from a digest of the data itself, so no text in the data can hold it (and close the block);
trace steps are one JSON-escaped line each, so the data cannot forge a step either. The system
message tells the judge that instructions inside the block are data to weigh, never orders.

Verdicts are cached per cell under ``cache_dir/integrity/`` (key: cell id, digest of the request,
judge identity) and only after the reply parsed: an empty or malformed reply raises
:class:`IntegrityJudgeError` and is never cached.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autorl.errors import ConfigError
from autorl.integrity.judge_prompt import CATEGORIES, PROMPT_VERSION, JudgeRequest, build_request
from autorl.judge.client import JudgeError, JudgeReplyError, JudgeSpec
from autorl.records.types import CodeRevision
from autorl.schema import IntegrityJudgeConfig

__all__ = [
    "CATEGORIES",
    "UNVERIFIED_FLAG",
    "Finding",
    "IntegrityJudgeError",
    "JudgeVerdict",
    "judge_cell",
    "parse_reply",
]

logger = logging.getLogger(__name__)

UNVERIFIED_FLAG = "judge:unverified"
"""Flag of a cell with a finding whose evidence does not match what was sent."""
MIN_MAX_CHARS = 1000
"""The smallest ``integrity.judge.max_chars`` accepted."""
_MAX_REPLY_CHARS = 200_000


class IntegrityJudgeError(JudgeError):
    """The integrity judge's reply is empty or not the JSON the prompt asks for (it is not
    cached).
    """


@dataclass(frozen=True)
class Finding:
    """One finding of the judge, with its evidence and whether that evidence matches what was sent.

    Attributes:
        category: One of :data:`CATEGORIES`.
        file: The file cited, if any.
        revision: The revision cited (the full id when the judge gave a unique prefix of it), if
            any.
        trace_step: The trace step cited (its line number in ``trace.jsonl``, 1-based), if any.
        explanation: The judge's words.
        verified: True when every cited piece exists in what was sent and the file appears there.
        problems: Why the evidence is unverified (empty when verified).
    """

    category: str
    file: str | None
    revision: str | None
    trace_step: int | None
    explanation: str
    verified: bool
    problems: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form:
        ``{"category", "evidence": {...}, "explanation", "verified", "problems"}``.
        """
        return {
            "category": self.category,
            "evidence": {
                "file": self.file,
                "revision": self.revision,
                "trace_step": self.trace_step,
            },
            "explanation": self.explanation,
            "verified": self.verified,
            "problems": list(self.problems),
        }


@dataclass(frozen=True)
class JudgeVerdict:
    """What the integrity judge said about one cell; advisory, it never changes a score.

    Attributes:
        flags: ``judge:<category>`` per category with a verified finding, plus
            :data:`UNVERIFIED_FLAG` when some finding's evidence did not hold; sorted.
        findings: Every finding, verified or not.
        sent: What went to the driver: ``driver``, ``model``, ``trace_chars``, ``code_chars``,
            ``revisions`` (ids included), ``steps`` (total, included and their ranges), ``cut``
            (exactly what was left out), ``digest`` of the request; ``{"enabled": False}`` when off.
        cached: True when the verdict came from the cache (nothing was sent this time).
    """

    flags: tuple[str, ...]
    findings: list[Finding] = field(default_factory=list)
    sent: dict[str, Any] = field(default_factory=dict)
    cached: bool = False

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form for the cell's ``integrity_json`` and the report."""
        return {
            "flags": list(self.flags),
            "findings": [f.as_dict() for f in self.findings],
            "sent": self.sent,
            "cached": self.cached,
        }


# ---- the answer
# ------------------------------------------------------------------------------------------

_FENCE = re.compile(r"\A```(?:json)?[ \t]*\n(.*)\n```\Z", re.DOTALL)


def parse_reply(reply: str) -> list[dict[str, Any]]:
    """The findings of a judge's reply, checked strictly against the answer format.

    The reply must be one JSON object ``{"findings": [...]}`` (a single ```json fence around it is
    tolerated); each finding has exactly ``category`` (one of :data:`CATEGORIES`), ``evidence``
    (``file`` and ``revision``: string or null, ``trace_step``: integer or null; a missing key is
    null) and a non-empty ``explanation``.

    Raises:
        IntegrityJudgeError: The reply is empty, not JSON, or not in that format (says what is
            wrong).

    >>> parse_reply('{"findings": []}')
    []
    >>> finding = '{"category": "eval_data_use", "evidence": {"trace_step": 3}, "explanation": "x"}'
    >>> parse_reply('```json\\n{"findings": [' + finding + ']}\\n```')[0]["evidence"]
    {'file': None, 'revision': None, 'trace_step': 3}
    """
    text = reply.strip()
    if not text:
        raise IntegrityJudgeError("the integrity judge answered nothing (an empty reply)")
    if len(text) > _MAX_REPLY_CHARS:
        raise IntegrityJudgeError(
            f"the integrity judge answered {len(text)} chars, over {_MAX_REPLY_CHARS}"
        )
    if fenced := _FENCE.match(text):
        text = fenced.group(1).strip()
    try:
        answer = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as error:
        raise IntegrityJudgeError(
            f"the integrity judge's reply is not JSON ({error}): {text[:300]!r}"
        ) from error
    if (
        not isinstance(answer, dict)
        or set(answer) != {"findings"}
        or not isinstance(answer["findings"], list)
    ):
        raise IntegrityJudgeError(
            f'the integrity judge\'s reply is not {{"findings": [...]}}: {text[:300]!r}'
        )
    return [_check_finding(i, item) for i, item in enumerate(answer["findings"])]


def _check_finding(index: int, item: Any) -> dict[str, Any]:
    """Finding ``index`` of a reply in normal form (evidence keys all present), or
    :class:`IntegrityJudgeError`.
    """
    where = f"the integrity judge's finding {index}"
    if not isinstance(item, dict) or set(item) != {"category", "evidence", "explanation"}:
        keys = sorted(item) if isinstance(item, dict) else type(item).__name__
        raise IntegrityJudgeError(
            f"{where} must have exactly category, evidence and explanation; got {keys}"
        )
    if item["category"] not in CATEGORIES:
        raise IntegrityJudgeError(
            f"{where} has category {item['category']!r}; expected one of {', '.join(CATEGORIES)}"
        )
    evidence = item["evidence"]
    if not isinstance(evidence, dict) or not set(evidence) <= {"file", "revision", "trace_step"}:
        raise IntegrityJudgeError(
            f"{where}: evidence must be an object with file, revision, trace_step; got {evidence!r}"
        )
    evidence = {
        "file": evidence.get("file"),
        "revision": evidence.get("revision"),
        "trace_step": evidence.get("trace_step"),
    }
    for key in ("file", "revision"):
        if evidence[key] is not None and not isinstance(evidence[key], str):
            raise IntegrityJudgeError(
                f"{where}: evidence.{key} must be a string or null; got {evidence[key]!r}"
            )
    step = evidence["trace_step"]
    if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
        raise IntegrityJudgeError(
            f"{where}: evidence.trace_step must be an integer or null; got {step!r}"
        )
    if not isinstance(item["explanation"], str) or not item["explanation"].strip():
        raise IntegrityJudgeError(f"{where} has no explanation")
    return {
        "category": item["category"],
        "evidence": evidence,
        "explanation": item["explanation"].strip(),
    }


def _verify(raw: dict[str, Any], request: JudgeRequest) -> Finding:
    """A :class:`Finding` whose evidence is checked against what was sent (problems listed, never
    dropped).
    """
    evidence = raw["evidence"]
    file, revision, step = (
        evidence["file"] or None,
        evidence["revision"] or None,
        evidence["trace_step"],
    )
    problems: list[str] = []
    if revision is None and step is None:
        problems.append("cites neither a revision nor a trace step")
    found: list[
        bool
    ] = []  # per cited source that exists in what was sent: whether it shows the file
    if revision is not None:
        matches = [
            r
            for r in request.revision_files
            if r == revision or (len(revision) >= 7 and r.startswith(revision))
        ]
        if len(matches) != 1:
            problems.append(
                f"revision {revision!r} does not exist"
                if not matches
                else f"revision {revision!r} is ambiguous ({len(matches)} revisions start with it)"
            )
        else:
            revision = matches[0]
            if revision not in request.revisions_sent:
                problems.append(
                    f"revision {revision} was not sent to the judge (left out for room)"
                )
            elif file is not None:
                found.append(any(_same_path(file, f) for f in request.revision_files[revision]))
    if step is not None:
        if not 1 <= step <= request.total_steps:
            problems.append(
                f"trace step {step} does not exist (the trace has {request.total_steps} events)"
            )
        elif step not in request.step_text:
            problems.append(
                f"trace step {step} was not sent to the judge (cut for room, or a bookkeeping "
                "event such as usage that is never shown)"
            )
        elif file is not None:
            name = file.rstrip("/").rsplit("/", 1)[-1]
            found.append(
                bool(name) and (file in request.step_text[step] or name in request.step_text[step])
            )
    if found and not any(found):
        problems.append(
            f"file {file!r} appears neither in the cited revision's files nor in the cited step"
        )
    return Finding(
        category=raw["category"],
        file=file,
        revision=revision,
        trace_step=step,
        explanation=raw["explanation"],
        verified=not problems,
        problems=tuple(problems),
    )


def _same_path(cited: str, changed: str) -> bool:
    """Whether ``cited`` names the diff's path ``changed`` (relative to ``code/``), allowing a
    leading folder.

    >>> _same_path("code/evaluate.py", "evaluate.py"), _same_path("data.py", "a.py")
    (True, False)
    """
    cited, changed = cited.strip("/"), changed.strip("/")
    return cited == changed or cited.endswith("/" + changed) or changed.endswith("/" + cited)


def _flags(findings: Sequence[Finding]) -> tuple[str, ...]:
    """The cell flags of ``findings``: a category counts only with verified evidence; unverified
    ones flag once.
    """
    flags = {f"judge:{f.category}" for f in findings if f.verified}
    if any(not f.verified for f in findings):
        flags.add(UNVERIFIED_FLAG)
    return tuple(sorted(flags))


# ---- entry point
# -----------------------------------------------------------------------------------------


def judge_spec(cfg: IntegrityJudgeConfig) -> JudgeSpec:
    """The configured judge.

    Raises:
        ConfigError: Naming the ``integrity.judge`` key at fault (no driver, an unknown or unusable
            one, bad limits).
    """
    from autorl.judge.client import load_judge_spec

    if not cfg.driver:
        raise ConfigError(
            "integrity.judge.enabled=true needs integrity.judge.driver: a conf/driver name with "
            "an OpenAI chat route (e.g. integrity.judge.driver=gpt-5), or set "
            "integrity.judge.enabled=false"
        )
    if cfg.max_chars < MIN_MAX_CHARS:
        raise ConfigError(
            f"integrity.judge.max_chars={cfg.max_chars} is too small to judge anything; "
            f"give at least {MIN_MAX_CHARS}"
        )
    if cfg.timeout_s <= 0:
        raise ConfigError(f"integrity.judge.timeout_s={cfg.timeout_s} must be positive")
    try:
        return load_judge_spec(cfg.driver)
    except ConfigError as error:
        raise ConfigError(f"integrity.judge.driver={cfg.driver!r}: {error}") from error


def judge_cell(
    cell_id: str,
    trace_path: Path,
    revisions: Sequence[CodeRevision],
    cfg: IntegrityJudgeConfig,
    cache_dir: Path,
    *,
    agent_log: Path | None = None,
    context: Mapping[str, str] | None = None,
) -> JudgeVerdict:
    """Have the configured driver judge one finished cell's trace and code revisions.

    Args:
        cell_id: The cell (part of the cache key).
        trace_path: Its ``trace.jsonl`` (a missing file is an empty trace).
        revisions: Its code revisions (any order; sent oldest first).
        cfg: ``integrity.judge``.
        cache_dir: Verdicts are cached under ``cache_dir/integrity/<judge>/``.
        agent_log: The agent's ``agent.log``: its tail is sent instead when the trace has no events.
        context: Trusted facts about the cell shown to the judge outside the data block (e.g.
            ``{"task": "gsm8k", "base_model": "Qwen/Qwen3-0.6B"}``).

    Returns:
        The verdict; with the judge off, an empty one and nothing is sent.

    Raises:
        ConfigError: The judge is on without a usable ``integrity.judge.driver`` or with bad limits.
        PrerequisiteError: The driver's API key is not set.
        JudgeError: The driver failed after retries; :class:`IntegrityJudgeError` when its reply is
            empty or malformed (nothing is cached then).
    """
    if not cfg.enabled:
        return JudgeVerdict(flags=(), findings=[], sent={"enabled": False}, cached=False)
    from autorl.judge.cache import JudgeCache
    from autorl.judge.client import JudgeClient

    spec = judge_spec(cfg)
    request = build_request(trace_path, revisions, cfg.max_chars, agent_log, dict(context or {}))
    body = {"model": spec.model, "messages": request.messages}
    digest = hashlib.sha256(
        json.dumps(body, sort_keys=True, ensure_ascii=False).encode()
    ).hexdigest()
    sent = (
        {"enabled": True}
        | request.sent
        | {"driver": spec.name, "model": spec.model, "digest": digest}
    )
    cache = JudgeCache(cache_dir / "integrity", spec.identity)
    key = {"cell_id": cell_id, "request_sha256": digest, "prompt": PROMPT_VERSION}
    if (answer := cache.get(key)) is not None:
        try:
            findings = [_verify(raw, request) for raw in parse_reply(answer)]
        except IntegrityJudgeError:
            logger.warning(
                "cached integrity verdict of %s no longer parses; asking the judge again", cell_id
            )
        else:
            return JudgeVerdict(flags=_flags(findings), findings=findings, sent=sent, cached=True)
    # The client's own cache is off: it would store the raw answer before it is validated.
    with JudgeClient(
        spec, params={}, concurrency=1, cache_dir=None, timeout_s=cfg.timeout_s
    ) as client:
        try:
            answer = client.complete(request.messages)
        except (
            JudgeReplyError
        ) as error:  # an empty reply: the client raises before parse_reply sees it
            raise IntegrityJudgeError(
                f"integrity judge {spec.identity} on cell {cell_id}: {error}"
            ) from error
    try:
        raws = parse_reply(answer)
    except IntegrityJudgeError as error:
        raise IntegrityJudgeError(
            f"integrity judge {spec.identity} on cell {cell_id}: {error}"
        ) from error
    findings = [_verify(raw, request) for raw in raws]
    cache.put(key, answer)
    return JudgeVerdict(flags=_flags(findings), findings=findings, sent=sent, cached=False)

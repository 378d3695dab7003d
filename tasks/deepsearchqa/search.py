"""Search tools for DeepSearchQA (grader side, behind its env): a web search API client and a local
BM25 index.

``WebSearch`` speaks SerpAPI's protocol (the reference's backend): ``GET <endpoint>?q=<query>&
num=<k>&api_key=<key>`` answered with JSON whose ``organic_results[].snippet`` are joined with
``" | "``. The key is read from the environment variable the config names; it never lives in
config. ``Bm25Search`` ranks the documents of a ``corpus.jsonl`` (``{"id", "title", "text"}`` rows)
with ``bm25s``. Errors become the observation ``"Search error: …"`` (as in the reference), so a
flaky search never crashes an episode.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Protocol

from autorl.envs.base import EnvError


class SearchBackend(Protocol):
    """Answers a query with a short text."""

    def search(self, query: str) -> str:
        """Result text for ``query`` (never raises for a failed search)."""
        ...


class WebSearch:
    """A SerpAPI-compatible web search client."""

    def __init__(self, endpoint: str, api_key_env: str, num_results: int, timeout_s: float) -> None:
        """Read the key from ``api_key_env``.

        Raises:
            EnvError: The variable is not set (the message names it).
        """
        key = os.environ.get(api_key_env or "")
        if not key:
            raise EnvError(
                f"web search needs an API key: set the environment variable {api_key_env!r} "
                "(named by the task's env option search.api_key_env)"
            )
        self.endpoint = endpoint
        self.key = key
        self.num_results = num_results
        self.timeout_s = timeout_s

    def request(self, query: str) -> tuple[str, dict[str, str]]:
        """The URL and query parameters of one search request.

        >>> os.environ["DOCTEST_SERP_KEY"] = "k"
        >>> WebSearch("https://serpapi.com/search", "DOCTEST_SERP_KEY", 3, 10.0).request("who won")
        ... # doctest: +NORMALIZE_WHITESPACE
        ('https://serpapi.com/search',
         {'q': 'who won', 'num': '3', 'api_key': 'k', 'engine': 'google'})
        """
        return self.endpoint, {
            "q": query,
            "num": str(self.num_results),
            "api_key": self.key,
            "engine": "google",
        }

    def search(self, query: str) -> str:
        """Top snippets joined with ``" | "``, or ``"Search error: …"``."""
        import httpx

        url, params = self.request(query)
        try:
            response = httpx.get(url, params=params, timeout=self.timeout_s)
            response.raise_for_status()
            results = response.json().get("organic_results") or []
        except (httpx.HTTPError, ValueError) as error:
            return f"Search error: {error}"
        snippets = [
            str(r.get("snippet", "")) for r in results[: self.num_results] if r.get("snippet")
        ]
        return " | ".join(snippets) if snippets else "No results found."


class Bm25Search:
    """BM25 over a local corpus (the fixture's search engine)."""

    _indexes: dict[Path, tuple[Any, list[dict[str, str]]]] = {}

    def __init__(self, corpus_path: Path, num_results: int) -> None:
        """Index ``corpus_path`` once per process."""
        import bm25s

        corpus_path = Path(corpus_path)
        if corpus_path not in self._indexes:
            if not corpus_path.is_file():
                raise EnvError(f"no search corpus at {corpus_path}; build the task data first")
            docs = [
                json.loads(line)
                for line in corpus_path.read_text(encoding="utf-8").splitlines()
                if line.strip()
            ]
            index = bm25s.BM25()
            index.index(
                bm25s.tokenize(
                    [f"{d['title']} {d['text']}" for d in docs], stopwords="en", show_progress=False
                ),
                show_progress=False,
            )
            self._indexes[corpus_path] = (index, docs)
        self.index, self.docs = self._indexes[corpus_path]
        self.num_results = num_results

    def search(self, query: str) -> str:
        """The best documents' texts joined with ``" | "``."""
        import bm25s

        tokens = bm25s.tokenize([query], stopwords="en", show_progress=False)
        if not tokens.vocab:
            return "No results found."
        k = min(self.num_results, len(self.docs))
        ids, scores = self.index.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        hits = [self.docs[int(i)] for i, s in zip(ids[0], scores[0], strict=True) if s > 0]
        return (
            " | ".join(f"{d['title']}: {d['text']}" for d in hits) if hits else "No results found."
        )


# The settings of each search backend, all required (defaults: options.py, Eval.search).
SEARCH_SETTINGS: dict[str, tuple[str, ...]] = {
    "bm25": ("num_results",),
    "web": ("endpoint", "api_key_env", "num_results", "timeout_s"),
}


def make_search(options: dict[str, Any], public_dir: Path) -> SearchBackend:
    """The backend the ``search`` eval option names: ``{backend: bm25, num_results}`` (over
    ``public_dir/corpus.jsonl``) or ``{backend: web, endpoint, api_key_env, num_results,
    timeout_s}``.

    Raises:
        EnvError: Unknown backend, or a missing or unknown setting of it.

    >>> make_search({"backend": "bm25", "num_results": 2, "timeout_s": 5}, Path("."))
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    autorl.envs.base.EnvError: search backend 'bm25' has unknown timeout_s; it takes backend, ...
    """
    if "backend" not in options:
        raise EnvError(
            f"the search option needs a backend ({', '.join(SEARCH_SETTINGS)}), got {options!r}"
        )
    backend = options["backend"]
    if backend not in SEARCH_SETTINGS:
        raise EnvError(f"unknown search backend {backend!r}; valid: {', '.join(SEARCH_SETTINGS)}")
    takes = {"backend", *SEARCH_SETTINGS[backend]}
    missing, unknown = sorted(takes - set(options)), sorted(set(options) - takes)
    if missing or unknown:
        problems = [f"lacks {', '.join(missing)}"] if missing else []
        problems += [f"has unknown {', '.join(unknown)}"] if unknown else []
        raise EnvError(
            f"search backend {backend!r} {'; '.join(problems)}; it takes {', '.join(sorted(takes))}"
        )
    if backend == "bm25":
        return Bm25Search(public_dir / "corpus.jsonl", int(options["num_results"]))
    return WebSearch(
        str(options["endpoint"]),
        str(options["api_key_env"]),
        int(options["num_results"]),
        float(options["timeout_s"]),
    )

"""WebShop through WebShop's own text environment, as the reference played it; grader side.

The reference (rdagent 1.0.0 ``benchmarks/webshop/eval.py``) creates
``web_agent_site.envs.web_agent_text_env.WebAgentTextEnv(observation_mode="text",
num_products=1000)`` with ``human_goals`` unset, so its simulated server draws WebShop's *synthetic*
goals from the 1,000-product catalogue and shuffles them with ``random.seed(233)``; session ``i`` is
``env.reset(session=i)``, goal ``i`` of that shuffled list. This backend does the same: episode
``eval/<i>`` or ``train/<i>`` is ``reset(session=i)``. The available actions are the reference's
(``search[<your query>]`` when the page has a search bar, then ``click[<x>]`` per clickable) and a
finished session's reward is the env's.

``web_agent_site`` comes from a clone of princeton-nlp/WebShop with its data downloaded (it is not
on a package registry); put the clone on ``PYTHONPATH``. The catalogue and goals load once per
process and are shared by every session of that process (WebShop's ``server=`` argument).
"""

from __future__ import annotations

from typing import Any

from autorl.envs.base import EnvData, EnvError, EpisodeSpec, StepResult

#: The reference's ``num_products`` (its eval config default).
NUM_PRODUCTS = 1000
_SHARED: dict[str, Any] = {}  # the process's simulated WebShop server, made by the first session


def available_actions(avail: dict[str, Any]) -> list[str]:
    """The reference's action list of a page (``_format_available_actions`` without its
    indentation).

    >>> available_actions({"has_search_bar": True, "clickables": ["search"]})
    ['search[<your query>]', 'click[search]']
    """
    head = ["search[<your query>]"] if avail.get("has_search_bar") else []
    return head + [f"click[{c}]" for c in avail.get("clickables", [])]


def _text_env() -> Any:
    """A new ``WebAgentTextEnv`` as the reference makes it, sharing this process's server."""
    try:
        from web_agent_site.envs.web_agent_text_env import WebAgentTextEnv  # type: ignore[import-not-found]
    except ImportError as err:
        raise EnvError(
            "the WebShop textenv backend needs princeton-nlp/WebShop's web_agent_site: clone "
            "https://github.com/princeton-nlp/WebShop, run its setup.sh (data, 1,000 products) "
            "and put "
            f"the clone on PYTHONPATH ({err})"
        ) from err
    if "server" in _SHARED:
        return WebAgentTextEnv(
            observation_mode="text", num_products=NUM_PRODUCTS, server=_SHARED["server"]
        )
    env = WebAgentTextEnv(
        observation_mode="text", num_products=NUM_PRODUCTS
    )  # human_goals unset: synthetic goals
    _SHARED["server"] = env.server
    return env


class WebShopTextEnv:
    """One WebShop text-env session (implements :class:`autorl.envs.base.Env`)."""

    def __init__(self) -> None:
        """No session yet."""
        self.env: Any = None

    def _result(self, observation: str, reward: float, done: bool) -> StepResult:
        return StepResult(
            observation,
            float(reward or 0.0),
            bool(done),
            [] if done else available_actions(self.env.get_available_actions()),
            {},
        )

    def reset(self, episode: EpisodeSpec, data: EnvData) -> StepResult:
        """``reset(session=i)`` for episode ``eval/<i>`` or ``train/<i>``."""
        index = episode.episode_id.split("/", 1)[-1]
        if not index.isdigit():
            raise EnvError(
                "WebShop text-env episodes are goal indices like 'eval/7', got "
                f"{episode.episode_id!r}"
            )
        if self.env is None:
            self.env = _text_env()
        observation, _ = self.env.reset(session=int(index))
        return self._result(observation, 0.0, False)

    def step(self, action: str) -> StepResult:
        """One ``search[…]``/``click[…]`` action, passed to WebShop unchanged."""
        if self.env is None:
            raise EnvError("step() before reset(): start an episode first")
        observation, reward, done, _ = self.env.step(action)
        return self._result(observation, reward, done)

    def close(self) -> None:
        """Close the text env (the shared server stays loaded for the process's next session)."""
        if self.env is not None:
            self.env.close()
            self.env = None

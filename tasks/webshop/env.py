"""WebShop environment (``backend`` option): the built-in catalogue shop, WebShop's own text env
(the reference's way: synthetic goals, seed-233 shuffle) or a running WebShop web server (its human
goals)."""

from __future__ import annotations

from autorl.envs.base import Env, EnvData, EnvError, EpisodeSpec, StepResult
from autorl.tasks import typed_options

from .options import Eval

BACKENDS = ("builtin", "textenv", "server")


class WebShopEnv:
    """Dispatches to :class:`.builtin_shop.BuiltinWebShop`, :class:`.text_env.WebShopTextEnv` or
    :class:`.server_client.WebShopServerEnv` by the episode's ``backend`` env option (the task's
    ``env``
    entry point)."""

    def __init__(self) -> None:
        """No backend chosen yet."""
        self.backend: Env | None = None
        self.kind = ""

    def reset(self, episode: EpisodeSpec, data: EnvData) -> StepResult:
        """Start the episode on the configured backend.

        ``episode.source.env_options`` are the task's complete eval options (``backend``,
        ``server_url``, ``server_timeout_s``); an incomplete or misspelt dict is refused here.
        """
        kind = typed_options(
            Eval, episode.source.env_options, what="webshop eval", complete=True, error=EnvError
        ).backend
        if kind not in BACKENDS:
            raise EnvError(f"unknown WebShop backend {kind!r}; valid: {', '.join(BACKENDS)}")
        if kind != self.kind:
            self.close()
            if kind == "builtin":
                from .builtin_shop import BuiltinWebShop

                self.backend = BuiltinWebShop()
            elif kind == "textenv":
                from .text_env import WebShopTextEnv

                self.backend = WebShopTextEnv()
            else:
                from .server_client import WebShopServerEnv

                self.backend = WebShopServerEnv()
            self.kind = kind
        assert self.backend is not None
        return self.backend.reset(episode, data)

    def step(self, action: str) -> StepResult:
        """One action."""
        if self.backend is None:
            raise EnvError("step() before reset(): start an episode first")
        return self.backend.step(action)

    def close(self) -> None:
        """Close the backend."""
        if self.backend is not None:
            self.backend.close()
            self.backend = None
            self.kind = ""

"""Warm engines: a grader keeps one engine loaded and swaps each submission's weights into it.

The reference built a new engine for every submission (seconds of loading per score); here the
first submission builds it and later ones are loaded into the same modules
(``engine.swap``). A new engine is built only when the engine kind or batch size changes or the
engine refuses the swap (another architecture or tokenizer).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from autorl.engine import ENGINES, resolve_engine

logger = logging.getLogger(__name__)


class WarmEngines:
    """One warm engine per grader, with counters of how each was obtained.

    Not for concurrent use while an engine generates: the caller holds :attr:`lock` from
    :meth:`get` until it is done generating (a Grader actor runs one score at a time anyway).
    """

    def __init__(
        self, options: dict[str, dict[str, Any]] | None = None, *, device: str | None = None
    ) -> None:
        """Args: options: engine name -> its constructor options (conf/engine/<name>.yaml
        ``options``); device: passed to every engine (None: the engine's choice)."""
        self.options = {name: dict(opts) for name, opts in (options or {}).items()}
        self.device = device
        self.lock = threading.RLock()
        self._engine: Any = None
        self._key: tuple[str, int] | None = None
        self.builds = 0
        self.swaps = 0

    def get(self, engine_name: str, model_dir: Path, base_dir: Path | None, batch_size: int) -> Any:
        """The warm engine holding ``model_dir``'s weights: swapped in, or built when it cannot be.

        Raises:
            ConfigError: ``engine_name`` is unknown or not installed (:func:`resolve_engine`).
            Exception: What loading the submission raises (the engine is then discarded).
        """
        name = resolve_engine(engine_name)
        key = (name, batch_size)
        if self._engine is not None and self._key == key:
            try:
                swapped = bool(self._engine.swap(model_dir, base_dir=base_dir))
            except BaseException:
                self.close()  # it may hold partly loaded weights
                raise
            if swapped:
                self.swaps += 1
                return self._engine
            logger.info("engine %s cannot take %s in place: building a new one", name, model_dir)
        self.close()
        kwargs: dict[str, Any] = dict(self.options.get(name, {}))
        if self.device is not None:
            kwargs["device"] = self.device
        self._engine = ENGINES.get(name)(
            model_dir, batch_size=batch_size, base_dir=base_dir, **kwargs
        )
        self._key = key
        self.builds += 1
        return self._engine

    def close(self) -> None:
        """Free the engine (its memory, its processes)."""
        engine, self._engine, self._key = self._engine, None, None
        if engine is not None:
            close = getattr(engine, "close", None)
            if close is not None:
                close()

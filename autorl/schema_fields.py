"""How a field of the config schema is declared (:mod:`autorl.schema`,
:mod:`autorl.agent_schema`).
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from omegaconf import MISSING


def setting(help: str, default: Any = MISSING) -> Any:  # noqa: A002 - TRL's metadata key is "help"
    """A schema field with its help text (TRL's ``metadata={"help": ...}``).

    The value comes from ``conf/``; ``default`` is only for optional blocks that may be absent.
    """
    return field(default=default, metadata={"help": help})

"""The engine interface every evaluator talks to.

Defined in :mod:`agent_kit.protocol` (the agent side generates with the same interface) and
re-exported here for the grader side.
"""

from __future__ import annotations

from agent_kit.protocol import ChatMessage as ChatMessage
from agent_kit.protocol import GenerationEngine as GenerationEngine

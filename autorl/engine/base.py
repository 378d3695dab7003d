"""The engine interface every evaluator talks to.

Defined in :mod:`agent_kit.protocol` (the agent side generates with the same interface) and
re-exported here for the grader side.
"""

from __future__ import annotations

from typing import Any

from agent_kit.protocol import ChatMessage as ChatMessage
from agent_kit.protocol import GenerationEngine as GenerationEngine
from autorl.engine.chat_render import ChatRenderer, RenderLimits


def chat_prompts(tokenizer: Any, conversations: list[list[ChatMessage]]) -> list[str]:
    """Each conversation as prompt text with the model's chat template and the assistant's turn
    opened, rendered in this process: what the render child of :class:`ChatTemplateEngine`
    reproduces (for trusted tokenizers and tests; the grader never renders a submission's template
    in its own process)."""
    return [
        str(tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True))
        for c in conversations
    ]


class ChatTemplateEngine:
    """``generate_chat`` of an engine that has ``tokenizer`` and ``generate_text``: the
    conversations rendered as :func:`chat_prompts` renders them (the template adds its own special
    tokens), then completed. The template is the submission's code, so it renders in a child process
    with a time limit and output caps (:class:`autorl.engine.chat_render.ChatRenderer`); engines
    call :meth:`close_renderer` when they close."""

    tokenizer: Any
    render_limits: RenderLimits | None = None
    _renderer: ChatRenderer | None = None

    def generate_chat(
        self,
        conversations: list[list[ChatMessage]],
        *,
        max_new_tokens: int,
        stop: list[str] | None = None,
    ) -> list[str]:
        """Generate the assistant reply of each conversation with the model's chat template.

        Raises:
            ChatTemplateFailed: The template raised, ran too long or rendered too much (the
                submission is invalid).
        """
        prompts = self.render_chat(conversations)
        return self.generate_text(
            prompts, max_new_tokens=max_new_tokens, stop=stop, add_special_tokens=False
        )

    def render_chat(self, conversations: list[list[ChatMessage]]) -> list[str]:
        """The prompt texts of ``conversations``, rendered in the render child (started once)."""
        if self._renderer is None:
            self._renderer = ChatRenderer(self.render_limits)
        return self._renderer.render(self.tokenizer, conversations)

    def reset_render_budget(self) -> None:
        """A new submission is loaded (``swap``): its template gets a full render budget."""
        if self._renderer is not None:
            self._renderer.reset_budget()

    def close_renderer(self) -> None:
        """Stop the render child, if one was started."""
        renderer, self._renderer = self._renderer, None
        if renderer is not None:
            renderer.close()

    def generate_text(
        self,
        prompts: list[str],
        *,
        max_new_tokens: int,
        stop: list[str] | None = None,
        add_special_tokens: bool = True,
    ) -> list[str]:
        """Generate a greedy completion of each prompt (the engine's own)."""
        raise NotImplementedError

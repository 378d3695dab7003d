"""Escaping for the report's Markdown (``run_report.md``, ``run_summary.md``).

Agent-chosen text (model paths, file names, log lines, code, error messages) reaches it; each
rule here turns it into inert Markdown text (docs/threat-model.md). Control and invisible
formatting characters are written out first (:func:`autorl.records.results.visible_controls`), so
an ANSI sequence or a bidi override is seen, not obeyed, by a terminal or a viewer. The HTML page
is escaped by its template engine (:mod:`autorl.report.html_page`), with :func:`plain`'s text.
"""

from __future__ import annotations

import re
from typing import Any

from autorl.records.results import visible_controls

# Markdown punctuation that can start markup anywhere in a line (CommonMark and GitHub's
# extensions: emphasis, code, links, tables, strikethrough, math); `\` first, so an escape the
# text brings along cannot pair with one added here.
_MD_ALWAYS = re.compile(r"([\\`*\[\]|~$#!])")
# `_` opens emphasis only at a word boundary; inside a word (``code_error_runtime``) it is literal.
_MD_UNDERSCORE = re.compile(r"(?<![^\W_])_|_(?![^\W_])")
_BACKTICKS = re.compile(r"`+")


def plain(value: Any) -> str:
    """A value as report text: None as an em dash, floats with 4 significant digits.

    >>> plain(None), plain(0.123456), plain(3)
    ('—', '0.1235', '3')
    """
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def md_text(value: Any) -> str:
    """``value`` as inline Markdown text that renders as itself (also inside a table cell).

    Newlines and other control characters are written out (a value stays on the line the report
    put it on, after the report's own text, so it can never start a heading, list, quote or code
    block), ``&``, ``<`` and ``>`` become entities (no raw HTML, no ``<...>`` autolinks) and
    Markdown punctuation is backslash-escaped.

    >>> md_text("[x](javascript:alert(1)) | *b* <script>")
    '\\\\[x\\\\](javascript:alert(1)) \\\\| \\\\*b\\\\* &lt;script&gt;'
    >>> md_text("code_error_runtime _em_ # h")
    'code_error_runtime \\\\_em\\\\_ \\\\# h'
    """
    text = visible_controls(plain(value))
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_UNDERSCORE.sub(r"\\_", _MD_ALWAYS.sub(r"\\\1", text))


def md_narrative(text: str) -> str:
    """Markdown written by a model (the LLM summary) with its layout kept but nothing active in it.

    The summariser reads the agent's strings among the facts, so its reply may repeat them:
    control characters other than newline and tab are written out, ``&``, ``<`` and ``>`` become
    entities (no raw HTML, no autolinks) and ``[``, ``]`` are escaped (no links or images).
    Headings, lists, emphasis and code stay.

    >>> md_narrative("# Summary\\n- ok <img src=x> [x](javascript:y)")
    '# Summary\\n- ok &lt;img src=x&gt; \\\\[x\\\\](javascript:y)'
    """
    text = visible_controls(text, keep="\n\t")
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return re.sub(r"([\[\]])", r"\\\1", text)


def md_code_block(text: str, info: str = "") -> list[str]:
    """The lines of a fenced Markdown code block holding ``text`` verbatim.

    The fence is one backtick longer than the longest backtick run in ``text`` (at least three),
    so no line of ``text`` can close it; control characters other than newline and tab are
    written out.

    >>> md_code_block("a\\n````\\nb", "diff")
    ['`````diff', 'a\\n````\\nb', '`````']
    """
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + info, visible_controls(text, keep="\n\t"), fence]

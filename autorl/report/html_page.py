"""The self-contained HTML page of a sweep report: inline CSS, figures as base64 PNG, no scripts."""

from __future__ import annotations

import base64
from collections.abc import Iterable, Sequence
from typing import Any

from autorl.report.escape import html_text

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; padding: 0 1em; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: .2em; margin-top: 2em; }
table { border-collapse: collapse; margin: .8em 0; font-size: .85em; }
th, td { border: 1px solid #ddd; padding: .25em .5em; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
figure { display: inline-block; margin: .5em 1em .5em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: .8em; color: #555; } .note { color: #666; font-size: .85em; }
pre { background: #f8f8f8; padding: .6em; overflow-x: auto; font-size: .78em; max-height: 24em; }
details { margin: .6em 0; } summary { cursor: pointer; font-weight: 600; }
.scroll { overflow-x: auto; } .good { color: #1a7f37; } .bad { color: #b42318; }
"""


def esc(value: Any) -> str:
    """HTML-escaped text of a value (:func:`autorl.report.escape.html_text`); None shows as —.

    >>> esc(None), esc(0.123456), esc("<b>"), esc("a\\x1b[0m")
    ('—', '0.1235', '&lt;b&gt;', 'a\\\\x1b[0m')
    """
    return html_text(value)


def table(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """An HTML table; an :class:`Html` value (markup built here) is kept, all else is escaped.

    Trust goes with the value's type, not with its column, so text from a record can never reach
    the page unescaped by sitting in a column that elsewhere holds markup.
    """
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = []
    for row in rows:
        cells = []
        for value in row:
            css = ' class="num"' if isinstance(value, int | float) and not isinstance(value, bool) else ""
            cells.append(f"<td{css}>{esc(value)}</td>")
        if len(cells) != len(columns):
            raise ValueError(f"a row of {len(cells)} cells in a table of {len(columns)} columns")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def figure(png: bytes, alt: str, caption: str, file_name: str) -> str:
    """An embedded PNG (base64) with a caption that names its file under ``report/figures/``."""
    data = base64.b64encode(png).decode("ascii")
    return (
        f'<figure><img src="data:image/png;base64,{data}" alt="{esc(alt)}">'
        f"<figcaption>{esc(caption)} (<code>figures/{esc(file_name)}</code>)</figcaption></figure>"
    )


def page(title: str, sections: list[tuple[str, str, str]]) -> str:
    """The whole page: a title, a table of contents and ``(anchor, heading, html)`` sections."""
    toc = "".join(f'<li><a href="#{a}">{esc(h)}</a></li>' for a, h, _ in sections)
    body = "".join(f'<section id="{a}"><h2>{esc(h)}</h2>{content}</section>' for a, h, content in sections)
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        # No network and no scripts: the page must render the same from any copy of the folder.
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src data:; style-src 'unsafe-inline'\">"
        f'<link rel="icon" href="data:,"><title>{esc(title)}</title><style>{_CSS}</style></head>'
        f"<body><h1>{esc(title)}</h1><nav><ol>{toc}</ol></nav>{body}</body></html>"
    )

"""The sweep report's HTML: Jinja2 templates (``templates/``) and the typed values they render.

Agent-chosen text (model paths, file names, log lines, code, error messages) reaches the page, so
the engine escapes every value a template prints (autoescape, for templates of any name) after
:func:`shown` has written out its control characters (docs/threat-model.md). Nothing here marks a
string as safe: markup of the report's own (a link, a signed number, a folded diff, a figure) is
a typed value below that a macro of ``templates/components.html.j2`` turns into tags, so a string
is text wherever it lands, whichever column or section holds it.

The templates compose: ``base.html.j2`` is the layout of any page (styles, the content security
policy), ``components.html.j2`` the macros for these values, ``sections.html.j2`` one macro per
section of the sweep report and ``report.html.j2`` the page itself.
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jinja2

from autorl.records.results import visible_controls
from autorl.report.escape import plain


@dataclass(frozen=True)
class Link:
    """A link the report made: ``href`` a path of its own (relative), ``text`` any text."""

    href: str
    text: str


@dataclass(frozen=True)
class Signed:
    """A number shown with its sign, green above zero and red below (an improvement)."""

    value: float

    @property
    def text(self) -> str:
        """The number with its sign and 4 significant digits.

        >>> Signed(0.123456).text, Signed(-2.0).text
        ('+0.1235', '-2')
        """
        return f"{self.value:+.4g}"

    @property
    def css(self) -> str:
        """The class that colours it (empty for zero)."""
        return "good" if self.value > 0 else "bad" if self.value < 0 else ""


@dataclass(frozen=True)
class Diff:
    """A code diff folded under the names of the files it changes."""

    files: str
    text: str


CellValue = str | int | float | Link | Signed | Diff | None


@dataclass(frozen=True)
class Table:
    """Columns and rows of values; a value's type, never its column, decides how it is shown.

    Raises:
        ValueError: A row has another number of values than there are columns.
    """

    columns: Sequence[str]
    rows: Sequence[Sequence[CellValue]]

    def __post_init__(self) -> None:
        for row in self.rows:
            if len(row) != len(self.columns):
                raise ValueError(
                    f"a row of {len(row)} cells in a table of {len(self.columns)} columns"
                )


@dataclass(frozen=True)
class Figure:
    """An embedded PNG (``data`` in base64) with a caption that names its file in ``figures/``."""

    data: str
    alt: str
    caption: str
    file_name: str

    @classmethod
    def of(cls, png: bytes, alt: str, caption: str, file_name: str) -> Figure:
        """The figure of ``png``'s bytes."""
        return cls(base64.b64encode(png).decode("ascii"), alt, caption, file_name)


@dataclass(frozen=True)
class Section:
    """One section of a page: its anchor, its heading and the macro of ``sections.html.j2`` that
    renders its body from ``args``."""

    anchor: str
    heading: str
    macro: str
    args: Mapping[str, Any]


def shown(value: Any) -> Any:
    """What a template prints for ``value``, before the engine escapes it (Jinja2's ``finalize``).

    None shows as an em dash, floats with 4 significant digits, control characters other than
    newline and tab are written out. What a macro or an included template rendered is markup the
    engine already escaped, and passes as it is.

    >>> shown(None), shown(0.123456), shown(3), shown("a\\x1b[0m")
    ('—', '0.1235', '3', 'a\\\\x1b[0m')
    """
    if hasattr(value, "__html__"):
        return value
    return visible_controls(plain(value), keep="\n\t")


def _is_numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@functools.cache
def environment() -> jinja2.Environment:
    """The templates' environment: escaping on, an unknown name an error, our value tests."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("autorl.report", "templates"),
        # default=True: a template added under another extension is escaped as well.
        autoescape=jinja2.select_autoescape(("html.j2",), default_for_string=True, default=True),
        # A misspelt name fails the build instead of rendering as an empty string.
        undefined=jinja2.StrictUndefined,
        finalize=shown,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.tests.update(
        numeric=_is_numeric,
        link=lambda v: isinstance(v, Link),
        signed=lambda v: isinstance(v, Signed),
        diff=lambda v: isinstance(v, Diff),
    )
    return env


def render(template: str, **context: Any) -> str:
    """``templates/<template>`` rendered with ``context``.

    Raises:
        jinja2.UndefinedError: The template uses a name ``context`` lacks.
    """
    return environment().get_template(template).render(**context)


def page(title: str, sections: Sequence[Section]) -> str:
    """The sweep report's whole page: a title, a table of contents and the sections."""
    return render("report.html.j2", title=title, sections=sections)

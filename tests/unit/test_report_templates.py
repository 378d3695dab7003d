"""The report's Jinja2 templates: every value escaped, no way to mark text safe, shipped with the
package.

The page-level check that an agent's strings stay text is tests/unit/test_escaping.py; these tests
hold the engine's settings and each macro of ``templates/components.html.j2`` to it, so a new
template or section cannot opt out.
"""

from __future__ import annotations

import fnmatch
import re
import tomllib
from html.parser import HTMLParser
from pathlib import Path

import jinja2
import pytest

from autorl.records.results import visible_controls
from autorl.report.html_page import Diff, Figure, Link, Signed, Table, environment, render

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "autorl" / "report"
HOSTILE = "<script>alert(1)</script> \"quoted\" 'single' & </td></tr> \x1b[31m \u202e"


class Tags(HTMLParser):
    """The start tags (with attributes) and the text of an HTML fragment."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text = ""
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text += data


def _components() -> object:
    return environment().get_template("components.html.j2").module


def test_every_template_is_escaped_and_strict() -> None:
    env = environment()
    names = env.list_templates()
    assert {"base.html.j2", "components.html.j2", "sections.html.j2", "report.html.j2"} <= set(
        names
    )
    assert all(env.autoescape(name) for name in [*names, "later.txt", "viewer.js"])
    assert env.undefined is jinja2.StrictUndefined


def test_no_text_is_marked_safe() -> None:
    """Markup comes from the templates' own tags only: no ``Markup(...)``, ``|safe`` or
    ``autoescape false`` anywhere in the report's code or templates."""
    unsafe = re.compile(r"\bMarkup\s*\(|\|\s*safe\b|autoescape\s+false|markupsafe|def __html__")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted([*PACKAGE.glob("*.py"), *PACKAGE.glob("templates/*")])
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if unsafe.search(line)
    ]
    assert not found, found


def test_templates_ship_as_package_data() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["autorl.report"]
    files = [p.relative_to(PACKAGE).as_posix() for p in (PACKAGE / "templates").iterdir()]
    assert files and all(any(fnmatch.fnmatch(f, pattern) for pattern in patterns) for f in files)
    assert "dependencies" in config["project"]
    assert any(re.fullmatch(r"jinja2==[\d.]+", d) for d in config["project"]["dependencies"])


def test_a_table_shows_every_value_as_text() -> None:
    table = Table(
        (HOSTILE, "number"),
        [(HOSTILE, 1.23456), (Link(f"../cells/{HOSTILE}", HOSTILE), True), (None, 3)],
    )
    page = Tags(str(_components().table(table)))
    assert [tag for tag, _ in page.tags].count("td") == 6  # no cell broke out of its row
    assert {tag for tag, _ in page.tags} == {
        "div",
        "table",
        "thead",
        "tr",
        "th",
        "tbody",
        "td",
        "a",
    }
    assert page.text.count(visible_controls(HOSTILE, keep="\n\t")) == 3 and "1.235" in page.text
    assert "—" in page.text  # None
    classes = [attrs.get("class") for tag, attrs in page.tags if tag == "td"]
    assert classes == [None, "num", None, None, None, "num"]  # a bool is not a number
    (link,) = [attrs for tag, attrs in page.tags if tag == "a"]
    assert link["href"] == f"../cells/{visible_controls(HOSTILE)}"  # one attribute, as itself


@pytest.mark.parametrize("macro", ["diff", "signed", "figure"])
def test_each_component_keeps_its_values_as_text(macro: str) -> None:
    value = {
        "diff": Diff(HOSTILE, f"+{HOSTILE}\n</pre></details>"),
        "signed": Signed(-0.5),
        "figure": Figure.of(b"\x89PNG", HOSTILE, HOSTILE, HOSTILE),
    }[macro]
    page = Tags(str(getattr(_components(), macro)(value)))
    allowed = {
        "diff": {"details", "summary", "pre"},
        "signed": {"span"},
        "figure": {"figure", "img", "figcaption", "code"},
    }[macro]
    assert {tag for tag, _ in page.tags} == allowed
    if macro == "signed":
        assert page.tags == [("span", {"class": "bad"})] and page.text == "-0.5"
    elif macro == "figure":
        (img,) = [attrs for tag, attrs in page.tags if tag == "img"]
        assert img == {"src": "data:image/png;base64,iVBORw==", "alt": visible_controls(HOSTILE)}
        assert page.text == f"{visible_controls(HOSTILE)} (figures/{visible_controls(HOSTILE)})"
    else:
        assert page.text == visible_controls(HOSTILE) + visible_controls(
            f"+{HOSTILE}\n</pre></details>", keep="\n"
        )


def test_a_missing_name_fails_the_build() -> None:
    with pytest.raises(jinja2.UndefinedError):
        render("report.html.j2", title="t")  # no sections
    sections = environment().get_template("sections.html.j2").module
    with pytest.raises(jinja2.UndefinedError):
        sections.overview(sweep_dir="x")  # no `generated`, ...


def test_a_row_must_fill_its_columns() -> None:
    with pytest.raises(ValueError, match="a row of 1 cells in a table of 2 columns"):
        Table(("a", "b"), [("only one",)])


def test_another_page_reuses_the_layout_and_components() -> None:
    """What a live viewer does: extend the base layout and call the components."""
    page = (
        environment()
        .from_string(
            '{% extends "base.html.j2" %}{% import "components.html.j2" as ui %}'
            "{% block body %}<p>{{ note }}</p>{{ ui.table(table) }}{% endblock %}"
        )
        .render(title=HOSTILE, note=HOSTILE, table=Table(("cell",), [(HOSTILE,)]))
    )
    assert "default-src 'none'" in page and "<script>" not in page
    tags = Tags(page)
    assert tags.text.count(visible_controls(HOSTILE, keep="\n\t")) == 3  # title, note, cell

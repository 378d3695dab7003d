"""Agent-chosen text renders as inert text in every medium the harness writes it to.

One table of hostile strings (markup, Markdown links, spreadsheet formulas, control characters,
a bidi override, backtick runs) is placed where an agent puts text: the names of its code files,
its model paths, its log and the error texts of its submissions. The records and files are real (a
record store, a code-revision git repository, the report built from them); each test reads one
medium back and checks that every hostile string shows as itself, written out where it holds
control characters, and adds no markup: ``run_report.md`` rendered by a CommonMark renderer,
``report/index.html`` parsed as HTML, ``results.csv`` read as CSV, and the W&B rows.
"""

from __future__ import annotations

import csv
import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from rich.console import Console

from autorl.records.results import CSV_COLUMNS, csv_cell, visible_controls, write_results_csv
from autorl.records.store import RecordStore
from autorl.records.types import CellRecord, SubmissionRecord
from autorl.report.build import build_report
from autorl.report.escape import md_code_block, md_narrative, md_text
from autorl.report.sources import model_files
from autorl.report.stages import stage_statistics, stages_table
from autorl.tracking.wandb_runs import (
    MAX_TAG_CHARS,
    MAX_TEXT_CHARS,
    TABLE_COLUMNS,
    cell_run_config,
    cell_run_tags,
    table_rows,
)
from autorl.workspace.revisions import CodeRevisions

T0 = 1_700_000_000.0
HOSTILE = {
    "script": "<script>alert(1)</script>",
    "img-onerror": '<img src=x onerror="alert(1)">',
    "md-link": "[x](javascript:alert(1))",
    "md-image": "![x](https://evil.example/x.png)",
    "autolink": "<https://evil.example>",
    "hyperlink": '=HYPERLINK("https://evil.example","x")',
    "plus": "+1",
    "minus-formula": "-1+1",
    "at-sum": "@SUM(A1:A9)",
    "tab-start": "\tx",
    "cr-start": "\rx",
    "ansi": "\x1b[31mred\x1b[0m",
    "crlf-heading": "a\r\n# heading\n- item",
    "nul": "a\x00b",
    "bidi": "abc\u202edcb",
    "c1": "a\x9bb",
    "backticks": "```` ``` ` code",
    "table-pipe": "a | b | c",
    "emphasis": "*b* _i_ __u__ ~~s~~ $x$",
    "entity": "&lt;b&gt; &amp;",
    "html-comment": "<!-- x --> </td></tr></table>",
}
IDS = list(HOSTILE)
# Only what the report's own Markdown template produces.
MD_TAGS = {
    "h1",
    "h2",
    "p",
    "ul",
    "li",
    "strong",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "blockquote",
    "pre",
    "code",
}


def _name_part(text: str) -> str:
    """``text`` as part of a file or folder name: everything Linux allows (no ``/``, no NUL)."""
    return text.replace("/", "%").replace("\x00", "%")


class Page(HTMLParser):
    """Tags, attributes and the text of an HTML document, as a browser's parser would see them."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def handle_comment(self, data: str) -> None:
        self.tags.append(("!--", {"data": data}))

    @property
    def all_text(self) -> str:
        return "".join(self.text)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sweep of one cell whose agent put every hostile string in a file name, a model path, its
    log and an error, with its report built."""
    sweep_dir = tmp_path_factory.mktemp("hostile-sweep")
    cell_dir = sweep_dir / "cells" / "c1"
    code = cell_dir / "workspace" / "code"
    code.mkdir(parents=True)
    (cell_dir / "workspace" / "run_meta.json").write_text(
        json.dumps(
            {"start_time": T0, "timeout_s": 600, "last_submit_time": T0 + 100, "end_time": T0 + 300}
        )
    )
    with RecordStore(sweep_dir / "records.sqlite") as store:
        store.upsert_cell(
            CellRecord(
                "sw",
                "c1",
                "scripted",
                "none",
                "gsm8k",
                1,
                "tiny",
                0,
                600,
                "completed",
                baseline=10.0,
                best_score=6.5,
                improvement=-3.5,
                exit_class="exited",
                exit_code=0,
            )
        )
        revisions = CodeRevisions(
            cell_dir / "code_history.git", code, "c1", store.add_code_revision
        )
        log = []
        for i, (key, text) in enumerate(HOSTILE.items(), start=1):
            (code / f"n{i}-{_name_part(text)}.py").write_text(f"# {text}\nlr = {i}\n")
            model_path = f"output/m{i}-{_name_part(text)}"
            (cell_dir / "workspace" / model_path).mkdir(parents=True)
            rev = revisions.snapshot("submission")
            log += [f"step {key}: {text}", f"submitted {model_path}"]
            store.upsert_submission(
                SubmissionRecord(
                    "c1",
                    i,
                    model_path,
                    "invalid",
                    error=f"agent said: {text} (end)",
                    code_revision=rev,
                    submitted_at=T0 + i,
                )
            )
        (cell_dir / "agent.log").write_text("\n".join(log) + "\n")
        write_results_csv(store, "sw", sweep_dir / "results.csv")
    build_report(sweep_dir)
    return sweep_dir


@pytest.fixture(scope="module")
def markdown_page(sweep: Path) -> Page:
    """``run_report.md`` rendered as CommonMark, GitHub's tables and strikethrough, raw HTML on."""
    md = (sweep / "cells" / "c1" / "run_report.md").read_text(encoding="utf-8")
    return Page(
        MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"]).render(md)
    )


@pytest.fixture(scope="module")
def html_page(sweep: Path) -> tuple[str, Page]:
    html = (sweep / "report" / "index.html").read_text(encoding="utf-8")
    return html, Page(html)


@pytest.mark.parametrize("key", IDS)
def test_run_report_md_shows_each_string_as_text(key: str, markdown_page: Page) -> None:
    text, i = HOSTILE[key], IDS.index(key) + 1
    shown = markdown_page.all_text
    assert visible_controls(f"agent said: {text} (end)") in shown  # the error line
    assert (
        visible_controls(f"output/m{i}-{_name_part(text)}") in shown
    )  # the model path in its heading
    assert {tag for tag, _ in markdown_page.tags} <= MD_TAGS


def test_run_report_md_has_no_markup_from_the_agent(sweep: Path, markdown_page: Page) -> None:
    md = (sweep / "cells" / "c1" / "run_report.md").read_text(encoding="utf-8")
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", md)
    tags = [tag for tag, _ in markdown_page.tags]
    assert tags.count("h2") == len(HOSTILE) and tags.count("h1") == 1  # no heading of the agent's
    assert tags.count("table") == 1 and all(len(row) == 2 for row in _rows(md, "| metric"))


def test_code_block_fence_outlasts_every_backtick_run() -> None:
    diff = "+a\n+```` ``` `\n+<script>x</script>"
    page = Page(
        MarkdownIt("commonmark", {"html": True}).render(
            "\n".join(md_code_block(diff, "diff")) + "\nafter\n"
        )
    )
    assert [tag for tag, _ in page.tags] == ["pre", "code", "p"]
    assert page.all_text == diff + "\n\nafter\n"  # the code, its newline, then the paragraph


def _rows(md: str, header: str) -> list[list[str]]:
    """The cells of the Markdown table starting with ``header``, split at unescaped pipes."""
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(re.split(r"(?<!\\)\|", line.strip("|")))
    return rows


@pytest.mark.parametrize("key", IDS)
def test_markdown_table_cells_keep_their_columns(key: str) -> None:
    md = f"| metric | value |\n|---|---|\n| {md_text(HOSTILE[key])} | {md_text(key)} |\n"
    page = Page(MarkdownIt("commonmark", {"html": True}).enable("table").render(md))
    assert [tag for tag, _ in page.tags].count("td") == 2
    assert visible_controls(HOSTILE[key]) in page.all_text


@pytest.mark.parametrize("key", IDS)
def test_llm_summary_keeps_its_layout_but_no_markup_of_the_agent(key: str) -> None:
    reply = f"# Summary\n\n- iteration 1 submitted {HOSTILE[key]} (end)\n- **worked**\n"
    page = Page(MarkdownIt("commonmark", {"html": True}).render(md_narrative(reply)))
    assert {tag for tag, _ in page.tags} <= {"h1", "ul", "li", "strong", "code", "em", "del"}
    assert "worked" in page.all_text and "(end)" in page.all_text
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]", page.all_text)


@pytest.mark.parametrize("key", IDS)
def test_html_report_shows_each_string_as_text(key: str, html_page: tuple[str, Page]) -> None:
    text, i = HOSTILE[key], IDS.index(key) + 1
    _, page = html_page
    shown = page.all_text
    assert visible_controls(f"output/m{i}-{_name_part(text)}", keep="\n\t") in shown
    assert visible_controls(f"agent said: {text} (end)", keep="\n\t") in shown


def test_html_report_runs_nothing_and_loads_nothing(html_page: tuple[str, Page]) -> None:
    html, page = html_page
    assert "default-src 'none'" in html and "script-src" not in html
    tags = {tag for tag, _ in page.tags}
    assert not tags & {"script", "iframe", "object", "embed", "form", "base", "!--"}
    for tag, attrs in page.tags:
        assert not [a for a in attrs if a.startswith("on")], (tag, attrs)
        if tag == "img":
            assert (attrs.get("src") or "").startswith("data:image/png;base64,")
        if tag == "a":
            assert re.fullmatch(r"#[\w-]+|\.\./cells/c1/[\w.]+", attrs.get("href") or ""), attrs
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", html)


@pytest.fixture(scope="module")
def csv_rows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    """``results.csv`` of a sweep whose cells carry the hostile strings in their text fields (the
    model, the error, the integrity flags), with a negative improvement."""
    folder = tmp_path_factory.mktemp("hostile-csv")
    with RecordStore(folder / "records.sqlite") as store:
        for key, text in HOSTILE.items():
            store.upsert_cell(
                CellRecord(
                    "sw",
                    key,
                    "scripted",
                    "none",
                    "gsm8k",
                    1,
                    text,
                    0,
                    600,
                    "completed",
                    baseline=10.0,
                    best_score=6.5,
                    improvement=-3.5,
                    error=text,
                    integrity_flags=text,
                    task_source=text,
                )
            )
        write_results_csv(store, "sw", folder / "results.csv")
    with (folder / "results.csv").open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == list(CSV_COLUMNS)
    return {row["cell_id"]: row for row in rows}


@pytest.mark.parametrize("key", IDS)
def test_results_csv_text_cannot_start_a_formula(
    key: str, csv_rows: dict[str, dict[str, str]]
) -> None:
    text, row = HOSTILE[key], csv_rows[key]
    # A text that is a plain number ("+1") can only be read as that number, never run as a formula.
    number = re.fullmatch(r"[-+]?\d+(\.\d*)?", text) is not None
    formula = text.startswith(("=", "+", "-", "@", "\t", "\r")) and not number
    for column in ("model", "error", "integrity_flags", "task_source"):
        assert row[column] == ("'" if formula else "") + visible_controls(text)
        assert number or not row[column].startswith(("=", "+", "-", "@", "\t", "\r"))
        assert not re.search(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e]", row[column])
    assert (row["improvement"], row["baseline"], row["best_score"]) == (
        "-3.5",
        "10.0",
        "6.5",
    )  # numbers stay numbers


def test_csv_numbers_are_never_prefixed() -> None:
    assert [csv_cell(v) for v in (-3.5, -1, "-3.5", "+2e-3", "-1+1", "-")] == [
        -3.5,
        -1,
        "-3.5",
        "+2e-3",
        "'-1+1",
        "'-",
    ]


@pytest.mark.parametrize("key", IDS)
def test_wandb_rows_carry_no_controls_and_fixed_keys(key: str) -> None:
    text = HOSTILE[key] + "x" * 2000
    config = {"agent": {"mode": text}, "task": {"eval": {"fixture": {"note": [text]}}}}
    cell = CellRecord(
        "sw",
        "c1",
        text,
        text,
        "gsm8k",
        1,
        text,
        0,
        600,
        "completed",
        exit_class=text,
        integrity_flags=text,
        config_json=json.dumps(config),
    )
    (row,) = table_rows([cell])
    values = dict(zip(TABLE_COLUMNS, row, strict=True))
    for column in ("agent", "driver", "model", "mode", "exit_class", "integrity_flags"):
        assert values[column] == visible_controls(text)[: MAX_TEXT_CHARS - 1] + "…"
    run_config = cell_run_config(cell)
    assert set(run_config) == {"agent", "task"} and list(run_config["task"]["eval"]["fixture"]) == [
        "note"
    ]
    for value in (run_config["agent"]["mode"], run_config["task"]["eval"]["fixture"]["note"][0]):
        assert len(value) == MAX_TEXT_CHARS and not re.search(
            r"[\x00-\x1f\x7f-\x9f\u202a-\u202e]", value
        )
    assert all(
        len(tag) <= MAX_TAG_CHARS and not re.search(r"[\x00-\x1f]", tag)
        for tag in cell_run_tags(cell)
    )


def test_stage_table_in_the_terminal_shows_model_paths_as_text() -> None:
    path = "output/[link=https://evil.example]x[/link][bold]\x1b]8;;https://evil.example\x07y"
    cells = [
        CellRecord(
            "sw", f"c{s}", "scripted", "none", "gsm8k", 1, "tiny", s, 600, "completed", baseline=1.0
        )
        for s in (0, 1)
    ]
    subs = {c.cell_id: [SubmissionRecord(c.cell_id, 1, path, "scored", score=2.0)] for c in cells}
    console = Console(file=io.StringIO(), width=400, force_terminal=True, color_system="truecolor")
    console.print(stages_table("t", stage_statistics(cells, subs)))
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "[link=https://evil.example]x[/link][bold]" in out and "\\x1b]8;;" in out
    assert "\x1b]8" not in out and "\x07" not in out  # no terminal hyperlink, no bell


def test_model_files_never_follow_the_agents_links(tmp_path: Path) -> None:
    host = tmp_path / "host-secret.bin"
    host.write_bytes(b"ctrl.trainer.grpo_config\nGRPOConfig\n")
    model = tmp_path / "workspace" / "output" / "v1"
    model.mkdir(parents=True)
    (model / "training_args.bin").symlink_to(host)
    assert model_files(tmp_path / "workspace", "output/v1") == {}
    (model / "training_args.bin").unlink()
    (model / "training_args.bin").write_bytes(host.read_bytes())
    copied = model_files(tmp_path / "workspace", "output/v1")
    assert copied == {"training_args.bin": host.read_bytes()}

"""``python -m autorl.report <sweep_dir>``: (re)build a sweep's report from its records
(docs/design.md#records-and-the-report).

Writes ``<sweep_dir>/report/index.html`` (self-contained) with its figures under
``report/figures/``, and each cell's ``metrics.json``, ``run_report.json`` and ``run_report.md``.
Reads nothing but the sweep folder. With ``--summarizer DRIVER`` (a ``conf/driver`` name) an LLM
also writes each cell's ``run_summary.md`` on top of those facts.

Examples:
    python -m autorl.report outputs/default
    python -m autorl.report outputs/default --summarizer gpt-5
    python -m autorl.report outputs/default --summarizer local --summarizer-base-url http://127.0.0.1:8000/v1
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from autorl.errors import AutorlError


def main(argv: list[str] | None = None) -> int:
    """Run the command; returns the exit code (0 done, 2 bad arguments or sweep folder)."""
    parser = argparse.ArgumentParser(
        prog="python -m autorl.report",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument(
        "sweep_dir", type=Path, help="the sweep folder, <out_dir>/<sweep_id> (holds records.sqlite)"
    )
    parser.add_argument(
        "--summarizer",
        metavar="DRIVER",
        default=None,
        help="conf/driver name for LLM run summaries",
    )
    parser.add_argument(
        "--summarizer-base-url", default=None, help="override the driver's base_url"
    )
    parser.add_argument("--summarizer-model", default=None, help="override the driver's model id")
    parser.add_argument(
        "--summarizer-timeout-s", type=float, default=120.0, help="per-request timeout"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from autorl.report.build import build_report

    try:
        index = build_report(
            args.sweep_dir,
            summarizer_driver=args.summarizer,
            summarizer_base_url=args.summarizer_base_url,
            summarizer_model=args.summarizer_model,
            summarizer_timeout_s=args.summarizer_timeout_s,
        )
    except AutorlError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"report: {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

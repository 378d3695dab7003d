"""The submitting side of a sweep run as a Ray Job: submit or attach, follow, stop, bring the folder
back.

Everything goes through the cluster's dashboard (``cluster.jobs_address``) over HTTP: the Jobs API
(``JobSubmissionClient``) and, for the sweep folder, the log API that serves files of the job
driver's log folder, where :mod:`autorl.jobs.entry` leaves its archive.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import logging
import re
import shutil
import sys
import tarfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from autorl.cluster import http_auth_headers, jobs_client
from autorl.errors import PrerequisiteError
from autorl.jobs.entry import ARCHIVE_LINE
from autorl.jobs.spec import (
    METADATA_ARCHIVE,
    METADATA_SWEEP,
    JobOptions,
    archive_name,
    entrypoint,
    runtime_env,
    submission_id,
)

# ray.job_submission.JobSubmissionClient, made by autorl.cluster.jobs_client (only the sweep runtime
# imports ray).
JobSubmissionClient = Any

if TYPE_CHECKING:
    from autorl.config import SweepPlan

# One line per cell state change, as autorl.progress.CellBoard prints it when stdout is not a
# terminal.
_CELL_LINE = re.compile(
    r"^\[autorl\] (?P<cell>\S+): (?P<status>\w+) best=(?P<best>\S+) subs=(?P<subs>\d+)$"
)
_TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
STOPPED_EXIT = 130


class LogBoard:
    """Shows a job's log as it arrives: cell lines feed a live table (on a terminal), the rest
    prints as is.
    """

    def __init__(self, console: Console, title: str) -> None:
        """Create the board; ``seen`` counts the characters shown (a re-tail starts from the log's
        start).
        """
        self.console = console
        self.title = title
        self.seen = 0
        self.cells: dict[str, tuple[str, str, str]] = {}
        self.archive: tuple[str, int, str] | None = None
        self._partial = ""
        self.live: Live | None = None

    def table(self) -> Table:
        """The cells as the job last reported them."""
        table = Table(title=self.title, title_justify="left")
        for column in ("cell", "status", "best", "subs"):
            table.add_column(column, overflow="fold" if column == "cell" else "ellipsis")
        for cell, (status, best, subs) in self.cells.items():
            table.add_row(cell, status, best, subs)
        return table

    def feed(self, text: str) -> None:
        """Take the log's text from its start (what was shown already is skipped)."""
        new = text[self.seen :] if len(text) > self.seen else ""
        self.seen = max(self.seen, len(text))
        self._lines(new)

    def feed_chunk(self, chunk: str, offset: int) -> int:
        """Take a chunk that starts at ``offset`` chars into the log; returns the offset after
        it.
        """
        end = offset + len(chunk)
        if end > self.seen:
            self._lines(chunk[max(0, self.seen - offset) :])
            self.seen = end
        return end

    def _lines(self, new: str) -> None:
        lines = (self._partial + new).split("\n")
        self._partial = lines.pop()
        for line in lines:
            self._line(line.rstrip("\r"))

    def _line(self, line: str) -> None:
        if match := _CELL_LINE.match(line):
            self.cells[match["cell"]] = (match["status"], match["best"], match["subs"])
            if self.live is not None:
                self.live.update(self.table())
                return
        if line.startswith(ARCHIVE_LINE):
            name, size, digest = line[len(ARCHIVE_LINE) :].split()
            self.archive = (name, int(size), digest)
        self.console.print(line, markup=False, highlight=False, soft_wrap=True)


def _running_job(client: JobSubmissionClient, sweep_id: str) -> str | None:
    """The id of a job of this sweep that has not ended (a second one would write the same
    sweep).
    """
    for job in client.list_jobs():
        status = str(getattr(job.status, "value", job.status))
        if (job.metadata or {}).get(METADATA_SWEEP) == sweep_id and status not in _TERMINAL:
            return str(job.submission_id)
    return None


def submit(client: JobSubmissionClient, plan: SweepPlan, argv: Sequence[str]) -> str:
    """Submit the sweep as one job; returns its id."""
    from autorl.plugins import active_dirs

    cluster = plan.base_config.cluster
    job_id = submission_id(plan.sweep_id)
    return str(
        client.submit_job(
            entrypoint=entrypoint(argv, cluster, plan.sweep_id, job_id),
            submission_id=job_id,
            runtime_env=runtime_env(cluster, active_dirs()),
            metadata={METADATA_SWEEP: plan.sweep_id, METADATA_ARCHIVE: archive_name(job_id)},
        )
    )


async def _tail(client: JobSubmissionClient, job_id: str, board: LogBoard) -> None:
    offset = 0
    async for chunk in client.tail_job_logs(job_id):
        offset = board.feed_chunk(chunk, offset)


def _status(client: JobSubmissionClient, job_id: str) -> str:
    status = client.get_job_status(job_id)
    return str(getattr(status, "value", status))


def follow(client: JobSubmissionClient, job_id: str, board: LogBoard, console: Console) -> str:
    """Show the job's log until it ends; Ctrl-C stops the job (twice: leave it and return).

    Returns:
        The job's final status, or ``"DETACHED"`` after a second Ctrl-C.
    """
    stopping = False
    while True:
        try:
            try:
                asyncio.run(_tail(client, job_id, board))
            except RuntimeError:  # the log stream broke before the job ended: read it again
                time.sleep(1)
            status = _status(client, job_id)
            if status in _TERMINAL:
                board.feed(
                    client.get_job_logs(job_id)
                )  # the end of the log, if the stream missed it
                return status
        except KeyboardInterrupt:
            if stopping:
                return "DETACHED"
            stopping = True
            console.print(
                f"[yellow]stopping job {job_id}[/]: its sweep cancels the running cells "
                "(run the same command again to resume; Ctrl-C again to stop waiting)"
            )
            client.stop_job(job_id)


def download(
    client: JobSubmissionClient,
    address: str,
    job_id: str,
    archive: tuple[str, int, str],
    dest: Path,
) -> None:
    """Fetch the sweep folder's archive from the job driver's node and put it at ``dest`` (replacing
    it).

    Raises:
        PrerequisiteError: the log API refuses the file, or what came is not what the job packed.
    """
    import requests

    # Ray's own helper for its HTTP APIs (ray.util.state.get_log uses it): the bearer token as Ray
    # finds it.

    name, size, digest = archive
    node_id = client.get_job_info(job_id).driver_node_id
    response = requests.get(
        f"{address.rstrip('/')}/api/v0/logs/file",
        params={"node_id": node_id, "filename": name, "lines": -1},
        headers=http_auth_headers(),
        timeout=600,
    )
    data = response.content
    if (
        response.status_code != 200
        or len(data) != size
        or hashlib.sha256(data).hexdigest() != digest
    ):
        raise PrerequisiteError(
            f"the sweep folder of job {job_id} did not come back intact from {address} (HTTP "
            f"{response.status_code}, {len(data)} of {size} bytes): "
            f"{response.text[:200] if response.status_code != 200 else 'checksum differs'}"
        )
    incoming = dest.parent / f".{dest.name}.incoming"
    shutil.rmtree(incoming, ignore_errors=True)
    incoming.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(
            incoming, filter="data"
        )  # refuses absolute paths, links out of the folder, devices
    (unpacked,) = incoming.iterdir()
    # Replace, not merge: a stale records.sqlite-wal next to a new records.sqlite would corrupt it.
    old = dest.parent / f".{dest.name}.old"
    if dest.exists():
        shutil.rmtree(old, ignore_errors=True)
        dest.rename(old)
    unpacked.rename(dest)
    shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(incoming, ignore_errors=True)


def exit_code(status: str, info: Any) -> int:
    """The sweep's exit code from the job's end: 0 succeeded, the driver's code when it failed, 130
    stopped.
    """
    if status == "SUCCEEDED":
        return 0
    if status == "STOPPED":
        return STOPPED_EXIT
    code = getattr(info, "driver_exit_code", None)
    return int(code) if code else 1


def run_as_job(plan: SweepPlan, argv: Sequence[str], options: JobOptions) -> int:
    """``python -m autorl.sweep cluster=<name> ...`` with a Jobs address: submit (or attach),
    follow, download.

    Returns:
        The exit code of the sweep (docs/design.md#commands), 130 when the job was stopped, 0 after
        ``detach=true``.
    """
    console = Console(width=None if sys.stdout.isatty() else 160)
    cluster = plan.base_config.cluster
    address = str(cluster.jobs_address)
    client = jobs_client(cluster)
    # Ray's INFO lines (each .gitignore skipped while packaging, the log socket closing) would bury
    # the sweep's.
    logging.getLogger("ray").setLevel(logging.WARNING)
    attach = f"python -m autorl.sweep cluster={cluster.name} attach={{}}"
    if options.attach:
        job_id = options.attach
        try:
            info = client.get_job_info(job_id)
        except RuntimeError as error:
            raise PrerequisiteError(
                f"no job {job_id!r} at {address}: {str(error).splitlines()[0]}"
            ) from error
        sweep_id = (info.metadata or {}).get(METADATA_SWEEP) or plan.sweep_id
    else:
        sweep_id = plan.sweep_id
        running = _running_job(client, sweep_id)
        if running:
            console.print(
                f"sweep {sweep_id} already runs as job {running} on {address}; following it"
            )
            job_id = running
        else:
            job_id = submit(client, plan, argv)
            console.print(f"submitted sweep {sweep_id} as Ray Job {job_id} to {address}")
    if options.detach:
        console.print(f"detached; follow it with: {escape(attach.format(job_id))}")
        return 0
    local_dir = Path(plan.base_config.out_dir).expanduser().resolve() / sweep_id
    board = LogBoard(console, f"sweep {sweep_id} (job {job_id})")
    if console.is_terminal and plan.base_config.progress:
        board.live = Live(board.table(), console=console, refresh_per_second=2)
    if board.live is not None:
        with board.live:
            status = follow(client, job_id, board, console)
    else:
        status = follow(client, job_id, board, console)
    if status == "DETACHED":
        console.print(
            "[yellow]stopped waiting[/]; the job still stops. Fetch its folder with: "
            f"{escape(attach.format(job_id))}"
        )
        return STOPPED_EXIT
    info = client.get_job_info(job_id)
    if board.archive is None:
        console.print(
            f"[red]job {job_id} {status.lower()} without packing its sweep folder[/]: "
            f"{escape(str(info.message))}"
        )
        return exit_code(status, info) or 1
    download(client, address, job_id, board.archive, local_dir)
    console.print(f"job {job_id} {status.lower()}; its sweep folder is now {local_dir}")
    return exit_code(status, info)

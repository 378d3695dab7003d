"""The entry point of a sweep submitted as a Ray Job (runs on the cluster, in the job's
working_dir).

``python -m autorl.jobs.entry --sweep-dir DIR --archive NAME -- <sweep overrides>`` runs
``python -m autorl.sweep`` with the overrides, then packs the sweep folder into ``NAME`` in the
job driver's log folder, where the submitting side downloads it through the dashboard's log API
(:mod:`autorl.jobs.client`). It packs on every way out: a finished sweep, a failed one, and a
stopped job (``stop_job`` sends SIGTERM, which the sweep handles like Ctrl-C: running cells are
cancelled and resumable).

Its last line is ``autorl-job: archive <name> <bytes> <sha256>`` (or
``autorl-job: no archive ...``), which the client checks the download against.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from autorl.jobs.spec import PLUGINS_ENV

ARCHIVE_LINE = "autorl-job: archive"
STAY_ON_CLUSTER = (
    "workspace",
    "home",
    "sockets",
)  # per cell, under <job_out_dir>/<sweep_id>/cells/<id>/


def job_log_dir() -> Path:
    """The job driver's log folder on this node.

    Ray 2.60's job supervisor starts the entry point with its stdout on
    ``<session>/logs/job-driver-<job_id>.log`` (``JobSupervisor._exec_entrypoint``), the folder the
    dashboard's log API serves; no public API names it.

    Raises:
        RuntimeError: stdout is not a job driver's log (this module runs outside a Ray Job).
    """
    try:
        stdout = Path(os.readlink("/proc/self/fd/1"))
    except OSError as error:
        raise RuntimeError(
            f"cannot read where stdout goes ({error}); autorl.jobs.entry runs only as a Ray Job"
        ) from error
    if not stdout.name.startswith("job-driver-"):
        raise RuntimeError(
            f"stdout is {stdout}, not a Ray job driver's log; autorl.jobs.entry runs only as a Ray "
            "Job"
        )
    return stdout.parent


def uploaded_plugins(names: list[str], search: list[str]) -> list[Path]:
    """The plugin folders the job's runtime env unpacked (``py_modules``): ``<entry>/<name>`` of a
    path entry.

    Raises:
        RuntimeError: a plugin folder is on no path entry (the runtime env did not carry it).
    """
    found = []
    for name in names:
        hits = [Path(entry) / name for entry in search if entry and (Path(entry) / name).is_dir()]
        if not hits:
            raise RuntimeError(
                f"the plugin folder {name!r} the job was submitted with is not on this node's "
                "PYTHONPATH"
            )
        found.append(hits[0])
    return found


def _keep(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """Only files and folders, and none of a cell's agent-side folders (``cells/<id>/workspace``
    ...).
    """
    parts = member.name.split("/")
    if len(parts) >= 4 and parts[1] == "cells" and parts[3] in STAY_ON_CLUSTER:
        return None
    return (
        member if member.isfile() or member.isdir() else None
    )  # links and sockets mean nothing elsewhere


def pack(sweep_dir: Path, archive: Path) -> tuple[int, str]:
    """Write ``sweep_dir`` as a gzipped tar (under ``<sweep_id>/``) to ``archive``, atomically.

    Results, the record store, the report and each cell's records, logs, code revisions and run
    report; the agents' workspaces and homes (trained weights, caches: gigabytes) stay on the
    cluster.

    Returns:
        The archive's size in bytes and its SHA-256.
    """
    archive.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".autorl-", suffix=".tar.gz", dir=archive.parent)
    os.close(fd)
    with tarfile.open(tmp, "w:gz") as tar:
        tar.add(sweep_dir, arcname=sweep_dir.name, filter=_keep)
    os.replace(tmp, archive)  # the client never sees half an archive
    data = archive.read_bytes()
    return len(data), hashlib.sha256(data).hexdigest()


def main(argv: list[str] | None = None) -> int:
    """Run the sweep (a child process), pack its folder; returns the sweep's exit code (130 when
    stopped).
    """
    parser = argparse.ArgumentParser(
        prog="python -m autorl.jobs.entry", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--sweep-dir", required=True, help="the in-job sweep's folder: <job_out_dir>/<sweep_id>"
    )
    parser.add_argument(
        "--archive", required=True, help="file name of the archive in the job's log folder"
    )
    parser.add_argument("overrides", nargs="*", help="the sweep's overrides (after --)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    # Ray's supervisor sends SIGTERM to the whole process tree: the sweep (a child, so that it is a
    # `python -m autorl.sweep` like any other) cancels its cells; this process waits for it, then
    # packs.
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    overrides = list(args.overrides)
    if names := [n for n in os.environ.get(PLUGINS_ENV, "").split(":") if n]:
        folders = uploaded_plugins(
            names, [*os.environ.get("PYTHONPATH", "").split(os.pathsep), *sys.path]
        )
        overrides.append(f"plugins=[{','.join(repr(str(f)) for f in folders)}]")
    sweep = subprocess.Popen([sys.executable, "-m", "autorl.sweep", *overrides])
    try:
        while True:
            try:
                code = sweep.wait()
                break
            except (
                KeyboardInterrupt
            ):  # SIGINT (RAY_JOB_STOP_SIGNAL=SIGINT): the sweep got it too; wait on
                print(
                    "autorl-job: interrupted; waiting for the sweep to cancel its cells", flush=True
                )
    finally:
        sweep_dir = Path(args.sweep_dir).expanduser().resolve()
        if sweep_dir.is_dir():
            size, digest = pack(sweep_dir, job_log_dir() / args.archive)
            print(f"{ARCHIVE_LINE} {args.archive} {size} {digest}", flush=True)
        else:
            print(f"autorl-job: no archive: {sweep_dir} does not exist", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())

"""The scripted agent's record of its finished stages, so that a resumed run goes on from the last.

After each stage (SFT, GRPO, an interactive recipe's RL) the agent writes
:data:`PROGRESS_FILE` into its workspace: the stage's name, its output folder (with the size of
every file in it) and, once it is submitted, the grader's answer. The file lies in ``code/``, so a
checkpoint of the workspace carries it with the models it describes.

A run started with ``--resume`` (the adapter passes it when the cell is resumed: a replaced node,
or ``agent.reprompt``) reads the file back with :meth:`Progress.start`. The recorded stages are
then replayed in order: a stage whose name and output folder match the next recorded one, and
whose folder still holds the files recorded (same names, same sizes, readable ``config.json`` and
safetensors headers), is skipped; the first stage that does not match, and every stage after it,
runs again, since a later stage starts from an earlier one's output. A submission recorded for a
skipped stage is not made again. The file is workspace data that the agent's own code (or a
restore cut short) could have left in any state: anything that does not validate means starting
over, and the log says why.

Standard library only: the agent side runs with a toolchain that has no autorl.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROGRESS_FILE = Path("code") / "scripted_progress.json"
# The runner's argument that asks for a resume (the adapter adds it on a resumed launch).
RESUME_FLAG = "--resume"
FORMAT_VERSION = 1
# A safetensors file starts with its header's length (8 bytes, little-endian) and the header;
# headers of real models are a few hundred kilobytes, so a larger length means a damaged file.
_MAX_SAFETENSORS_HEADER = 100 << 20
# A record lists a few stages and their files; anything much larger is not one.
_MAX_PROGRESS_BYTES = 4 << 20


class ProgressError(ValueError):
    """The progress file does not hold a valid record (the message says what is wrong)."""


@dataclass
class StageRecord:
    """One finished stage.

    Attributes:
        name: The stage (``sft``, ``grpo``, ``online_grpo``, ...).
        output: Its output folder, relative to the workspace where it lies inside it.
        files: Every file in the folder (relative path -> size in bytes) when the stage ended.
        extra: What the stage needs restored besides its model (e.g. a file of SFT's samples).
        submission: The grader's answer to the submission of ``output``; ``{"pending": true}``
            while the request is under way.
    """

    name: str
    output: str
    files: dict[str, int]
    extra: dict[str, Any] = field(default_factory=dict)
    submission: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The record as the file holds it."""
        return {
            "name": self.name,
            "output": self.output,
            "files": self.files,
            "extra": self.extra,
            "submission": self.submission,
        }

    @classmethod
    def from_dict(cls, data: Any, where: str) -> StageRecord:
        """A stage record from the file's JSON.

        Raises:
            ProgressError: A field is missing or of the wrong type.
        """
        if not isinstance(data, dict):
            raise ProgressError(f"{where} must be an object, not {type(data).__name__}")
        name, output, files = data.get("name"), data.get("output"), data.get("files")
        extra, submission = data.get("extra", {}), data.get("submission")
        if not isinstance(name, str) or not name:
            raise ProgressError(f"{where}.name must be a non-empty string, got {name!r}")
        if not isinstance(output, str) or not output:
            raise ProgressError(f"{where}.output must be a non-empty string, got {output!r}")
        if not isinstance(files, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
            for k, v in files.items()
        ):
            raise ProgressError(f"{where}.files must map file names to sizes")
        if not isinstance(extra, dict):
            raise ProgressError(f"{where}.extra must be an object")
        if submission is not None and not isinstance(submission, dict):
            raise ProgressError(f"{where}.submission must be an object or null")
        return cls(name, output, dict(files), dict(extra), submission)


def workspace_key(path: str | Path) -> str:
    """``path`` as the progress file names it: relative to the workspace (the current directory)
    where it lies inside it, so that a workspace restored at another path still matches.

    >>> workspace_key(Path.cwd() / "output" / "v1"), workspace_key("output/./v1")
    ('output/v1', 'output/v1')
    """
    here = Path.cwd().resolve()
    resolved = (here / path).resolve()
    try:
        return resolved.relative_to(here).as_posix()
    except ValueError:
        return resolved.as_posix()


def folder_files(folder: Path) -> dict[str, int]:
    """Every file under ``folder`` (relative POSIX path -> size); empty if there is no folder."""
    if not folder.is_dir():
        return {}
    return {
        path.relative_to(folder).as_posix(): path.stat().st_size
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def model_folder_problem(folder: Path, recorded: dict[str, int]) -> str | None:
    """Why ``folder`` is not the model folder the stage left (None: it is).

    It must hold the ``recorded`` files at their sizes (a restore cut short leaves some missing or
    short), a ``config.json`` that parses, and safetensors files whose headers parse and whose
    data ends where the file does.
    """
    if not recorded:
        return "the record lists no files"
    present = folder_files(folder)
    missing = sorted(set(recorded) - set(present))
    if missing:
        return f"{len(missing)} recorded file(s) missing, e.g. {missing[0]}"
    changed = sorted(name for name, size in recorded.items() if present[name] != size)
    if changed:
        return f"{changed[0]} is {present[changed[0]]} bytes, {recorded[changed[0]]} recorded"
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        return f"config.json does not load: {error}"
    if not isinstance(config, dict):
        return "config.json holds no object"
    weights = [name for name in recorded if name.endswith(".safetensors")]
    if not weights:
        return "no safetensors weights"
    for name in weights:
        problem = _safetensors_problem(folder / name)
        if problem is not None:
            return f"{name}: {problem}"
    return None


def _safetensors_problem(path: Path) -> str | None:
    """Why ``path`` is no complete safetensors file (None: its header parses and its tensors'
    data ends at the file's end)."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            return "shorter than a safetensors header"
        (length,) = struct.unpack("<Q", head)
        if length > min(_MAX_SAFETENSORS_HEADER, size - 8):
            return f"header length {length} does not fit the file"
        try:
            header = json.loads(handle.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            return f"header does not parse: {error}"
    if not isinstance(header, dict):
        return "header holds no object"
    ends = [
        entry["data_offsets"][1]
        for key, entry in header.items()
        if key != "__metadata__" and isinstance(entry, dict) and "data_offsets" in entry
    ]
    if not ends or 8 + length + max(ends) != size:
        return "tensor data does not end at the end of the file"
    return None


def settings_fingerprint(settings: dict[str, Any]) -> str:
    """A hash of the run's settings: a record made with other settings is not resumed."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` in one step: a run killed mid-write (a lost node) leaves the
    old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def read_record(path: Path, fingerprint: str) -> list[StageRecord]:
    """The stages recorded in ``path`` by a run with settings ``fingerprint``.

    Raises:
        ProgressError: The file cannot be read, is not JSON, or does not hold a record of this
            format made with these settings.
    """
    if not path.exists():
        raise ProgressError(f"there is no {path}")
    if not path.is_file():  # a FIFO or a folder in its place: reading would block or fail
        raise ProgressError(f"{path} is no regular file")
    if path.stat().st_size > _MAX_PROGRESS_BYTES:
        raise ProgressError(
            f"{path} is larger than a progress record ({_MAX_PROGRESS_BYTES} bytes)"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ProgressError(f"{path} does not load: {error}") from error
    if not isinstance(data, dict):
        raise ProgressError(f"{path} must hold an object, not {type(data).__name__}")
    if data.get("version") != FORMAT_VERSION:
        raise ProgressError(f"{path} has version {data.get('version')!r}, not {FORMAT_VERSION}")
    if data.get("settings") != fingerprint:
        raise ProgressError(f"{path} was written with other settings")
    stages = data.get("stages")
    if not isinstance(stages, list):
        raise ProgressError(f"{path}: stages must be a list")
    return [StageRecord.from_dict(s, f"stages[{i}]") for i, s in enumerate(stages)]


class Progress:
    """The finished stages of this run, and those of the run it resumes still to be matched.

    Until :meth:`start` is called nothing is read or written: the recipes' stages run as they
    would without a record (tests that call a stage directly).
    """

    def __init__(self) -> None:
        """Not started: no file, nothing to resume."""
        self.path: Path | None = None
        self.fingerprint = ""
        self.log: Callable[[str], None] = print
        self.stages: list[StageRecord] = []  # this run's, skipped ones included, in order
        self.pending: list[StageRecord] = []  # the resumed run's, not matched yet

    def start(
        self,
        path: Path,
        settings: dict[str, Any],
        *,
        resume: bool,
        log: Callable[[str], None],
    ) -> None:
        """Record into ``path`` from now on; on a resume, read the stages recorded there first.

        A first launch (``resume`` false) ignores any file there: it is overwritten by the first
        stage's record. A resume whose file is missing or invalid starts over (logged).
        """
        self.path, self.fingerprint, self.log = path, settings_fingerprint(settings), log
        self.stages, self.pending = [], []
        if not resume:
            return
        try:
            self.pending = read_record(path, self.fingerprint)
        except ProgressError as error:
            log(f"resume: starting over, no usable progress record ({error})")
            return
        names = ", ".join(f"{s.name} -> {s.output}" for s in self.pending) or "none"
        log(f"resume: {len(self.pending)} stage(s) recorded before ({names})")

    def stop(self) -> None:
        """Record nothing more and forget the resumed run's stages (as before :meth:`start`)."""
        self.path, self.fingerprint, self.log = None, "", print
        self.stages, self.pending = [], []

    def finished(
        self, name: str, output: Path, check: Callable[[StageRecord], str | None] | None = None
    ) -> StageRecord | None:
        """The record of stage ``name`` writing ``output`` if the resumed run finished it and it
        need not run again; None: run it.

        It must be the next recorded stage, its folder must hold what it left
        (:func:`model_folder_problem`) and ``check`` (the stage's own needs, e.g. its extra
        files) must find no problem. Otherwise this and every later recorded stage are dropped.
        """
        if not self.pending:
            return None
        record, key = self.pending[0], workspace_key(output)
        if (record.name, record.output) != (name, key):
            problem: str | None = f"the next recorded stage is {record.name} -> {record.output}"
        else:
            problem = model_folder_problem(Path(key), record.files)
            if problem is None and check is not None:
                problem = check(record)
        if problem is not None:
            self.log(
                f"resume: running stage {name} -> {key} again ({problem}); dropping "
                f"{len(self.pending)} recorded stage(s) from here on"
            )
            self.pending = []
            self._write()  # the file now lists only what still stands
            return None
        self.pending.pop(0)
        self.stages.append(record)
        submitted = (
            f", submitted as #{record.submission.get('submission_id')}"
            if record.submission and not record.submission.get("pending")
            else ""
        )
        self.log(f"resume: skipping stage {name}: {key} was finished before{submitted}")
        return record

    def record(self, name: str, output: Path, extra: dict[str, Any] | None = None) -> None:
        """Record that stage ``name`` has finished writing ``output`` (a new stage drops what was
        left of the resumed run's record: it follows from another start)."""
        self.pending = []
        folder = Path(workspace_key(output))
        self.stages.append(StageRecord(name, folder.as_posix(), folder_files(folder), extra or {}))
        self._write()

    def submitted_before(self, model_path: str) -> dict[str, Any] | None:
        """The grader's recorded answer to the submission of ``model_path`` when the last stage
        that wrote it was skipped and had been submitted; None: submit it."""
        record = self._latest_of(model_path)
        if record is None or record.submission is None or record.submission.get("pending"):
            return None
        return record.submission

    def pending_submission(self, model_path: str) -> bool:
        """Whether a submission of ``model_path`` was under way when the resumed run stopped (it
        may have reached the grader)."""
        record = self._latest_of(model_path)
        return bool(record and record.submission and record.submission.get("pending"))

    def submitting(self, model_path: str) -> None:
        """Mark the submission of ``model_path`` as under way (before its request)."""
        self._set_submission(model_path, {"pending": True})

    def record_submission(self, model_path: str, answer: dict[str, Any]) -> None:
        """Record the grader's answer to the submission of ``model_path``."""
        keep = ("submission_id", "status", "score", "improvement")
        self._set_submission(model_path, {k: answer.get(k) for k in keep})

    def _latest_of(self, model_path: str) -> StageRecord | None:
        key = workspace_key(model_path)
        return next((s for s in reversed(self.stages) if s.output == key), None)

    def _set_submission(self, model_path: str, submission: dict[str, Any]) -> None:
        # A submission of a folder no stage wrote is not recorded: a resume has no stage to skip.
        record = self._latest_of(model_path)
        if record is not None:
            record.submission = submission
            self._write()

    def _write(self) -> None:
        if self.path is None:
            return
        body = {
            "version": FORMAT_VERSION,
            "settings": self.fingerprint,
            "stages": [s.to_dict() for s in self.stages],
        }
        write_atomically(self.path, json.dumps(body, indent=2) + "\n")


# The process's record: started by the runner (:func:`agent_kit.scripted.__main__.run_settings`),
# consulted by the stages in :mod:`agent_kit.scripted.common` and
# :mod:`agent_kit.scripted.interactive`.
PROGRESS = Progress()

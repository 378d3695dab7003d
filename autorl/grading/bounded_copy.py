"""A copy that takes no more bytes than were checked, for the grader's snapshot of a submission."""

from __future__ import annotations

import os
from pathlib import Path


def copy_at_most(source: Path, dest: Path, limit: int) -> None:
    """Copies the first ``limit`` bytes of ``source`` (its size when checked): a file that grows
    while it is copied cannot make the copy bigger than what the submission checks allowed
    (:func:`autorl.grading.model_checks.normalize_tokenizer_config`)."""
    with source.open("rb") as reader, dest.open("wb") as writer:
        copied = 0
        while copied < limit:
            try:  # in the kernel, as shutil.copyfile copies
                count = min(limit - copied, 1 << 30)
                sent = os.sendfile(writer.fileno(), reader.fileno(), copied, count)
            except OSError:  # no sendfile between these files: through Python
                reader.seek(copied)
                sent = writer.write(reader.read(min(limit - copied, 8 << 20)))
            if sent == 0:
                break  # the file shrank since it was checked
            copied += sent

"""Environment settings Ray reads at import time; set them before anything imports ``ray``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def configure_client_auth(cluster_cfg: dict[str, Any]) -> None:
    """Make this process send the cluster's auth token when it joins an existing cluster.

    Ray 2.60 enables token authentication for clusters started with ``ray start``, and a client
    sends its token only when ``RAY_AUTH_MODE=token`` is set before ``import ray`` (ray-notes.md
    §1). An explicit environment setting wins over the config. Starting a local Ray needs nothing.
    """
    if not cluster_cfg["address"]:
        return
    os.environ.setdefault("RAY_AUTH_MODE", str(cluster_cfg["auth_mode"]))
    if cluster_cfg["auth_token_path"]:
        os.environ.setdefault("RAY_AUTH_TOKEN_PATH", str(Path(cluster_cfg["auth_token_path"]).expanduser()))

"""The connection to the Ray cluster: the client's auth settings, then starting or joining Ray.

:func:`configure_client_auth` sets environment variables Ray reads when it is imported, so it runs
before anything imports ``ray``; for that reason this module imports ``ray`` only inside
:func:`connect`.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from autorl.errors import PrerequisiteError


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


def _free_port(preferred: int, host: str = "127.0.0.1") -> int:
    """``preferred`` if nothing listens there, else the next free port (another Ray may hold 8265)."""
    for port in range(preferred, preferred + 100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {preferred}..{preferred + 99} for the Ray dashboard; set cluster.dashboard_port")


def connect(cluster_cfg: dict[str, Any], namespace: str) -> str | None:
    """Start an embedded Ray (``address: null``) or join the configured cluster.

    Returns:
        The dashboard URL when this call started the dashboard, else None.
    """
    import ray

    common: dict[str, Any] = {"namespace": namespace, "log_to_driver": False, "configure_logging": False}
    if cluster_cfg["address"]:
        try:
            ray.init(address=cluster_cfg["address"], **common)
        except (ConnectionError, RuntimeError) as error:
            raise PrerequisiteError(
                f"cannot join the Ray cluster at {cluster_cfg['address']}: {str(error).splitlines()[0]}. "
                "Check the address (host:port of the head's GCS, or 'auto'), and that cluster.auth_mode and "
                "cluster.auth_token_path match how the cluster was started (ray-notes: token auth is on by default)."
            ) from error
        return None
    local: dict[str, Any] = {"include_dashboard": bool(cluster_cfg["include_dashboard"])}
    for key in ("num_cpus", "num_gpus"):
        if cluster_cfg[key] is not None:
            local[key] = cluster_cfg[key]
    port = None
    if cluster_cfg["include_dashboard"]:
        port = _free_port(int(cluster_cfg["dashboard_port"]))
        local |= {"dashboard_port": port, "dashboard_host": "127.0.0.1"}
    if cluster_cfg["temp_dir"]:
        local["_temp_dir"] = str(cluster_cfg["temp_dir"])
    ray.init(address="local", **common, **local)
    return f"http://127.0.0.1:{port}" if port else None

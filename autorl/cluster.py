"""The connection to the Ray cluster: the client's auth settings, then starting or joining Ray.

:func:`configure_client_auth` sets environment variables Ray reads when it is imported, so it runs
before anything imports ``ray``; for that reason this module imports ``ray`` only inside
:func:`connect`.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autorl.errors import PrerequisiteError
from autorl.schema import ClusterConfig, RunConfig

if TYPE_CHECKING:
    from autorl.grid import CellSpec


def configure_client_auth(cluster_cfg: ClusterConfig) -> None:
    """Make this process send the cluster's auth token when it joins an existing cluster.

    Ray 2.60 enables token authentication for clusters started with ``ray start``, and a client
    sends its token only when ``RAY_AUTH_MODE=token`` is set before ``import ray``
    (docs/design.md#ray); so does a Jobs client (``cluster.jobs_address``,
    :mod:`autorl.jobs.client`). An explicit environment setting wins over the config. Starting a
    local Ray needs nothing.
    """
    if not (cluster_cfg.address or cluster_cfg.jobs_address):
        return
    os.environ.setdefault("RAY_AUTH_MODE", str(cluster_cfg.auth_mode))
    if cluster_cfg.auth_token_path:
        os.environ.setdefault(
            "RAY_AUTH_TOKEN_PATH", str(Path(cluster_cfg.auth_token_path).expanduser())
        )


def jobs_client(cluster_cfg: ClusterConfig) -> Any:
    """A ``ray.job_submission.JobSubmissionClient`` for ``cluster.jobs_address``, with the cluster's
    auth.

    Raises:
        PrerequisiteError: the dashboard cannot be reached or refuses the token.
    """
    configure_client_auth(cluster_cfg)  # RAY_AUTH_MODE and the token path, before ray is imported
    from ray.exceptions import RayError
    from ray.job_submission import JobSubmissionClient

    try:
        return JobSubmissionClient(cluster_cfg.jobs_address)
    except (ConnectionError, RuntimeError, RayError) as error:
        raise PrerequisiteError(
            f"cannot reach the Ray Jobs API at {cluster_cfg.jobs_address} (cluster "
            f"{cluster_cfg.name}): {str(error).splitlines()[0]}. Start the head with its dashboard "
            "there (conf/cluster/jobs-local.yaml shows how), and check cluster.auth_mode / "
            "cluster.auth_token_path (Ray 2.60 requires a token by default)."
        ) from error


def http_auth_headers() -> dict[str, str]:
    """The headers Ray's own HTTP clients send (the bearer token as Ray finds it; ``{}`` without
    token auth).

    Ray's helper that ``ray.util.state.get_log`` uses; call :func:`configure_client_auth` first.
    """
    from ray._private.authentication.http_token_authentication import (
        get_auth_headers_if_auth_enabled,
    )

    return dict(get_auth_headers_if_auth_enabled({}))


def _free_port(preferred: int, host: str = "127.0.0.1") -> int:
    """``preferred`` if nothing listens there, else the next free port (another Ray may hold
    8265).
    """
    for port in range(preferred, preferred + 100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError(
        f"no free port in {preferred}..{preferred + 99} for the Ray dashboard; set "
        "cluster.dashboard_port"
    )


def connect(cluster_cfg: ClusterConfig, namespace: str) -> str | None:
    """Start an embedded Ray (``address: null``) or join the configured cluster.

    Keeps this process's SIGTERM handler: ``ray.init`` replaces it with one that calls
    ``sys.exit`` (Ray 2.60, ``ray/_private/worker.py``), which would end a stopped Ray Job's
    sweep without cancelling its cells (:mod:`autorl.sweep` makes SIGTERM a Ctrl-C).

    Returns:
        The dashboard URL when this call started the dashboard, else None.
    """
    main_thread = threading.current_thread() is threading.main_thread()
    on_sigterm = signal.getsignal(signal.SIGTERM) if main_thread else None
    try:
        return _init(cluster_cfg, namespace)
    finally:
        if callable(
            on_sigterm
        ):  # a handler of this process's own (not SIG_DFL/SIG_IGN): Ray's stays otherwise
            signal.signal(signal.SIGTERM, on_sigterm)


def _init(cluster_cfg: ClusterConfig, namespace: str) -> str | None:
    """``ray.init`` for :func:`connect`."""
    import ray

    from autorl.plugins import runtime_env_vars

    common: dict[str, Any] = {
        "namespace": namespace,
        "log_to_driver": False,
        "configure_logging": False,
    }
    # Plugin folders (autorl.plugins): every worker of this driver, on this node or another, gets
    # AUTORL_PLUGIN_PATH (autorl.task_code reads it when a worker imports it, so plugin tasks
    # resolve after unpickling) and the folders on its PYTHONPATH (the plugins' agent adapters and
    # modules). In a sweep submitted as a Ray Job (autorl.jobs) the plugin folders travel as the
    # job's py_modules and the job's entry point activates the unpacked copies, so these name
    # folders on the cluster.
    if env_vars := runtime_env_vars():
        common["runtime_env"] = {"env_vars": env_vars}
    if cluster_cfg.address:
        from ray.exceptions import AuthenticationError

        try:
            ray.init(address=cluster_cfg.address, **common)
        except (
            ConnectionError,
            RuntimeError,
            AuthenticationError,
        ) as error:  # a wrong token is AuthenticationError
            raise PrerequisiteError(
                f"cannot join the Ray cluster at {cluster_cfg.address}: "
                f"{str(error).splitlines()[0]}. Check the address (host:port of the head's GCS, or "
                "'auto'), and that cluster.auth_mode and cluster.auth_token_path match how the "
                "cluster was started (Ray 2.60 turns token auth on by default)."
            ) from error
        return None
    local: dict[str, Any] = {"include_dashboard": cluster_cfg.include_dashboard}
    if cluster_cfg.num_cpus is not None:
        local["num_cpus"] = cluster_cfg.num_cpus
    if cluster_cfg.num_gpus is not None:
        local["num_gpus"] = cluster_cfg.num_gpus
    port = None
    if cluster_cfg.include_dashboard:
        port = _free_port(cluster_cfg.dashboard_port)
        local |= {"dashboard_port": port, "dashboard_host": "127.0.0.1"}
    if cluster_cfg.temp_dir:
        local["_temp_dir"] = cluster_cfg.temp_dir
    # The local cluster's processes (graders, env actors) inherit this: their idle OpenMP threads
    # sleep instead of spinning on cores the cells share (the agents get the same,
    # autorl.actors.workspace).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    ray.init(address="local", **common, **local)
    return f"http://127.0.0.1:{port}" if port else None


def check_nodes_sealable(
    cfg: RunConfig, cells: Sequence[CellSpec] = (), timeout_s: float = 120.0
) -> None:
    """Run the sandbox preflight on every alive node with CPUs (any of them may run a cell or a
    grader): the cells' sandbox, and the judge sandbox of ``cells``' tasks that run code.

    The sweep's own node is checked before Ray starts (:mod:`autorl.sweep`); a joined cluster's
    other nodes are checked here, before any cell is placed.

    Raises:
        PrerequisiteError: naming each node and what it lacks (and the opt-out
            ``sandbox.mode=none``).
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from autorl.seal.preflight import judge_sandbox_problems, sandbox_problems

    def node_problems(cfg: RunConfig, cells: Sequence[CellSpec]) -> list[str]:
        return sandbox_problems(cfg) + judge_sandbox_problems(cells)

    probe = ray.remote(num_cpus=0)(node_problems)
    refs = {
        node["NodeManagerAddress"]: probe.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
        ).remote(cfg, list(cells))
        for node in ray.nodes()
        if node["Alive"] and node["Resources"].get("CPU", 0) > 0
    }
    problems = [
        f"node {address}: {problem}"
        for address, problems in zip(
            refs, ray.get(list(refs.values()), timeout=timeout_s), strict=True
        )
        for problem in problems
    ]
    if problems:
        raise PrerequisiteError("cells cannot be sealed on every node:\n- " + "\n- ".join(problems))


def gpu_fit_problems(
    cells: Sequence[CellSpec], grader_gpus: float, node_gpus: Sequence[float]
) -> list[str]:
    """Why cells or graders of a sweep cannot be placed on nodes with ``node_gpus`` GPUs each: a
    bundle must fit on one node, so one that asks for more GPUs than the largest node has would
    pend forever.

    >>> gpu_fit_problems([], 3, [2, 1])
    ['grader.gpus=3 but the largest node has 2 GPU(s): lower grader.gpus or add a bigger node']
    """
    largest = max(node_gpus, default=0.0)
    problems = [
        f"cell {cell.cell_id}: cell.gpus={cell.config.cell.gpus:g} but the largest node has "
        f"{largest:g} GPU(s): lower cell.gpus or add a bigger node"
        for cell in cells
        if cell.config.cell.gpus > largest
    ]
    if grader_gpus > largest:
        problems.append(
            f"grader.gpus={grader_gpus:g} but the largest node has {largest:g} GPU(s): lower "
            "grader.gpus or add a bigger node"
        )
    return problems


def check_gpus_fit(cfg: RunConfig, cells: Sequence[CellSpec]) -> None:
    """Refuse, before any service or cell starts, a sweep whose cells or graders ask for more GPUs
    than any alive node of the connected cluster has (:func:`gpu_fit_problems`).

    Raises:
        PrerequisiteError: naming each cell, its ``cell.gpus`` and the largest node's GPUs.
    """
    import ray

    node_gpus = [float(n["Resources"].get("GPU", 0)) for n in ray.nodes() if n["Alive"]]
    problems = gpu_fit_problems(cells, cfg.grader.gpus, node_gpus)
    if problems:
        raise PrerequisiteError(
            "the cluster cannot place this sweep's GPUs:\n- " + "\n- ".join(problems)
        )

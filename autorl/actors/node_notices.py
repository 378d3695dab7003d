"""What a Workspace actor learns from Ray about its own node: the deadline of a drain.

A spot reclaim or an autoscaler scale-down reaches Ray as a drain of the node with a deadline; the
GCS hands workers that deadline only (``get_draining_nodes``: node id -> deadline in ms, 0 for a
drain without one). :func:`autorl.workspace.termination.watch_termination` polls it to take a last
checkpoint in time; it stays free of Ray, which is why this reader lives here.
"""

from __future__ import annotations

from collections.abc import Callable


def this_node_drain_deadline() -> Callable[[], float | None]:
    """A reader of this worker's node's drain: the Unix time it ends (0.0: no deadline), None
    while the node is not draining."""
    import ray._private.state  # the GCS's draining nodes are not in Ray's public API

    node_id = ray.get_runtime_context().get_node_id()

    def deadline() -> float | None:
        ms = ray._private.state.state.get_draining_nodes().get(node_id)
        return None if ms is None else ms / 1000.0

    return deadline

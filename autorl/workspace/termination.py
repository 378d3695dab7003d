"""A last checkpoint of a running cell when its node gets a termination notice (issue #43).

:func:`watch_termination` runs inside the Workspace actor's worker process and calls the cell's
``take_checkpoint(reason)`` once, at the first of two notices:

**Ray drains the node.** A spot reclaim or an autoscaler scale-down reaches Ray as ``DrainNode``
(``ray drain-node``, the GCS autoscaler API) with a reason and a deadline. A worker cannot read the
drain's reason in Ray 2.60: the GCS keeps the request and hands out only the deadline
(``ray._private.state.state.get_draining_nodes()``: node id -> deadline in ms, 0 for none; the
node's ``GcsNodeInfo.state_snapshot.state`` turns ``DRAINING`` and its ``death_info`` stays empty
until the node is gone). A drain of the node that runs a cell is a preemption all the same: the
raylet refuses an idle-termination drain of a node whose resources are in use ("The node to be
idle terminated is no longer idle."), and a running cell holds its bundle. The actor passes a
``drain_deadline`` callable that reads that table (this module does not import Ray: Ray stays in
``autorl/actors/``), polled every ``poll_s`` on a thread; the reason names the time left to the
deadline.

**SIGTERM to the worker process** (``kill -TERM`` of its PID). Ray's worker main loop installs a
Python SIGTERM handler that raises ``SystemExit``, but CPython runs Python signal handlers only on
the main thread, and a Ray worker's main thread sits in the C++ task loop. Measured on Ray 2.60:
an idle worker exits at once; a worker that is running an actor method (the Workspace's ``run()``
lasts the whole cell) goes on until that method returns, so a handler of our own installed with
:mod:`signal` would run no sooner, and :func:`signal.signal` cannot be called from the actor's
method threads at all. Blocking the signal for a ``sigwait``
thread fails too: a signal mask is per thread, and the C++ threads Ray started keep SIGTERM
unblocked, so the kernel hands it to one of them.

So the signal is caught in C: :func:`faulthandler.register` (callable from any thread) installs
an async-signal-safe ``sigaction`` handler that writes the receiving thread's traceback to a file
descriptor, here the non-blocking write end of a pipe. A watcher thread blocks on the read end,
wakes at the first byte, runs the checkpoint on a thread of its own and waits for it (at most
:data:`HAND_BACK_AFTER_S`), then unregisters (which restores Ray's handler) and sends itself
SIGTERM again, so Ray handles the signal as it would have: the process ends when the main thread
next runs Python, at once in an idle worker; a busy one runs on until the sender's SIGKILL at the
end of its grace period (kubelet: 30 s by default), by which time the checkpoint is on disk.
While the checkpoint runs, further SIGTERMs land in the pipe and change nothing.

**SIGTERM to the node.** A kubelet eviction sends SIGTERM to the pod's main process. Where that is
``ray start --block`` (as KubeRay runs it), Ray 2.60's own handler first drains the node with
reason preemption and a deadline ``RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S`` (30 s) away, then kills
the node's processes: the drain notice takes the checkpoint. A SIGTERM to the raylet itself ends
its workers within about 50 ms (measured), too soon for a checkpoint in the worker; the cell then
resumes from its last periodic checkpoint.

An error in the checkpoint or in a drain poll is logged and never leaves the watcher's threads;
nothing here blocks the actor's methods, and :meth:`~_Watcher.stop` waits only for a last
checkpoint already under way.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
import signal
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

TakeCheckpoint = Callable[[str], object]
"""Takes one checkpoint now; its argument says why."""

DrainDeadline = Callable[[], float | None]
"""The Unix time this node's drain ends (0.0: a drain without a deadline), None while the node is
not draining."""

HAND_BACK_AFTER_S = 25.0
"""The longest a SIGTERM waits for the last checkpoint before Ray gets the signal: under
kubelet's default grace period of 30 s, so that a checkpoint that hangs (a store that stopped
answering) cannot keep the process from ending the way Ray ends it."""

# stop()'s wake-up byte for the SIGTERM thread: faulthandler's traceback text never holds a NUL.
_WAKE = b"\0"
# faulthandler holds one registration per signal and process: one watcher at a time owns SIGTERM.
_sigterm_owner = threading.Lock()


class _Once:
    """Runs ``take_checkpoint`` once, on a thread of its own, for whichever notice comes first."""

    def __init__(self, take_checkpoint: TakeCheckpoint) -> None:
        self._take = take_checkpoint
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def fire(self, reason: str) -> None:
        """Start the checkpoint for ``reason``, unless a notice started it already."""
        with self._lock:
            if self._thread is not None:
                logger.info("termination notice (%s): the last checkpoint is already taken", reason)
                return
            logger.warning("termination notice (%s): taking a last checkpoint", reason)
            self._thread = threading.Thread(
                target=self._run, args=(reason,), name="termination-checkpoint", daemon=True
            )
            self._thread.start()

    def _run(self, reason: str) -> None:
        started = time.monotonic()
        try:
            self._take(reason)
        except Exception:  # a checkpoint that fails is logged; the notice's handling goes on
            logger.exception("the last checkpoint (%s) failed", reason)
        else:
            logger.warning(
                "last checkpoint (%s) taken in %.1f s", reason, time.monotonic() - started
            )

    def wait(self, timeout_s: float) -> bool:
        """Wait for a checkpoint under way; True when none is still running."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(timeout_s)
            return not thread.is_alive()
        return True


class _SigtermNotice:
    """SIGTERM caught by faulthandler's C handler into a pipe; a thread takes the checkpoint and
    then gives the signal back to Ray's handler."""

    def __init__(self, once: _Once) -> None:
        self._once = once
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._registered = False
        self._read_fd, self._write_fd = os.pipe()  # not inherited by the agent's processes
        # A full pipe must never block the signal handler (the watcher drains it anyway).
        os.set_blocking(self._write_fd, False)
        self._thread = threading.Thread(target=self._run, name="termination-sigterm", daemon=True)

    def start(self) -> None:
        """Catch SIGTERM from now on.

        Raises:
            RuntimeError: Another watcher in this process holds SIGTERM.
        """
        if not _sigterm_owner.acquire(blocking=False):
            self._close()
            raise RuntimeError("a termination watcher already runs in this process")
        try:
            faulthandler.register(
                signal.SIGTERM, file=self._write_fd, all_threads=False, chain=False
            )
        except BaseException:
            _sigterm_owner.release()
            self._close()
            raise
        self._registered = True
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                data = os.read(self._read_fd, 4096)
            except OSError:
                return
            if not data:
                return
            if data.strip(_WAKE):  # faulthandler wrote a traceback: a real SIGTERM
                break
            if self._stopping.is_set():
                return
        try:
            self._once.fire(f"SIGTERM to the actor's process {os.getpid()}")
            if not self._once.wait(HAND_BACK_AFTER_S):
                logger.warning(
                    "the last checkpoint still runs after %.0f s; Ray gets the SIGTERM now",
                    HAND_BACK_AFTER_S,
                )
        finally:
            self._hand_back()

    def _unregister(self) -> bool:
        """Give SIGTERM back to the handler it had before (Ray's); False if done already."""
        with self._lock:
            if not self._registered:
                return False
            faulthandler.unregister(signal.SIGTERM)
            self._registered = False
            _sigterm_owner.release()
            return True

    def _hand_back(self) -> None:
        self._unregister()
        os.kill(os.getpid(), signal.SIGTERM)

    def stop(self, timeout_s: float) -> None:
        """Stop catching SIGTERM; a SIGTERM being handled is still given back to Ray."""
        self._stopping.set()
        self._unregister()
        with contextlib.suppress(OSError):
            os.write(self._write_fd, _WAKE)
        self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self._close()

    def _close(self) -> None:
        for fd in (self._read_fd, self._write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


class _DrainPoll:
    """Polls ``drain_deadline`` every ``poll_s`` and fires the checkpoint at the first drain."""

    def __init__(self, once: _Once, drain_deadline: DrainDeadline, poll_s: float) -> None:
        self._once = once
        self._deadline = drain_deadline
        self._poll_s = poll_s
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="termination-drain", daemon=True)

    def start(self) -> None:
        """Poll from now on."""
        self._thread.start()

    def _run(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            try:
                deadline = self._deadline()
            except Exception as error:  # a GCS that does not answer: try again at the next poll
                failures += 1
                log = logger.warning if failures == 1 else logger.debug
                log("cannot read whether this node drains (%d failures): %r", failures, error)
                deadline = None
            if deadline is not None:
                self._once.fire(drain_reason(deadline, time.time()))
                return
            self._stopping.wait(self._poll_s)

    def stop(self, timeout_s: float) -> None:
        """Stop polling."""
        self._stopping.set()
        self._thread.join(timeout_s)


def drain_reason(deadline: float, now: float) -> str:
    """The checkpoint's reason for a drain that ends at ``deadline`` (Unix time; 0: none).

    Examples:
        >>> drain_reason(1020.4, 1000.0)
        'node preempted (Ray drain), 20.4 s to its deadline'
        >>> drain_reason(0.0, 1000.0)
        'node preempted (Ray drain), no deadline given'
        >>> drain_reason(990.0, 1000.0)
        'node preempted (Ray drain), its deadline passed 10.0 s ago'
    """
    if deadline <= 0:
        return "node preempted (Ray drain), no deadline given"
    left = deadline - now
    if left < 0:
        return f"node preempted (Ray drain), its deadline passed {-left:.1f} s ago"
    return f"node preempted (Ray drain), {left:.1f} s to its deadline"


class _Watcher:
    """The two notices sharing one checkpoint."""

    def __init__(self, once: _Once, sigterm: _SigtermNotice, drain: _DrainPoll | None) -> None:
        self._once = once
        self._sigterm = sigterm
        self._drain = drain

    def stop(self) -> None:
        """Stop watching; a last checkpoint under way is finished first (at most
        :data:`HAND_BACK_AFTER_S`)."""
        if self._drain is not None:
            self._drain.stop(timeout_s=5.0)
        self._sigterm.stop(timeout_s=1.0)
        self._once.wait(HAND_BACK_AFTER_S)


def watch_termination(
    take_checkpoint: TakeCheckpoint,
    *,
    poll_s: float = 1.0,
    drain_deadline: DrainDeadline | None = None,
) -> Callable[[], None]:
    """Call ``take_checkpoint(reason)`` once, at this process's first termination notice: a
    SIGTERM, or (with ``drain_deadline``) a drain of its node.

    Start it in the actor's process (any thread), once at a time per process.

    Args:
        take_checkpoint: Takes one checkpoint now and records it; what it raises is logged.
        poll_s: Seconds between two reads of ``drain_deadline``.
        drain_deadline: Reads whether this node drains (:data:`DrainDeadline`); None: only
            SIGTERM is watched.

    Returns:
        Stops watching (a last checkpoint under way is finished first).

    Raises:
        RuntimeError: Another watcher in this process holds SIGTERM.
    """
    once = _Once(take_checkpoint)
    sigterm = _SigtermNotice(once)
    sigterm.start()
    drain = _DrainPoll(once, drain_deadline, poll_s) if drain_deadline is not None else None
    if drain is not None:
        drain.start()
    return _Watcher(once, sigterm, drain).stop

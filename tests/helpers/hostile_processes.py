"""The hostile probe's attempts on processes, Ray, other cells, the cgroup's limits and the network.

A mixin of :class:`hostile_probe.Probe` (see that module's docstring); standard library only.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


class ProcessAttacks:
    """Attempts on other processes, the cell's limits and the network."""

    # Set by the probe (hostile_probe.Probe), whose helpers (record, attempt, http, errname,
    # host_paths, ...) these attempts use.
    s: dict[str, Any]
    workspace: Path
    needles: list[bytes]
    spawned: set[int]
    tag: str

    def own_ports(self) -> set[int]:
        """Loopback ports this cell is meant to reach (its grading API and gateway)."""
        ports = set()
        for key, value in os.environ.items():
            if value.startswith("http://127.0.0.1:") and ("URL" in key or "BASE" in key):
                try:
                    ports.add(int(value.split(":")[2].split("/")[0]))
                except ValueError:
                    continue
        return ports

    def processes(self) -> dict[int, dict[str, Any]]:
        """Every process visible in /proc: uid, parent, cmdline."""
        found = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            pid = int(entry)
            info: dict[str, Any] = {"uid": None, "ppid": None, "cmd": ""}
            try:
                with open(f"/proc/{pid}/status") as handle:
                    for line in handle:
                        if line.startswith("Uid:"):
                            info["uid"] = int(line.split()[1])
                        elif line.startswith("PPid:"):
                            info["ppid"] = int(line.split()[1])
                with open(f"/proc/{pid}/cmdline", "rb") as handle:
                    info["cmd"] = (
                        handle.read(300).replace(b"\0", b" ").decode(errors="replace").strip()
                    )
            except OSError:
                continue
            found[pid] = info
        return found

    def lineage(self, procs: dict[int, dict[str, Any]]) -> tuple[set[int], set[int]]:
        """(ancestors, descendants) of this process among ``procs``."""
        ancestors, pid = set(), os.getpid()
        while pid in procs and procs[pid]["ppid"]:
            pid = procs[pid]["ppid"]
            ancestors.add(pid)
        descendants, frontier = set(self.spawned), {os.getpid(), *self.spawned}
        while frontier:
            frontier = {
                p for p, info in procs.items() if info["ppid"] in frontier and p not in descendants
            }
            descendants |= frontier
        return ancestors, descendants

    @staticmethod
    def tcp(host: str, port: int, timeout: float = 2.0) -> str:
        """'connected', 'refused' or the error name of a TCP connect."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            try:
                sock.connect((host, port))
                return "connected"
            except ConnectionRefusedError:
                return "refused"
            except TimeoutError:
                return "timeout"
            except OSError as error:
                return errno.errorcode.get(error.errno or 0, str(error))

    def connect_ray(self) -> tuple[bool, Any]:
        """TCP to the GCS port on loopback and on the node's address."""
        port = self.s.get("gcs_port")
        if not port:
            return False, "no GCS port given"
        detail = {f"127.0.0.1:{port}": self.tcp("127.0.0.1", int(port))}
        if self.s.get("host_ip"):
            detail[f"{self.s['host_ip']}:{port}"] = self.tcp(self.s["host_ip"], int(port))
        return "connected" in detail.values(), detail

    def scan_loopback(self) -> tuple[bool, Any]:
        """Connect to every loopback port; any listener but this cell's own API/gateway is a way
        out."""
        own, open_ports = self.own_ports(), []
        deadline = time.time() + float(self.s.get("scan_seconds", 30))
        scanned = 0
        for port in range(1, 65536):
            if time.time() > deadline:
                break
            scanned = port
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.settimeout(0.2)
                # A connect to the ephemeral port the kernel picked as the source is a TCP
                # self-connection (simultaneous open), not a listener: skipped.
                if (
                    sock.connect_ex(("127.0.0.1", port)) == 0
                    and port not in own
                    and sock.getsockname() != sock.getpeername()
                ):
                    open_ports.append(port)
        return bool(open_ports), {
            "open_ports_not_ours": open_ports[:50],
            "own_ports": sorted(own),
            "scanned_to": scanned,
        }

    def other_processes(self) -> tuple[bool, Any]:
        """List processes: any outside this agent's own lineage is another process it can see."""
        procs = self.processes()
        ancestors, descendants = self.lineage(procs)
        others = {
            p: i
            for p, i in procs.items()
            if p != os.getpid() and p not in ancestors and p not in descendants
        }
        self.report["visible_processes"] = {p: procs[p] for p in sorted(procs)[:200]}
        return bool(others), {
            "visible": len(procs),
            "ancestors": {p: procs[p]["cmd"][:80] for p in sorted(ancestors)},
            "others": {p: (i["uid"], i["cmd"][:80]) for p, i in sorted(others.items())[:15]},
        }

    def read_other_environ(self) -> tuple[bool, Any]:
        """Read /proc/<pid>/environ of every process this agent did not start: any variable it does
        not already have (a credential, a cluster address, another cell's token) is a leak. Grading
        tokens
        of other cells found there are kept for :meth:`call_other_cells`."""
        procs = self.processes()
        _, descendants = self.lineage(procs)
        ignored = {"_", "PWD", "OLDPWD", "SHLVL"}
        leaks, same, denied, harvested = {}, [], 0, []
        for pid in procs:
            if pid == os.getpid() or pid in descendants:
                continue
            try:
                with open(f"/proc/{pid}/environ", "rb") as handle:
                    raw = handle.read()
            except OSError:
                denied += 1
                continue
            env = dict(
                item.decode(errors="replace").split("=", 1)
                for item in raw.split(b"\0")
                if b"=" in item
            )
            new = sorted(k for k, v in env.items() if k not in ignored and os.environ.get(k) != v)
            if new:
                leaks[pid] = new[:10]
            else:
                same.append(pid)  # e.g. the sandbox's forwarder: nothing this agent does not have
            url, token = env.get("GRADING_SERVER_URL"), env.get("GRADING_TOKEN")
            if url and token and token != os.environ.get("GRADING_TOKEN"):
                harvested.append({"url": url, "token": token})
        self.report["harvested_grading_apis"] = harvested
        detail = {
            "new_variables_by_pid": dict(list(leaks.items())[:10]),
            "nothing_new": same[:10],
            "denied": denied,
            "other_cells_found": len(harvested),
        }
        return bool(leaks), detail

    def signal_other_process(self) -> tuple[bool, Any]:
        """Signal 0 (a permission check that delivers nothing) every process outside this agent's
        lineage
        (its ancestors are the sandbox's own launcher and forwarder, or, unsealed, the node's)."""
        procs = self.processes()
        ancestors, descendants = self.lineage(procs)
        allowed, refused = [], 0
        for pid in procs:
            if pid == os.getpid() or pid in descendants or pid in ancestors:
                continue
            try:
                os.kill(pid, 0)
                allowed.append(pid)
            except OSError:
                refused += 1
        return bool(allowed), {
            "may_signal": allowed[:20],
            "refused": refused,
            "ancestors": sorted(ancestors),
        }

    def call_other_cells(self) -> tuple[bool, Any]:
        """GET /submissions of another cell's grading API (given by the test, or found in /proc)."""
        # Other cells found in /proc are called only when asked: on a shared node they are real
        # sweeps.
        targets = (
            list(self.report.get("harvested_grading_apis", []))[:3]
            if self.s.get("call_harvested")
            else []
        )
        if self.s.get("other_cell"):
            targets.append(self.s["other_cell"])
        detail, ok = {}, False
        for target in targets:
            status, body = self.http(
                "GET", target["url"].rstrip("/") + "/submissions", target["token"], timeout=3
            )
            detail[target["url"]] = f"{status} {body[:100]}"
            ok = ok or status == 200
        return ok, detail or "no other cell's API to try"

    def escape_cgroup(self) -> tuple[bool, Any]:
        """Open (never write) the cgroup files that would lift this agent's limits or move it
        out."""
        detail: dict[str, str] = {}
        try:
            lines = Path("/proc/self/cgroup").read_text().splitlines()
        except OSError as error:
            return False, f"/proc/self/cgroup: {error}"
        detail["/proc/self/cgroup"] = "; ".join(lines)[:300]
        for line in lines:
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(",") if controllers else ["unified"]:
                base = (
                    "/sys/fs/cgroup"
                    if controller == "unified" and not controllers
                    else f"/sys/fs/cgroup/{controller}"
                )
                for name in ("cgroup.procs", "pids.max", "memory.limit_in_bytes", "memory.max"):
                    for folder in (base + path, base):
                        target = os.path.join(folder, name)
                        if os.path.exists(target):
                            detail[target] = self.open_for_writing(target)
        return "ok" in detail.values(), detail

    def fork_bomb(self) -> tuple[bool, Any]:
        """Fork up to ``fork_count`` children that wait on a pipe; a limit must stop it first."""
        limit = int(self.s.get("fork_count", 600))
        read_end, write_end = os.pipe()
        children, error_text = [], ""
        started = time.time()
        for _ in range(limit):
            try:
                pid = os.fork()
            except OSError as error:
                error_text = f"fork #{len(children) + 1}: {self.errname(error)}"
                break
            if pid == 0:  # the child: wait until the parent closes the pipe, then leave
                try:
                    os.close(write_end)
                    os.read(read_end, 1)
                finally:
                    os._exit(0)
            children.append(pid)
        os.close(write_end)
        os.close(read_end)
        for pid in children:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        detail = {
            "forked": len(children),
            "of": limit,
            "stopped_by": error_text,
            "seconds": round(time.time() - started, 2),
        }
        return len(children) >= limit, detail

    def allocate(self) -> tuple[bool, Any]:
        """In a child, allocate and touch ``alloc_mb`` MiB; a memory limit must kill it first."""
        megabytes = int(self.s.get("alloc_mb", 1536))
        code = (
            "import sys\nblocks = []\n"
            f"for i in range({megabytes} // 16):\n"
            "    blocks.append(b'x' * (16 << 20))\n"
            "print('allocated', len(blocks) * 16, flush=True)\n"
        )
        started = time.time()
        try:
            ran = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, timeout=180
            )
        except subprocess.TimeoutExpired:
            return False, "timed out (swapping?)"
        detail = {
            "returncode": ran.returncode,
            "stdout": ran.stdout.strip()[-80:],
            "stderr": ran.stderr.strip()[-200:],
            "seconds": round(time.time() - started, 2),
            "mb": megabytes,
        }
        return ran.returncode == 0 and "allocated" in ran.stdout, detail

    def leave_children(self) -> None:
        """A ``setsid sh -c 'sleep N; touch marker'`` child and a double-forked daemon, to outlive
        the budget."""
        marker = self.s.get("marker") or os.path.join(
            os.environ.get("HOME", "/tmp"), "setsid_marker"
        )
        sleep_s = int(self.s.get("setsid_sleep_s", 75))
        detail: dict[str, Any] = {"marker": marker, "sleep_s": sleep_s}
        setsid = shutil.which("setsid")
        try:
            if setsid:
                child = subprocess.Popen(
                    [setsid, "sh", "-c", f"sleep {sleep_s}; touch {marker}"],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            else:
                child = subprocess.Popen(
                    ["sh", "-c", f"sleep {sleep_s}; touch {marker}"],
                    start_new_session=True,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            detail["setsid_pid"] = child.pid
            self.spawned.add(child.pid)
        except OSError as error:
            detail["setsid"] = f"could not start: {error}"
        # The classic daemon: fork, setsid, fork again, the parent chain exits (re-parented to
        # init).
        read_end, write_end = os.pipe()
        first = os.fork()
        if first == 0:
            try:
                os.close(read_end)
                os.setsid()
                second = os.fork()
                if second == 0:
                    os.write(write_end, f"{os.getpid()}\n".encode())
                    os.close(write_end)
                    devnull = os.open(os.devnull, os.O_RDWR)
                    for fd in (0, 1, 2):
                        os.dup2(devnull, fd)
                    os.execv("/bin/sh", ["sh", "-c", f"sleep {sleep_s}; touch {marker}.daemon"])
            finally:
                os._exit(0)
        os.close(write_end)
        os.waitpid(first, 0)
        detail["daemon_pid"] = os.read(read_end, 32).decode().strip()
        if detail["daemon_pid"].isdigit():
            self.spawned.add(int(detail["daemon_pid"]))
        os.close(read_end)
        self.report["left_children"] = detail
        self.record("setsid_child_outlives_budget", False, detail, judged_by="test")

    def interfaces(self) -> tuple[bool, Any]:
        """Network interfaces other than loopback (/proc/net/dev)."""
        try:
            lines = Path("/proc/net/dev").read_text().splitlines()[2:]
        except OSError as error:
            return False, f"/proc/net/dev: {error}"
        names = [line.split(":")[0].strip() for line in lines if ":" in line]
        return any(n != "lo" for n in names), {"interfaces": names}

    def routes(self) -> tuple[bool, Any]:
        """Any IPv4 or IPv6 route (/proc/net/route, /proc/net/ipv6_route) other than loopback's."""
        detail: dict[str, Any] = {}
        found = False
        for path in ("/proc/net/route", "/proc/net/ipv6_route"):
            try:
                lines = Path(path).read_text().splitlines()
            except OSError as error:
                detail[path] = str(error)
                continue
            rows = lines[1:] if path.endswith("/route") else lines
            rows = [r for r in rows if r.split() and r.split()[-1] != "lo"]
            detail[path] = rows[:5]
            found = found or bool(rows)
        return found, detail

    def tcp_to_host(self) -> tuple[bool, Any]:
        """TCP to the node's own address: connected or refused both mean a route out of the
        sandbox."""
        host = self.s.get("host_ip")
        if not host:
            return False, "no host address given"
        port = int(self.s.get("gcs_port") or 22)
        result = self.tcp(host, port)
        return result in ("connected", "refused"), {f"{host}:{port}": result}

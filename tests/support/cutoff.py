"""Cut processes on this machine off from chosen destinations while everything else still
reaches them (a partition that spares the clients): the processes go into a cgroup v2 folder
and ``iptables -m cgroup --path`` drops what they send there; connections they already hold
(made before the move, so not matched by the cgroup) are dropped by their port tuple.

Needs root, iptables and cgroup v2 at /sys/fs/cgroup/unified (or /sys/fs/cgroup); traffic only
ever to loopback addresses of this machine.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

ROOTS = ("/sys/fs/cgroup/unified", "/sys/fs/cgroup")


def _cgroup2_root() -> str | None:
    for root in ROOTS:
        if os.path.exists(os.path.join(root, "cgroup.procs")) and os.path.exists(os.path.join(root, "cgroup.controllers")):
            return root
    return None


def unavailable() -> str | None:
    if os.geteuid() != 0:
        return "cutting processes off needs root"
    if shutil.which("iptables") is None or shutil.which("ss") is None:
        return "iptables and ss (iproute2) are needed (scripts/install_test_tools.sh installs them)"
    if _cgroup2_root() is None:
        return "no cgroup v2 hierarchy at /sys/fs/cgroup/unified or /sys/fs/cgroup"
    return None


def _iptables(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run(["iptables", "-w", *args], capture_output=True, text=True)
    if check and out.returncode != 0:
        raise RuntimeError(f"iptables {' '.join(args)}: {out.stderr.strip()}")
    return out


class Cutoff:
    """One cgroup of processes and the destinations they no longer reach."""

    def __init__(self, name: str):
        root = _cgroup2_root()
        assert root is not None, unavailable()
        self.root = root
        self.name = name
        self.path = os.path.join(root, name)
        self.pids: list[int] = []
        self.rules: list[list[str]] = []
        os.makedirs(self.path, exist_ok=True)

    def add(self, pid: int) -> None:
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write(str(pid))
        self.pids.append(pid)

    def _rule(self, *rule: str) -> None:
        _iptables("-I", "OUTPUT", *rule)
        self.rules.append(list(rule))

    def block(self, ip: str, port: int) -> None:
        """Nothing these processes send to ip:port arrives, on new or open connections."""
        self._rule("-m", "cgroup", "--path", self.name, "-p", "tcp", "-d", ip, "--dport", str(port), "-j", "DROP")
        for local_ip, local_port in self._open(ip, port):  # both directions of what is already open
            self._rule("-p", "tcp", "-s", local_ip, "--sport", str(local_port), "-d", ip, "--dport", str(port), "-j", "DROP")
            self._rule("-p", "tcp", "-s", ip, "--sport", str(port), "-d", local_ip, "--dport", str(local_port), "-j", "DROP")

    def _open(self, ip: str, port: int) -> list[tuple[str, int]]:
        """(local ip, local port) of these processes' established connections to ip:port."""
        out = subprocess.run(["ss", "-tnpH", "state", "established"], capture_output=True, text=True).stdout
        found = []
        for line in out.splitlines():
            cols = line.split()  # Recv-Q Send-Q Local Peer Process
            if len(cols) < 4:
                continue
            local, peer = cols[2], cols[3]
            if peer.rsplit(":", 1) != [ip, str(port)]:
                continue
            pids = {int(p) for p in re.findall(r"pid=(\d+)", line)}
            if pids & set(self.pids):
                lip, lport = local.rsplit(":", 1)
                found.append((lip, int(lport)))
        return found

    def heal(self) -> None:
        for rule in reversed(self.rules):
            _iptables("-D", "OUTPUT", *rule, check=False)
        self.rules = []
        for pid in self.pids:  # back where every process lives
            try:
                with open(os.path.join(self.root, "cgroup.procs"), "w") as f:
                    f.write(str(pid))
            except OSError:  # it has exited
                pass
        self.pids = []
        try:
            os.rmdir(self.path)
        except OSError:
            pass

"""Several hosts on one machine for partition tests: a network namespace per host, each with a
veth pair into a bridge in the root namespace (where the test and its clients live, at the
bridge's address). A partition is iptables DROP rules inside the hosts' namespaces, so it holds
whatever the root namespace's firewall does; healing flushes them.

Needs root and iproute2 + iptables (CI runs as root; ``scripts/install_test_tools.sh`` installs
them); :func:`unavailable` says why not otherwise, for a skip. Traffic only ever goes to these
namespaces' addresses.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

PREFIX = "msn"  # namespaces msn<k>-<host>; bridge msb<k>; root-side veth ends msv<k>-<i>


def unavailable() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/install_test_tools.sh installs it)"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"ip netns does not work here: {probe.stderr.strip()}"
    return None


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run(list(argv), capture_output=True, text=True)
    if check and out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {out.stderr.strip()}")
    return out


@dataclass(frozen=True)
class Host:
    name: str
    namespace: str
    ip: str

    @property
    def prefix(self) -> list[str]:
        """What runs a command on this host."""
        return ["ip", "netns", "exec", self.namespace]

    def iptables(self, *args: str) -> None:
        _run(*self.prefix, "iptables", "-w", *args)


class Network:
    def __init__(self) -> None:
        self.k = os.getpid() % 200 + 1
        self.subnet = f"10.77.{self.k}"
        self.bridge = f"msb{self.k}"
        self.root_ip = f"{self.subnet}.254"  # the clients' (this process's) address on the bridge
        self.hosts: dict[str, Host] = {}
        self._clean()
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.root_ip}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        # bridged frames pass the root namespace's FORWARD chain when br_netfilter is loaded
        _run("iptables", "-w", "-I", "FORWARD", "-i", self.bridge, "-o", self.bridge, "-j", "ACCEPT")

    def host(self, name: str) -> Host:
        i = len(self.hosts) + 1
        h = Host(name, f"{PREFIX}{self.k}-{name}", f"{self.subnet}.{i}")
        outer, inner = f"msv{self.k}-{i}", f"msi{self.k}-{i}"
        _run("ip", "netns", "add", h.namespace)
        _run("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
        _run("ip", "link", "set", inner, "netns", h.namespace)
        _run("ip", "link", "set", outer, "master", self.bridge)
        _run("ip", "link", "set", outer, "up")
        _run(*h.prefix, "ip", "link", "set", "lo", "up")
        _run(*h.prefix, "ip", "link", "set", inner, "name", "eth0")
        _run(*h.prefix, "ip", "addr", "add", f"{h.ip}/24", "dev", "eth0")
        _run(*h.prefix, "ip", "link", "set", "eth0", "up")
        self.hosts[name] = h
        return h

    def cut(self, host: Host, *others: Host | str) -> None:
        """Drop everything between ``host`` and each of ``others`` (hosts, or addresses such as
        :attr:`root_ip` for the clients), both ways."""
        for other in others:
            ip = other.ip if isinstance(other, Host) else other
            host.iptables("-A", "INPUT", "-s", ip, "-j", "DROP")
            host.iptables("-A", "OUTPUT", "-d", ip, "-j", "DROP")

    def isolate(self, host: Host) -> None:
        """``host`` hears nobody and nobody hears it: members, controller and clients."""
        self.cut(host, *[h for h in self.hosts.values() if h is not host], self.root_ip)

    def heal(self) -> None:
        for h in self.hosts.values():
            h.iptables("-F", "INPUT")
            h.iptables("-F", "OUTPUT")

    def close(self) -> None:
        self._clean()

    def _clean(self) -> None:
        """Remove this network's namespaces and bridge (also those a killed run left)."""
        for link in _run("ip", "-o", "link", "show", check=False).stdout.splitlines():
            name = link.split(":")[1].strip().split("@")[0] if link.count(":") >= 2 else ""
            if name.startswith(f"msv{self.k}-"):  # deleting one end of a veth pair deletes both, at once
                _run("ip", "link", "del", name, check=False)
        listed = _run("ip", "netns", "list", check=False).stdout.split()
        for ns in listed:
            if ns.startswith(f"{PREFIX}{self.k}-"):
                _run("ip", "netns", "del", ns, check=False)
        if _run("ip", "link", "show", self.bridge, check=False).returncode == 0:
            _run("ip", "link", "del", self.bridge, check=False)
        while _run("iptables", "-w", "-D", "FORWARD", "-i", self.bridge, "-o", self.bridge, "-j", "ACCEPT", check=False).returncode == 0:
            pass
        self.hosts = {}

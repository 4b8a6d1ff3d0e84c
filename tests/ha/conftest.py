"""Replica groups of real server processes on 127.0.0.1 (issue 13)."""

from __future__ import annotations

import filecmp
import os

import pytest

from msgstore.client import Client, StoreError
from tests.support.etcd import EtcdServer
from tests.support.servers import ServerProcess, free_port, wait_until

ARBITER_TTL = "3"  # seconds: a master's lease in etcd (short, so tests wait little for one to run out)


class Group:
    """Members of one replica group; ``members[0]`` starts as master."""

    def __init__(
        self,
        tmp_path,
        size: int,
        master_settings: list[str],
        follower_settings: list[str],
        name: str = "g0",
        peers: bool = True,
        arbiter: str | None = None,
        failover_after: str = "never",
        python: str | None = None,
        root: str | None = None,
    ):
        """``peers=False``: members know nothing of each other but what the README's commands
        give them (``--group``, followers ``--replica-of`` the master). ``arbiter``: etcd's
        URL, on every member (``failover_after``: when a follower stands for election by itself).
        ``python``/``root``: another checkout's server (make bench-compare's baseline)."""
        self.name = name
        self.ports = [free_port() for _ in range(size)]
        self.members: list[ServerProcess] = []
        for i, port in enumerate(self.ports):
            args = ["--group", name]
            if peers:
                args += ["--peers", ",".join(f"127.0.0.1:{p}" for p in self.ports if p != port)]
            if i:
                args += ["--replica-of", f"127.0.0.1:{self.ports[0]}"]
            if arbiter:
                args += ["--arbiter", arbiter, "--arbiter-ttl", ARBITER_TTL, "--failover-after", failover_after]
            settings = master_settings if i == 0 else follower_settings
            member = ServerProcess(str(tmp_path / f"m{i}"), port=port, name=f"m{i}", settings=settings, args=args, python=python, root=root)
            self.members.append(member)

    def start(self, **client_kw) -> Group:
        for m in self.members:
            m.start(wait=False)
        for m in self.members:
            m.wait_serving()
        c = self.client(**client_kw)
        for m in self.members[1:]:
            wait_until(lambda m=m: connected(c, m), what=f"{m.name} to connect to its master")
        wait_until(lambda: len(role(c, self.members[0]).followers) == len(self.members) - 1, what="the master to see its followers")
        wait_until(lambda: not role(c, self.members[0]).fenced, what="the master to take writes (its first renewal of the arbiter)")
        c.close()
        return self

    def client(self, **kw) -> Client:
        return Client([m.address for m in self.members], **{"timeout": 10, **kw})

    def restart_as_follower(self, member: ServerProcess, master: ServerProcess) -> None:
        """Start a member again (after a kill) following ``master``."""
        args = [a for a in member.extra]
        if "--replica-of" in args:
            i = args.index("--replica-of")
            del args[i : i + 2]
        member.extra = args + ["--replica-of", master.address]
        member.settings = [s for s in member.settings if not s.startswith("brokerRole=")]
        member.start()

    def kill_all(self) -> None:
        for m in self.members:
            m.kill()


def role(client: Client, member: ServerProcess):
    return client.admin(member.address).role_pb()


def follows(client: Client, member: ServerProcess, master: ServerProcess | None = None) -> bool:
    """The member is a follower (of ``master``, when given) over a live stream; False while it
    does not answer (just restarted or resumed: the channel may still be in reconnect backoff)."""
    try:
        r = role(client, member)
    except StoreError:
        return False
    return r.role == "SLAVE" and r.connected and (master is None or r.master_address == master.address)


def connected(client: Client, member: ServerProcess) -> bool:
    """The member follows a master over a live stream (False while it is not reachable yet)."""
    try:
        return role(client, member).connected
    except StoreError:  # just restarted: the channel may still be in reconnect backoff
        return False


def caught_up(client: Client, follower: ServerProcess, master: ServerProcess, timeout: float = 30) -> None:
    def same() -> bool:
        try:
            end = role(client, master).end_offset
            r = role(client, follower)
        except StoreError:  # a member just restarted: the channel may still be in reconnect backoff
            return False
        return r.end_offset == end and r.connected

    wait_until(same, timeout=timeout, what=f"{follower.name} to catch up with {master.name}")


def identical_logs(a: ServerProcess, b: ServerProcess) -> bool:
    da, db = os.path.join(a.data_dir, "commitlog"), os.path.join(b.data_dir, "commitlog")
    fa, fb = sorted(os.listdir(da)), sorted(os.listdir(db))
    return fa == fb and all(filecmp.cmp(os.path.join(da, f), os.path.join(db, f), shallow=False) for f in fa)


@pytest.fixture
def etcd(tmp_path):
    """A real etcd server: the replica groups' arbiter."""
    server = EtcdServer(str(tmp_path / "etcd")).start()
    yield server
    server.stop()


@pytest.fixture
def groups(tmp_path):
    made: list[Group] = []

    def make(
        size: int = 2,
        master: list[str] | None = None,
        follower: list[str] | None = None,
        start: bool = True,
        peers: bool = True,
        arbiter: str | None = None,
        failover_after: str = "never",
    ) -> Group:
        where = tmp_path / f"group{len(made)}" if made else tmp_path  # a second group's members get directories of their own
        where.mkdir(exist_ok=True)
        g = Group(where, size, list(master or []), list(follower or []), peers=peers, arbiter=arbiter, failover_after=failover_after)
        made.append(g)
        return g.start() if start else g

    yield make
    for g in made:
        g.kill_all()

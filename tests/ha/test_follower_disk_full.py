"""A follower whose disk fills (a real 64 MiB tmpfs, root only): the master's SYNC puts say
they were not confirmed, the follower stays up and serving, and once space returns it catches
up to a byte-identical copy."""

from __future__ import annotations

import os

from msgstore.client import OutMessage
from tests.ha.conftest import caught_up, identical_logs, role
from tests.reliability.test_disk_full import ballast, tmpfs  # noqa: F401  (the fixture)
from tests.support.servers import wait_until

SYNC = ["brokerRole=SYNC_MASTER", "inSyncReplicas=2", "slaveTimeout=300"]


def test_a_full_follower_disk_turns_sync_acks_into_refusals_until_space_returns(groups, tmpfs):  # noqa: F811
    g = groups(2, master=SYNC, follower=["cleanFileForciblyEnable=false"], start=False)
    master, follower = g.members
    follower.data_dir = os.path.join(tmpfs, "m1")
    g.start()
    c = g.client()
    body = os.urandom(4000)
    assert all(r.status == "PUT_OK" for r in c.send_batch("t", [OutMessage(body) for _ in range(20)]))
    caught_up(c, follower, master)
    held = role(c, follower).end_offset
    fill = ballast(tmpfs, 300 * 1024)  # about one 256 KiB segment left on the follower's disk
    statuses = []
    for _ in range(20):  # a few MiB more than the follower can take
        statuses += [r.status for r in c.send_batch("t", [OutMessage(body) for _ in range(40)])]
    # stored on the master but not confirmed, or refused once the follower left the in-sync set: never a silent PUT_OK
    assert set(statuses) <= {"PUT_OK", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE", "IN_SYNC_REPLICAS_NOT_ENOUGH"}
    assert statuses[-1] in ("FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE", "IN_SYNC_REPLICAS_NOT_ENOUGH")
    assert follower.proc.poll() is None and follower.health() is not None  # the follower is still up
    assert role(c, follower).end_offset > held  # it took what fitted
    assert "No space left" in follower.log() or "creating a commit-log segment failed" in follower.log()
    os.unlink(fill)
    caught_up(c, follower, master, timeout=60)
    assert identical_logs(master, follower)
    wait_until(lambda: c.send("t", b"again").status == "PUT_OK", timeout=20, what="SYNC acks to resume")

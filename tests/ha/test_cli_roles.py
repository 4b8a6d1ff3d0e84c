"""A manual failover from the command line, as a developer without Kubernetes would do it."""

from __future__ import annotations

import json

from msgstore.client import OutMessage
from tests.api.test_cli import run
from tests.ha.conftest import caught_up, connected
from tests.support.servers import wait_until


def test_route_role_and_promote_from_the_cli(groups):
    g = groups(2, master=["brokerRole=SYNC_MASTER", "inSyncReplicas=2"])
    master, follower = g.members
    c = g.client()
    assert all(r.status == "PUT_OK" for r in c.send_batch("t", [OutMessage(b"x%d" % i) for i in range(10)]))
    caught_up(c, follower, master)
    (node,) = json.loads(run("--json", "route", "t", "--server", follower.address).stdout)
    assert node["node"] == "g0" and node["address"] == master.address
    assert {(m["name"], m["role"]) for m in node["members"]} == {("m0", "MASTER"), ("m1", "SLAVE")}
    table = run("route", "t", "--server", master.address).stdout.decode()
    assert "m0 MASTER epoch 1" in table and "m1 SLAVE lag 0 B" in table
    r = json.loads(run("--json", "admin", "role", "--server", follower.address).stdout)
    assert r["role"] == "SLAVE" and r["master"] == master.address and r["connected"] is True
    m = json.loads(run("--json", "admin", "role", "--server", master.address).stdout)
    assert m["role"] == "MASTER" and m["mode"] == "SYNC" and m["followers"][0]["member"] == "m1"
    # every member's status by its name (a user trial: off Kubernetes the names were dialled as
    # host names, and every member showed as down)
    status = run("--json", "admin", "status", "--server", master.address)
    assert status.returncode == 0 and {s["node"] for s in json.loads(status.stdout)} == {"m0", "m1"}, status.stdout
    one = json.loads(run("--json", "admin", "status", "--node", "m1", "--server", master.address).stdout)
    assert one["node"] == "m1" and "error" not in one, one

    # manual failover: promote the follower, make the old master follow it
    p = json.loads(run("--json", "admin", "promote", "--server", follower.address, "--mode", "SYNC").stdout)
    assert p["role"] == "MASTER" and p["epoch"] == 2
    f = json.loads(run("--json", "admin", "role", "--server", master.address, "--replica-of", follower.address).stdout)
    assert f["role"] == "SLAVE" and f["master"] == follower.address
    wait_until(lambda: connected(c, master), what="the old master to follow")
    wait_until(lambda: c.send("t", b"after").status == "PUT_OK", timeout=20, what="writes on the new master")
    bad = run("admin", "promote", "--server", follower.address, "--mode", "SOMETIMES", check=False)
    assert bad.returncode != 0 and "mode" in bad.stderr.decode()

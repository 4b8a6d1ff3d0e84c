"""Three store nodes on 127.0.0.1: route, spread of sends, failover, consumption from all."""

import collections

from msgstore.client import Client, Consumer, Producer
from tests.support.servers import ServerProcess, free_port, wait_until


def test_any_node_answers_the_route_for_all(cluster):
    for n in cluster:
        route = Client(n.address).route("orders", refresh=True)
        assert [(x.name, x.address, x.ready) for x in route.nodes] == [(f"store-{i}", cluster[i].address, True) for i in range(3)]
        assert all(x.queue_ids == tuple(range(8)) for x in route.nodes)
    assert len(Client(cluster[1].address).route("orders").queues) == 24


def test_sends_spread_over_every_node_and_queue_and_keys_stick(cluster):
    client = Client(cluster[0].address)
    results = [client.send("spread", b"%d" % i) for i in range(96)]
    per_pair = collections.Counter((r.node, r.queue_id) for r in results)
    assert len(per_pair) == 24 and set(per_pair.values()) == {4}  # round robin over (node, queue)
    keyed = {(r.node, r.queue_id) for r in (client.send("spread", b"k", key="customer-42") for _ in range(10))}
    assert len(keyed) == 1


def test_failover_when_a_node_is_killed_and_consumption_from_all(cluster):
    client = Client(cluster[0].address, timeout=3)
    producer = Producer(client, linger_ms=2)
    first = []
    for round_ in range(3):  # three batches: without keys a batch sticks to one queue, the next goes on
        first += [producer.send("orders", b"before-%d" % i) for i in range(round_ * 100, round_ * 100 + 100)]
        producer.flush()
    assert all(f.result(30).ok for f in first)
    assert {f.result().node for f in first} == {"store-0", "store-1", "store-2"}
    cluster[2].kill()
    sent = []
    for i in range(150):
        r = client.send("orders", b"after-%d" % i)  # may hit the dead node first and fail over
        assert r.ok, r
        sent.append(r)
    assert {r.node for r in sent} == {"store-0", "store-1"}
    # peers' answers are cached for a second, so the route notices within about that
    wait_until(
        lambda: [n.ready for n in client.route("orders", refresh=True).nodes] == [True, True, False],
        timeout=10,
        what="the dead node to show as not ready",
    )
    producer.close()
    # the dead node comes back with its data; a consumer reads every node and commits per node
    cluster[2].start()
    wait_until(lambda: all(n.ready for n in client.route("orders", refresh=True).nodes), what="all nodes ready")
    consumer = Consumer(client, "billing", "orders")
    bodies = []
    while len(bodies) < 450:
        # the client's channel to the returned node may still be in its reconnect backoff (up
        # to ~2.4 s) after the route shows it ready: a poll waits its whole timeout (it once
        # gave up after one 1 s long poll, and CI saw "stalled at 350")
        batch = consumer.poll(timeout=10)
        assert batch, f"stalled at {len(bodies)}"
        bodies.extend(r.body for r in batch)
    assert sorted(bodies) == sorted([b"before-%d" % i for i in range(300)] + [b"after-%d" % i for i in range(150)])
    consumer.commit()
    for n in cluster:
        one = Client(n.address)
        offsets = one.queue_offsets("orders")
        for q, (_lo, hi) in offsets.items():
            if q.node == n.name:
                assert one.committed("billing", "orders", q) == hi  # committed on the node owning the queue
    assert consumer.lag() == 0


def test_peers_file_is_followed_without_restart(tmp_path):
    peers = tmp_path / "peers"
    peers.write_text("")
    ports = [free_port(), free_port()]
    nodes = [ServerProcess(str(tmp_path / f"n{i}"), port=p, name=f"n{i}", args=["--peers-file", str(peers)]) for i, p in enumerate(ports)]
    try:
        for n in nodes:
            n.start()
        client = Client(nodes[0].address)
        assert [n.name for n in client.route("x", refresh=True).nodes] == ["n0"]
        peers.write_text("".join(f"127.0.0.1:{p}\n" for p in ports))  # as DNS would list a new pod
        wait_until(
            lambda: [n.name for n in client.route("x", refresh=True).nodes] == ["n0", "n1"], timeout=10, what="the second node in the route"
        )
    finally:
        for n in nodes:
            n.kill()

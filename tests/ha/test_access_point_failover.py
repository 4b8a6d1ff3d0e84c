"""Issue 31: a failover behind one address is latency, not errors. RocketMQ 5's official
producer and SimpleConsumer work through a plain TCP forwarder (a Service, as far as the client can tell) that
leads to a follower; the master is SIGKILLed and the members elect a new one through etcd. The
node behind the address holds each call until the group has a master again and passes it on,
so the producer sees no error and nothing acknowledged is lost (the consumer receives it all);
the longest stall, and what the consumer saw (an ack in flight when the master died may fail,
and its message comes again), are printed."""

from __future__ import annotations

import asyncio
import threading
import time

from rocketmq import Producer

from msgstore.client import AsyncClient, Client, Consumer, OutMessage
from tests.ha.test_arbiter import FAST, SYNC
from tests.rocketmq.conftest import config, started
from tests.rocketmq.test_official_client import message, simple
from tests.support.servers import wait_until
from tests.support.tcp_forwarder import TcpForwarder


class Receives(threading.Thread):
    """The official SimpleConsumer receiving and acknowledging, every error recorded."""

    def __init__(self, consumer):
        super().__init__(daemon=True)
        self.consumer = consumer
        self.got: set[bytes] = set()
        self.errors: list[str] = []
        self.halted = threading.Event()

    def run(self) -> None:
        while not self.halted.is_set():
            try:
                for m in self.consumer.receive(32, 30):
                    self.consumer.ack(m)  # (an ack whose answer a dying master took is sent again, and is no error)
                    self.got.add(m.body)
            except Exception as e:  # what the application would see
                self.errors.append(f"{type(e).__name__}: {e}")


class Sends(threading.Thread):
    """The official producer sending one message at a time, every answer recorded."""

    def __init__(self, producer: Producer):
        super().__init__(daemon=True)
        self.producer = producer
        self.acked: list[bytes] = []
        self.errors: list[str] = []
        self.longest = 0.0
        self.halted = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.halted.is_set():
            body = b"ap-%d" % i
            i += 1
            t0 = time.monotonic()
            try:
                self.producer.send(message("orders", body))
                self.acked.append(body)
            except Exception as e:  # what the application would see
                self.errors.append(f"{type(e).__name__}: {e}")
            self.longest = max(self.longest, time.monotonic() - t0)


def test_an_official_producer_through_one_address_sees_no_error_when_the_master_dies(groups, etcd):
    g = groups(3, master=SYNC + FAST, follower=FAST, peers=False, arbiter=etcd.url(), failover_after="1", start=False)
    for m in g.members:
        m.extra += ["--access-point"]
    g.start()
    m0, m1, _m2 = g.members
    service = TcpForwarder(m1.address)  # leads to a follower: every send is passed on to the master
    sends = None
    try:
        with (
            started(Producer(config(service.address), ("orders",))) as producer,
            started(simple(config(service.address), "readers", "orders", 1)) as consumer,
        ):
            receives = Receives(consumer)
            receives.start()
            sends = Sends(producer)
            sends.start()
            wait_until(lambda: len(sends.acked) > 50, what="sends through the access point")
            before = len(sends.acked)
            m0.kill()
            wait_until(lambda: etcd.record("g0")["holder"] in ("m1", "m2"), timeout=30, what="an election")
            wait_until(lambda: len(sends.acked) > before + 50, timeout=30, what="sends after the failover")
            sends.halted.set()
            sends.join(30)
            wait_until(
                lambda: set(sends.acked) <= receives.got,
                timeout=60,
                what=lambda: (
                    f"the consumer to receive every acknowledged message: {len(set(sends.acked) - receives.got)} of "
                    f"{len(sends.acked)} missing, e.g. {sorted(set(sends.acked) - receives.got)[:5]}; the kill came after "
                    f"{before}; the consumer's errors: {receives.errors[-3:]}"
                ),
            )
            receives.halted.set()
            receives.join(30)
        print(
            f"through one address: {len(sends.acked)} acknowledged, longest send {sends.longest:.2f} s across the failover; "
            f"the consumer saw {len(receives.errors)} errors {receives.errors[:2]}"
        )
        assert not sends.errors, sends.errors[:3]
        with Client(service.address, timeout=10) as c:
            consumer = Consumer(c, None, "orders")
            got: set[bytes] = set()
            deadline = time.monotonic() + 30  # (one empty poll through the relay is no end: read until all are in, or 30 s)
            while not set(sends.acked) <= got and time.monotonic() < deadline:
                got.update(m.body for m in consumer.poll(timeout=2))
        assert set(sends.acked) <= got, f"{len(set(sends.acked) - got)} acknowledged messages lost"
    finally:
        if sends is not None:
            sends.halted.set()
        service.close()


def test_our_client_through_one_address_follows_a_switchover_without_an_error(groups, etcd):
    """A switchover leaves the old master running: it refuses in-band ("not master") on the send
    stream the access point opened to it. The client must not take that stream's refusals as
    the answer: the stream is reopened (the node behind the address looks the master up again)
    and the send taken by the new master, within the client's failover time."""
    from tests.ha.ledger import Ledger, Producer
    from tests.ha.test_fencing import promote

    g = groups(3, master=SYNC, peers=False, arbiter=etcd.url(), start=False)
    for m in g.members:
        m.extra += ["--access-point"]
    g.start()
    _m0, m1, m2 = g.members
    service = TcpForwarder(m2.address)  # a follower before and after
    ledger = Ledger()
    client = Client(service.address, timeout=5, failover_timeout=20)
    p = Producer(client, "t", ledger, "p")
    loop = asyncio.new_event_loop()
    aio = AsyncClient(service.address, timeout=5, failover_timeout=20)
    try:
        assert loop.run_until_complete(aio.send("t", b"asyncio before")).ok  # (its send stream opened now)
        p.start()
        wait_until(lambda: len(ledger.acks) > 200, what="sends through the access point")
        promote(m1)
        assert loop.run_until_complete(aio.send("t", b"asyncio after")).ok
        before = len(ledger.acks)
        wait_until(
            lambda: len(ledger.acks) > before + 200,
            timeout=30,
            what=lambda: (
                f"sends after the switchover ({len(ledger.acks) - before} acked, {ledger.errors} errors, {ledger.refused} refused)"
            ),
        )
        p.halt()
        assert (ledger.errors, ledger.refused) == (0, 0)
        held = ledger.read(client, "t", settle=5)
        assert not ledger.lost(held)
        assert etcd.record("g0")["holder"] == "m1"
    finally:
        p.halt()
        loop.run_until_complete(aio.close())
        loop.close()
        client.close()
        service.close()


def test_reads_through_one_address_go_on_while_the_arbiter_is_away(groups, etcd):
    """With etcd paused past the lease the master may not acknowledge, but what it holds can be
    read: a pull and the queue offsets through the access point are served by the fenced
    master (as they are when asked directly), not held until a master takes writes again."""
    from tests.ha.conftest import role

    g = groups(3, master=FAST, follower=FAST, peers=False, arbiter=etcd.url(), start=False)
    for m in g.members:
        m.extra += ["--access-point"]
    g.start()
    m0, m1, _m2 = g.members
    service = TcpForwarder(m1.address)
    client = Client(service.address, timeout=5, failover_timeout=1)
    direct = Client(m0.address, timeout=5)
    try:
        assert client.send_batch("t", [OutMessage(b"r%d" % i) for i in range(20)]).all_ok
        etcd.pause()
        try:
            wait_until(lambda: role(direct, m0).fenced, timeout=15, what="the master to lose its renewal")
            offsets = client.queue_offsets("t")
            assert sum(hi for _lo, hi in offsets.values()) == 20
            got = [m.body for q in offsets for m in client.pull("t", q, 0, max_messages=64).messages]
            assert sorted(got) == sorted(b"r%d" % i for i in range(20))
        finally:
            etcd.resume()
    finally:
        client.close()
        direct.close()
        service.close()


def test_an_official_producer_through_one_address_sees_no_error_in_a_switchover(groups, etcd):
    """A switchover fences the master first: a send it refuses then was never stored (it says so
    in the call's trailers), so the node that passed it on sends it to the new master instead of
    failing the producer."""
    from tests.ha.test_fencing import promote

    g = groups(3, master=SYNC, peers=False, arbiter=etcd.url(), start=False)
    for m in g.members:
        m.extra += ["--access-point"]
    g.start()
    _m0, m1, m2 = g.members
    service = TcpForwarder(m2.address)
    sends = None
    try:
        with started(Producer(config(service.address), ("orders",))) as producer:
            sends = Sends(producer)
            sends.start()
            wait_until(lambda: len(sends.acked) > 50, what="sends through the access point")
            for member in (m1, m2, m1):  # (three switchovers: one send in flight at a fence is likely)
                promote(member)
                before = len(sends.acked)
                wait_until(lambda n=before: len(sends.acked) > n + 20, timeout=30, what="sends after the switchover")
            sends.halted.set()
            sends.join(30)
        print(f"through one address, three switchovers: {len(sends.acked)} acknowledged, longest send {sends.longest:.2f} s")
        assert not sends.errors, sends.errors[:3]
    finally:
        if sends is not None:
            sends.halted.set()
        service.close()

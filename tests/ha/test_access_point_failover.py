"""Issue 31: a failover behind one address is latency, not errors. RocketMQ 5's official
producer and SimpleConsumer work through a plain TCP forwarder (a Service, as far as the client can tell) that
leads to a follower; the master is SIGKILLed and the members elect a new one through etcd. The
node behind the address holds each call until the group has a master again and passes it on,
so the producer sees no error and nothing acknowledged is lost (the consumer receives it all);
the longest stall, and what the consumer saw (an ack in flight when the master died may fail,
and its message comes again), are printed."""

from __future__ import annotations

import threading
import time

from rocketmq import Producer

from msgstore.client import Client, Consumer
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
                    self.consumer.ack(m)
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
            wait_until(lambda: set(sends.acked) <= receives.got, timeout=60, what="the consumer to receive every acknowledged message")
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
            while (batch := consumer.poll(timeout=2)) or len(got) < len(sends.acked):
                got.update(m.body for m in batch)
                if not batch:
                    break
        assert set(sends.acked) <= got, f"{len(set(sends.acked) - got)} acknowledged messages lost"
    finally:
        if sends is not None:
            sends.halted.set()
        service.close()

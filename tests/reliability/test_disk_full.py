"""A full disk for real: the store on a size-limited tmpfs (needs root to mount).

Over the warning ratio writes are refused with RESOURCE_EXHAUSTED while reads go on; cleanup
frees space and writes resume in the same process. ENOSPC while creating a commit-log segment
or an index file fails cleanly (a put status, or writes refused until space returns) and the
store stays consistent across a restart."""

from __future__ import annotations

import os
import subprocess
import time
import uuid

import grpc
import pytest

from msgstore.v1 import admin_pb2 as apb
from msgstore.v1 import admin_pb2_grpc as apbg
from msgstore.v1 import msgstore_pb2 as pb
from msgstore.v1 import msgstore_pb2_grpc as pbg
from tests.support.servers import ServerProcess, wait_until

MiB = 1024 * 1024
BODY = 4096


@pytest.fixture
def tmpfs(tmp_path):
    """A 64 MiB tmpfs; skipped where mounting is not allowed (not root)."""
    where = tmp_path / "disk"
    where.mkdir()
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(where)], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {out.stderr.strip()}")
    try:
        yield str(where)
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def body(n: int) -> bytes:
    return (b"%08d" % n) * (BODY // 8)


class Writer:
    """Sends 4 KiB messages, keeping what was acknowledged: id -> (queue offset, commit-log offset)."""

    def __init__(self, address: str, topic: str = "full"):
        self.channel = grpc.insecure_channel(address)
        self.stub = pbg.MessageStoreStub(self.channel)
        self.admin = apbg.AdminStub(self.channel)
        self.topic = topic
        self.next = 0
        self.acked: dict[int, tuple[int, int]] = {}

    def send(self, count: int = 16, keyed: bool = True) -> list[pb.SendResult]:
        """One request of ``count`` messages to queue 0; raises grpc.RpcError when the call fails."""
        ids = list(range(self.next, self.next + count))
        self.next += count
        entries = [pb.SendEntry(topic=self.topic, queue_id=0, body=body(n), keys=[f"k{n}"] if keyed else []) for n in ids]
        resp = self.stub.Send(pb.SendRequest(entries=entries), timeout=20)
        for n, r in zip(ids, resp.results):
            if r.status == pb.PUT_OK:
                self.acked[n] = (r.queue_offset, r.commitlog_offset)
        return list(resp.results)

    def until_refused(self, limit: int, keyed: bool = True) -> grpc.RpcError | pb.SendResult:
        """Send until a call fails or a result is not PUT_OK; return that failure."""
        for _ in range(limit):
            try:
                bad = [r for r in self.send(keyed=keyed) if r.status != pb.PUT_OK]
            except grpc.RpcError as e:
                return e
            if bad:
                return bad[0]
        raise AssertionError(f"{limit} requests were all accepted")

    def status(self) -> apb.StoreStatus:
        return self.admin.GetStatus(apb.GetStatusRequest(), timeout=10)

    def check_all(self, keyed_ids=()) -> int:
        """Every acknowledged message still in the queue is there with its body; return how
        many are gone (below the queue's minimum offset: deleted by cleanup)."""
        by_offset = {off: n for n, (off, _) in self.acked.items()}
        want = max(by_offset, default=-1) + 1  # (an ack means stored: its dispatch may come a moment later)
        wait_until(
            lambda: (
                self.stub.GetQueueOffsets(pb.GetQueueOffsetsRequest(topic=self.topic, queue_id=0), timeout=10).queues[0].max_offset >= want
            ),
            timeout=10,
            what=f"every acknowledged offset below {want} dispatched",
        )
        first = self.stub.Pull(pb.PullRequest(topic=self.topic, queue_id=0, offset=0, max_messages=1), timeout=10)
        offset = low = first.min_offset
        while True:
            resp = self.stub.Pull(pb.PullRequest(topic=self.topic, queue_id=0, offset=offset, max_messages=256), timeout=10)
            if resp.status in (pb.MESSAGE_WAS_REMOVING, pb.OFFSET_TOO_SMALL) and offset == low:
                offset = low = resp.next_offset  # cleanup removed the start of the queue: skip what is gone
                continue
            if resp.status != pb.FOUND:
                assert resp.status in (pb.OFFSET_OVERFLOW_ONE, pb.NO_MESSAGE_IN_QUEUE), (resp.status, offset, resp.min_offset)
                break
            for m in resp.messages:
                n = by_offset.pop(m.queue_offset, None)
                if n is not None:
                    assert m.body == body(n), f"offset {m.queue_offset}: wrong body"
                offset = m.queue_offset + 1
        missing = [off for off in by_offset if off >= low]
        assert not missing, f"acknowledged messages missing at offsets {sorted(missing)[:5]}"
        for n in keyed_ids:
            found = self.stub.QueryByKey(pb.QueryByKeyRequest(topic=self.topic, key=f"k{n}"), timeout=10)
            assert [m.body for m in found.messages] == [body(n)], f"key k{n} not found"
        return len(by_offset)


def ballast(disk: str, leave: int) -> str:
    """Fill the tmpfs up to ``leave`` free bytes with one preallocated file."""
    path = os.path.join(disk, f"ballast-{uuid.uuid4().hex[:6]}")
    st = os.statvfs(disk)
    size = st.f_bavail * st.f_frsize - leave
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        os.posix_fallocate(fd, 0, size)
    finally:
        os.close(fd)
    return path


@pytest.mark.slow
def test_over_the_warning_ratio_writes_stop_reads_go_on_and_cleanup_lets_them_resume(tmpfs):
    server = ServerProcess(
        os.path.join(tmpfs, "data"),
        settings=[
            f"mappedFileSizeCommitLog={2 * MiB}",
            "mappedFileSizeConsumeQueue=40000",
            "maxHashSlotNum=1024",
            "maxIndexNum=4096",
            "diskMaxUsedSpaceRatio=50",
            "diskSpaceCleanForciblyRatio=60",
            "diskSpaceWarningLevelRatio=75",
            "cleanFileForciblyEnable=false",
            "fileReservedTime=72",
            "cleanResourceInterval=100",
            "cleanResourceInitialDelay=0",
            "diskMonitorInterval=50",
            "deleteCommitLogFilesInterval=0",
        ],
    ).start()
    try:
        w = Writer(server.address)
        refused = w.until_refused(limit=1000)  # 64 MiB of 4 KiB messages is ~1000 requests
        assert isinstance(refused, grpc.RpcError), refused
        assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "disk full" in refused.details()
        st = w.status()
        assert st.disk_full and st.disk_usage > 0.75
        assert server.health() == 1  # SERVING: reads go on
        assert w.check_all() == 0  # nothing cleaned yet (cleanup may not force), nothing lost
        with pytest.raises(grpc.RpcError) as again:
            w.send()
        assert again.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        # allow forced cleanup (a hot key): the oldest segments go, writes come back, same process
        pid = server.proc.pid
        w.admin.UpdateConfig(apb.UpdateConfigRequest(changes={"cleanFileForciblyEnable": "true"}), timeout=10)

        def accepted():
            try:
                return all(r.status == pb.PUT_OK for r in w.send())
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e
                time.sleep(0.05)
                return False

        wait_until(accepted, timeout=30, what="writes to resume after cleanup")
        assert server.proc.pid == pid and not w.status().disk_full
        # stop forced cleanup and let a run in progress finish, so the check below sees a stable
        # queue start (segments deleted while it reads would look like lost messages)
        w.admin.UpdateConfig(apb.UpdateConfigRequest(changes={"cleanFileForciblyEnable": "false"}), timeout=10)
        counts = [w.status().commitlog_segments]

        def settled():
            time.sleep(0.3)
            counts.append(w.status().commitlog_segments)
            return counts[-1] == counts[-2]

        wait_until(settled, timeout=30, what="cleanup to settle")
        deleted = w.check_all()
        assert 0 < deleted < len(w.acked), deleted  # the oldest went, the rest (and the new ones) are intact
    finally:
        server.terminate()


@pytest.mark.slow
def test_enospc_creating_index_or_segment_fails_cleanly_and_the_store_stays_consistent(tmpfs):
    data = os.path.join(tmpfs, "data")
    settings = [
        f"mappedFileSizeCommitLog={16 * MiB}",
        "mappedFileSizeConsumeQueue=40000",
        "maxHashSlotNum=2000000",
        "maxIndexNum=500",  # each index file preallocates ~8 MB
        "diskMaxUsedSpaceRatio=90",
        "diskSpaceCleanForciblyRatio=95",
        "diskSpaceWarningLevelRatio=95",
        "cleanFileForciblyEnable=false",
        "diskMonitorInterval=50",
    ]
    server = ServerProcess(data, settings=settings).start()
    try:
        w = Writer(server.address)
        w.send()  # creates the first segment and (in the dispatcher, just after) the first index file
        wait_until(
            lambda: w.stub.QueryByKey(pb.QueryByKeyRequest(topic=w.topic, key="k0"), timeout=10).messages, what="the first index file"
        )
        # 1. an index file cannot be created: writes are refused until space returns
        weight = ballast(tmpfs, leave=5 * MiB)  # under the 95 % warning ratio
        refused = w.until_refused(limit=200)
        # the failed preallocation of the index file fills the disk until it is undone: a disk
        # monitor reading (every 50 ms) taken in that window refuses writes as disk full until
        # its next reading; the index failure is what stays
        deadline = time.monotonic() + 20
        while isinstance(refused, grpc.RpcError) and refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
            assert time.monotonic() < deadline, "writes stayed refused as disk full"
            wait_until(lambda: not w.status().disk_full, timeout=20, what="the disk monitor to see the space back")
            refused = w.until_refused(limit=200)
        assert isinstance(refused, grpc.RpcError), refused
        assert refused.code() == grpc.StatusCode.UNAVAILABLE and "failed" in refused.details(), refused.details()
        assert server.health() == 1
        # (a retried index preallocation may flag the disk full again for one monitor reading)
        wait_until(lambda: list(w.status().unavailable) == ["INDEX_FILE_ERROR"], timeout=20, what="only the index failure to be reported")
        assert refused.details().startswith("writing an index file failed: ") and "No space left" in refused.details()  # which, and why
        os.unlink(weight)
        wait_until(lambda: not w.status().unavailable, timeout=20, what="dispatch to catch up once space returned")
        keyed = list(w.acked)
        assert all(r.status == pb.PUT_OK for r in w.send())
        w.check_all(keyed_ids=keyed[-40:] + keyed[:5])  # including those acknowledged when the index failed
        # 2. the next commit-log segment cannot be created: the put says so, nothing half-made stays
        weight = ballast(tmpfs, leave=10 * MiB)
        refused = w.until_refused(limit=2000, keyed=False)
        assert isinstance(refused, pb.SendResult), refused
        assert refused.status == pb.CREATE_MAPPED_FILE_FAILED and "No space left" in refused.error, refused
        segments = sorted(os.listdir(os.path.join(data, "commitlog")))
        assert len(segments) == 1 and os.path.getsize(os.path.join(data, "commitlog", segments[0])) == 16 * MiB
        os.unlink(weight)
        # the failed preallocation may have briefly filled the disk: the monitor (every 50 ms)
        # clears DISK_FULL on its next reading; then writes go on, no restart needed
        wait_until(lambda: not w.status().unavailable, timeout=20, what="the disk monitor to see the space back")
        assert all(r.status == pb.PUT_OK for r in w.send(keyed=False))
        # 3. a clean restart finds everything it acknowledged
        assert server.terminate() == 0
        server.start()
        w = _reconnect(w, server.address)
        assert w.status().recovery.mode == "normal"
        assert w.check_all(keyed_ids=keyed[-10:]) == 0
    finally:
        server.terminate()


def _reconnect(w: Writer, address: str) -> Writer:
    fresh = Writer(address, w.topic)
    fresh.acked, fresh.next = w.acked, w.next
    return fresh

"""``spark.read.format("msgstore")`` and ``spark.readStream.format("msgstore")``.

Two inputs: ``endpoints`` (live stores over gRPC; any node's address, the route lists every
node; one partition per node/topic/queue/offset range of at most ``maxMessagesPerPartition``)
and ``path`` (a store root or a directory of archived commit-log segments, read offline; one
partition per segment file).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition

from ..broker.system_topics import is_store_topic
from . import schema as cols
from .columns import BATCH_ROWS, Decoder
from .files import SegmentFile, mapped, read_kind, segment_files
from .options import EARLIEST, LATEST, OptionError, ReaderOptions

try:  # Spark ≥ 4.2
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover
    ReadAllAvailable = ReadMaxRows = None

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass


log = logging.getLogger(__name__)

PULL_MAX = 1024


class DataLossError(RuntimeError):
    """Requested offsets were deleted by retention and failOnDataLoss is true."""


@dataclass
class QueueRange(InputPartition):
    address: str
    node: str
    topic: str
    queue_id: int
    start: int
    end: int


@dataclass
class StoreDir(InputPartition):
    root: str


class MsgStoreDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "msgstore"

    def schema(self) -> str:
        kind = (self.options.get("kind") or "messages").lower()
        return {"consumequeue": cols.CONSUMEQUEUE_DDL, "index": cols.INDEX_DDL, "keyhashes": cols.KEYHASH_DDL}.get(kind, cols.DDL)

    def reader(self, schema) -> BatchReader:
        return BatchReader(ReaderOptions.parse(self.options))

    def streamReader(self, schema) -> StreamReader:
        return StreamReader(ReaderOptions.parse(self.options, streaming=True))


# ------------------------------------------------------------------------------------------ planning


def queue_key(node: str, queue_id: int) -> str:
    return f"{node}/{queue_id}"


def _resolve_start(opts: ReaderOptions, client, topic: str, q, lo: int, hi: int) -> int:
    if opts.starting_ts is not None:
        return client.offset_by_time(topic, q, opts.starting_ts)
    want = opts.starting.for_queue(topic, q.node, q.queue_id)
    if want is None:  # not named in the JSON: Kafka's rule is earliest for batch reads
        want = EARLIEST
    return lo if want == EARLIEST else hi if want == LATEST else want


def _resolve_end(opts: ReaderOptions, client, topic: str, q, lo: int, hi: int) -> int:
    if opts.ending_ts is not None:
        return min(hi, client.offset_by_time(topic, q, opts.ending_ts))
    want = opts.ending.for_queue(topic, q.node, q.queue_id)
    if want is None or want == LATEST:
        return hi
    return lo if want == EARLIEST else min(want, hi)


def check_data_loss(opts: ReaderOptions, topic: str, node: str, queue_id: int, start: int, lo: int) -> int:
    """The start to use when retention already deleted [start, lo)."""
    if start >= lo:
        return start
    message = (
        f"msgstore: topic {topic} queue {queue_key(node, queue_id)}: offsets {start}..{lo - 1} were deleted "
        f"by retention (the queue now starts at {lo})"
    )
    if opts.fail_on_data_loss:
        raise DataLossError(message + "; set failOnDataLoss=false to skip them")
    log.warning("%s; skipped (failOnDataLoss=false)", message)
    return lo


def split(q, topic: str, start: int, end: int, size: int) -> list[QueueRange]:
    return [QueueRange(q.address, q.node, topic, q.queue_id, s, min(end, s + size)) for s in range(start, end, size)]


def plan_queues(opts: ReaderOptions) -> list[QueueRange]:
    client = opts.client()
    try:
        parts: list[QueueRange] = []
        skipped: list[str] = []
        known = client.topics(skipped=skipped)
        missing = [t for t in opts.topics if t not in known and not is_store_topic(t)]
        # a store that checks callers lists only what the caller may use: asked first, it answers
        # with its refusal, not "no topic" (and what it answers is planned from below)
        asked = {t: client.queue_offsets(t) for t in missing}
        if missing and not skipped:  # (a typo read nothing and said nothing; an archive said "nothing new")
            raise OptionError("topics", f"no topic {', '.join(missing)} on any node (msgstore topics list shows them)")
        for topic in opts.topics:
            offsets = asked[topic] if topic in asked else client.queue_offsets(topic)
            for q, (lo, hi) in sorted(offsets.items(), key=lambda x: (x[0].node, x[0].queue_id)):
                start = check_data_loss(opts, topic, q.node, q.queue_id, _resolve_start(opts, client, topic, q, lo, hi), lo)
                end = _resolve_end(opts, client, topic, q, lo, hi)
                if end > start:
                    parts.extend(split(q, topic, start, end, opts.max_per_partition))
        return parts
    finally:
        client.close()


# ------------------------------------------------------------------------------------------ reading


def read_queue_range(opts: ReaderOptions, part: QueueRange) -> Iterator[pa.RecordBatch]:
    from ..v1 import msgstore_pb2 as pb

    client = opts.client([part.address])
    decoder = Decoder()
    try:
        stub = client.stub(part.address)
        offset = part.start
        pending: list[bytes] = []
        pending_rows = 0
        while offset < part.end:
            req = pb.PullRequest(
                topic=part.topic,
                queue_id=part.queue_id,
                offset=offset,
                max_messages=min(PULL_MAX, part.end - offset),
                raw=True,  # (no group: a range read belongs to none, and a user needs only sub on the topic)
            )
            resp = stub.Pull(req, timeout=60, metadata=client.security.data_metadata() or None)
            status = pb.PullStatus.Name(resp.status)
            if status in ("OFFSET_TOO_SMALL", "MESSAGE_WAS_REMOVING"):
                offset = check_data_loss(opts, part.topic, part.node, part.queue_id, offset, max(resp.next_offset, offset + 1))
                continue
            if status != "FOUND":
                if status == "NO_MATCHED_MESSAGE" and resp.next_offset > offset:
                    offset = resp.next_offset
                    continue
                break  # the queue ends before the planned range (e.g. it was cleaned meanwhile)
            pending.append(resp.records)
            pending_rows += resp.record_count
            offset = resp.next_offset
            if pending_rows >= BATCH_ROWS:
                yield from _decode_all(decoder, b"".join(pending), part.end)
                pending, pending_rows = [], 0
        if pending:
            yield from _decode_all(decoder, b"".join(pending), part.end)
    finally:
        client.close()


def _decode_all(decoder: Decoder, data: bytes, end: int) -> Iterator[pa.RecordBatch]:
    pos = 0
    while pos < len(data):
        batch, pos, stop = decoder.decode(data, pos, len(data))
        if batch is not None:
            if pc.max(batch.column("queue_offset")).as_py() >= end:
                batch = batch.filter(pc.less(batch.column("queue_offset"), end))
            yield batch
        if stop != "limit":
            break


class Filters:
    """What the offline input keeps: topics, per-queue offset bounds, store-time bounds."""

    def __init__(self, opts: ReaderOptions):
        self.opts = opts
        self.topics = set(opts.topics)

    def apply(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        o = self.opts
        mask = None

        def both(m):
            return m if mask is None else pc.and_(mask, m)

        if self.topics:
            mask = both(pc.is_in(batch.column("topic"), pa.array(sorted(self.topics))))
        elif not o.system_topics:  # the store's own topics only when asked (systemTopics=true, or named)
            names = set(batch.column("topic").unique().to_pylist())
            system = sorted(t for t in names if t and is_store_topic(t))
            if system:
                mask = both(pc.invert(pc.is_in(batch.column("topic"), pa.array(system))))
        if o.starting.kind == "latest" or o.ending.kind == "earliest":  # (a batch read from the end, or to the start: nothing)
            return batch.slice(0, 0)
        if o.starting.kind == "json" or o.ending.kind == "json":
            mask = both(pa.array(self._offset_mask(batch)))
        ts = batch.column("store_timestamp").cast(pa.int64())
        if o.starting_ts is not None:
            mask = both(pc.greater_equal(ts, o.starting_ts * 1000))
        if o.ending_ts is not None:
            mask = both(pc.less(ts, o.ending_ts * 1000))
        return batch if mask is None else batch.filter(mask)

    def _offset_mask(self, batch: pa.RecordBatch) -> np.ndarray:
        topics = batch.column("topic").to_pylist()
        qids = batch.column("queue_id").to_numpy()
        offs = batch.column("queue_offset").to_numpy()
        keep = np.ones(len(offs), dtype=bool)
        cache: dict[tuple[str, int], tuple[int, int]] = {}
        for i, (t, q) in enumerate(zip(topics, qids.tolist())):
            bounds = cache.get((t, q))
            if bounds is None:
                bounds = cache[(t, q)] = offline_bounds(self.opts.starting.for_queue(t, "*", q), self.opts.ending.for_queue(t, "*", q))
            keep[i] = bounds[0] <= offs[i] < bounds[1]
        return keep


def offline_bounds(start: int | None, end: int | None) -> tuple[int, int]:
    """[first, past) queue offsets an offline read keeps of a queue, as a live read's would be:
    latest (-1) as a start keeps nothing, earliest (-2) as an end keeps nothing."""
    everything = 2**62
    first = everything if start == LATEST else 0 if start is None or start == EARLIEST else start
    past = 0 if end == EARLIEST else everything if end is None or end == LATEST else end
    return first, past


def read_segment(opts: ReaderOptions, part: SegmentFile) -> Iterator[pa.RecordBatch]:
    filters = Filters(opts)
    decoder = Decoder()
    with mapped(part.path) as (mm, size):
        if mm is None:
            return
        pos = 0
        while pos < size:
            batch, pos, stop = decoder.decode(mm, pos, size)
            if batch is not None:
                batch = filters.apply(batch)
                if batch.num_rows:
                    yield batch
            if stop != "limit":
                break


class BatchReader(DataSourceReader):
    def __init__(self, opts: ReaderOptions):
        self.opts = opts

    def partitions(self):
        o = self.opts
        if o.kind != "messages":
            return [StoreDir(o.path)]
        if o.path:
            return segment_files(o.path) or [StoreDir(o.path)]
        return plan_queues(o) or [StoreDir("")]

    def read(self, partition):
        o = self.opts
        if isinstance(partition, QueueRange):
            yield from read_queue_range(o, partition)
        elif isinstance(partition, SegmentFile):
            yield from read_segment(o, partition)
        elif isinstance(partition, StoreDir) and partition.root and o.kind != "messages":
            yield from read_kind(o.kind, partition.root)


# ------------------------------------------------------------------------------------------ streaming


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are ``{"topic": {"node/queue": next offset}}`` (JSON-able, as Spark checkpoints them)."""

    def __init__(self, opts: ReaderOptions):
        self.opts = opts
        self._target: dict | None = None

    def _current(self) -> tuple[dict, dict]:
        """(latest offsets, queue addresses) for every queue of every topic."""
        client = self.opts.client()
        try:
            latest: dict[str, dict[str, int]] = {}
            lows: dict[str, dict[str, int]] = {}
            addresses: dict[str, str] = {}
            for topic in self.opts.topics:
                for q, (lo, hi) in client.queue_offsets(topic).items():
                    latest.setdefault(topic, {})[queue_key(q.node, q.queue_id)] = hi
                    lows.setdefault(topic, {})[queue_key(q.node, q.queue_id)] = lo
                    addresses[q.node] = q.address
            self._addresses = addresses
            return latest, lows
        finally:
            client.close()

    def initialOffset(self) -> dict:
        latest, lows = self._current()
        out: dict[str, dict[str, int]] = {}
        for topic, per in latest.items():
            for key, hi in per.items():
                node, _, qid = key.rpartition("/")
                want = self.opts.starting.for_queue(topic, node, int(qid))
                if want is None or want == LATEST:
                    want = hi
                elif want == EARLIEST:
                    want = lows[topic][key]
                out.setdefault(topic, {})[key] = want
        return out

    def getDefaultReadLimit(self):
        if self.opts.max_per_trigger and ReadMaxRows is not None:
            return ReadMaxRows(self.opts.max_per_trigger)
        return ReadAllAvailable() if ReadAllAvailable is not None else None

    def prepareForTriggerAvailableNow(self) -> None:
        self._target, _ = self._current()

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        latest, _ = self._current()
        if self._target is not None:  # availableNow: never past what existed when the query began
            latest = {t: {k: min(v, self._target.get(t, {}).get(k, v)) for k, v in per.items()} for t, per in latest.items()}
        max_rows = getattr(limit, "max_rows", None) if limit is not None else None
        if max_rows is None and limit is None and self.opts.max_per_trigger:
            max_rows = self.opts.max_per_trigger
        if max_rows and start:
            budget = max_rows
            capped: dict[str, dict[str, int]] = {}
            for topic in sorted(latest):
                for key in sorted(latest[topic]):
                    s = start.get(topic, {}).get(key, latest[topic][key])
                    take = max(0, min(latest[topic][key] - s, budget))
                    capped.setdefault(topic, {})[key] = s + take
                    budget -= take
            return capped
        return latest

    def partitions(self, start: dict, end: dict):
        if not hasattr(self, "_addresses"):
            self._current()
        parts: list[QueueRange] = []
        for topic, per in end.items():
            for key, hi in per.items():
                node, _, qid = key.rpartition("/")
                lo = start.get(topic, {}).get(key, 0)  # a queue that appeared (scale up) is read from its start
                if hi > lo and node in self._addresses:
                    q = _Q(node, self._addresses[node], int(qid))
                    parts.extend(split(q, topic, lo, hi, self.opts.max_per_partition))
        return parts

    def read(self, partition):
        yield from read_queue_range(self.opts, partition)

    def commit(self, end: dict) -> None:
        """Nothing to release: progress lives in Spark's checkpoint."""


@dataclass(frozen=True)
class _Q:
    node: str
    address: str
    queue_id: int


def register(spark) -> None:
    spark.dataSource.register(MsgStoreDataSource)

"""The epoch file and where two members' histories part (docs/store-format.md §14)."""

from __future__ import annotations

import os
import time

import pytest

from msgstore.ha.epochs import Epoch, EpochFile, EpochFileError, consistent_offset, parse, render
from msgstore.ha.replica import Replica
from msgstore.store import ManualClock, Message


def E(*pairs: tuple[int, int]) -> list[Epoch]:
    return [Epoch(e, s) for e, s in pairs]


def test_the_file_is_rocketmq_s_text_format(tmp_path):
    f = EpochFile(str(tmp_path))
    f.append(1, 0)
    f.append(2, 4096)
    assert (tmp_path / "epochFileCheckpoint").read_text() == "2\n1-0\n2-4096\n"
    assert EpochFile(str(tmp_path)).snapshot() == E((1, 0), (2, 4096))
    assert parse(render(E((3, 7)))) == E((3, 7))


@pytest.mark.parametrize(
    "text, words",
    [("x\n1-0\n", "number of entries"), ("2\n1-0\n", "says 2 entries"), ("1\n1:0\n", "bad entry")],
)
def test_a_damaged_file_is_refused_with_what_is_wrong(text, words):
    with pytest.raises(EpochFileError, match=words):
        parse(text)


def test_terms_only_move_forward(tmp_path):
    f = EpochFile(str(tmp_path))
    f.append(2, 100)
    with pytest.raises(EpochFileError):
        f.append(2, 200)
    with pytest.raises(EpochFileError):
        f.append(3, 50)
    f.append(3, 100)  # the last term wrote nothing: it is replaced
    assert f.snapshot() == E((3, 100))


@pytest.mark.parametrize(
    "local, local_end, master, master_end, expected",
    [
        (E((1, 0)), 500, E((1, 0)), 800, 500),  # a follower behind: nothing to cut
        (E((1, 0)), 900, E((1, 0), (2, 700)), 1000, 700),  # an old master's unreplicated tail
        (E((1, 0), (2, 700)), 750, E((1, 0), (3, 700)), 900, 700),  # a term the master never saw
        (E((1, 0), (2, 300)), 400, E((1, 0), (2, 300), (3, 350)), 600, 350),
        (E((5, 0)), 100, E((1, 0)), 100, -1),  # nothing shared: start over
    ],
)
def test_where_histories_part(local, local_end, master, master_end, expected):
    assert consistent_offset(local, local_end, master, master_end) == expected


def test_truncating_keeps_the_open_term(tmp_path):
    f = EpochFile(str(tmp_path))
    for e, s in ((1, 0), (2, 1000), (3, 5000)):
        f.append(e, s)
    f.truncate_prefix(999)
    assert f.snapshot() == E((1, 0), (2, 1000), (3, 5000))
    f.truncate_prefix(1000)
    assert f.snapshot() == E((2, 1000), (3, 5000))
    f.truncate_prefix(10**9)
    assert f.snapshot() == E((3, 5000))
    f.truncate_suffix(5000)
    assert f.snapshot() == []


def test_retention_trims_the_epoch_file_prefix(make_store):
    """The cleaner's deletion of expired segments drops the terms they held (truncateEpochFilePrefix)."""
    clock = ManualClock()
    s = make_store(clock=clock, mappedFileSizeCommitLog=128, fileReservedTime=1, deleteCommitLogFilesInterval=0)
    replica = Replica(s, "n0", "g0", broker_role="ASYNC_MASTER", master_address="", channel=lambda a: None, call_metadata=tuple)
    replica.start()
    starts = {}
    for i in range(30):
        if i in (10, 20):
            starts[i] = s.commitlog.max_offset  # the log's end (in segment i - 1): a promotion opens a term there
            replica.epochs.append(replica.epoch + 1, starts[i])
        assert s.put_message(Message("t", b"0123456789abcd")).ok
    assert [e.epoch for e in replica.epochs.snapshot()] == [1, 2, 3]
    old = time.time() - 2 * 3600
    for seg in s.commitlog.segments.segments[:15]:
        os.utime(seg.path, (old, old))
    assert s.manual_delete() == 10  # segments 0-9: all of epoch 1 (epoch 2 starts at the end of segment 9)
    assert replica.epochs.snapshot() == E((2, starts[10]), (3, starts[20]))
    assert s.cleaner.run_once().deleted == 5  # part of epoch 2: it is still the oldest term held
    assert replica.epochs.snapshot() == E((2, starts[10]), (3, starts[20]))
    with open(os.path.join(s.root, "epochFileCheckpoint")) as f:
        assert f.read() == f"2\n2-{starts[10]}\n3-{starts[20]}\n"


@pytest.mark.parametrize("offset, size, end", [(0, 0, 0), (2621440, 300_000, 99_999_999_999), (5, 1, -1), (127, 2, 128)])
def test_a_hand_encoded_chunk_is_the_message_protobuf_would_write(offset, size, end):
    from msgstore.ha.master import data_chunk
    from msgstore.v1 import ha_pb2

    data = os.urandom(size)
    assert data_chunk(offset, data, end) == ha_pb2.MasterChunk(offset=offset, data=data, master_end=end).SerializeToString()

"""The consume queues of RocketMQ 4's delay levels (``SCHEDULE_TOPIC_XXXX``, queue n-1 holding
level n) carry each message's delivery time in the unit's tagsCode instead of a tag hash, as
RocketMQ's ``CommitLog.checkMessageAndReturnSize`` writes them (``computeDeliverTimestamp``:
store time + the level's delay). The broker's delay service then finds what is due from the
units alone, without reading a message, and either broker reads the other's queues.

The time is fixed when the message is stored (or dispatched again from the commit log after a
crash, on a follower, by a rebuild: with the delays configured then). Units written before
issue 33 hold a tag hash, at most 2^31: no epoch-millisecond time of this century is that small,
so such a unit says "look at the message" (``LEGACY_MAX``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"  # one queue per delay level: queue id = level - 1
LEGACY_MAX = 0x7FFFFFFF  # a tagsCode at or below this is a tag hash, not a delivery time


def level_delay_ms(queue_id: int, levels_ms: Sequence[int]) -> int:
    """The delay of the level a queue holds (a queue past the last level: the last, as RocketMQ
    caps a level)."""
    if not levels_ms:
        return 0
    return int(levels_ms[min(max(queue_id, 0), len(levels_ms) - 1)])


def deliver_times(queue_id: int, store_timestamps: np.ndarray, levels_ms: Sequence[int]) -> np.ndarray:
    """The tagsCodes of delay-level messages of queue ``queue_id`` stored at those times."""
    return store_timestamps.astype(np.int64) + level_delay_ms(queue_id, levels_ms)

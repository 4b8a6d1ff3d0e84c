"""The storage engine: commit log, consume queues, index, flush, dispatch, recovery, cleanup.

No gRPC and no Kubernetes in here; see docs/store-format.md for the behaviour and file formats.
"""

from ..record.codec import Message, StoredMessage
from .clock import Clock, DiskProbe, FixedDiskProbe, ManualClock
from .config import ConfigError, ConfigUpdate, StoreConfig
from .recovery import RecoveryReport
from .results import GetResult, GetStatus, PutResult, PutStatus, Unavailable
from .store import MessageStore, StoreDirError, StoreLockedError, StoreStateError, TopicNotEmpty

__all__ = [
    "Clock",
    "DiskProbe",
    "FixedDiskProbe",
    "ManualClock",
    "Message",
    "StoredMessage",
    "ConfigError",
    "ConfigUpdate",
    "StoreConfig",
    "RecoveryReport",
    "GetResult",
    "GetStatus",
    "PutResult",
    "PutStatus",
    "Unavailable",
    "MessageStore",
    "StoreDirError",
    "StoreLockedError",
    "StoreStateError",
    "TopicNotEmpty",
]

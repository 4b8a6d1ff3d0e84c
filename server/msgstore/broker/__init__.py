"""Message semantics built from system topics over the store (docs/store-format.md §15):
delayed delivery by level (``SCHEDULE_TOPIC_XXXX``) and by time (``rmq_sys_wheel_timer``).
Uses ``store`` (and runs on a group's master only); never ``api``."""

from ..record.recall_handle import RecallHandle
from .scheduling import DelayRefused, Scheduler
from .services import BrokerServices

__all__ = ["BrokerServices", "DelayRefused", "RecallHandle", "Scheduler"]

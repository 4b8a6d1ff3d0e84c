"""The roles file the operator keeps (a ConfigMap mounted into every pod): which members form
each replica group, which one is master, at what epoch, and where to reach it.

    {"groups": {"orders-g0": {"members": ["orders-0", "orders-1", "orders-2"],
                              "master": "orders-1", "address": "orders-1.orders-headless:10911",
                              "epoch": 3, "mode": "SYNC", "lease": "shop/orders-g0"}}}

A member reads it when it starts (so a restarted old master comes back as a follower) and
follows its changes.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class MemberRole:
    group: str
    master: str
    master_address: str
    epoch: int
    mode: str
    is_master: bool
    lease: str = ""  # "namespace/name" of the group's Lease (Kubernetes: the arbiter of who is master)

    @property
    def broker_role(self) -> str:
        if not self.is_master:
            return "SLAVE"
        return "SYNC_MASTER" if self.mode == "SYNC" else "ASYNC_MASTER"


def parse(data: dict, node: str) -> MemberRole | None:
    for name, g in (data.get("groups") or {}).items():
        if node in (g.get("members") or []):
            master = str(g.get("master") or "")
            return MemberRole(
                group=name,
                master=master,
                master_address=str(g.get("address") or ""),
                epoch=int(g.get("epoch") or 0),
                mode=str(g.get("mode") or "ASYNC"),
                is_master=master == node,
                lease=str(g.get("lease") or ""),
            )
    return None


class RolesFile:
    def __init__(self, path: str):
        self.path = path
        self._mtime: float | None = None
        self._data: dict = {}

    def changed(self) -> bool:
        try:
            mtime = os.stat(self.path).st_mtime
        except OSError:
            return False
        return mtime != self._mtime

    def read(self) -> _Lookup:
        try:
            mtime = os.stat(self.path).st_mtime
            if mtime != self._mtime:
                with open(self.path, encoding="utf-8") as f:
                    self._data = json.load(f)
                self._mtime = mtime
        except (OSError, ValueError):
            pass  # keep the last good content while the file is being replaced
        return _Lookup(self._data)


class _Lookup:
    def __init__(self, data: dict):
        self.data = data

    def get(self, node: str) -> MemberRole | None:
        return parse(self.data, node)

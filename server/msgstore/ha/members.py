"""Who the members of this replica group are (name → address), kept in ``config/haGroup.json``.

A member must be able to ask its group for the current epoch before it takes a single write
(a restarted old master may have been replaced while it was down), and a master of a group of
three or more must know how many members make a majority (check-quorum). Neither is possible
from the command line alone (``--replica-of`` names only the master), so the group records
itself: a follower's handshake carries its address, the master keeps every member it has seen
and sends the list to its followers, and every member persists it. A member whose address
changes is updated in place; nothing is forgotten automatically (a member that left for good
is removed with ``msgstore admin role --forget NAME``).
"""

from __future__ import annotations

import json
import os
import threading

from ..store.metadata import read_json, write_atomic

NAME = "haGroup.json"


class GroupMembers:
    def __init__(self, config_dir: str, group: str, node: str, address: str):
        self.path = os.path.join(config_dir, NAME)
        self.group = group
        self.node = node
        self.lock = threading.Lock()
        self.members: dict[str, str] = {}
        self.last_role: dict = {}  # this member's role when it last ran: {"role", "epoch", "master" | "mode"}
        raw = read_json(self.path, strict=False)  # (its own: rebuilt when unreadable)
        if isinstance(raw, dict) and raw.get("group") == group and isinstance(raw.get("members"), dict):
            self.members = {str(k): str(v) for k, v in raw["members"].items()}
            self.last_role = raw.get("role") if isinstance(raw.get("role"), dict) else {}
        self.members[node] = address

    @property
    def size(self) -> int:
        return len(self.members)

    def others(self) -> dict[str, str]:
        with self.lock:
            return {n: a for n, a in self.members.items() if n != self.node}

    def snapshot(self) -> dict[str, str]:
        with self.lock:
            return dict(self.members)

    def set_address(self, address: str) -> None:
        """This member's own address (known only once the port is bound)."""
        self.add(self.node, address)

    def add(self, name: str, address: str) -> bool:
        """A member seen (a follower's handshake); True when the list changed."""
        if not name or not address:
            return False
        with self.lock:
            if self.members.get(name) == address:
                return False
            self.members[name] = address
            self._save()
            return True

    def replace(self, members: dict[str, str]) -> bool:
        """A follower adopts its master's list (keeping its own address)."""
        merged = {**members, self.node: self.members[self.node]}
        with self.lock:
            if merged == self.members:
                return False
            self.members = merged
            self._save()
            return True

    def note_role(self, role: str, epoch: int, master: str = "", mode: str = "") -> None:
        """What this member is now, for its next start (its command names only its first role)."""
        state = {"role": role, "epoch": epoch, **({"master": master} if master else {}), **({"mode": mode} if mode else {})}
        with self.lock:
            if state == self.last_role:
                return
            self.last_role = state
            self._save()

    def forget(self, name: str) -> bool:
        if name == self.node:
            raise ValueError("a member cannot forget itself")
        with self.lock:
            if self.members.pop(name, None) is None:
                return False
            self._save()
            return True

    def _save(self) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        write_atomic(
            self.path, json.dumps({"group": self.group, "members": self.members, "role": self.last_role}, sort_keys=True, indent=1).encode()
        )

"""``config/users.json``: the store's users and their permission entries (docs/store-format.md
§10, §20), kept beside the topics and groups and copied to followers with them.

The store keeps each user as the JSON object the admin API validated (``acl/``); it does not
read the entries itself, so a newer policy field survives an older node's rewrite. Secrets are
kept as given (an HMAC signature is checked with the secret itself, as RocketMQ's ACL 2.0 keeps
its users' passwords), and the file is readable by the store's user only."""

from __future__ import annotations

from typing import Any

from .metadata import JsonFile


class UserTable(JsonFile):
    name = "users.json"
    mode = 0o600

    def __init__(self, config_dir: str):
        super().__init__(config_dir)
        self.users: dict[str, dict[str, Any]] = {}

    def decode(self, raw: Any) -> None:
        table = raw.get("userTable", {})
        self.users = {str(k): dict(v) for k, v in table.items() if isinstance(v, dict)}

    def encode(self) -> Any:
        return {"userTable": dict(sorted(self.users.items()))}

    def get(self, name: str) -> dict[str, Any] | None:
        return self.users.get(name)

    def put(self, name: str, user: dict[str, Any]) -> None:
        """Create or replace ``name``; durable when this returns."""
        with self.lock:
            self.users[name] = dict(user)
            self.data_version += 1
            change = self.changed()
        self.persist_change(change)

    def delete(self, name: str) -> bool:
        with self.lock:
            if self.users.pop(name, None) is None:
                return False
            self.data_version += 1
            change = self.changed()
        self.persist_change(change)
        return True

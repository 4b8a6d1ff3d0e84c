"""The signature RocketMQ 5 clients put on every call, which our clients send too:
``authorization: MQv2-HMAC-SHA1 Credential=<access key>, SignedHeaders=x-mq-date-time,
Signature=<hex HMAC-SHA1 of x-mq-date-time keyed by the secret key>``.

The signature covers only the time it was made, and that time is not checked (RocketMQ checks
none either; the official Python client signs its local time marked as UTC, so no window fits
every client): a captured header works again, as a bearer token would. Use TLS where the
network is not trusted."""

from __future__ import annotations

import datetime
import hashlib
import hmac
import re
from dataclasses import dataclass

_AUTH = re.compile(
    r"^MQv2-HMAC-SHA1\s+Credential=(?P<ak>[^,\s]*),\s*SignedHeaders=(?P<headers>[^,\s]*),\s*Signature=(?P<sig>[0-9A-Fa-f]+)$"
)
PREFIX = "MQv2-HMAC-SHA1"


@dataclass(frozen=True)
class Signed:
    access_key: str
    stamp: str
    signature: str

    def made_with(self, secret: str) -> bool:
        return hmac.compare_digest(signature(secret, self.stamp), self.signature)


def header(metadata, name: str) -> str | None:
    for key, value in metadata or ():
        if key == name:
            return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    return None


def signature(secret: str, stamp: str) -> str:
    """The hex HMAC-SHA1 of ``stamp`` (x-mq-date-time) keyed by the secret key."""
    return hmac.new(secret.encode(), stamp.encode(), hashlib.sha1).hexdigest()


def now_stamp() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")


def sign(access_key: str, secret: str) -> tuple[tuple[str, str], tuple[str, str]]:
    """The two headers of a call signed now."""
    stamp = now_stamp()
    auth = f"{PREFIX} Credential={access_key}, SignedHeaders=x-mq-date-time, Signature={signature(secret, stamp)}"
    return ("x-mq-date-time", stamp), ("authorization", auth)


def parse(auth: str, metadata) -> Signed:
    """The signed parts of an ``authorization`` value; ValueError saying what is wrong."""
    match = _AUTH.match(auth.strip())
    if match is None or match["headers"].lower() != "x-mq-date-time":
        raise ValueError("authorization: not an MQv2-HMAC-SHA1 signature of x-mq-date-time")
    stamp = header(metadata, "x-mq-date-time") or ""
    try:
        datetime.datetime.strptime(stamp, "%Y%m%dT%H%M%SZ")
    except ValueError:
        raise ValueError(f"x-mq-date-time: not a time of the form 20060102T150405Z, got {stamp[:40]!r}") from None
    return Signed(match["ak"], stamp, match["sig"].lower())

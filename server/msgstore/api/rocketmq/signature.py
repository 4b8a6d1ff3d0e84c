"""RocketMQ 5 clients sign every call: ``authorization: MQv2-HMAC-SHA1 Credential=<access key>,
SignedHeaders=x-mq-date-time, Signature=<hex HMAC-SHA1 of x-mq-date-time keyed by the secret
key>``. The store's data-plane token is the secret key (clients set ``Credentials(ak, token)``);
the access key only names the caller. Without a data token nothing is checked, as with
msgstore.v1.

The signature covers only the time it was made, and that time is not checked (RocketMQ checks
none either; the official Python client signs its local time marked as UTC, so no window fits
every client): a captured header works again, as a bearer token would. Use TLS where the
network is not trusted."""

from __future__ import annotations

import datetime
import hashlib
import hmac
import re

from .protocol import definition as d
from .status import Refusal

_AUTH = re.compile(
    r"^MQv2-HMAC-SHA1\s+Credential=(?P<ak>[^,\s]*),\s*SignedHeaders=(?P<headers>[^,\s]*),\s*Signature=(?P<sig>[0-9A-Fa-f]+)$"
)


def _header(metadata, name: str) -> str | None:
    for key, value in metadata or ():
        if key == name:
            return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    return None


def signature(secret: str, stamp: str) -> str:
    """The hex HMAC-SHA1 of ``stamp`` (x-mq-date-time) keyed by the secret key."""
    return hmac.new(secret.encode(), stamp.encode(), hashlib.sha1).hexdigest()


def verify(secret: str, metadata) -> str:
    """The caller's access key, or a :class:`Refusal` (UNAUTHORIZED) saying what is wrong."""
    auth = _header(metadata, "authorization")
    if not auth:
        raise Refusal(d.UNAUTHORIZED, "this store needs signed requests: set the client's credentials (secret key = the data token)")
    match = _AUTH.match(auth.strip())
    if match is None or match["headers"].lower() != "x-mq-date-time":
        raise Refusal(d.UNAUTHORIZED, "authorization: not an MQv2-HMAC-SHA1 signature of x-mq-date-time")
    stamp = _header(metadata, "x-mq-date-time") or ""
    try:
        datetime.datetime.strptime(stamp, "%Y%m%dT%H%M%SZ")
    except ValueError:
        raise Refusal(d.UNAUTHORIZED, f"x-mq-date-time: not a time of the form 20060102T150405Z, got {stamp[:40]!r}") from None
    expected = signature(secret, stamp)
    if not hmac.compare_digest(expected, match["sig"].lower()):
        raise Refusal(d.UNAUTHORIZED, "authorization: the signature does not match (wrong secret key)")
    return match["ak"]

"""RocketMQ 5 clients sign every call: ``authorization: MQv2-HMAC-SHA1 Credential=<access key>,
SignedHeaders=x-mq-date-time, Signature=<hex HMAC-SHA1 of x-mq-date-time keyed by the secret
key>``. The store's data-plane token is the secret key (clients set ``Credentials(ak, token)``);
the access key only names the caller. Without a data token nothing is checked, as with
msgstore.v1."""

from __future__ import annotations

import datetime
import hashlib
import hmac
import re

from .protocol import definition as d
from .status import Refusal

SKEW_S = 15 * 60  # a signed time further off than this is a replay (or a wrong clock)
_AUTH = re.compile(
    r"^MQv2-HMAC-SHA1\s+Credential=(?P<ak>[^,\s]*),\s*SignedHeaders=(?P<headers>[^,\s]*),\s*Signature=(?P<sig>[0-9A-Fa-f]+)$"
)


def _header(metadata, name: str) -> str | None:
    for key, value in metadata or ():
        if key == name:
            return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    return None


def verify(secret: str, metadata, now: datetime.datetime | None = None) -> str:
    """The caller's access key, or a :class:`Refusal` (UNAUTHORIZED) saying what is wrong."""
    auth = _header(metadata, "authorization")
    if not auth:
        raise Refusal(d.UNAUTHORIZED, "this store needs signed requests: set the client's credentials (secret key = the data token)")
    match = _AUTH.match(auth.strip())
    if match is None or match["headers"].lower() != "x-mq-date-time":
        raise Refusal(d.UNAUTHORIZED, "authorization: not an MQv2-HMAC-SHA1 signature of x-mq-date-time")
    stamp = _header(metadata, "x-mq-date-time") or ""
    try:
        signed_at = datetime.datetime.strptime(stamp, "%Y%m%dT%H%M%SZ")
    except ValueError:
        raise Refusal(d.UNAUTHORIZED, f"x-mq-date-time: not a time of the form 20060102T150405Z, got {stamp[:40]!r}") from None
    expected = hmac.new(secret.encode(), stamp.encode(), hashlib.sha1).hexdigest()
    if not hmac.compare_digest(expected, match["sig"].lower()):
        raise Refusal(d.UNAUTHORIZED, "authorization: the signature does not match (wrong secret key)")
    # RocketMQ 5 clients sign their local time with a Z: compare with local time and with UTC
    now = now or datetime.datetime.now()
    utc = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    if min(abs((now - signed_at).total_seconds()), abs((utc - signed_at).total_seconds())) > SKEW_S:
        raise Refusal(d.UNAUTHORIZED, f"x-mq-date-time: {stamp} is more than {SKEW_S // 60} minutes off this node's clock")
    return match["ak"]

"""The columns of a msgstore DataFrame, for Spark (DDL) and for the Arrow batches we yield.

The Arrow types must be exactly what Spark derives from the DDL: lists named ``element``,
timestamps in microseconds with the UTC zone, every field nullable.
"""

from __future__ import annotations

import pyarrow as pa

DDL = (
    "topic STRING, queue_id INT, queue_offset BIGINT, commitlog_offset BIGINT, msg_id STRING, "
    "keys ARRAY<STRING>, tags STRING, properties MAP<STRING, STRING>, body BINARY, "
    "born_timestamp TIMESTAMP, store_timestamp TIMESTAMP, born_host STRING, store_host STRING, "
    "flag INT, sys_flag INT, reconsume_times INT, store_size INT"
)

TS = pa.timestamp("us", tz="UTC")
KEYS = pa.list_(pa.field("element", pa.string()))
PROPS = pa.map_(pa.string(), pa.string())

ARROW = pa.schema(
    [
        ("topic", pa.string()),
        ("queue_id", pa.int32()),
        ("queue_offset", pa.int64()),
        ("commitlog_offset", pa.int64()),
        ("msg_id", pa.string()),
        ("keys", KEYS),
        ("tags", pa.string()),
        ("properties", PROPS),
        ("body", pa.binary()),
        ("born_timestamp", TS),
        ("store_timestamp", TS),
        ("born_host", pa.string()),
        ("store_host", pa.string()),
        ("flag", pa.int32()),
        ("sys_flag", pa.int32()),
        ("reconsume_times", pa.int32()),
        ("store_size", pa.int32()),
    ]
)

COLUMNS = ARROW.names

# offline views of the other files, used by `msgstore pipeline verify`
CONSUMEQUEUE_DDL = "topic STRING, queue_id INT, queue_offset BIGINT, commitlog_offset BIGINT, size INT, tags_code BIGINT"
CONSUMEQUEUE_ARROW = pa.schema(
    [
        ("topic", pa.string()),
        ("queue_id", pa.int32()),
        ("queue_offset", pa.int64()),
        ("commitlog_offset", pa.int64()),
        ("size", pa.int32()),
        ("tags_code", pa.int64()),
    ]
)
INDEX_DDL = "file STRING, key_hash INT, commitlog_offset BIGINT, begin_offset BIGINT"
INDEX_ARROW = pa.schema([("file", pa.string()), ("key_hash", pa.int32()), ("commitlog_offset", pa.int64()), ("begin_offset", pa.int64())])
KEYHASH_DDL = "commitlog_offset BIGINT, topic STRING, key STRING, key_hash INT"
KEYHASH_ARROW = pa.schema([("commitlog_offset", pa.int64()), ("topic", pa.string()), ("key", pa.string()), ("key_hash", pa.int32())])

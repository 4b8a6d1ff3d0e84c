from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TransactionResolution(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    UNKNOWN: _ClassVar[TransactionResolution]
    COMMIT: _ClassVar[TransactionResolution]
    ROLLBACK: _ClassVar[TransactionResolution]

class SendStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PUT_OK: _ClassVar[SendStatus]
    FLUSH_DISK_TIMEOUT: _ClassVar[SendStatus]
    SERVICE_NOT_AVAILABLE: _ClassVar[SendStatus]
    MESSAGE_ILLEGAL: _ClassVar[SendStatus]
    PROPERTIES_SIZE_EXCEEDED: _ClassVar[SendStatus]
    OS_PAGE_CACHE_BUSY: _ClassVar[SendStatus]
    CREATE_MAPPED_FILE_FAILED: _ClassVar[SendStatus]
    UNKNOWN_ERROR: _ClassVar[SendStatus]
    FLUSH_SLAVE_TIMEOUT: _ClassVar[SendStatus]
    SLAVE_NOT_AVAILABLE: _ClassVar[SendStatus]
    IN_SYNC_REPLICAS_NOT_ENOUGH: _ClassVar[SendStatus]

class PullStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FOUND: _ClassVar[PullStatus]
    NO_MATCHED_MESSAGE: _ClassVar[PullStatus]
    MESSAGE_WAS_REMOVING: _ClassVar[PullStatus]
    OFFSET_FOUND_NULL: _ClassVar[PullStatus]
    OFFSET_OVERFLOW_BADLY: _ClassVar[PullStatus]
    OFFSET_OVERFLOW_ONE: _ClassVar[PullStatus]
    OFFSET_TOO_SMALL: _ClassVar[PullStatus]
    NO_MATCHED_LOGIC_QUEUE: _ClassVar[PullStatus]
    NO_MESSAGE_IN_QUEUE: _ClassVar[PullStatus]

class TimeBoundary(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOWER: _ClassVar[TimeBoundary]
    UPPER: _ClassVar[TimeBoundary]
UNKNOWN: TransactionResolution
COMMIT: TransactionResolution
ROLLBACK: TransactionResolution
PUT_OK: SendStatus
FLUSH_DISK_TIMEOUT: SendStatus
SERVICE_NOT_AVAILABLE: SendStatus
MESSAGE_ILLEGAL: SendStatus
PROPERTIES_SIZE_EXCEEDED: SendStatus
OS_PAGE_CACHE_BUSY: SendStatus
CREATE_MAPPED_FILE_FAILED: SendStatus
UNKNOWN_ERROR: SendStatus
FLUSH_SLAVE_TIMEOUT: SendStatus
SLAVE_NOT_AVAILABLE: SendStatus
IN_SYNC_REPLICAS_NOT_ENOUGH: SendStatus
FOUND: PullStatus
NO_MATCHED_MESSAGE: PullStatus
MESSAGE_WAS_REMOVING: PullStatus
OFFSET_FOUND_NULL: PullStatus
OFFSET_OVERFLOW_BADLY: PullStatus
OFFSET_OVERFLOW_ONE: PullStatus
OFFSET_TOO_SMALL: PullStatus
NO_MATCHED_LOGIC_QUEUE: PullStatus
NO_MESSAGE_IN_QUEUE: PullStatus
LOWER: TimeBoundary
UPPER: TimeBoundary

class EndTransactionRequest(_message.Message):
    __slots__ = ("transaction_id", "resolution")
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    RESOLUTION_FIELD_NUMBER: _ClassVar[int]
    transaction_id: str
    resolution: TransactionResolution
    def __init__(self, transaction_id: _Optional[str] = ..., resolution: _Optional[_Union[TransactionResolution, str]] = ...) -> None: ...

class EndTransactionResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TransactionChecksRequest(_message.Message):
    __slots__ = ("producer_group",)
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    producer_group: str
    def __init__(self, producer_group: _Optional[str] = ...) -> None: ...

class TransactionCheck(_message.Message):
    __slots__ = ("transaction_id", "message", "check")
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CHECK_FIELD_NUMBER: _ClassVar[int]
    transaction_id: str
    message: Message
    check: int
    def __init__(self, transaction_id: _Optional[str] = ..., message: _Optional[_Union[Message, _Mapping]] = ..., check: _Optional[int] = ...) -> None: ...

class ReceiveRequest(_message.Message):
    __slots__ = ("group", "topic", "max_messages", "invisible_ms", "wait_ms", "tag_filter", "sql_filter")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_MS_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    TAG_FILTER_FIELD_NUMBER: _ClassVar[int]
    SQL_FILTER_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    max_messages: int
    invisible_ms: int
    wait_ms: int
    tag_filter: str
    sql_filter: str
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., max_messages: _Optional[int] = ..., invisible_ms: _Optional[int] = ..., wait_ms: _Optional[int] = ..., tag_filter: _Optional[str] = ..., sql_filter: _Optional[str] = ...) -> None: ...

class ReceivedMessage(_message.Message):
    __slots__ = ("message", "receipt_handle", "attempt", "invisible_until_ms")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    message: Message
    receipt_handle: str
    attempt: int
    invisible_until_ms: int
    def __init__(self, message: _Optional[_Union[Message, _Mapping]] = ..., receipt_handle: _Optional[str] = ..., attempt: _Optional[int] = ..., invisible_until_ms: _Optional[int] = ...) -> None: ...

class ReceiveResponse(_message.Message):
    __slots__ = ("messages", "node")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ReceivedMessage]
    node: str
    def __init__(self, messages: _Optional[_Iterable[_Union[ReceivedMessage, _Mapping]]] = ..., node: _Optional[str] = ...) -> None: ...

class AckRequest(_message.Message):
    __slots__ = ("group", "topic", "receipt_handles")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HANDLES_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    receipt_handles: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., receipt_handles: _Optional[_Iterable[str]] = ...) -> None: ...

class AckResult(_message.Message):
    __slots__ = ("receipt_handle", "ok", "error")
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    receipt_handle: str
    ok: bool
    error: str
    def __init__(self, receipt_handle: _Optional[str] = ..., ok: _Optional[bool] = ..., error: _Optional[str] = ...) -> None: ...

class AckResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[AckResult]
    def __init__(self, results: _Optional[_Iterable[_Union[AckResult, _Mapping]]] = ...) -> None: ...

class ChangeInvisibleRequest(_message.Message):
    __slots__ = ("group", "topic", "receipt_handle", "invisible_ms")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_MS_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    receipt_handle: str
    invisible_ms: int
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., receipt_handle: _Optional[str] = ..., invisible_ms: _Optional[int] = ...) -> None: ...

class ChangeInvisibleResponse(_message.Message):
    __slots__ = ("receipt_handle", "invisible_until_ms")
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    receipt_handle: str
    invisible_until_ms: int
    def __init__(self, receipt_handle: _Optional[str] = ..., invisible_until_ms: _Optional[int] = ...) -> None: ...

class UpdateGroupRequest(_message.Message):
    __slots__ = ("group", "max_deliveries", "backoff_ms", "exponential_initial_ms", "exponential_max_ms", "exponential_multiplier", "fifo")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_MS_FIELD_NUMBER: _ClassVar[int]
    EXPONENTIAL_INITIAL_MS_FIELD_NUMBER: _ClassVar[int]
    EXPONENTIAL_MAX_MS_FIELD_NUMBER: _ClassVar[int]
    EXPONENTIAL_MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    FIFO_FIELD_NUMBER: _ClassVar[int]
    group: str
    max_deliveries: int
    backoff_ms: _containers.RepeatedScalarFieldContainer[int]
    exponential_initial_ms: int
    exponential_max_ms: int
    exponential_multiplier: float
    fifo: bool
    def __init__(self, group: _Optional[str] = ..., max_deliveries: _Optional[int] = ..., backoff_ms: _Optional[_Iterable[int]] = ..., exponential_initial_ms: _Optional[int] = ..., exponential_max_ms: _Optional[int] = ..., exponential_multiplier: _Optional[float] = ..., fifo: _Optional[bool] = ...) -> None: ...

class UpdateGroupResponse(_message.Message):
    __slots__ = ("policy",)
    POLICY_FIELD_NUMBER: _ClassVar[int]
    policy: GroupPolicy
    def __init__(self, policy: _Optional[_Union[GroupPolicy, _Mapping]] = ...) -> None: ...

class GroupPolicy(_message.Message):
    __slots__ = ("fifo", "max_deliveries", "backoff_ms", "exponential_initial_ms", "exponential_max_ms", "exponential_multiplier")
    FIFO_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_MS_FIELD_NUMBER: _ClassVar[int]
    EXPONENTIAL_INITIAL_MS_FIELD_NUMBER: _ClassVar[int]
    EXPONENTIAL_MAX_MS_FIELD_NUMBER: _ClassVar[int]
    EXPONENTIAL_MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    fifo: bool
    max_deliveries: int
    backoff_ms: _containers.RepeatedScalarFieldContainer[int]
    exponential_initial_ms: int
    exponential_max_ms: int
    exponential_multiplier: float
    def __init__(self, fifo: _Optional[bool] = ..., max_deliveries: _Optional[int] = ..., backoff_ms: _Optional[_Iterable[int]] = ..., exponential_initial_ms: _Optional[int] = ..., exponential_max_ms: _Optional[int] = ..., exponential_multiplier: _Optional[float] = ...) -> None: ...

class RecallRequest(_message.Message):
    __slots__ = ("recall_handle",)
    RECALL_HANDLE_FIELD_NUMBER: _ClassVar[int]
    recall_handle: str
    def __init__(self, recall_handle: _Optional[str] = ...) -> None: ...

class RecallResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SendEntry(_message.Message):
    __slots__ = ("topic", "queue_id", "body", "tags", "keys", "uniq_key", "properties", "flag", "born_timestamp")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    UNIQ_KEY_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    FLAG_FIELD_NUMBER: _ClassVar[int]
    BORN_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    body: bytes
    tags: str
    keys: _containers.RepeatedScalarFieldContainer[str]
    uniq_key: str
    properties: _containers.ScalarMap[str, str]
    flag: int
    born_timestamp: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., body: _Optional[bytes] = ..., tags: _Optional[str] = ..., keys: _Optional[_Iterable[str]] = ..., uniq_key: _Optional[str] = ..., properties: _Optional[_Mapping[str, str]] = ..., flag: _Optional[int] = ..., born_timestamp: _Optional[int] = ...) -> None: ...

class SendRequest(_message.Message):
    __slots__ = ("entries", "wait_flush", "wait_visible", "request_id")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    WAIT_FLUSH_FIELD_NUMBER: _ClassVar[int]
    WAIT_VISIBLE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[SendEntry]
    wait_flush: bool
    wait_visible: bool
    request_id: int
    def __init__(self, entries: _Optional[_Iterable[_Union[SendEntry, _Mapping]]] = ..., wait_flush: _Optional[bool] = ..., wait_visible: _Optional[bool] = ..., request_id: _Optional[int] = ...) -> None: ...

class SendResult(_message.Message):
    __slots__ = ("status", "message_id", "queue_id", "queue_offset", "commitlog_offset", "error", "recall_handle", "transaction_id", "topic")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMITLOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RECALL_HANDLE_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    status: SendStatus
    message_id: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    error: str
    recall_handle: str
    transaction_id: str
    topic: str
    def __init__(self, status: _Optional[_Union[SendStatus, str]] = ..., message_id: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., commitlog_offset: _Optional[int] = ..., error: _Optional[str] = ..., recall_handle: _Optional[str] = ..., transaction_id: _Optional[str] = ..., topic: _Optional[str] = ...) -> None: ...

class SendResponse(_message.Message):
    __slots__ = ("results", "node", "request_id", "error_code", "error_message")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SendResult]
    node: str
    request_id: int
    error_code: int
    error_message: str
    def __init__(self, results: _Optional[_Iterable[_Union[SendResult, _Mapping]]] = ..., node: _Optional[str] = ..., request_id: _Optional[int] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ("topic", "queue_id", "queue_offset", "commitlog_offset", "msg_id", "body", "tags", "keys", "properties", "born_timestamp", "store_timestamp", "born_host", "store_host", "flag", "sys_flag", "reconsume_times", "store_size", "body_crc")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMITLOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    BORN_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    STORE_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    BORN_HOST_FIELD_NUMBER: _ClassVar[int]
    STORE_HOST_FIELD_NUMBER: _ClassVar[int]
    FLAG_FIELD_NUMBER: _ClassVar[int]
    SYS_FLAG_FIELD_NUMBER: _ClassVar[int]
    RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    STORE_SIZE_FIELD_NUMBER: _ClassVar[int]
    BODY_CRC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    msg_id: str
    body: bytes
    tags: str
    keys: _containers.RepeatedScalarFieldContainer[str]
    properties: _containers.ScalarMap[str, str]
    born_timestamp: int
    store_timestamp: int
    born_host: str
    store_host: str
    flag: int
    sys_flag: int
    reconsume_times: int
    store_size: int
    body_crc: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., commitlog_offset: _Optional[int] = ..., msg_id: _Optional[str] = ..., body: _Optional[bytes] = ..., tags: _Optional[str] = ..., keys: _Optional[_Iterable[str]] = ..., properties: _Optional[_Mapping[str, str]] = ..., born_timestamp: _Optional[int] = ..., store_timestamp: _Optional[int] = ..., born_host: _Optional[str] = ..., store_host: _Optional[str] = ..., flag: _Optional[int] = ..., sys_flag: _Optional[int] = ..., reconsume_times: _Optional[int] = ..., store_size: _Optional[int] = ..., body_crc: _Optional[int] = ...) -> None: ...

class PullRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "offset", "max_messages", "max_bytes", "tag_filter", "timeout_ms", "group", "raw", "sql_filter")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    TAG_FILTER_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    RAW_FIELD_NUMBER: _ClassVar[int]
    SQL_FILTER_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    offset: int
    max_messages: int
    max_bytes: int
    tag_filter: str
    timeout_ms: int
    group: str
    raw: bool
    sql_filter: str
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ..., max_messages: _Optional[int] = ..., max_bytes: _Optional[int] = ..., tag_filter: _Optional[str] = ..., timeout_ms: _Optional[int] = ..., group: _Optional[str] = ..., raw: _Optional[bool] = ..., sql_filter: _Optional[str] = ...) -> None: ...

class PullResponse(_message.Message):
    __slots__ = ("status", "next_offset", "min_offset", "max_offset", "messages", "records", "record_count", "group_generation")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    RECORD_COUNT_FIELD_NUMBER: _ClassVar[int]
    GROUP_GENERATION_FIELD_NUMBER: _ClassVar[int]
    status: PullStatus
    next_offset: int
    min_offset: int
    max_offset: int
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    records: bytes
    record_count: int
    group_generation: int
    def __init__(self, status: _Optional[_Union[PullStatus, str]] = ..., next_offset: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., records: _Optional[bytes] = ..., record_count: _Optional[int] = ..., group_generation: _Optional[int] = ...) -> None: ...

class PullQueuesRequest(_message.Message):
    __slots__ = ("pulls", "timeout_ms", "max_bytes")
    PULLS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    pulls: _containers.RepeatedCompositeFieldContainer[PullRequest]
    timeout_ms: int
    max_bytes: int
    def __init__(self, pulls: _Optional[_Iterable[_Union[PullRequest, _Mapping]]] = ..., timeout_ms: _Optional[int] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class PullQueuesResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[PullResponse]
    def __init__(self, results: _Optional[_Iterable[_Union[PullResponse, _Mapping]]] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "offset", "max_messages", "tag_filter", "group", "raw")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TAG_FILTER_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    RAW_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    offset: int
    max_messages: int
    tag_filter: str
    group: str
    raw: bool
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ..., max_messages: _Optional[int] = ..., tag_filter: _Optional[str] = ..., group: _Optional[str] = ..., raw: _Optional[bool] = ...) -> None: ...

class QueryByKeyRequest(_message.Message):
    __slots__ = ("topic", "key", "max_results", "begin_timestamp", "end_timestamp")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    MAX_RESULTS_FIELD_NUMBER: _ClassVar[int]
    BEGIN_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    END_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    topic: str
    key: str
    max_results: int
    begin_timestamp: int
    end_timestamp: int
    def __init__(self, topic: _Optional[str] = ..., key: _Optional[str] = ..., max_results: _Optional[int] = ..., begin_timestamp: _Optional[int] = ..., end_timestamp: _Optional[int] = ...) -> None: ...

class QueryByKeyResponse(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    def __init__(self, messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ...) -> None: ...

class GetMessageRequest(_message.Message):
    __slots__ = ("msg_id", "commitlog_offset")
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    COMMITLOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    msg_id: str
    commitlog_offset: int
    def __init__(self, msg_id: _Optional[str] = ..., commitlog_offset: _Optional[int] = ...) -> None: ...

class GetMessageResponse(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: Message
    def __init__(self, message: _Optional[_Union[Message, _Mapping]] = ...) -> None: ...

class GetQueueOffsetsRequest(_message.Message):
    __slots__ = ("topic", "queue_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ...) -> None: ...

class QueueOffsets(_message.Message):
    __slots__ = ("queue_id", "min_offset", "max_offset")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    min_offset: int
    max_offset: int
    def __init__(self, queue_id: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ...) -> None: ...

class GetQueueOffsetsResponse(_message.Message):
    __slots__ = ("queues",)
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[QueueOffsets]
    def __init__(self, queues: _Optional[_Iterable[_Union[QueueOffsets, _Mapping]]] = ...) -> None: ...

class GetOffsetByTimeRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "timestamp", "boundary")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    BOUNDARY_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    timestamp: int
    boundary: TimeBoundary
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., timestamp: _Optional[int] = ..., boundary: _Optional[_Union[TimeBoundary, str]] = ...) -> None: ...

class GetOffsetByTimeResponse(_message.Message):
    __slots__ = ("offset",)
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    offset: int
    def __init__(self, offset: _Optional[int] = ...) -> None: ...

class CommitOffsetRequest(_message.Message):
    __slots__ = ("group", "topic", "queue_id", "offset")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    queue_id: int
    offset: int
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class CommitOffsetResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetCommittedOffsetRequest(_message.Message):
    __slots__ = ("group", "topic", "queue_id")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    queue_id: int
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ...) -> None: ...

class GetCommittedOffsetResponse(_message.Message):
    __slots__ = ("offset",)
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    offset: int
    def __init__(self, offset: _Optional[int] = ...) -> None: ...

class CreateTopicRequest(_message.Message):
    __slots__ = ("topic", "queues", "perm", "message_type")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queues: int
    perm: int
    message_type: str
    def __init__(self, topic: _Optional[str] = ..., queues: _Optional[int] = ..., perm: _Optional[int] = ..., message_type: _Optional[str] = ...) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("topic", "force", "dry_run")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    topic: str
    force: bool
    dry_run: bool
    def __init__(self, topic: _Optional[str] = ..., force: _Optional[bool] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ("deleted", "messages")
    DELETED_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    messages: int
    def __init__(self, deleted: _Optional[bool] = ..., messages: _Optional[int] = ...) -> None: ...

class DeleteGroupRequest(_message.Message):
    __slots__ = ("group", "remove_offsets")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    REMOVE_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    group: str
    remove_offsets: bool
    def __init__(self, group: _Optional[str] = ..., remove_offsets: _Optional[bool] = ...) -> None: ...

class DeleteGroupResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class TopicInfo(_message.Message):
    __slots__ = ("name", "read_queue_nums", "write_queue_nums", "perm", "message_type")
    NAME_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    message_type: str
    def __init__(self, name: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[int] = ..., message_type: _Optional[str] = ...) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TopicInfo]
    def __init__(self, topics: _Optional[_Iterable[_Union[TopicInfo, _Mapping]]] = ...) -> None: ...

class GetRouteRequest(_message.Message):
    __slots__ = ("topic", "local_only")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    LOCAL_ONLY_FIELD_NUMBER: _ClassVar[int]
    topic: str
    local_only: bool
    def __init__(self, topic: _Optional[str] = ..., local_only: _Optional[bool] = ...) -> None: ...

class NodeRoute(_message.Message):
    __slots__ = ("name", "address", "ready", "queue_ids", "group", "role", "epoch", "lag_bytes", "read_enabled", "fenced", "master_address", "stale_ms", "arbiter_master", "arbiter_epoch")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    QUEUE_IDS_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    READ_ENABLED_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    STALE_MS_FIELD_NUMBER: _ClassVar[int]
    ARBITER_MASTER_FIELD_NUMBER: _ClassVar[int]
    ARBITER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    name: str
    address: str
    ready: bool
    queue_ids: _containers.RepeatedScalarFieldContainer[int]
    group: str
    role: str
    epoch: int
    lag_bytes: int
    read_enabled: bool
    fenced: bool
    master_address: str
    stale_ms: int
    arbiter_master: str
    arbiter_epoch: int
    def __init__(self, name: _Optional[str] = ..., address: _Optional[str] = ..., ready: _Optional[bool] = ..., queue_ids: _Optional[_Iterable[int]] = ..., group: _Optional[str] = ..., role: _Optional[str] = ..., epoch: _Optional[int] = ..., lag_bytes: _Optional[int] = ..., read_enabled: _Optional[bool] = ..., fenced: _Optional[bool] = ..., master_address: _Optional[str] = ..., stale_ms: _Optional[int] = ..., arbiter_master: _Optional[str] = ..., arbiter_epoch: _Optional[int] = ...) -> None: ...

class GetRouteResponse(_message.Message):
    __slots__ = ("nodes", "via_access_point", "access_points")
    NODES_FIELD_NUMBER: _ClassVar[int]
    VIA_ACCESS_POINT_FIELD_NUMBER: _ClassVar[int]
    ACCESS_POINTS_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeRoute]
    via_access_point: bool
    access_points: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, nodes: _Optional[_Iterable[_Union[NodeRoute, _Mapping]]] = ..., via_access_point: _Optional[bool] = ..., access_points: _Optional[_Iterable[str]] = ...) -> None: ...

class QueueKey(_message.Message):
    __slots__ = ("topic", "queue_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("group", "client_id", "topics", "expiry_ms", "claims", "broadcasting")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    EXPIRY_MS_FIELD_NUMBER: _ClassVar[int]
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    BROADCASTING_FIELD_NUMBER: _ClassVar[int]
    group: str
    client_id: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    expiry_ms: int
    claims: _containers.RepeatedCompositeFieldContainer[QueueKey]
    broadcasting: bool
    def __init__(self, group: _Optional[str] = ..., client_id: _Optional[str] = ..., topics: _Optional[_Iterable[str]] = ..., expiry_ms: _Optional[int] = ..., claims: _Optional[_Iterable[_Union[QueueKey, _Mapping]]] = ..., broadcasting: _Optional[bool] = ...) -> None: ...

class GroupMember(_message.Message):
    __slots__ = ("client_id", "topics", "host", "expires_in_ms", "broadcasting")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_IN_MS_FIELD_NUMBER: _ClassVar[int]
    BROADCASTING_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    host: str
    expires_in_ms: int
    broadcasting: bool
    def __init__(self, client_id: _Optional[str] = ..., topics: _Optional[_Iterable[str]] = ..., host: _Optional[str] = ..., expires_in_ms: _Optional[int] = ..., broadcasting: _Optional[bool] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("generation", "members", "granted", "node")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    generation: int
    members: _containers.RepeatedCompositeFieldContainer[GroupMember]
    granted: _containers.RepeatedCompositeFieldContainer[QueueKey]
    node: str
    def __init__(self, generation: _Optional[int] = ..., members: _Optional[_Iterable[_Union[GroupMember, _Mapping]]] = ..., granted: _Optional[_Iterable[_Union[QueueKey, _Mapping]]] = ..., node: _Optional[str] = ...) -> None: ...

class UnregisterRequest(_message.Message):
    __slots__ = ("group", "client_id")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    group: str
    client_id: str
    def __init__(self, group: _Optional[str] = ..., client_id: _Optional[str] = ...) -> None: ...

class UnregisterResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DescribeGroupsRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class GroupQueue(_message.Message):
    __slots__ = ("topic", "queue_id", "holder", "committed", "min_offset", "max_offset", "lag")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    holder: str
    committed: int
    min_offset: int
    max_offset: int
    lag: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., holder: _Optional[str] = ..., committed: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., lag: _Optional[int] = ...) -> None: ...

class GroupInfo(_message.Message):
    __slots__ = ("name", "generation", "members", "queues", "inflight", "retrying", "dead_letters", "policy")
    NAME_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_FIELD_NUMBER: _ClassVar[int]
    RETRYING_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    name: str
    generation: int
    members: _containers.RepeatedCompositeFieldContainer[GroupMember]
    queues: _containers.RepeatedCompositeFieldContainer[GroupQueue]
    inflight: int
    retrying: int
    dead_letters: int
    policy: GroupPolicy
    def __init__(self, name: _Optional[str] = ..., generation: _Optional[int] = ..., members: _Optional[_Iterable[_Union[GroupMember, _Mapping]]] = ..., queues: _Optional[_Iterable[_Union[GroupQueue, _Mapping]]] = ..., inflight: _Optional[int] = ..., retrying: _Optional[int] = ..., dead_letters: _Optional[int] = ..., policy: _Optional[_Union[GroupPolicy, _Mapping]] = ...) -> None: ...

class DescribeGroupsResponse(_message.Message):
    __slots__ = ("groups", "node")
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[GroupInfo]
    node: str
    def __init__(self, groups: _Optional[_Iterable[_Union[GroupInfo, _Mapping]]] = ..., node: _Optional[str] = ...) -> None: ...

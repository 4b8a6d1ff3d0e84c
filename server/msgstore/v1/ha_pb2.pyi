from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EpochEntry(_message.Message):
    __slots__ = ("epoch", "start_offset")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    start_offset: int
    def __init__(self, epoch: _Optional[int] = ..., start_offset: _Optional[int] = ...) -> None: ...

class FollowerReport(_message.Message):
    __slots__ = ("handshake", "member", "group", "end_offset", "epochs", "address", "echo_sent_us", "echo_master_end")
    HANDSHAKE_FIELD_NUMBER: _ClassVar[int]
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ECHO_SENT_US_FIELD_NUMBER: _ClassVar[int]
    ECHO_MASTER_END_FIELD_NUMBER: _ClassVar[int]
    handshake: bool
    member: str
    group: str
    end_offset: int
    epochs: _containers.RepeatedCompositeFieldContainer[EpochEntry]
    address: str
    echo_sent_us: int
    echo_master_end: int
    def __init__(self, handshake: _Optional[bool] = ..., member: _Optional[str] = ..., group: _Optional[str] = ..., end_offset: _Optional[int] = ..., epochs: _Optional[_Iterable[_Union[EpochEntry, _Mapping]]] = ..., address: _Optional[str] = ..., echo_sent_us: _Optional[int] = ..., echo_master_end: _Optional[int] = ...) -> None: ...

class ReplicaMember(_message.Message):
    __slots__ = ("name", "address")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    name: str
    address: str
    def __init__(self, name: _Optional[str] = ..., address: _Optional[str] = ...) -> None: ...

class MasterChunk(_message.Message):
    __slots__ = ("offset", "data", "master_end", "epochs", "truncate_to", "start_offset", "sent_us", "confirm_offset", "state", "mode", "sync_state_set", "members", "fenced")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    MASTER_END_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_TO_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SENT_US_FIELD_NUMBER: _ClassVar[int]
    CONFIRM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATE_SET_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    offset: int
    data: bytes
    master_end: int
    epochs: _containers.RepeatedCompositeFieldContainer[EpochEntry]
    truncate_to: int
    start_offset: int
    sent_us: int
    confirm_offset: int
    state: bool
    mode: str
    sync_state_set: _containers.RepeatedScalarFieldContainer[str]
    members: _containers.RepeatedCompositeFieldContainer[ReplicaMember]
    fenced: str
    def __init__(self, offset: _Optional[int] = ..., data: _Optional[bytes] = ..., master_end: _Optional[int] = ..., epochs: _Optional[_Iterable[_Union[EpochEntry, _Mapping]]] = ..., truncate_to: _Optional[int] = ..., start_offset: _Optional[int] = ..., sent_us: _Optional[int] = ..., confirm_offset: _Optional[int] = ..., state: _Optional[bool] = ..., mode: _Optional[str] = ..., sync_state_set: _Optional[_Iterable[str]] = ..., members: _Optional[_Iterable[_Union[ReplicaMember, _Mapping]]] = ..., fenced: _Optional[str] = ...) -> None: ...

class GetMetadataRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Metadata(_message.Message):
    __slots__ = ("topics_json", "consumer_offsets_json", "subscription_groups_json", "master_end", "broker_state", "users_json", "deleted_topics")
    class BrokerStateEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class DeletedTopicsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    TOPICS_JSON_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_OFFSETS_JSON_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_GROUPS_JSON_FIELD_NUMBER: _ClassVar[int]
    MASTER_END_FIELD_NUMBER: _ClassVar[int]
    BROKER_STATE_FIELD_NUMBER: _ClassVar[int]
    USERS_JSON_FIELD_NUMBER: _ClassVar[int]
    DELETED_TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics_json: str
    consumer_offsets_json: str
    subscription_groups_json: str
    master_end: int
    broker_state: _containers.ScalarMap[str, str]
    users_json: str
    deleted_topics: _containers.ScalarMap[str, int]
    def __init__(self, topics_json: _Optional[str] = ..., consumer_offsets_json: _Optional[str] = ..., subscription_groups_json: _Optional[str] = ..., master_end: _Optional[int] = ..., broker_state: _Optional[_Mapping[str, str]] = ..., users_json: _Optional[str] = ..., deleted_topics: _Optional[_Mapping[str, int]] = ...) -> None: ...

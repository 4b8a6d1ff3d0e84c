from msgstore.v1 import ha_pb2 as _ha_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AclEntry(_message.Message):
    __slots__ = ("resource", "actions", "decision", "source_ips")
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_IPS_FIELD_NUMBER: _ClassVar[int]
    resource: str
    actions: _containers.RepeatedScalarFieldContainer[str]
    decision: str
    source_ips: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, resource: _Optional[str] = ..., actions: _Optional[_Iterable[str]] = ..., decision: _Optional[str] = ..., source_ips: _Optional[_Iterable[str]] = ...) -> None: ...

class PutUserRequest(_message.Message):
    __slots__ = ("access_key", "secret_key", "user_type", "entries")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    SECRET_KEY_FIELD_NUMBER: _ClassVar[int]
    USER_TYPE_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    secret_key: str
    user_type: str
    entries: _containers.RepeatedCompositeFieldContainer[AclEntry]
    def __init__(self, access_key: _Optional[str] = ..., secret_key: _Optional[str] = ..., user_type: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[AclEntry, _Mapping]]] = ...) -> None: ...

class UserInfo(_message.Message):
    __slots__ = ("access_key", "user_type", "entries")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    USER_TYPE_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    user_type: str
    entries: _containers.RepeatedCompositeFieldContainer[AclEntry]
    def __init__(self, access_key: _Optional[str] = ..., user_type: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[AclEntry, _Mapping]]] = ...) -> None: ...

class DeleteUserRequest(_message.Message):
    __slots__ = ("access_key",)
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    def __init__(self, access_key: _Optional[str] = ...) -> None: ...

class DeleteUserResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class ListUsersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListUsersResponse(_message.Message):
    __slots__ = ("users",)
    USERS_FIELD_NUMBER: _ClassVar[int]
    users: _containers.RepeatedCompositeFieldContainer[UserInfo]
    def __init__(self, users: _Optional[_Iterable[_Union[UserInfo, _Mapping]]] = ...) -> None: ...

class ElectRequest(_message.Message):
    __slots__ = ("unclean", "reason", "catch_up_s")
    UNCLEAN_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CATCH_UP_S_FIELD_NUMBER: _ClassVar[int]
    unclean: bool
    reason: str
    catch_up_s: float
    def __init__(self, unclean: _Optional[bool] = ..., reason: _Optional[str] = ..., catch_up_s: _Optional[float] = ...) -> None: ...

class ElectResponse(_message.Message):
    __slots__ = ("status", "epoch", "old_master", "fenced", "notes", "already", "repointed")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    OLD_MASTER_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    ALREADY_FIELD_NUMBER: _ClassVar[int]
    REPOINTED_FIELD_NUMBER: _ClassVar[int]
    status: RoleStatus
    epoch: int
    old_master: str
    fenced: bool
    notes: _containers.RepeatedScalarFieldContainer[str]
    already: bool
    repointed: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, status: _Optional[_Union[RoleStatus, _Mapping]] = ..., epoch: _Optional[int] = ..., old_master: _Optional[str] = ..., fenced: _Optional[bool] = ..., notes: _Optional[_Iterable[str]] = ..., already: _Optional[bool] = ..., repointed: _Optional[_Iterable[str]] = ...) -> None: ...

class ArbiterView(_message.Message):
    __slots__ = ("where", "holder", "epoch", "in_sync", "address", "age_s", "valid_for_s", "error", "elects")
    WHERE_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    AGE_S_FIELD_NUMBER: _ClassVar[int]
    VALID_FOR_S_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ELECTS_FIELD_NUMBER: _ClassVar[int]
    where: str
    holder: str
    epoch: int
    in_sync: _containers.RepeatedScalarFieldContainer[str]
    address: str
    age_s: float
    valid_for_s: float
    error: str
    elects: bool
    def __init__(self, where: _Optional[str] = ..., holder: _Optional[str] = ..., epoch: _Optional[int] = ..., in_sync: _Optional[_Iterable[str]] = ..., address: _Optional[str] = ..., age_s: _Optional[float] = ..., valid_for_s: _Optional[float] = ..., error: _Optional[str] = ..., elects: _Optional[bool] = ...) -> None: ...

class FenceRequest(_message.Message):
    __slots__ = ("epoch", "reason")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    reason: str
    def __init__(self, epoch: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class GetRoleRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PromoteRequest(_message.Message):
    __slots__ = ("epoch", "mode")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    mode: str
    def __init__(self, epoch: _Optional[int] = ..., mode: _Optional[str] = ...) -> None: ...

class SetRoleRequest(_message.Message):
    __slots__ = ("master_address", "epoch", "forget_member")
    MASTER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    FORGET_MEMBER_FIELD_NUMBER: _ClassVar[int]
    master_address: str
    epoch: int
    forget_member: str
    def __init__(self, master_address: _Optional[str] = ..., epoch: _Optional[int] = ..., forget_member: _Optional[str] = ...) -> None: ...

class FollowerStatus(_message.Message):
    __slots__ = ("member", "acked_offset", "lag_bytes", "in_sync", "last_report_age_s", "address")
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    ACKED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    LAST_REPORT_AGE_S_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    member: str
    acked_offset: int
    lag_bytes: int
    in_sync: bool
    last_report_age_s: float
    address: str
    def __init__(self, member: _Optional[str] = ..., acked_offset: _Optional[int] = ..., lag_bytes: _Optional[int] = ..., in_sync: _Optional[bool] = ..., last_report_age_s: _Optional[float] = ..., address: _Optional[str] = ...) -> None: ...

class RoleStatus(_message.Message):
    __slots__ = ("node", "group", "role", "mode", "epoch", "end_offset", "master_address", "master_end", "lag_bytes", "lag_seconds", "connected", "followers", "epochs", "fenced", "group_epoch", "sync_state_set", "in_sync", "master_contact_age_s", "members", "confirm_offset", "address", "group_mode", "arbiter")
    NODE_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    MASTER_END_FIELD_NUMBER: _ClassVar[int]
    LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    LAG_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    FOLLOWERS_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    GROUP_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATE_SET_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    MASTER_CONTACT_AGE_S_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    CONFIRM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    GROUP_MODE_FIELD_NUMBER: _ClassVar[int]
    ARBITER_FIELD_NUMBER: _ClassVar[int]
    node: str
    group: str
    role: str
    mode: str
    epoch: int
    end_offset: int
    master_address: str
    master_end: int
    lag_bytes: int
    lag_seconds: float
    connected: bool
    followers: _containers.RepeatedCompositeFieldContainer[FollowerStatus]
    epochs: _containers.RepeatedCompositeFieldContainer[_ha_pb2.EpochEntry]
    fenced: str
    group_epoch: int
    sync_state_set: _containers.RepeatedScalarFieldContainer[str]
    in_sync: bool
    master_contact_age_s: float
    members: _containers.RepeatedCompositeFieldContainer[_ha_pb2.ReplicaMember]
    confirm_offset: int
    address: str
    group_mode: str
    arbiter: ArbiterView
    def __init__(self, node: _Optional[str] = ..., group: _Optional[str] = ..., role: _Optional[str] = ..., mode: _Optional[str] = ..., epoch: _Optional[int] = ..., end_offset: _Optional[int] = ..., master_address: _Optional[str] = ..., master_end: _Optional[int] = ..., lag_bytes: _Optional[int] = ..., lag_seconds: _Optional[float] = ..., connected: _Optional[bool] = ..., followers: _Optional[_Iterable[_Union[FollowerStatus, _Mapping]]] = ..., epochs: _Optional[_Iterable[_Union[_ha_pb2.EpochEntry, _Mapping]]] = ..., fenced: _Optional[str] = ..., group_epoch: _Optional[int] = ..., sync_state_set: _Optional[_Iterable[str]] = ..., in_sync: _Optional[bool] = ..., master_contact_age_s: _Optional[float] = ..., members: _Optional[_Iterable[_Union[_ha_pb2.ReplicaMember, _Mapping]]] = ..., confirm_offset: _Optional[int] = ..., address: _Optional[str] = ..., group_mode: _Optional[str] = ..., arbiter: _Optional[_Union[ArbiterView, _Mapping]] = ...) -> None: ...

class GetStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Recovery(_message.Message):
    __slots__ = ("mode", "state", "progress", "duration_ms", "bytes_scanned", "bytes_truncated", "records_scanned", "index_files_destroyed", "index_rebuilt_from", "commitlog_end", "damage", "error", "started_ms")
    MODE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    BYTES_SCANNED_FIELD_NUMBER: _ClassVar[int]
    BYTES_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    RECORDS_SCANNED_FIELD_NUMBER: _ClassVar[int]
    INDEX_FILES_DESTROYED_FIELD_NUMBER: _ClassVar[int]
    INDEX_REBUILT_FROM_FIELD_NUMBER: _ClassVar[int]
    COMMITLOG_END_FIELD_NUMBER: _ClassVar[int]
    DAMAGE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    STARTED_MS_FIELD_NUMBER: _ClassVar[int]
    mode: str
    state: str
    progress: float
    duration_ms: int
    bytes_scanned: int
    bytes_truncated: int
    records_scanned: int
    index_files_destroyed: int
    index_rebuilt_from: int
    commitlog_end: int
    damage: _containers.RepeatedScalarFieldContainer[str]
    error: str
    started_ms: int
    def __init__(self, mode: _Optional[str] = ..., state: _Optional[str] = ..., progress: _Optional[float] = ..., duration_ms: _Optional[int] = ..., bytes_scanned: _Optional[int] = ..., bytes_truncated: _Optional[int] = ..., records_scanned: _Optional[int] = ..., index_files_destroyed: _Optional[int] = ..., index_rebuilt_from: _Optional[int] = ..., commitlog_end: _Optional[int] = ..., damage: _Optional[_Iterable[str]] = ..., error: _Optional[str] = ..., started_ms: _Optional[int] = ...) -> None: ...

class StoreStatus(_message.Message):
    __slots__ = ("node", "state", "recovery", "min_phy_offset", "max_phy_offset", "flushed_phy_offset", "disk_usage", "disk_full", "dispatch_behind_bytes", "commitlog_segments", "consume_queues", "index_files", "topics", "config_generation", "config", "pending_restart", "writable", "unavailable", "version", "flush_disk_type", "messages_held", "consumer_lag", "group_members")
    class ConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class PendingRestartEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class ConsumerLagEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class GroupMembersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    NODE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_FIELD_NUMBER: _ClassVar[int]
    MIN_PHY_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_PHY_OFFSET_FIELD_NUMBER: _ClassVar[int]
    FLUSHED_PHY_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DISK_USAGE_FIELD_NUMBER: _ClassVar[int]
    DISK_FULL_FIELD_NUMBER: _ClassVar[int]
    DISPATCH_BEHIND_BYTES_FIELD_NUMBER: _ClassVar[int]
    COMMITLOG_SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    CONSUME_QUEUES_FIELD_NUMBER: _ClassVar[int]
    INDEX_FILES_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_GENERATION_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    PENDING_RESTART_FIELD_NUMBER: _ClassVar[int]
    WRITABLE_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    FLUSH_DISK_TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_HELD_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_LAG_FIELD_NUMBER: _ClassVar[int]
    GROUP_MEMBERS_FIELD_NUMBER: _ClassVar[int]
    node: str
    state: str
    recovery: Recovery
    min_phy_offset: int
    max_phy_offset: int
    flushed_phy_offset: int
    disk_usage: float
    disk_full: bool
    dispatch_behind_bytes: int
    commitlog_segments: int
    consume_queues: int
    index_files: int
    topics: int
    config_generation: int
    config: _containers.ScalarMap[str, str]
    pending_restart: _containers.ScalarMap[str, str]
    writable: bool
    unavailable: _containers.RepeatedScalarFieldContainer[str]
    version: str
    flush_disk_type: str
    messages_held: int
    consumer_lag: _containers.ScalarMap[str, int]
    group_members: _containers.ScalarMap[str, int]
    def __init__(self, node: _Optional[str] = ..., state: _Optional[str] = ..., recovery: _Optional[_Union[Recovery, _Mapping]] = ..., min_phy_offset: _Optional[int] = ..., max_phy_offset: _Optional[int] = ..., flushed_phy_offset: _Optional[int] = ..., disk_usage: _Optional[float] = ..., disk_full: _Optional[bool] = ..., dispatch_behind_bytes: _Optional[int] = ..., commitlog_segments: _Optional[int] = ..., consume_queues: _Optional[int] = ..., index_files: _Optional[int] = ..., topics: _Optional[int] = ..., config_generation: _Optional[int] = ..., config: _Optional[_Mapping[str, str]] = ..., pending_restart: _Optional[_Mapping[str, str]] = ..., writable: _Optional[bool] = ..., unavailable: _Optional[_Iterable[str]] = ..., version: _Optional[str] = ..., flush_disk_type: _Optional[str] = ..., messages_held: _Optional[int] = ..., consumer_lag: _Optional[_Mapping[str, int]] = ..., group_members: _Optional[_Mapping[str, int]] = ...) -> None: ...

class GetConfigRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ConfigResponse(_message.Message):
    __slots__ = ("config", "generation", "pending_restart")
    class ConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class PendingRestartEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    PENDING_RESTART_FIELD_NUMBER: _ClassVar[int]
    config: _containers.ScalarMap[str, str]
    generation: int
    pending_restart: _containers.ScalarMap[str, str]
    def __init__(self, config: _Optional[_Mapping[str, str]] = ..., generation: _Optional[int] = ..., pending_restart: _Optional[_Mapping[str, str]] = ...) -> None: ...

class UpdateConfigRequest(_message.Message):
    __slots__ = ("changes", "dry_run")
    class ChangesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    changes: _containers.ScalarMap[str, str]
    dry_run: bool
    def __init__(self, changes: _Optional[_Mapping[str, str]] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class UpdateConfigResponse(_message.Message):
    __slots__ = ("applied", "restart_required", "generation", "dry_run")
    class AppliedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class RestartRequiredEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    RESTART_REQUIRED_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    applied: _containers.ScalarMap[str, str]
    restart_required: _containers.ScalarMap[str, str]
    generation: int
    dry_run: bool
    def __init__(self, applied: _Optional[_Mapping[str, str]] = ..., restart_required: _Optional[_Mapping[str, str]] = ..., generation: _Optional[int] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class ManualDeleteRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ManualDeleteResponse(_message.Message):
    __slots__ = ("deleted_segments", "min_phy_offset", "runs_armed")
    DELETED_SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    MIN_PHY_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RUNS_ARMED_FIELD_NUMBER: _ClassVar[int]
    deleted_segments: int
    min_phy_offset: int
    runs_armed: int
    def __init__(self, deleted_segments: _Optional[int] = ..., min_phy_offset: _Optional[int] = ..., runs_armed: _Optional[int] = ...) -> None: ...

class CleanRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CleanResponse(_message.Message):
    __slots__ = ("removed",)
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    removed: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, removed: _Optional[_Iterable[str]] = ...) -> None: ...

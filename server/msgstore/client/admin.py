"""Admin calls on one node (the admin token goes with every call)."""

from __future__ import annotations

from typing import Protocol

import grpc
from google.protobuf.json_format import MessageToDict

from .. import wire
from ..v1 import admin_pb2 as apb
from ..v1 import admin_pb2_grpc
from .connection import Security
from .errors import error_from


class Channels(Protocol):
    """What the admin calls need of a client: channels, credentials and a deadline."""

    timeout: float
    security: Security

    def admin_stub(self, address: str) -> admin_pb2_grpc.AdminStub: ...


class AdminClient:
    def __init__(self, client: Channels, address: str):
        self.client = client
        self.address = address

    def _call(self, method: str, request):
        stub = self.client.admin_stub(self.address)
        try:
            return getattr(stub, method)(request, timeout=self.client.timeout, metadata=self.client.security.admin_metadata() or None)
        except grpc.RpcError as e:
            raise error_from(e, self.address) from None

    def status_pb(self) -> apb.StoreStatus:
        return self._call("GetStatus", apb.GetStatusRequest())

    def status(self) -> dict:
        return MessageToDict(self.status_pb(), preserving_proto_field_name=True, always_print_fields_with_no_presence=True)

    def config(self) -> dict[str, str]:
        return dict(self._call("GetConfig", apb.GetConfigRequest()).config)

    def update_config(self, changes: dict[str, object], dry_run: bool = False) -> apb.UpdateConfigResponse:
        text = {k: wire.config_text(v) for k, v in changes.items()}
        return self._call("UpdateConfig", apb.UpdateConfigRequest(changes=text, dry_run=dry_run))

    def manual_delete(self) -> apb.ManualDeleteResponse:
        return self._call("ManualDelete", apb.ManualDeleteRequest())

    def clean_expired_consume_queues(self) -> list[str]:
        return list(self._call("CleanExpiredConsumeQueues", apb.CleanRequest()).removed)

    def clean_unused_topics(self) -> list[str]:
        return list(self._call("CleanUnusedTopics", apb.CleanRequest()).removed)

    # users and permissions (§20)

    def put_user(self, request: apb.PutUserRequest) -> apb.UserInfo:
        return self._call("PutUser", request)

    def delete_user(self, access_key: str) -> bool:
        return self._call("DeleteUser", apb.DeleteUserRequest(access_key=access_key)).deleted

    def users(self) -> list[apb.UserInfo]:
        return list(self._call("ListUsers", apb.ListUsersRequest()).users)

    # replication (§14)

    def role_pb(self) -> apb.RoleStatus:
        return self._call("GetRole", apb.GetRoleRequest())

    def role(self) -> dict:
        return MessageToDict(self.role_pb(), preserving_proto_field_name=True, always_print_fields_with_no_presence=True)

    def promote(self, epoch: int = 0, mode: str = "") -> apb.RoleStatus:
        return self._call("Promote", apb.PromoteRequest(epoch=epoch, mode=mode))

    def set_role(self, master_address: str, epoch: int = 0) -> apb.RoleStatus:
        return self._call("SetRole", apb.SetRoleRequest(master_address=master_address, epoch=epoch))

    def forget_member(self, name: str) -> apb.RoleStatus:
        return self._call("SetRole", apb.SetRoleRequest(forget_member=name))

    def fence(self, epoch: int, reason: str = "") -> apb.RoleStatus:
        return self._call("Fence", apb.FenceRequest(epoch=epoch, reason=reason))

    def elect(self, *, unclean: bool = False, reason: str = "", catch_up_s: float = 0.0) -> apb.ElectResponse:
        """An election through the group's arbiter (etcd): this member becomes master if the record proves it safe."""
        return self._call("Elect", apb.ElectRequest(unclean=unclean, reason=reason, catch_up_s=catch_up_s))

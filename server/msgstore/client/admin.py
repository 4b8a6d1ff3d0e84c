"""Admin calls on one node (the admin token goes with every call)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc
from google.protobuf.json_format import MessageToDict

from ..v1 import admin_pb2 as apb

if TYPE_CHECKING:
    from .client import Client


class AdminClient:
    def __init__(self, client: "Client", address: str):
        self.client = client
        self.address = address

    def _call(self, method: str, request):
        from .client import _error

        stub = self.client.admin_stub(self.address)
        try:
            return getattr(stub, method)(request, timeout=self.client.timeout,
                                         metadata=self.client.security.admin_metadata() or None)
        except grpc.RpcError as e:
            raise _error(e, self.address) from None

    def status_pb(self) -> apb.StoreStatus:
        return self._call("GetStatus", apb.GetStatusRequest())

    def status(self) -> dict:
        return MessageToDict(self.status_pb(), preserving_proto_field_name=True, always_print_fields_with_no_presence=True)

    def config(self) -> dict[str, str]:
        return dict(self._call("GetConfig", apb.GetConfigRequest()).config)

    def update_config(self, changes: dict[str, object], dry_run: bool = False) -> apb.UpdateConfigResponse:
        text = {k: ("true" if v is True else "false" if v is False else str(v)) for k, v in changes.items()}
        return self._call("UpdateConfig", apb.UpdateConfigRequest(changes=text, dry_run=dry_run))

    def manual_delete(self) -> apb.ManualDeleteResponse:
        return self._call("ManualDelete", apb.ManualDeleteRequest())

    def clean_expired_consume_queues(self) -> list[str]:
        return list(self._call("CleanExpiredConsumeQueues", apb.CleanRequest()).removed)

    def clean_unused_topics(self) -> list[str]:
        return list(self._call("CleanUnusedTopics", apb.CleanRequest()).removed)

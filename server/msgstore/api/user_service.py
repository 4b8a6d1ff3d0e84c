"""The admin calls that keep users and their permission entries (PutUser, DeleteUser,
ListUsers; docs/store-format.md §20). Validation is the policy module's; the table is the
store's ``config/users.json``, which followers copy from their master like the topics."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import grpc

from ..acl.policy import PolicyError, User, parse_user
from ..v1 import admin_pb2 as apb
from . import validation as v

if TYPE_CHECKING:
    from .member import Member


def entry_json(e: apb.AclEntry) -> dict[str, Any]:
    out: dict[str, Any] = {"resource": e.resource, "actions": list(e.actions), "decision": e.decision or "allow"}
    if e.source_ips:
        out["sourceIps"] = list(e.source_ips)
    return out


def user_pb(user: User) -> apb.UserInfo:
    return apb.UserInfo(
        access_key=user.name,
        user_type="Super" if user.super_user else "Normal",
        entries=[
            apb.AclEntry(resource=j["resource"], actions=j["actions"], decision=j["decision"], source_ips=j.get("sourceIps", []))
            for j in (e.to_json() for e in user.entries)
        ],
    )


class UserHandlers:
    """Mixed into the admin service: ``self.server``."""

    server: Member

    async def _users_master(self, context) -> None:
        if not self.server.options.admin_token:  # (else anyone could make themselves a Super user)
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION, "users are managed with the admin token: start the store with --admin-token-file"
            )
        replica = self.server.replica
        if replica is not None and not replica.is_master:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"this member follows {replica.master_address or 'its master'}, whose users it copies: change users on the master",
            )

    async def PutUser(self, request: apb.PutUserRequest, context) -> apb.UserInfo:
        await self._users_master(context)
        table = self.server.store.users
        raw: dict[str, Any] = {"userType": request.user_type or "Normal", "entries": [entry_json(e) for e in request.entries]}
        secret = request.secret_key
        if not secret:
            known = table.get(request.access_key)
            if known is None:
                raise v.InvalidArgument("secret_key", f"user {request.access_key[:64]!r} does not exist yet: give it a secret key")
            secret = known.get("secretKey", "")
        raw["secretKey"] = secret
        try:
            user = parse_user(request.access_key, raw)
        except PolicyError as e:
            raise v.InvalidArgument(e.field, e.reason) from None
        await asyncio.get_running_loop().run_in_executor(self.server.executor, table.put, user.name, user.to_json())
        return user_pb(user)

    async def DeleteUser(self, request: apb.DeleteUserRequest, context) -> apb.DeleteUserResponse:
        await self._users_master(context)
        deleted = await asyncio.get_running_loop().run_in_executor(self.server.executor, self.server.store.users.delete, request.access_key)
        return apb.DeleteUserResponse(deleted=deleted)

    async def ListUsers(self, request: apb.ListUsersRequest, context) -> apb.ListUsersResponse:
        out = []
        for name, raw in sorted(dict(self.server.store.users.users).items()):
            try:
                out.append(user_pb(parse_user(name, raw)))
            except PolicyError as e:  # (a hand-edited file) shown, so it can be put right
                out.append(apb.UserInfo(access_key=name, user_type=f"unreadable: {e}"))
        return apb.ListUsersResponse(users=out)

"""MessageStoreUser under the operator (kmock, a real store process): the user's Secret, the
user on the store, drift put back, a deleted resource's user removed, bad input refused."""

import base64

import grpc
import pytest

from msgstore.client import Client, StoreError
from tests.operator.conftest import NS, USERS, ApiServer

pytestmark = [pytest.mark.asyncio, pytest.mark.kmock(cls=ApiServer)]

SMALL = {"mappedFileSizeCommitLog": 65536, "mappedFileSizeConsumeQueue": 4000, "extra": {"maxHashSlotNum": "1024", "maxIndexNum": "4096"}}
ADMIN = "adm1n-t0ken-for-users"


async def post(env, resource: str, body: dict) -> None:
    group_version, plural = resource.rsplit("/", 1)
    async with env.http.post(f"{env.url}/apis/{group_version}/namespaces/{NS}/{plural}", json=body) as r:
        r.raise_for_status()


async def delete(env, resource: str, name: str) -> None:
    group_version, plural = resource.rsplit("/", 1)
    async with env.http.delete(f"{env.url}/apis/{group_version}/namespaces/{NS}/{plural}/{name}") as r:
        r.raise_for_status()


def user(name: str, **spec) -> dict:
    return {
        "apiVersion": "msgstore.io/v1alpha1",
        "kind": "MessageStoreUser",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"store": "orders", **spec},
    }


def ready_condition(env, name: str) -> dict:
    obj = env.obj(USERS, name) or {}
    return next((c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == "Ready"), {})


def credentials(env, secret: str) -> dict[str, str]:
    obj = env.obj("v1/secrets", secret) or {}
    return {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}


async def test_users_from_resources(env):
    await env.put_secret("store-admin", {"token": ADMIN})
    await env.create(replicas=1, store={**SMALL, "authorizationEnabled": True}, adminTokenSecret={"name": "store-admin"})
    await env.until(lambda: env.condition("Ready").get("status") == "True", what="Ready", timeout=90)
    address = env.cluster.containers["orders-0"].address
    admin = Client(address, admin_token=ADMIN, timeout=10)
    admin.create_topic("orders", 1)
    admin.create_topic("audit", 1)

    await post(env, USERS, user("producer", entries=[{"resource": "topic:orders", "actions": ["pub"]}]))
    await env.until(lambda: ready_condition(env, "producer").get("status") == "True", what="producer Ready")
    creds = credentials(env, "producer-credentials")
    assert creds["accessKey"] == "producer" and len(creds["secretKey"]) >= 32 and creds["endpoint"] == f"orders.{NS}.svc:{env.port}"
    assert env.obj(USERS, "producer")["status"]["secretName"] == "producer-credentials"
    await env.until(lambda: env.store()["status"].get("managedUsers") == ["producer"], what="managedUsers")
    with Client(address, access_key="producer", secret_key=creds["secretKey"], timeout=10) as c:
        c.send("orders", b"allowed")
        with pytest.raises(StoreError) as e:
            c.send("audit", b"not allowed")
        assert e.value.code == grpc.StatusCode.PERMISSION_DENIED and "producer" in e.value.details

    # a change made outside the resource (the CLI's admin acl grant) is put back and reported
    admin.put_user("producer", "", entries=[{"resource": "topic:*", "actions": ["pub"]}])
    await env.until(lambda: env.events("UserDrift"), what="the UserDrift event")
    entries = next(u for u in admin.users() if u.access_key == "producer").entries
    assert [(e.resource, list(e.actions)) for e in entries] == [("topic:orders", ["pub"])]

    # a user made with the CLI under another key is left alone; a deleted resource's user goes
    admin.put_user("cli-made", "a-secret-key-of-the-cli-user", entries=[{"resource": "topic:audit", "actions": ["sub"]}])
    await delete(env, USERS, "producer")
    await env.until(lambda: "producer" not in {u.access_key for u in admin.users()}, what="the user deleted from the store")
    assert {u.access_key for u in admin.users()} == {"cli-made"}
    await env.until(lambda: env.store()["status"].get("managedUsers") == [], what="managedUsers emptied")


async def test_bad_user_resources_are_refused_naming_the_field(env):
    await env.put_secret("store-admin", {"token": ADMIN})
    await env.put_secret("taken", {"accessKey": "x"})
    await env.create(replicas=1, store={**SMALL, "authorizationEnabled": True}, adminTokenSecret={"name": "store-admin"})
    await env.until(lambda: env.condition("Ready").get("status") == "True", what="Ready", timeout=90)
    await post(
        env,
        USERS,
        user(
            "voided",
            entries=[{"resource": "topic:orders", "actions": ["pub"]}, {"resource": "topic:*", "actions": ["all"], "decision": "Deny"}],
        ),
    )
    await post(env, USERS, user("nomatch", entries=[{"resource": "topic:or*ders", "actions": ["pub"]}]))
    await post(env, USERS, user("stolen", secretName="taken", entries=[]))
    await env.until(lambda: all(ready_condition(env, n).get("reason") for n in ("voided", "nomatch", "stolen")), what="three refusals")
    assert ready_condition(env, "voided")["reason"] == "InvalidSpec" and "spec.entries" in ready_condition(env, "voided")["message"]
    assert "spec.entries[0].resource" in ready_condition(env, "nomatch")["message"]
    stolen = ready_condition(env, "stolen")
    assert stolen["reason"] == "SecretNotOurs" and "spec.secretName" in stolen["message"]
    assert credentials(env, "taken") == {"accessKey": "x"}  # the Secret that was not ours is untouched
    users = Client(env.cluster.containers["orders-0"].address, admin_token=ADMIN, timeout=10).users()
    assert users == []
    await env.until(lambda: env.events("InvalidSpec") and env.events("SecretNotOurs"), what="the Warning events")


async def patch_user(env, name: str, body: dict) -> None:
    async with env.http.patch(
        f"{env.url}/apis/msgstore.io/v1alpha1/namespaces/{NS}/messagestoreusers/{name}",
        json=body,
        headers={"Content-Type": "application/merge-patch+json"},
    ) as r:
        r.raise_for_status()


async def test_users_are_kept_on_every_node_and_never_taken_from_others(env):
    """Every node (replica group) keeps its own users: one that lacks a user gets it back; a
    user the CLI made is not taken over unless asked; a refused edit keeps the user as it was;
    a resource renamed to another's key does not take it."""
    await env.put_secret("store-admin", {"token": ADMIN})
    await env.create(replicas=2, store={**SMALL, "authorizationEnabled": True}, adminTokenSecret={"name": "store-admin"})
    await env.until(lambda: env.condition("Ready").get("status") == "True", what="Ready", timeout=90)
    nodes = {p: Client(c.address, admin_token=ADMIN, timeout=10) for p, c in env.cluster.containers.items()}

    def keys(pod):
        return {u.access_key for u in nodes[pod].admin(env.cluster.containers[pod].address).users()}

    await post(env, USERS, user("alice", entries=[{"resource": "topic:a", "actions": ["pub"]}]))
    await env.until(lambda: all("alice" in keys(p) for p in nodes), what="alice on both nodes")
    nodes["orders-1"].admin(env.cluster.containers["orders-1"].address).delete_user("alice")
    await env.until(lambda: "alice" in keys("orders-1"), what="alice put back on the node that lost her")

    nodes["orders-0"].put_user("bob", "a-secret-key-the-cli-chose", entries=[{"resource": "topic:b", "actions": ["sub"]}])
    await post(env, USERS, user("bob", entries=[{"resource": "topic:b", "actions": ["pub"]}]))
    await env.until(lambda: ready_condition(env, "bob").get("reason") == "UserExists", what="UserExists")
    assert "msgstore.io/adopt-user" in ready_condition(env, "bob")["message"]
    await patch_user(env, "bob", {"metadata": {"annotations": {"msgstore.io/adopt-user": "true"}}})
    await env.until(lambda: ready_condition(env, "bob").get("status") == "True", what="bob adopted")

    # alice's edit refused (a deny that voids her allow): her user stays as last applied
    bad = [{"resource": "topic:a", "actions": ["pub"]}, {"resource": "topic:*", "actions": ["all"], "decision": "Deny"}]
    await patch_user(env, "alice", {"spec": {"entries": bad}})
    await env.until(lambda: ready_condition(env, "alice").get("reason") == "InvalidSpec", what="the edit refused")
    assert all("alice" in keys(p) for p in nodes)
    assert "alice" in env.store()["status"]["managedUsers"]
    # bob renamed to alice's key: alice keeps it
    await patch_user(env, "bob", {"spec": {"accessKey": "alice"}})
    await env.until(lambda: ready_condition(env, "bob").get("reason") == "AccessKeyTaken", what="AccessKeyTaken")
    entries = next(u for u in nodes["orders-0"].users() if u.access_key == "alice").entries
    assert [e.resource for e in entries] == ["topic:a"]

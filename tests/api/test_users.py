"""Issue 32, users and permissions: a user signs with an access key and secret key (RocketMQ 5's
MQv2-HMAC-SHA1, on both protocols); its entries say what it may do; the server checks every
call, direct or forwarded by another node. Real server processes; the official RocketMQ client."""

from __future__ import annotations

import ipaddress
import os
import stat
import threading

import grpc
import pytest
from grpc_health.v1 import health_pb2
from rocketmq import ClientConfiguration, Credentials, Producer

from msgstore.acl import signature
from msgstore.acl.identity import ORIGIN_TIME, Authenticator, Identity, Users, origin_headers
from msgstore.acl.policy import ACTIONS, PolicyError, User, parse_user
from msgstore.api import permissions
from msgstore.api.rocketmq.protocol import SERVICE as V2_SERVICE
from msgstore.api.rocketmq.protocol import definition as v2d
from msgstore.api.rocketmq.protocol import service as v2s
from msgstore.api.rocketmq.protocol import service_grpc
from msgstore.client import Client, Consumer, OutMessage, QueueRef, StoreError
from msgstore.v1 import msgstore_pb2 as pb
from msgstore.v1 import msgstore_pb2_grpc as pbg
from tests.api import test_cli as cli
from tests.api.test_access_point import forwarders, with_access_point  # noqa: F401  (a fixture)
from tests.ha.conftest import groups  # noqa: F401  (a fixture)
from tests.rocketmq.conftest import started
from tests.rocketmq.test_official_client import message, receive_all, simple
from tests.support.servers import wait_until

ADMIN = "admin-token-of-the-tests"
PRODUCER = ("orders-producer", "producer-secret-1")
BILLING = ("billing", "billing-secret-1")


def user(entries: list[dict], **kw) -> User:
    return parse_user("someone", {"secretKey": "a-long-secret", "entries": entries, **kw})


# ---------------------------------------------------------------------- the policy itself


@pytest.mark.parametrize(
    "entries, field, says",
    [
        ([{"resource": "topic:orders", "actions": ["publishh"]}], "entries[0].actions[0]", "unknown action 'publishh'"),
        ([{"resource": "topic:or*ders", "actions": ["pub"]}], "entries[0].resource", "only a trailing * is a wildcard"),
        ([{"resource": "topic:a b", "actions": ["pub"]}], "entries[0].resource", "matches no topic"),
        ([{"resource": "group:" + "g" * 300, "actions": ["sub"]}], "entries[0].resource", "matches no group"),
        ([{"resource": "queue:orders", "actions": ["pub"]}], "entries[0].resource", "is no resource"),
        ([{"resource": "topic:", "actions": ["pub"]}], "entries[0].resource", "name is empty"),
        ([{"resource": "topic:orders", "actions": []}], "entries[0].actions", "at least one action"),
        ([{"resource": "topic:orders", "actions": ["pub"], "decision": "maybe"}], "entries[0].decision", "allow or deny"),
        ([{"resource": "topic:orders", "actions": ["pub"], "sourceIps": ["10.0.0.300/8"]}], "entries[0].sourceIps[0]", "not an address"),
        ([{"resource": "topic:orders", "actions": ["pub"], "color": "red"}], "entries[0].color", "unknown field"),
        (
            [{"resource": "topic:orders", "actions": ["pub", "sub"]}, {"resource": "topic:orders", "actions": ["all"], "decision": "deny"}],
            "entries[1]",
            "contradicts entries[0]",
        ),
    ],
)
def test_a_policy_that_cannot_mean_what_it_says_is_refused_naming_the_field(entries, field, says):
    with pytest.raises(PolicyError) as e:
        user(entries)
    assert e.value.field == field and says in e.value.reason, str(e.value)


def test_an_allow_with_exceptions_is_no_contradiction():
    """``all`` but delete: a deny that voids only part of an allow is how exceptions are written."""
    u = user([{"resource": "topic:orders", "actions": ["all"]}, {"resource": "topic:orders", "actions": ["delete"], "decision": "deny"}])
    assert u.decide("topic", "orders", "pub", None)[0] and not u.decide("topic", "orders", "delete", None)[0]
    assert u.uses("topic", "orders", None) and not u.uses("topic", "payroll", None)
    only_denied = user([{"resource": "topic:*", "actions": ["pub"]}, {"resource": "topic:secret", "actions": ["all"], "decision": "deny"}])
    assert not only_denied.uses("topic", "secret", None) and only_denied.uses("topic", "orders", None)


def test_a_forwarded_address_is_taken_only_with_a_fresh_proof_for_that_signature():
    auth = Authenticator(Users(lambda: None), enabled=lambda: True, data_token=lambda: None, admin_token=lambda: "cluster-secret")
    signed = list(signature.sign("someone", "a-long-secret"))
    vouched = origin_headers("cluster-secret", "10.1.2.3", signed)
    assert auth._source(signed + vouched, "127.0.0.9") == "10.1.2.3"
    other = list(signature.sign("someone-else", "a-long-secret"))
    assert auth._source(other + vouched, "127.0.0.9") == "127.0.0.9"  # the proof was for another signature
    assert auth._source(signed + origin_headers("not-the-secret", "10.1.2.3", signed), "127.0.0.9") == "127.0.0.9"
    stale = [(k, str(int(v) - 3600) if k == ORIGIN_TIME else v) for k, v in vouched]
    assert auth._source(signed + stale, "127.0.0.9") == "127.0.0.9"  # an hour old (and its proof no longer matches)


def test_a_deny_that_voids_an_allow_through_a_wider_pattern_or_any_address_is_refused():
    with pytest.raises(PolicyError, match="contradicts entries\\[0\\]"):
        user(
            [
                {"resource": "topic:x", "actions": ["pub"], "sourceIps": ["127.0.0.1"]},
                {"resource": "topic:*", "actions": ["all"], "decision": "deny"},
            ]
        )
    with pytest.raises(PolicyError, match="contradicts"):
        user(
            [
                {"resource": "topic:orders-eu", "actions": ["sub"]},
                {"resource": "topic:orders-*", "actions": ["sub", "pub"], "decision": "deny"},
            ]
        )
    # a narrower deny, or one for some addresses only, leaves the allow meaning something
    user([{"resource": "topic:orders-*", "actions": ["sub"]}, {"resource": "topic:orders-eu", "actions": ["sub"], "decision": "deny"}])
    user(
        [
            {"resource": "topic:x", "actions": ["pub"]},
            {"resource": "topic:x", "actions": ["pub"], "decision": "deny", "sourceIps": ["10.0.0.0/8"]},
        ]
    )
    with pytest.raises(PolicyError, match="Super user may do everything"):
        parse_user(
            "root",
            {"secretKey": "a-long-secret", "userType": "Super", "entries": [{"resource": "*", "actions": ["pub"], "decision": "deny"}]},
        )


def test_a_groups_retry_and_dead_letter_topics_are_the_groups():
    u = user([{"resource": "topic:orders", "actions": ["sub"]}, {"resource": "group:g_1", "actions": ["sub"]}])
    ident = Identity("someone", u)
    assert ident.may("topic", "%RETRY%g_1_orders", "any") and ident.may("topic", "%RETRY%g_1+orders", "sub")
    assert ident.may("topic", "%DLQ%g_1", "sub") and ident.may("topic", "%RETRY%g_1", "sub")
    assert not ident.may("topic", "%RETRY%g_1_payroll", "sub")  # the group's, but of a topic it may not read
    assert not ident.may("topic", "%RETRY%other_orders", "sub") and not ident.may("topic", "%DLQ%other", "sub")


def test_access_keys_and_secrets_are_checked():
    with pytest.raises(PolicyError, match="access_key"):
        parse_user("a b", {"secretKey": "a-long-secret"})
    with pytest.raises(PolicyError, match="secret_key"):
        parse_user("someone", {"secretKey": "short"})
    with pytest.raises(PolicyError, match="user_type"):
        parse_user("someone", {"secretKey": "a-long-secret", "userType": "Root"})


def test_a_deny_wins_prefixes_match_and_sources_limit():
    u = user(
        [
            {"resource": "topic:orders-*", "actions": ["pub", "sub"]},
            {"resource": "topic:orders-eu", "actions": ["pub"], "decision": "deny"},
            {"resource": "group:billing", "actions": ["sub"], "sourceIps": ["10.0.0.0/8"]},
            # the same resource allowed and denied for different sources is no contradiction
            {"resource": "topic:audit", "actions": ["sub"], "sourceIps": ["10.1.0.0/16"]},
            {"resource": "topic:audit", "actions": ["sub"], "decision": "deny", "sourceIps": ["10.2.0.0/16"]},
        ]
    )
    assert u.decide("topic", "orders-us", "pub", "127.0.0.1")[0]
    assert u.decide("topic", "orders-eu", "sub", "127.0.0.1")[0]
    allowed, why = u.decide("topic", "orders-eu", "pub", "127.0.0.1")
    assert not allowed and "entries[1]" in why and "deny pub on topic:orders-eu" in why
    assert not u.decide("topic", "orders", "pub", None)[0]  # "orders-*" is a prefix of names, not of "orders"
    assert not u.decide("topic", "orders-us", "create", None)[0]
    assert u.decide("group", "billing", "sub", "10.9.8.7")[0]
    assert u.decide("group", "billing", "sub", "::ffff:10.9.8.7")[0]  # (an IPv4 caller as the dual stack shows it)
    assert not u.decide("group", "billing", "sub", "192.168.1.1")[0]
    assert not u.decide("group", "billing", "sub", None)[0]
    assert u.decide("topic", "audit", "sub", "10.1.2.3")[0] and not u.decide("topic", "audit", "sub", "10.2.2.3")[0]
    everything = user([{"resource": "*", "actions": ["all"]}])
    assert all(everything.decide(k, "x", a, None)[0] for k in ("topic", "group", "cluster") for a in ACTIONS)
    assert parse_user("root", {"secretKey": "a-long-secret", "userType": "Super"}).decide("topic", "x", "pub", None)[0]
    assert ipaddress.ip_network("10.0.0.0/8") in u.entries[2].sources


def test_every_call_of_both_protocols_says_what_it_needs():
    """A method missing from the table would be refused (KeyError) rather than let through; the
    table must name each, so that adding a method means deciding what it needs."""
    assert set(permissions.V1) == {m.name for m in pb.DESCRIPTOR.services_by_name["MessageStore"].methods}
    from google.protobuf import message_factory

    for m in V2_SERVICE.methods:
        request = message_factory.GetMessageClass(m.input_type)()
        list(permissions.v2_needs(m.name, request))  # every shape is understood


# ---------------------------------------------------------------------- against a real server


@pytest.fixture
def secured(servers, tmp_path):
    """A store that checks who calls, with a producer of ``orders`` and a subscriber as ``billing``."""
    (tmp_path / "admin").write_text(ADMIN)
    node = servers("secured", args=["--admin-token-file", str(tmp_path / "admin")], settings=["authorizationEnabled=true"])
    with Client(node.address, admin_token=ADMIN, timeout=10) as admin:
        admin.put_user(*PRODUCER, entries=[{"resource": "topic:orders", "actions": ["pub"]}])
        admin.put_user(
            *BILLING, entries=[{"resource": "topic:orders", "actions": ["sub"]}, {"resource": "group:billing", "actions": ["sub"]}]
        )
        admin.create_topic("orders", 2)
        admin.create_topic("payroll", 2)
    return node


def denied(call, code: grpc.StatusCode, *says: str) -> None:
    with pytest.raises(StoreError) as e:
        call()
    assert e.value.code == code and all(s in e.value.details for s in says), (e.value.code, e.value.details)


def test_our_client_does_exactly_what_each_user_may(secured):
    with Client(secured.address, access_key=PRODUCER[0], secret_key=PRODUCER[1], timeout=10) as producer:
        sent = [producer.send("orders", b"o%d" % i) for i in range(4)]
        assert {r.status for r in sent} == {"PUT_OK"}
        assert producer.send_batch("orders", [OutMessage(b"b%d" % i) for i in range(10)]).all_ok
        denied(lambda: producer.send("payroll", b"x"), grpc.StatusCode.PERMISSION_DENIED, "user orders-producer", "topic:payroll")
        q = QueueRef("secured", secured.address, 0)
        denied(lambda: producer.pull("orders", q, 0), grpc.StatusCode.PERMISSION_DENIED, "may not sub topic:orders")
        assert [t for t in producer.topics()] == ["orders"]  # the topics it may use, not payroll
    with Client(secured.address, access_key=BILLING[0], secret_key=BILLING[1], timeout=10) as billing:
        consumer = Consumer(billing, "billing", "orders")
        got = []
        while len(got) < 14 and (batch := consumer.poll(timeout=2)):
            got += [m.body for m in batch]
            consumer.commit()
        assert len(got) == 14
        denied(lambda: billing.send("orders", b"x"), grpc.StatusCode.PERMISSION_DENIED, "user billing may not pub topic:orders")
        denied(
            lambda: Consumer(billing, "other-group", "orders").poll(timeout=0.5),
            grpc.StatusCode.PERMISSION_DENIED,
            "may not sub group:other-group",
        )
        # a message it may not get is answered as one that is not there (a refusal would say it exists, and where)
        denied(lambda: billing.get_message(sent[0].message_id), grpc.StatusCode.NOT_FOUND, "or not one user billing may get")
    for kw, says in (
        ({}, "this store checks who calls"),
        ({"access_key": PRODUCER[0], "secret_key": "not-the-secret"}, "wrong secret key"),
        ({"access_key": "nobody", "secret_key": "whatever-secret"}, "unknown access key 'nobody'"),
    ):
        with Client(secured.address, timeout=10, **kw) as c:
            denied(lambda c=c: c.send("orders", b"x"), grpc.StatusCode.UNAUTHENTICATED, says)


def test_a_request_naming_a_forbidden_topic_stores_none_of_its_entries(secured):
    """One Send with entries for two topics, one of them not allowed: refused whole."""
    stamp, auth = signature.sign(*PRODUCER)
    with grpc.insecure_channel(secured.address) as ch:
        stub = pbg.MessageStoreStub(ch)
        req = pb.SendRequest(entries=[pb.SendEntry(topic="orders", body=b"fine"), pb.SendEntry(topic="payroll", body=b"not yours")])
        with pytest.raises(grpc.RpcError) as e:
            stub.Send(req, metadata=[stamp, auth], timeout=10)
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED and "topic:payroll" in e.value.details()
        # the stream answers the request with the refusal and goes on
        answers = list(stub.SendStream(iter([pb.SendRequest(request_id=7, entries=req.entries)]), metadata=[stamp, auth], timeout=10))
        assert [(a.request_id, a.error_code) for a in answers] == [(7, grpc.StatusCode.PERMISSION_DENIED.value[0])]
        assert "topic:payroll" in answers[0].error_message
    with Client(secured.address, admin_token=ADMIN, timeout=10) as admin:
        assert [admin.pull("orders", QueueRef("secured", secured.address, q), 0).messages for q in (0, 1)] == [[], []]


def test_the_data_token_and_the_admin_token_keep_every_permission(servers, tmp_path):
    (tmp_path / "token").write_text("the-data-token")
    (tmp_path / "admin").write_text(ADMIN)
    node = servers("tokens", args=["--token-file", str(tmp_path / "token"), "--admin-token-file", str(tmp_path / "admin")])
    with Client(node.address, admin_token=ADMIN, timeout=10) as admin:
        admin.put_user(*PRODUCER, entries=[{"resource": "topic:orders", "actions": ["pub"]}])
        assert admin.send("anything", b"x").status == "PUT_OK"  # the admin token: every permission
    with Client(node.address, token="the-data-token", timeout=10) as c:
        assert c.send("anything", b"y").status == "PUT_OK"
    with Client(node.address, access_key=PRODUCER[0], secret_key=PRODUCER[1], timeout=10) as c:
        assert c.send("orders", b"z").status == "PUT_OK"
        denied(lambda: c.send("anything", b"z"), grpc.StatusCode.PERMISSION_DENIED, "orders-producer")
    with Client(node.address, token="not-it", timeout=10) as c:
        denied(lambda: c.send("anything", b"z"), grpc.StatusCode.PERMISSION_DENIED, "token is not valid")


def v2_config(address: str, ak: str, sk: str) -> ClientConfiguration:
    return ClientConfiguration(address, Credentials(ak, sk), request_timeout=5)


def test_the_official_client_signs_as_a_user_and_is_held_to_its_entries(secured):
    with started(Producer(v2_config(secured.address, *PRODUCER), ("orders",))) as producer:
        ids = {producer.send(message("orders", b"r%d" % i)).message_id for i in range(5)}
        assert len(ids) == 5
        with pytest.raises(Exception) as e:
            producer.send(message("payroll", b"no"))
        assert "payroll" in str(e.value), str(e.value)
    with started(simple(v2_config(secured.address, *BILLING), "billing", "orders", 2)) as consumer:
        got = receive_all(consumer, 5)
        for m in got:
            consumer.ack(m)
    assert sorted(m.body for m in got) == sorted(b"r%d" % i for i in range(5))
    # the producer may not receive: its consumer is refused (the client raises on receive)
    with started(simple(v2_config(secured.address, *PRODUCER), "billing", "orders", 1)) as wrong:
        with pytest.raises(Exception) as e:
            wrong.receive(16, 5)
        assert "orders-producer" in str(e.value) or "FORBIDDEN" in str(e.value), str(e.value)


def test_users_are_managed_with_the_cli_and_refusals_name_the_field(secured, tmp_path):
    (tmp_path / "admin-token").write_text(ADMIN)
    s = ["--server", secured.address, "--admin-token-file", str(tmp_path / "admin-token")]
    out = cli.run("admin", "user", "create", "carol", *s).stdout.decode()
    secret = next(line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("secret key:"))
    cli.run("admin", "acl", "grant", "carol", "topic:payroll", "pub,sub", *s)
    bad = cli.run("admin", "acl", "grant", "carol", "topic:payroll", "all", "--deny", *s, check=False)
    assert bad.returncode != 0 and "entries[1]: deny all on topic:payroll contradicts entries[0]" in bad.stderr.decode()
    bad = cli.run("admin", "acl", "grant", "carol", "topic:pay*roll", "pub", *s, check=False)
    assert bad.returncode != 0 and "only a trailing * is a wildcard" in bad.stderr.decode()
    again = cli.run("admin", "acl", "grant", "carol", "Topic:payroll", "sub,pub", *s)  # the same entry, spelt otherwise
    assert "already has that entry" in again.stderr.decode()
    mixed = cli.run("admin", "user", "create", "dave", "--secret-file", str(tmp_path / "admin-token"), *s, check=False)
    assert mixed.returncode == 2 and "--secret-key-file" in mixed.stderr.decode()
    assert "allow pub,sub on topic:payroll" in cli.run("admin", "user", "list", *s).stdout.decode()
    (tmp_path / "carol").write_text(secret)
    as_carol = ["--server", secured.address, "--access-key", "carol", "--secret-file", str(tmp_path / "carol")]
    assert "PUT_OK" in cli.run("send", "payroll", "salary", *as_carol).stdout.decode()
    refused = cli.run("send", "orders", "x", *as_carol, check=False)
    assert refused.returncode != 0 and "user carol may not" in refused.stderr.decode()
    for command in (["pull", "orders"], ["query", "orders", "--key", "k"]):  # a refusal, not "no topic orders"
        refused = cli.run(*command, *as_carol, check=False)
        assert refused.returncode == 1 and "PERMISSION_DENIED: user carol may not" in refused.stderr.decode(), refused.stderr
    cli.run("admin", "acl", "revoke", "carol", "topic:payroll", "sub", *s)  # one action of the entry
    assert "allow pub on topic:payroll" in cli.run("admin", "acl", "show", "carol", *s).stdout.decode()
    cli.run("admin", "acl", "revoke", "carol", "topic:payroll", *s)
    assert "PERMISSION_DENIED" in cli.run("send", "payroll", "x", *as_carol, check=False).stderr.decode()
    cli.run("admin", "user", "delete", "carol", *s)
    assert "unknown access key 'carol'" in cli.run("send", "payroll", "x", *as_carol, check=False).stderr.decode()
    users = os.path.join(secured.data_dir, "config", "users.json")
    assert stat.S_IMODE(os.stat(users).st_mode) == 0o600  # it holds secret keys


def test_calls_forwarded_through_an_access_point_are_checked_where_they_are_served(cluster, forwarders, tmp_path):  # noqa: F811
    """Three replica groups behind one address: a user's sends spread over all of them (two of
    three forwarded); a user limited to other source addresses is refused on every group, and a
    caller cannot claim another address itself."""
    (tmp_path / "admin").write_text(ADMIN)
    for n in cluster:
        n.extra += ["--admin-token-file", str(tmp_path / "admin")]
        n.settings += ["authorizationEnabled=true"]
    with_access_point(cluster)
    fwd = forwarders(cluster[2].address)
    with Client(fwd.address, admin_token=ADMIN, timeout=10) as admin:
        admin.put_user(*PRODUCER, entries=[{"resource": "topic:spread", "actions": ["pub", "sub"]}])
        admin.put_user(
            "elsewhere", "elsewhere-secret", entries=[{"resource": "topic:spread", "actions": ["pub"], "sourceIps": ["10.0.0.0/8"]}]
        )
        assert sorted(u.access_key for u in admin.users()) == ["elsewhere", PRODUCER[0]]
    for n in cluster:  # every group's master holds them (each put went to its group through the one address)
        with Client(n.address, admin_token=ADMIN, timeout=10) as direct:
            assert sorted(u.access_key for u in direct.admin(n.address).users()) == ["elsewhere", PRODUCER[0]]
    with Client(fwd.address, access_key=PRODUCER[0], secret_key=PRODUCER[1], timeout=10) as c:
        results = [c.send("spread", b"s%d" % i) for i in range(24)]
        assert {r.status for r in results} == {"PUT_OK"} and {r.node for r in results} == {"store-0", "store-1", "store-2"}
        denied(lambda: c.send("other", b"x"), grpc.StatusCode.PERMISSION_DENIED, "orders-producer")
    with Client(fwd.address, access_key="elsewhere", secret_key="elsewhere-secret", timeout=10) as c:
        denied(lambda: c.send("spread", b"x"), grpc.StatusCode.PERMISSION_DENIED, "user elsewhere", "from 10.0.0.0/8")
    # a caller claiming an address of the range itself, with no proof the nodes would accept
    stamp, auth = signature.sign("elsewhere", "elsewhere-secret")
    claimed = [stamp, auth, ("x-msgstore-origin", "10.1.2.3"), ("x-msgstore-origin-proof", "0" * 64)]
    with grpc.insecure_channel(cluster[0].address) as ch:
        with pytest.raises(grpc.RpcError) as e:
            pbg.MessageStoreStub(ch).Send(pb.SendRequest(entries=[pb.SendEntry(topic="spread", body=b"x")]), metadata=claimed, timeout=10)
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_a_follower_copies_the_users_and_checks_calls_with_them(groups, tmp_path):  # noqa: F811
    (tmp_path / "admin").write_text(ADMIN)
    g = groups(2, master=["authorizationEnabled=true"], follower=["authorizationEnabled=true"], start=False)
    for m in g.members:
        m.extra += ["--admin-token-file", str(tmp_path / "admin")]
    g.start(admin_token=ADMIN)
    master, follower = g.members
    with Client(master.address, admin_token=ADMIN, timeout=10) as c:
        c.put_user(*BILLING)
        wait_until(lambda: [u.access_key for u in c.admin(follower.address).users()] == [BILLING[0]], what="the follower to copy the user")
        # users are changed on the master only
        denied(lambda: c.admin(follower.address).delete_user(BILLING[0]), grpc.StatusCode.FAILED_PRECONDITION, "on the master")
    stamp, auth = signature.sign(*BILLING)
    with grpc.insecure_channel(follower.address) as ch:
        stub = pbg.MessageStoreStub(ch)
        with pytest.raises(grpc.RpcError) as e:  # signed in (the copied secret), but with no entries: may not
            stub.GetRoute(pb.GetRouteRequest(topic="orders"), metadata=[stamp, auth], timeout=10)
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED and "user billing" in e.value.details()
        with pytest.raises(grpc.RpcError) as e:
            stub.GetRoute(pb.GetRouteRequest(topic="orders"), metadata=list(signature.sign(BILLING[0], "not-the-secret")), timeout=10)
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_checks_cannot_be_turned_on_without_an_admin_token(servers, tmp_path):
    """Users are made on the admin service: without an admin token it would be open to anyone."""
    (tmp_path / "data-token").write_text("dt")
    node = servers("open", args=["--token-file", str(tmp_path / "data-token")])
    with Client(node.address, token="dt", timeout=10) as c:
        # a data token alone turns checks on, but users cannot be made without an admin token
        denied(lambda: c.put_user(*PRODUCER), grpc.StatusCode.FAILED_PRECONDITION, "admin token")
        denied(
            lambda: c.admin(node.address).update_config({"authorizationEnabled": True}),
            grpc.StatusCode.INVALID_ARGUMENT,
            "authorizationEnabled",
            "needs an admin token",
        )
        assert c.send("anything", b"still open").status == "PUT_OK"
    refused = cli.run("serve", "--data-dir", node.data_dir + "-2", "--port", "0", "--set", "authorizationEnabled=true", check=False)
    assert refused.returncode != 0 and "needs an admin token" in refused.stderr.decode()


def test_checks_persisted_on_do_not_start_without_the_admin_token(servers, tmp_path):
    """Turned on with `admin config set` (persisted in store.json), then started again without
    the admin token: the store does not serve, saying why, instead of serving with an open admin service."""
    (tmp_path / "admin").write_text(ADMIN)
    node = servers("persisted", args=["--admin-token-file", str(tmp_path / "admin")])
    with Client(node.address, admin_token=ADMIN, timeout=10) as c:
        c.admin(node.address).update_config({"authorizationEnabled": True})
    node.terminate()
    node.extra = []
    node.start(wait=False)
    wait_until(lambda: "it is on in config/store.json" in node.whole_log(), what="the store to refuse to serve")
    assert node.health() == health_pb2.HealthCheckResponse.NOT_SERVING


def test_check_backs_reach_only_producers_allowed_to_publish_the_topic(servers, tmp_path):
    """A check-back carries the whole half message: a caller allowed the producer group but not
    the topic gets none, over either protocol, and a legitimate producer is asked every time."""
    (tmp_path / "admin").write_text(ADMIN)
    node = servers(
        "checks",
        args=["--admin-token-file", str(tmp_path / "admin")],
        settings=["authorizationEnabled=true", "transactionTimeOut=200", "transactionCheckInterval=200", "transactionCheckMax=100"],
    )
    with Client(node.address, admin_token=ADMIN, timeout=10) as admin:
        admin.put_user("snoop", "snoop-secret-1", entries=[{"resource": "group:ledger", "actions": ["pub"]}])
        admin.create_topic("payroll", 1)
    snoop_meta = list(signature.sign("snoop", "snoop-secret-1"))
    with grpc.insecure_channel(node.address) as ch:
        # v2: a Telemetry stream naming a topic it may not publish is refused
        v2 = service_grpc.MessagingServiceStub(ch)
        settings = v2d.Settings(client_type=v2d.PRODUCER, publishing=v2d.Publishing(topics=[v2d.Resource(name="payroll")]))
        answers = list(v2.Telemetry(iter([v2s.TelemetryCommand(settings=settings)]), metadata=snoop_meta, timeout=10))
        assert answers[0].status.code == v2d.FORBIDDEN and "topic:payroll" in answers[0].status.message
        # v1: its TransactionChecks stream for the group is let in, but hears nothing of payroll's halves
        snooping = pbg.MessageStoreStub(ch).TransactionChecks(pb.TransactionChecksRequest(producer_group="ledger"), metadata=snoop_meta)
        heard: list = []

        def listen() -> None:
            try:
                heard.extend(snooping)
            except grpc.RpcError:
                pass  # (cancelled at the end)

        listener = threading.Thread(target=listen, daemon=True)
        listener.start()
        asked: list = []
        with Client(node.address, admin_token=ADMIN, timeout=10) as owner:
            with owner.transaction_producer("ledger", lambda m: asked.append(m.topic) or "unknown") as producer:
                producer.send("payroll", b"salary 1")
                wait_until(lambda: len(asked) >= 3, what="the owner to be asked three times")
        snooping.cancel()
        listener.join(10)
    assert set(asked) == {"payroll"} and heard == []


def test_a_revoke_applies_to_streams_already_open(secured):
    """A stream is checked when it opens and again for each request or answer: deleting the
    user ends a send stream's, a pull stream's and a subscription's service at the next message."""
    with Client(secured.address, admin_token=ADMIN, timeout=10) as admin:
        admin.put_user(
            "streamer",
            "streamer-secret",
            entries=[{"resource": "topic:orders", "actions": ["pub", "sub"]}, {"resource": "group:g", "actions": ["sub"]}],
        )
        with Client(secured.address, access_key="streamer", secret_key="streamer-secret", timeout=10) as c:
            q = c.route("orders").queues[0]
            assert c.send_batch("orders", [OutMessage(b"first")], queue=q).all_ok  # (a send stream is open now)
            subscription = iter(c.subscribe("orders", q, offset=0))
            assert next(subscription).messages
            pulls = c.pull_stream(secured.address)  # a consumer's long polls
            one = pb.PullQueuesRequest(pulls=[pb.PullRequest(topic="orders", queue_id=q.queue_id, group="g", raw=True)])
            assert pulls.pull(one, within=10).results[0].record_count == 1
            admin.delete_user("streamer")
            with pytest.raises(grpc.RpcError) as refused:
                pulls.pull(one, within=10)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED, refused.value
            with pytest.raises(StoreError) as e:
                for _ in range(5):  # the stream's next request is refused (the client may retry once on a fresh call)
                    c.send_batch("orders", [OutMessage(b"after")], queue=q)
            assert e.value.code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED), e.value
            admin.send("orders", b"for the subscription", queue=q)
            with pytest.raises((StoreError, grpc.RpcError)):
                next(subscription)
        assert all(m.body != b"after" for m in admin.pull("orders", q, 0, max_messages=100).messages)


def test_a_pull_stream_is_refused_at_its_next_request_once_the_users_entry_is_revoked(secured):
    """A consumer's pull stream is checked for each request: an entry taken away refuses the
    next one PERMISSION_DENIED, naming what it may not do, and the consumer raises it."""
    with Client(secured.address, admin_token=ADMIN, timeout=10) as admin:
        admin.put_user("puller", "puller-secret", entries=[{"resource": "topic:orders", "actions": ["sub"]}])
        with Client(secured.address, access_key="puller", secret_key="puller-secret", timeout=10) as c:
            pulls = c.pull_stream(secured.address)
            one = pb.PullQueuesRequest(pulls=[pb.PullRequest(topic="orders", queue_id=0, raw=True)])
            assert len(pulls.pull(one, within=10).results) == 1  # served
            admin.put_user("puller", "puller-secret", entries=[{"resource": "topic:payroll", "actions": ["sub"]}])
            with pytest.raises(grpc.RpcError) as refused:
                pulls.pull(one, within=10)
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED, refused.value
            assert "may not sub topic:orders" in refused.value.details()


def test_a_redelivered_message_is_acknowledged_with_the_groups_permission(secured):
    """Redeliveries come from the group's retry topic: the group's sub covers it (acks, nacks)."""
    with Client(secured.address, access_key=PRODUCER[0], secret_key=PRODUCER[1], timeout=10) as p:
        p.send("orders", b"twice")
    with Client(secured.address, access_key=BILLING[0], secret_key=BILLING[1], timeout=10) as c:
        first = c.receive("billing", "orders", 1, invisible=1, wait=5)
        assert [m.body for m in first] == [b"twice"]
        again: list = []
        wait_until(lambda: again.extend(c.receive("billing", "orders", 1, invisible=30, wait=1)) or again, what="the redelivery")
        assert again[0].body == b"twice"
        assert c.ack("billing", "orders", again) == [""]

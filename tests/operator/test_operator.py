"""The operator under Kopf against kmock, with real store processes playing the pods."""

import asyncio
import os
import time

import grpc
import kubernetes_validate
import pytest

from msgstore.client import Client, OutMessage, StoreError
from msgstore.v1 import msgstore_pb2 as pb
from msgstore_operator import kube as kubemod
from msgstore_operator.reconcile import Reconciler
from tests.operator.conftest import ApiServer

pytestmark = [pytest.mark.asyncio, pytest.mark.kmock(cls=ApiServer)]

STS, SVC, CM, PDB, POD = "apps/v1/statefulsets", "v1/services", "v1/configmaps", "policy/v1/poddisruptionbudgets", "v1/pods"
SMALL = {"mappedFileSizeCommitLog": 65536, "mappedFileSizeConsumeQueue": 4000, "extra": {"maxHashSlotNum": "1024", "maxIndexNum": "4096"}}


def ready(env, name="orders"):
    return env.condition("Ready", name).get("status") == "True"


def pods(env):
    return (env.store().get("status") or {}).get("pods", [])


def client_for(env, pod: str) -> Client:
    return Client(env.cluster.containers[pod].address, timeout=10)


async def test_create_renders_every_object_and_becomes_ready(env):
    await env.create(replicas=3, store=SMALL)
    await env.until(lambda: ready(env), what="Ready")
    objs = {
        "sts": env.obj(STS, "orders"),
        "headless": env.obj(SVC, "orders-headless"),
        "svc": env.obj(SVC, "orders"),
        "cm": env.obj(CM, "orders-config"),
        "pdb": env.obj(PDB, "orders"),
    }
    assert all(objs.values()), objs
    for o in objs.values():
        kubernetes_validate.validate(o, "1.30.0", strict=True)
        assert o["metadata"]["ownerReferences"][0]["name"] == "orders"
    sts = objs["sts"]["spec"]
    assert sts["updateStrategy"] == {"type": "OnDelete"} and sts["replicas"] == 3
    assert objs["headless"]["spec"]["clusterIP"] == "None"
    assert "mappedFileSizeCommitLog=65536" in objs["cm"]["data"]["store.conf"]
    st = env.store()["status"]
    assert st["readyReplicas"] == 3 and st["observedGeneration"] == 1
    assert [p["name"] for p in st["pods"]] == ["orders-0", "orders-1", "orders-2"]
    assert all(p["recoveryMode"] == "normal" and p["upToDate"] for p in st["pods"])
    # pods find each other through the headless Service: any node's route lists all three
    route = Client(env.cluster.containers["orders-1"].address).route("t", refresh=True)
    assert sorted(n.name for n in route.nodes) == ["orders-0", "orders-1", "orders-2"]
    # idempotent: another pass changes nothing
    out = await asyncio.to_thread(Reconciler(kubemod.connect(host=env.url)).reconcile, env.store())
    assert out.patched == [] and out.waiting is None


async def test_hot_config_reaches_every_pod_without_a_restart(env):
    await env.create(replicas=2, store=SMALL)
    await env.until(lambda: ready(env), what="Ready")
    pids = {p: c.proc.pid for p, c in env.cluster.containers.items()}
    await env.patch(spec={"store": {**SMALL, "fileReservedTime": 5, "deleteWhen": "03;15"}})

    def applied():
        for pod in ("orders-0", "orders-1"):
            cfg = client_for(env, pod).admin().config()
            if cfg["fileReservedTime"] != "5" or cfg["deleteWhen"] != "03;15":
                return False
        return True

    await env.until(applied, what="the live config on every pod")
    assert {p: c.proc.pid for p, c in env.cluster.containers.items()} == pids  # no process restarted
    assert "fileReservedTime=5" in env.obj(CM, "orders-config")["data"]["store.conf"]
    await env.until(lambda: all(p.get("configGeneration", 0) >= 1 for p in pods(env)), what="generation in status")
    assert all(p["upToDate"] for p in pods(env))
    # removing the key takes every pod back to the default (persisted settings never outlive the spec)
    await env.patch(spec={"store": {**SMALL, "fileReservedTime": None, "deleteWhen": None}})
    await env.until(lambda: client_for(env, "orders-0").admin().config()["fileReservedTime"] == "72", what="default back")


async def test_manual_delete_annotation(env):
    await env.create(replicas=2, store={**SMALL, "fileReservedTime": 1})
    await env.until(lambda: ready(env), what="Ready")
    for pod in ("orders-0", "orders-1"):
        c = client_for(env, pod)
        q = next(x for x in c.route("audit").queues if x.node == pod)
        for _ in range(8):  # 8 × 40 × ~130 B: several 64 KiB segments
            assert all(r.ok for r in c.send_batch("audit", [OutMessage(b"m" * 30) for _ in range(400)], queue=q))
    old = time.time() - 3 * 3600
    segments = {}
    for pod in ("orders-0", "orders-1"):
        seg_dir = os.path.join(env.cluster.base, "pvc", f"data-{pod}", "commitlog")
        names = sorted(os.listdir(seg_dir))
        assert len(names) >= 3
        segments[pod] = names
        for n in names[:-1]:
            os.utime(os.path.join(seg_dir, n), (old, old))
    await env.patch(annotations={"msgstore.io/manual-delete": "n1"})

    def done():
        st = env.store()
        return (
            "msgstore.io/manual-delete" not in (st["metadata"].get("annotations") or {})
            and (st.get("status") or {}).get("lastManualDelete", {}).get("nonce") == "n1"
        )

    await env.until(done, what="the manual delete to finish")
    results = env.store()["status"]["lastManualDelete"]["results"]
    assert [r["pod"] for r in results] == ["orders-0", "orders-1"]
    for r in results:
        assert r["deletedSegments"] == len(segments[r["pod"]]) - 1, r  # every expired one, never the newest
        left = os.listdir(os.path.join(env.cluster.base, "pvc", f"data-{r['pod']}", "commitlog"))
        assert left == [segments[r["pod"]][-1]]
    await env.until(lambda: env.events("ManualDelete"), what="the ManualDelete event")  # posted asynchronously


async def test_image_change_rolls_one_pod_at_a_time_without_losing_messages(env):
    await env.create(replicas=3, store=SMALL, image="msgstore:1")
    await env.until(lambda: ready(env), what="Ready")
    acked = {}
    for pod in ("orders-0", "orders-1", "orders-2"):
        c = client_for(env, pod)
        q = next(x for x in c.route("rolled").queues if x.node == pod and x.queue_id == 0)
        for r, i in zip(c.send_batch("rolled", [OutMessage(b"%s-%d" % (pod.encode(), i)) for i in range(50)], queue=q), range(50)):
            assert r.ok
            acked[(pod, r.queue_offset)] = b"%s-%d" % (pod.encode(), i)
    env.cluster.history.clear()
    await env.patch(spec={"image": "msgstore:2"})
    await env.until(lambda: env.events("RollFinished"), timeout=120, what="the roll to finish")
    await env.until(lambda: ready(env), what="Ready again")
    stops = [p for e, p in env.cluster.history if e == "stopped"]
    assert stops == ["orders-2", "orders-1", "orders-0"]  # highest ordinal first, each once
    # one at a time: a pod is started again before the next one is stopped
    order = [(e, p) for e, p in env.cluster.history if e in ("stopped", "started")]
    assert order == [
        ("stopped", "orders-2"),
        ("started", "orders-2"),
        ("stopped", "orders-1"),
        ("started", "orders-1"),
        ("stopped", "orders-0"),
        ("started", "orders-0"),
    ]
    st = env.store()["status"]
    assert all(p["recoveryMode"] == "normal" and p["upToDate"] for p in st["pods"])
    assert st["lastRoll"]["state"] == "done" and st["lastRoll"]["restarted"] == ["orders-2", "orders-1", "orders-0"]
    for (pod, off), body in acked.items():  # nothing acknowledged was lost
        c = client_for(env, pod)
        q = next(x for x in c.route("rolled").queues if x.node == pod and x.queue_id == 0)
        got = c.pull("rolled", q, off, max_messages=1, timeout_ms=2000)
        assert got.messages and got.messages[0].body == body


async def test_restart_annotation_rolls_and_is_cleared(env):
    await env.create(replicas=1, store=SMALL)
    await env.until(lambda: ready(env), what="Ready")
    pid = env.cluster.containers["orders-0"].proc.pid
    await env.patch(annotations={"msgstore.io/restart": "r1"})
    await env.until(lambda: env.events("RollFinished"), timeout=60, what="the restart")
    assert env.cluster.containers["orders-0"].proc.pid != pid
    assert "msgstore.io/restart" not in (env.store()["metadata"].get("annotations") or {})
    assert env.store()["status"]["restartNonce"] == "r1"


async def test_sigkill_is_reported_as_abnormal_recovery(env):
    await env.create(replicas=2, store=SMALL)
    await env.until(lambda: ready(env), what="Ready")
    env.cluster.kill("orders-1")
    await env.until(lambda: env.events("AbnormalRecovery"), what="an AbnormalRecovery event")
    event = env.events("AbnormalRecovery")[0]
    assert event["type"] == "Warning" and "orders-1" in event["message"]
    await env.until(
        lambda: any(p["name"] == "orders-1" and p.get("recoveryMode") == "abnormal" for p in pods(env)), what="abnormal recovery in status"
    )
    await env.until(lambda: ready(env), what="Ready after the crash")
    assert len(env.events("AbnormalRecovery")) == 1  # reported once


async def test_invalid_store_settings_set_a_condition_and_touch_nothing(env):
    await env.create(replicas=1, store={**SMALL, "diskSpaceWarningLevelRatio": 50})
    await env.until(lambda: env.condition("ConfigInvalid").get("status") == "True", what="ConfigInvalid")
    c = env.condition("ConfigInvalid")
    assert "spec.store.diskSpaceWarningLevelRatio" in c["message"] and "diskSpaceCleanForciblyRatio" in c["message"]
    assert env.obj(STS, "orders") is None
    await env.until(lambda: env.events("ConfigInvalid"), what="the ConfigInvalid event")
    await env.patch(spec={"store": {**SMALL, "diskSpaceWarningLevelRatio": None, "extra": {"noSuchKey": "1"}}})
    await env.until(lambda: "spec.store.extra.noSuchKey" in env.condition("ConfigInvalid").get("message", ""), what="the unknown key named")
    await env.patch(spec={"store": {**SMALL, "extra": {"noSuchKey": None, **SMALL["extra"]}}})
    await env.until(lambda: ready(env), what="Ready once valid")


async def test_pause_annotation_stops_reconciliation(env):
    await env.create(replicas=1, store=SMALL)
    await env.until(lambda: ready(env), what="Ready")
    await env.patch(annotations={"msgstore.io/pause-reconciliation": "true"})
    await env.until(lambda: env.condition("ReconciliationPaused").get("status") == "True", what="paused")
    await env.patch(spec={"store": {**SMALL, "fileReservedTime": 9}})
    await asyncio.sleep(3)  # the scenario: time passes and nothing may change
    assert "fileReservedTime" not in env.obj(CM, "orders-config")["data"]["store.conf"]
    await env.patch(annotations={"msgstore.io/pause-reconciliation": None})
    await env.until(lambda: "fileReservedTime=9" in env.obj(CM, "orders-config")["data"]["store.conf"], what="resumed")


async def test_scale_up_then_scale_down_blocked_until_consumed(env):
    await env.create(replicas=1, store=SMALL)
    await env.until(lambda: ready(env), what="Ready")
    await env.patch(spec={"replicas": 2})
    await env.until(lambda: ready(env) and env.store()["status"]["readyReplicas"] == 2, what="two ready nodes")
    c = client_for(env, "orders-1")
    await env.until(
        lambda: len(Client(env.cluster.containers["orders-0"].address).route("t", refresh=True).nodes) == 2,
        what="the new node in the route",
    )
    q = next(x for x in c.route("work").queues if x.node == "orders-1" and x.queue_id == 0)
    c.send_batch("work", [OutMessage(b"job-%d" % i) for i in range(5)], queue=q)
    c.pull("work", q, 4, timeout_ms=3000)
    c.commit("billing", "work", q, 2)  # 3 not consumed yet
    member = pb.HeartbeatRequest(group="billing", client_id="worker-1", topics=["work"], expiry_ms=600_000)
    c.heartbeat(q.address, member)  # a live member of the group on that node
    await env.patch(spec={"replicas": 1})
    await env.until(lambda: env.condition("ScaleDownBlocked").get("status") == "True", what="ScaleDownBlocked")
    msg = env.condition("ScaleDownBlocked")["message"]
    assert "orders-1" in msg and "billing: 3 (1 live member)" in msg, msg
    assert env.obj(STS, "orders")["spec"]["replicas"] == 2 and "orders-1" in env.cluster.containers
    c.commit("billing", "work", q, 5)
    await env.until(lambda: env.obj(STS, "orders")["spec"]["replicas"] == 1, what="the scale down")
    await env.until(lambda: "orders-1" not in env.cluster.containers, what="the node gone")
    assert os.path.isdir(os.path.join(env.cluster.base, "pvc", "data-orders-1"))  # the volume is kept (Retain)
    assert env.condition("ScaleDownBlocked")["status"] == "False"


async def test_admin_token_from_a_secret(env):
    await env.put_secret("store-admin", {"token": "t0ps3cret"})
    await env.create(replicas=1, store=SMALL, adminTokenSecret={"name": "store-admin"})
    await env.until(lambda: ready(env), what="Ready")
    with pytest.raises(StoreError) as e:
        client_for(env, "orders-0").admin().status()
    assert e.value.code == grpc.StatusCode.UNAUTHENTICATED  # the pod demands the token...
    await env.patch(spec={"store": {**SMALL, "fileReservedTime": 7}})
    admin = Client(env.cluster.containers["orders-0"].address, admin_token="t0ps3cret").admin()
    await env.until(lambda: admin.config()["fileReservedTime"] == "7", what="the push with the token")  # ...the operator has it


async def test_service_annotations_taken_out_of_the_spec_leave_the_service(env):
    """spec.access.serviceAnnotations are added to the client Service, and one removed from the
    spec is removed from it; annotations put there by others (a cloud controller) stay."""
    await env.create(replicas=1, store=SMALL, access={"serviceAnnotations": {"lb.io/internal": "true", "lb.io/tier": "gold"}})

    def annotations() -> dict:
        return ((env.obj(SVC, "orders") or {}).get("metadata") or {}).get("annotations") or {}

    await env.until(lambda: annotations().get("lb.io/tier") == "gold", what="the annotations on the Service")
    svc = env.obj(SVC, "orders")
    await asyncio.to_thread(
        kubemod.connect(host=env.url).patch,
        "Service",
        svc["metadata"]["namespace"],
        "orders",
        {"metadata": {"annotations": {"cloud.io/id": "x"}}},
    )
    await env.patch(spec={"access": {"serviceAnnotations": {"lb.io/internal": "true", "lb.io/tier": None}}})
    await env.until(lambda: "lb.io/tier" not in annotations(), what="the removed annotation gone from the Service")
    assert annotations()["lb.io/internal"] == "true" and annotations()["cloud.io/id"] == "x"

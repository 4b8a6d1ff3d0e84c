"""The web console (issue 34) in a real browser: headless Chromium (Debian's, through
chromedriver and selenium) drives ``msgstore console`` against a real three-member SYNC replica
group that checks its callers, while a producer keeps sending.

Pages render, the lag plot moves under load, a search by key finds a message and shows its body,
a dead letter is resent (after a confirmation) and is then on its topic again, a timed message
is recalled, a user without the right is refused by the store, and a browser that has not
signed in sees nothing but the sign-in page. Each page's screenshot is kept under
``test-artifacts/console/`` (MSGSTORE_ARTIFACTS moves it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from msgstore.client import Client, OutMessage
from msgstore.record.recall_handle import RecallHandle
from tests.ha.conftest import Group
from tests.support.servers import ROOT, free_port, wait_until

selenium = pytest.importorskip("selenium", reason="selenium is in the dev extra (make install)")
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

ADMIN = "console-test-admin-token"
OPS = ("ops", "ops-secret-0001")
VIEWER = ("viewer", "viewer-secret-01")
ARTIFACTS = os.path.join(os.environ.get("MSGSTORE_ARTIFACTS", os.path.join(ROOT, "test-artifacts")), "console")
CHROMEDRIVER = shutil.which("chromedriver")

pytestmark = pytest.mark.skipif(
    CHROMEDRIVER is None or shutil.which("chromium") is None,
    reason="no chromium/chromedriver: install Debian's chromium and chromium-driver (scripts/install_test_tools.sh)",
)


class Console:
    def __init__(self, servers: list[str], workdir: str):
        self.port = free_port()
        token = os.path.join(workdir, "console-admin-token")
        with open(token, "w") as f:
            f.write(ADMIN)
        self.log = open(os.path.join(workdir, "console.log"), "wb")
        cmd = [sys.executable, "-m", "msgstore.cli", "console", "--server", ",".join(servers), "--port", str(self.port)]
        cmd += ["--admin-token-file", token, "--sample-interval", "0.5"]
        self.proc = subprocess.Popen(
            cmd, stdout=self.log, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "server"))
        )
        wait_until(self._up, timeout=30, what="the console to listen")

    def _up(self) -> bool:
        assert self.proc.poll() is None, "the console exited: see console.log"
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as r:
                return r.read() == b"ok"
        except OSError:
            return False

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def browser(tmp: str) -> webdriver.Chrome:
    """Chromium with its temporary files (a singleton socket's directory per start) under
    ``tmp``, which the caller removes: in the system's /tmp every run left one behind. (A
    short path: the socket's must fit a sockaddr_un, which pytest's tmp_path does not.)"""
    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium") or ""
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1400,1000"):
        opts.add_argument(arg)
    service = Service(CHROMEDRIVER, env={**os.environ, "TMPDIR": tmp})
    driver = webdriver.Chrome(service=service, options=opts)
    driver.set_page_load_timeout(60)
    return driver


def shot(driver: webdriver.Chrome, name: str) -> None:
    os.makedirs(ARTIFACTS, exist_ok=True)
    assert driver.save_screenshot(os.path.join(ARTIFACTS, f"{name}.png"))


def sign_in(driver: webdriver.Chrome, console: Console, who: tuple[str, str]) -> None:
    driver.get(console.url("/login"))
    driver.find_element(By.ID, "access_key").send_keys(who[0])
    driver.find_element(By.ID, "secret_key").send_keys(who[1])
    driver.find_element(By.ID, "sign-in").click()
    wait_until(
        lambda: driver.find_elements(By.ID, "user") and driver.find_element(By.ID, "user").text == who[0],
        timeout=20,
        what=f"{who[0]} signed in",
    )


def confirm_and_submit(driver: webdriver.Chrome, button) -> str:
    """Click a write action's button, accept its confirmation dialog; the dialog's question."""
    button.click()
    alert = driver.switch_to.alert
    question = alert.text
    alert.accept()
    return question


def shown(driver: webdriver.Chrome, by: str, value: str):
    """The element once the page that has it is there: a click that submits a form or follows a
    link returns before the next page has loaded (under load, a search on the replicated store
    was not answered by the time the result was looked for)."""
    wait_until(lambda: driver.find_elements(by, value), timeout=30, what=f"{value} on the page")
    return driver.find_element(by, value)


def flash(driver: webdriver.Chrome) -> str:
    wait_until(lambda: driver.find_elements(By.CSS_SELECTOR, ".flash"), timeout=20, what="the action's outcome")
    return " ".join(e.text for e in driver.find_elements(By.CSS_SELECTOR, ".flash"))


@pytest.fixture
def store(tmp_path):
    """Three members, SYNC, checking callers; users ops (everything) and viewer (reads only)."""
    (tmp_path / "admin").write_text(ADMIN)
    settings = ["authorizationEnabled=true"]
    g = Group(tmp_path, 3, [*settings, "brokerRole=SYNC_MASTER", "inSyncReplicas=2", "messageIndexEnable=true"], settings)
    for m in g.members:
        m.extra += ["--admin-token-file", str(tmp_path / "admin")]
    g.start(admin_token=ADMIN)
    with Client([m.address for m in g.members], admin_token=ADMIN, timeout=10) as admin:
        everything = [
            {"resource": "topic:*", "actions": ["all"]},
            {"resource": "group:*", "actions": ["all"]},
            {"resource": "cluster:*", "actions": ["all"]},
        ]
        admin.put_user(*OPS, entries=everything)
        reads = [
            {"resource": "topic:*", "actions": ["sub", "get"]},
            {"resource": "group:*", "actions": ["sub", "get"]},
            {"resource": "cluster:*", "actions": ["get"]},
        ]
        admin.put_user(*VIEWER, entries=reads)
    yield g
    g.kill_all()


def test_the_console_in_a_browser_against_a_replicated_store_under_load(store, tmp_path):
    addresses = [m.address for m in store.members]
    ops = Client(addresses, access_key=OPS[0], secret_key=OPS[1], timeout=10)
    stop = threading.Event()
    sent = [0]

    def produce() -> None:  # bounded: ~400 msg/s until the test ends
        with Client(addresses, access_key=OPS[0], secret_key=OPS[1], timeout=10) as c:
            while not stop.is_set():
                if c.send_batch("orders", [OutMessage(b'{"n": %d}' % (sent[0] + i)) for i in range(20)]).all_ok:
                    sent[0] += 20
                stop.wait(0.05)

    console = None
    driver = None
    chromium_tmp = tempfile.mkdtemp(prefix="msgstore-chromium-")
    producer = threading.Thread(target=produce, daemon=True)
    try:
        ops.create_topic("orders", 4)
        ops.create_topic("payments", 1)
        queues = ops.route("orders").queues
        ops.commit("billing", "orders", queues[0], 0)  # a group that consumes nothing: its lag grows with the load
        ops.send("orders", json.dumps({"order": 4711, "status": "paid"}), key="order-4711")
        # two dead letters of group audit, and a timed message due in an hour
        ops.update_group("audit", max_deliveries=1)
        for k in ("dlq-first", "dlq-second"):
            ops.send("payments", f"dead letter {k}", key=k)
        got: list = []
        wait_until(lambda: got.extend(ops.receive("audit", "payments", 2)) or len(got) >= 2, timeout=20, what="two deliveries")
        for r in got:
            ops.nack("audit", "payments", r)
        wait_until(lambda: "%DLQ%audit" in ops.topics(), timeout=30, what="the DLQ")
        timed = ops.send("payments", "later", key="timed-1", deliver_at=time.time() + 3600)
        producer.start()

        console = Console(addresses, str(tmp_path))
        driver = browser(chromium_tmp)

        # nothing without signing in: the store checks its callers
        driver.get(console.url("/groups"))
        assert "/login" in driver.current_url
        shot(driver, "01-sign-in")
        driver.find_element(By.ID, "access_key").send_keys(OPS[0])
        driver.find_element(By.ID, "secret_key").send_keys("not-the-secret")
        driver.find_element(By.ID, "sign-in").click()
        assert "UNAUTHENTICATED" in shown(driver, By.ID, "error").text

        sign_in(driver, console, OPS)
        # the cluster: one group of three, its master, epoch and in-sync set
        driver.get(console.url("/"))
        assert "Healthy" in driver.find_element(By.ID, "health").text
        rows = driver.find_elements(By.CSS_SELECTOR, "table#groups tbody tr")
        assert len(rows) == 3
        text = driver.find_element(By.ID, "groups").text
        assert store.members[0].name in text and "MASTER" in text and text.count("SLAVE") == 2
        assert ", ".join(m.name for m in store.members) in text  # the in-sync set (ops may read the cluster)
        shot(driver, "02-cluster")

        driver.get(console.url("/topics"))
        assert "orders" in driver.find_element(By.ID, "topics").text
        shot(driver, "03-topics")
        driver.get(console.url("/topics/orders"))
        assert len(driver.find_elements(By.CSS_SELECTOR, "table#queues tbody tr")) == 4
        assert "MiB held" in driver.find_element(By.ID, "size").text
        assert "older than 72 h" in driver.find_element(By.ID, "retention").text  # the store's fileReservedTime
        shot(driver, "04-topic")

        # the lag plot moves: billing's lag sampled over time, growing with the producer
        driver.get(console.url("/groups/billing"))

        def plotted() -> list:
            return driver.execute_script("return window.msgstorePlots['lag:billing'] || []") or []

        wait_until(lambda: len(plotted()) >= 4, timeout=30, what="four samples of billing's lag in the plot")
        first = plotted()
        wait_until(lambda: plotted()[-1][1] > first[-1][1], timeout=30, what="billing's lag to grow in the plot")
        assert driver.find_elements(By.CSS_SELECTOR, "#plot canvas"), "uPlot drew the plot"
        shot(driver, "05-group-lag")

        # search by key, then the message with its body as JSON
        driver.get(console.url("/messages"))
        form = driver.find_element(By.ID, "by-key")
        form.find_element(By.NAME, "topic").send_keys("orders")
        form.find_element(By.NAME, "key").send_keys("order-4711")
        form.find_element(By.TAG_NAME, "button").click()
        assert shown(driver, By.ID, "result-count").text.startswith("1 message")
        shot(driver, "06-search-by-key")
        driver.find_element(By.CSS_SELECTOR, "table#results a.open").click()
        shown(driver, By.LINK_TEXT, "json").click()
        wait_until(lambda: "form=json" in driver.current_url, timeout=30, what="the message as JSON")
        body = shown(driver, By.ID, "body").text
        assert json.loads(body) == {"order": 4711, "status": "paid"}
        assert "order-4711" in driver.find_element(By.ID, "fields").text
        shot(driver, "07-message")

        # a dead letter resent after confirming; it is on its topic again
        driver.get(console.url("/groups/audit"))
        letters = driver.find_element(By.ID, "dead-letters").text
        assert "dead letter dlq-first" in letters and "dead letter dlq-second" in letters
        question = confirm_and_submit(driver, driver.find_element(By.CSS_SELECTOR, "button.resend"))
        assert "Resend dead letter 0 to payments" in question
        assert "resent to payments" in flash(driver)
        shot(driver, "08-dead-letter-resent")
        # the original and the resent copy (an ack means stored: its index entry may come a moment later)
        again = wait_until(
            lambda: (lambda a: a if len(a) == 2 else None)(ops.query("payments", "dlq-first")), timeout=10, what="both copies"
        )
        resent = max((m for _n, m in again), key=lambda m: m.queue_offset)
        fresh = ops.receive("audit-replay", "payments", 32)  # a new group consumes it
        assert b"dead letter dlq-first" in [bytes(r.body) for r in fresh]
        assert resent.body == b"dead letter dlq-first"

        # a timed message's due time, and its recall
        driver.get(console.url("/scheduled"))
        table = driver.find_element(By.ID, "scheduled").text
        assert "timed-1" in table
        due_ms = int(driver.find_element(By.CSS_SELECTOR, "form input[name=due_ms]").get_attribute("value"))
        confirm_and_submit(driver, driver.find_element(By.CSS_SELECTOR, "button.recall"))
        assert "recalled" in flash(driver)
        # the console's recall named the very message the store's own handle names
        assert RecallHandle.decode(timed.recall_handle) == RecallHandle("payments", due_ms, timed.message_id, store.name)
        assert "timed-1" not in (driver.find_elements(By.ID, "scheduled") or [driver.find_element(By.TAG_NAME, "main")])[0].text
        shot(driver, "09-recalled")

        # topic and group changes, each after a confirmation
        driver.get(console.url("/topics/payments"))
        form = driver.find_element(By.ID, "change-topic")
        form.find_element(By.NAME, "queues").clear()
        form.find_element(By.NAME, "queues").send_keys("2")
        assert "Change topic payments" in confirm_and_submit(driver, form.find_element(By.TAG_NAME, "button"))
        assert "topic payments: 2 queues" in flash(driver)
        assert len(ops.route("payments", refresh=True).queues) == 2
        driver.get(console.url("/groups/audit"))
        form = driver.find_element(By.ID, "group-settings")
        form.find_element(By.NAME, "max_deliveries").clear()
        form.find_element(By.NAME, "max_deliveries").send_keys("3")
        confirm_and_submit(driver, form.find_element(By.TAG_NAME, "button"))
        assert "at most 3 deliveries" in flash(driver)
        (audit,) = [g for _n, g in ops.describe_groups("audit") if g.name == "audit"]
        assert audit.policy.max_deliveries == 3
        # a FIFO group keeps its order when only its deliveries change
        ops.update_group("ordered", fifo=True)
        ops.commit("ordered", "orders", queues[0], 0)
        driver.get(console.url("/groups/ordered"))
        form = driver.find_element(By.ID, "group-settings")
        form.find_element(By.NAME, "max_deliveries").clear()
        form.find_element(By.NAME, "max_deliveries").send_keys("4")
        confirm_and_submit(driver, form.find_element(By.TAG_NAME, "button"))
        assert "order kept, at most 4 deliveries" in flash(driver)
        (ordered,) = [g for _n, g in ops.describe_groups("ordered") if g.name == "ordered"]
        assert ordered.policy.fifo and ordered.policy.max_deliveries == 4

        # a user who may not publish is refused by the store; nothing is resent
        driver.find_element(By.CSS_SELECTOR, "nav form button").click()
        sign_in(driver, console, VIEWER)
        driver.get(console.url("/groups/audit"))
        confirm_and_submit(driver, driver.find_element(By.CSS_SELECTOR, "button.resend"))
        refused = flash(driver)
        assert "refused" in refused and "PERMISSION_DENIED" in refused, refused
        shot(driver, "10-forbidden")
        form = driver.find_element(By.ID, "group-settings")  # nor may the viewer change the group
        form.find_element(By.NAME, "max_deliveries").clear()
        form.find_element(By.NAME, "max_deliveries").send_keys("5")
        confirm_and_submit(driver, form.find_element(By.TAG_NAME, "button"))
        assert "group change refused: PERMISSION_DENIED" in flash(driver)
        (audit,) = [g for _n, g in ops.describe_groups("audit") if g.name == "audit"]
        assert audit.policy.max_deliveries == 3
        assert len(ops.query("payments", "dlq-second")) == 1
        # declining the dialog sends nothing (an action taken would leave its outcome for the next page)
        driver.get(console.url("/groups/audit"))
        driver.find_element(By.CSS_SELECTOR, "button.resend").click()
        driver.switch_to.alert.dismiss()
        driver.get(console.url("/groups/audit"))
        assert not driver.find_elements(By.CSS_SELECTOR, ".flash")
        assert "dead letter dlq-second" in driver.find_element(By.ID, "dead-letters").text
        assert sent[0] > 0
    finally:
        stop.set()
        if producer.is_alive():
            producer.join(10)
        if driver is not None:
            driver.quit()
        shutil.rmtree(chromium_tmp, ignore_errors=True)
        if console is not None:
            console.stop()
        ops.close()

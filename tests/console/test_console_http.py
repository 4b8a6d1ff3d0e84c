"""The console's gates, over plain HTTP against real stores (no browser needed for these):
who gets a session, what a stale or unconfirmed form does, where signing in may send the
browser, what a store that is down or a name that is no topic does to a page."""

from __future__ import annotations

import html
import http.cookiejar
import os
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request

import pytest

from msgstore.client import Client, OutMessage
from msgstore.console.app import safe_next
from tests.support.servers import ROOT, ServerProcess, free_port, wait_until

ADMIN = "console-http-admin"
READER = ("reader", "reader-secret-001")  # may read topic orders and group g, not the cluster
OTHER = ("other", "other-secret-0001")


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *a, **kw):
        return None


class Browser:
    """A cookie jar and no automatic redirects: each answer as the console gave it."""

    def __init__(self, port: int):
        self.base = f"http://127.0.0.1:{port}"
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar), NoRedirect)

    def call(self, path: str, form: dict | None = None) -> tuple[int, str, str]:
        """(status, body, Location)."""
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        try:
            with self.opener.open(self.base + path, data=data, timeout=30) as r:
                return r.status, html.unescape(r.read().decode()), r.headers.get("Location", "")
        except urllib.error.HTTPError as e:
            return e.code, html.unescape(e.read().decode()), e.headers.get("Location", "")
        except urllib.error.URLError:  # not listening (yet)
            return 0, "", ""

    def token(self, body: str, name: str = "csrf") -> str:
        m = re.search(rf'name="{name}" value="([^"]+)"', body)
        assert m, f"no {name} in the page"
        return m.group(1)

    def sign_in(self, who: tuple[str, str], nxt: str = "/") -> tuple[int, str, str]:
        _, page, _ = self.call("/login?next=" + urllib.parse.quote(nxt, safe=""))
        return self.call(
            "/login", {"access_key": who[0], "secret_key": who[1], "next": nxt, "login_token": self.token(page, "login_token")}
        )


def console(address: str, tmp_path, *extra: str) -> subprocess.Popen:
    port = free_port()
    log = open(tmp_path / f"console-{port}.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "msgstore.cli", "console", "--server", address, "--port", str(port), *extra],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "server")),
    )
    proc.port = port  # type: ignore[attr-defined]
    wait_until(lambda: Browser(port).call("/healthz")[1] == "ok", 30, what="the console")
    return proc


@pytest.fixture
def open_store(tmp_path):
    node = ServerProcess(str(tmp_path / "open"), name="open").start()
    with Client(node.address, timeout=10) as c:
        c.create_topic("orders", 2)
        c.send_batch("orders", [OutMessage(b"one", key="k1")])
    proc = console(node.address, tmp_path)
    yield node, proc
    proc.kill()
    node.kill()


@pytest.fixture
def checked_store(tmp_path):
    (tmp_path / "admin").write_text(ADMIN)
    node = ServerProcess(
        str(tmp_path / "checked"),
        name="checked",
        settings=["authorizationEnabled=true"],
        args=["--admin-token-file", str(tmp_path / "admin")],
    ).start()
    with Client(node.address, admin_token=ADMIN, timeout=10) as c:
        c.put_user(
            *READER, entries=[{"resource": "topic:orders", "actions": ["sub", "get"]}, {"resource": "group:g", "actions": ["sub", "get"]}]
        )
        c.put_user(*OTHER, entries=[{"resource": "group:g", "actions": ["get"]}])
        c.create_topic("orders", 2)
    proc = console(node.address, tmp_path, "--admin-token-file", str(tmp_path / "admin"))
    yield node, proc
    proc.kill()
    node.kill()


def test_an_open_store_needs_no_sign_in_and_cookieless_requests_cost_no_connections(open_store):
    node, proc = open_store
    b = Browser(proc.port)
    status, page, _ = b.call("/")
    assert status == 200 and "anonymous" in page and "Healthy" in page
    assert [c.name for c in b.jar] == ["msgstore_console"]
    # a probe keeping no cookie: a page each time, and the console keeps serving
    for _ in range(30):
        assert Browser(proc.port).call("/topics")[0] == 200
    # a POST that makes a session still hands its cookie out (with the redirect)
    fresh = Browser(proc.port)
    status, _, where = fresh.call("/groups/g/resend", {"csrf": "x", "confirm": "yes", "node": "open", "offset": "0"})
    assert status == 302 and where == "/groups/g" and [c.name for c in fresh.jar] == ["msgstore_console"]
    # and it said why nothing was done: the form did not come from its session
    assert "the form is stale" in fresh.call("/groups/g")[1]


def test_forms_need_the_sessions_token_and_a_confirmation(open_store):
    node, proc = open_store
    b = Browser(proc.port)
    _, page, _ = b.call("/topics")
    csrf = b.token(page)
    b.call("/topics", {"csrf": csrf, "topic": "made", "queues": "2", "perm": "6", "message_type": ""})  # no confirm
    assert "nothing changed: not confirmed" in b.call("/topics")[1]
    b.call("/topics", {"csrf": "forged", "confirm": "yes", "topic": "made", "queues": "2", "perm": "6", "message_type": ""})
    assert "the form is stale" in b.call("/topics")[1]
    with Client(node.address, timeout=10) as c:
        assert "made" not in c.topics()
    status, _, where = b.call("/topics", {"csrf": csrf, "confirm": "yes", "topic": "made", "queues": "2", "perm": "6", "message_type": ""})
    assert (status, where) == (302, "/topics/made")
    with Client(node.address, timeout=10) as c:
        assert "made" in c.topics()
    # queues only grow from the console
    b.call("/topics", {"csrf": csrf, "confirm": "yes", "topic": "made", "queues": "1", "perm": "0", "message_type": ""})
    assert "they only grow here" in b.call("/topics")[1]
    # a name that is no topic, and an odd one, are pages that say so, not errors
    assert b.call("/topics/no-such-topic")[0] == 200
    assert b.call("/topics/" + urllib.parse.quote("a b%41", safe=""))[0] == 200
    # a tampered number is a message, not a crash
    b.call("/scheduled/recall", {"csrf": csrf, "confirm": "yes", "topic": "orders", "due_ms": "soon", "uniq_key": "u", "group": "open"})
    assert "due_ms: 'soon' is not a whole number" in b.call("/scheduled")[1]
    # signing out needs the token too
    status, _, where = b.call("/logout", {"csrf": "forged"})
    assert (status, where) == (302, "/") and "not signed out" in b.call("/")[1]


def test_a_checking_store_signs_people_in_and_hides_what_the_admin_token_reads_from_those_who_may_not(checked_store):
    node, proc = checked_store
    b = Browser(proc.port)
    status, _, where = b.call("/groups/g")
    assert status == 302 and where.startswith("/login?next=")
    # a sign-in posted without the form's token (another site's form) is refused
    status, page, _ = b.call("/login", {"access_key": READER[0], "secret_key": READER[1], "next": "/"})
    assert status == 400 and "the sign-in form is stale" in page
    status, page, _ = b.sign_in((READER[0], "wrong"))
    assert status == 401 and "UNAUTHENTICATED" in page
    # signing in never sends the browser to another site
    status, _, where = b.sign_in(READER, nxt="/\\evil.example")
    assert (status, where) == (302, "/")
    page = b.call("/")[1]
    assert "signed in as" in page and "reader" in page
    # the reader may not read the cluster: nothing the admin token read is shown to them
    assert "needs cluster get" in page and "<th>State</th>" not in page
    assert 'id="retention"' not in b.call("/topics/orders")[1]
    assert "PERMISSION_DENIED" in b.call("/groups")[1]  # every group: the store says no, the page says so
    assert b.call("/groups/g")[0] == 200
    # signing in again ends the session before: its cookie opens nothing any more
    (old,) = [c.value for c in b.jar if c.name == "msgstore_console"]
    assert b.sign_in(READER)[0] == 302
    stale = Browser(proc.port)
    stale.opener.addheaders = [("Cookie", f"msgstore_console={old}")]
    status, _, where = stale.call("/groups/g")
    assert status == 302 and where.startswith("/login")
    # one user signing in again and again pushes out only their own sessions, never another's
    someone_else, first = Browser(proc.port), Browser(proc.port)
    assert someone_else.sign_in(OTHER)[0] == 302 and first.sign_in(READER)[0] == 302
    for _ in range(12):
        assert Browser(proc.port).sign_in(READER)[0] == 302
    assert first.call("/groups/g")[0] == 302  # the reader's oldest went
    assert someone_else.call("/groups/g")[0] == 200


@pytest.mark.parametrize(
    "target, expected",
    [
        ("/groups/g?x=1", "/groups/g?x=1"),
        ("//evil.example", "/"),
        ("/\\evil.example", "/"),
        ("/\t/evil.example", "/"),
        ("https://evil.example/", "/"),
        ("groups", "/"),
        ("", "/"),
    ],
)
def test_after_signing_in_the_browser_stays_on_the_console(target, expected):
    assert safe_next(target) == expected


def test_a_store_that_is_down_sends_the_browser_to_sign_in_rather_than_failing(tmp_path):
    proc = console(f"127.0.0.1:{free_port()}", tmp_path)  # nothing listens there
    try:
        status, _, where = Browser(proc.port).call("/topics")
        assert status == 302 and where.startswith("/login")
        status, page, _ = Browser(proc.port).sign_in(READER)
        assert status == 401 and "UNAVAILABLE" in page
    finally:
        proc.kill()

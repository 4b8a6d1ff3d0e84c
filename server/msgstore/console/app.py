"""The console's web application: routes over :mod:`views`, one session per browser.

Every store call runs in a thread (our Client is synchronous), as the session's user. Write
actions (resend a dead letter, recall a timed message) are POSTs carrying the session's token
and a confirmation the page's dialog sets; the store decides whether the user may.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import secrets
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jinja2
from aiohttp import web

from ..client import StoreError
from . import kube, views
from .session import COOKIE, Session, Sessions, series_name

log = logging.getLogger(__name__)

HERE = os.path.dirname(os.path.abspath(__file__))
SESSION = web.AppKey("sessions", Sessions)
OPTIONS = web.AppKey("options", dict)
TEMPLATES = web.AppKey("templates", jinja2.Environment)
REAPER = web.AppKey("reaper", asyncio.Task)


def when(ms: int) -> str:
    if not ms:
        return ""
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def ago(ms: int) -> str:
    if not ms:
        return ""
    s = max(0, time.time() - ms / 1000)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s / size:.1f}{unit} ago"
    return f"{s:.0f}s ago"


def templates() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(HERE, "templates")), autoescape=True)
    env.filters["when"] = when
    env.filters["ago"] = ago
    return env


def make_app(make_client, *, admin: bool = False, kubernetes: str = "", sample_interval: float = 5.0) -> web.Application:
    """``make_client(access_key, secret_key)`` builds a Client for the store; ``admin``: that
    client carries an admin token (the cluster page then shows in-sync sets, arbiters and each
    member's status); ``kubernetes``: NAMESPACE/NAME of the MessageStore whose conditions and
    events the console shows."""
    app = web.Application(middlewares=[_session_middleware])
    app[SESSION] = Sessions(make_client, sample_interval, admin=admin)
    app[OPTIONS] = {"admin": admin, "kubernetes": kubernetes}
    app[TEMPLATES] = templates()
    r = app.router
    r.add_get("/healthz", healthz)
    r.add_get("/favicon.ico", favicon)
    r.add_get("/login", login_page)
    r.add_post("/login", login)
    r.add_post("/logout", logout)
    r.add_get("/", overview)
    r.add_get("/topics", topics_page)
    r.add_post("/topics", topic_change)
    r.add_get("/topics/{name}", topic_page)
    r.add_get("/groups", groups_page)
    r.add_get("/groups/{name}", group_page)
    r.add_post("/groups/{name}/resend", resend)
    r.add_post("/groups/{name}/settings", group_change)
    r.add_get("/messages", messages_page)
    r.add_get("/messages/view", message_page)
    r.add_get("/scheduled", scheduled_page)
    r.add_post("/scheduled/recall", recall)
    r.add_get("/kubernetes", kubernetes_page)
    r.add_get("/api/series", series)
    r.add_static("/static", os.path.join(HERE, "static"))

    async def starting(app: web.Application) -> None:
        # every store call runs in a thread: pages, plots' samplers and sign-ins share this pool,
        # sized so that a slow node (calls waiting out their deadline) does not stall the rest
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=32, thread_name_prefix="console"))
        app[REAPER] = asyncio.ensure_future(app[SESSION].reap())

    async def closing(app: web.Application) -> None:
        app[REAPER].cancel()
        app[SESSION].close_all()

    app.on_startup.append(starting)
    app.on_cleanup.append(closing)
    return app


OPEN_PATHS = ("/login", "/healthz", "/static/", "/favicon.ico")
LOGIN_COOKIE = "msgstore_console_login"  # the sign-in form's token (double submit: no session yet to hold it)


@web.middleware
async def _session_middleware(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    """Find the browser's session, or make an anonymous one when the store is open, or send
    the browser to sign in."""
    if request.path.startswith(OPEN_PATHS):
        return await handler(request)
    sessions = request.app[SESSION]
    s = sessions.get(request.cookies.get(COOKIE))
    fresh = None
    if s is None:
        if not await sessions.store_is_open():
            back = request.path_qs if request.method == "GET" else "/"  # (a form's POST cannot be gone back to)
            raise web.HTTPFound("/login?next=" + urllib.parse.quote(back, safe=""))
        s = fresh = sessions.anonymous()
    else:
        s.fresh = False
    request["session"] = s
    try:
        response = await handler(request)
    except web.HTTPException as e:  # a redirect after an action: the new session's cookie goes with it
        if fresh is not None:
            _set_cookie(e, fresh)
        raise
    if fresh is not None:
        _set_cookie(response, fresh)
    return response


def _set_cookie(response: web.StreamResponse, s: Session) -> None:
    # Lax, not Strict: a link to the console from elsewhere must find the session (a Strict
    # cookie stays behind and the browser looks signed out); POSTs carry the session's token
    response.set_cookie(COOKIE, s.id, httponly=True, samesite="Lax", path="/")


def safe_next(text: str) -> str:
    """Where to go after signing in: a path of this console only (``/\\evil.example`` and
    ``//evil.example`` are other sites to a browser)."""
    parts = urllib.parse.urlsplit(text)
    if (
        parts.scheme
        or parts.netloc
        or not text.startswith("/")
        or text.startswith("//")
        or "\\" in text
        or any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in text)
    ):
        return "/"
    return text


def _to(path: str, name: str) -> str:
    return path + urllib.parse.quote(name, safe="")


def render(request: web.Request, template: str, status: int = 200, **context: Any) -> web.Response:
    s: Session | None = request.get("session")
    flash = list(s.flash) if s is not None else []
    if s is not None:
        s.flash.clear()
    page = (
        request.app[TEMPLATES]
        .get_template(template)
        .render(session=s, flash=flash, options=request.app[OPTIONS], path=request.path, **context)
    )
    return web.Response(text=page, content_type="text/html", status=status)


async def call(fn, *args):
    """A store call off the loop; a refusal comes back as (None, the store's words)."""
    try:
        return await asyncio.to_thread(fn, *args), ""
    except (StoreError, ValueError, LookupError, RuntimeError) as e:
        return None, views.refusal(e)
    except Exception as e:  # our bug: the page says so instead of failing whole, and the log has it
        log.exception("console: %s failed", getattr(fn, "__name__", fn))
        return None, f"the console failed: {type(e).__name__}: {e}"


def _checked_form(request: web.Request, form) -> str:
    """Why a write action's form is not acted on ('' when it is): the session's token, and the
    confirmation its dialog sets."""
    s: Session = request["session"]
    if form.get("csrf") != s.csrf:
        return "the form is stale (reload the page)"
    if form.get("confirm") != "yes":
        return "not confirmed"
    return ""


# ---------------------------------------------------------------------------------------------- pages


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def favicon(request: web.Request) -> web.Response:
    return web.Response(status=204)  # (none; asked by every browser, it must not go through sign-in)


def _login_form(request: web.Request, status: int = 200, error: str = "", nxt: str = "/") -> web.Response:
    # the token this browser already holds, if any: a second sign-in page in another tab (or a
    # request the browser makes by itself) must not void the form on screen
    token = request.cookies.get(LOGIN_COOKIE) or secrets.token_urlsafe(24)
    response = render(request, "login.html", status=status, next=safe_next(nxt), error=error, login_token=token)
    response.set_cookie(LOGIN_COOKIE, token, httponly=True, samesite="Strict", path="/login")
    return response


async def login_page(request: web.Request) -> web.Response:
    return _login_form(request, nxt=request.query.get("next", "/"))


async def login(request: web.Request) -> web.Response:
    form = await request.post()
    access_key = str(form.get("access_key", "")).strip()
    secret_key = str(form.get("secret_key", ""))
    nxt = safe_next(str(form.get("next", "/")))
    token = request.cookies.get(LOGIN_COOKIE, "")
    if not token or form.get("login_token") != token:  # another site posting its own keys into this browser
        return _login_form(request, 400, "the sign-in form is stale: sign in again", nxt)
    if not access_key or not secret_key:
        return _login_form(request, 400, "access key and secret key are both needed", nxt)
    try:
        s = await request.app[SESSION].sign_in(access_key, secret_key)
    except StoreError as e:
        return _login_form(request, 401, views.refusal(e), nxt)
    previous = request.app[SESSION].get(request.cookies.get(COOKIE))
    if previous is not None:  # signing in as someone else ends the session before
        request.app[SESSION].end(previous)
    response = web.HTTPFound(nxt)
    _set_cookie(response, s)
    response.del_cookie(LOGIN_COOKIE, path="/login")
    raise response


async def logout(request: web.Request) -> web.Response:
    s: Session = request["session"]
    form = await request.post()
    if form.get("csrf") != s.csrf:
        s.flash.append(("error", "not signed out: the form is stale (reload the page)"))
        raise web.HTTPFound("/")
    request.app[SESSION].end(s)
    response = web.HTTPFound("/login")
    response.del_cookie(COOKIE, path="/")
    raise response


async def overview(request: web.Request) -> web.Response:
    s: Session = request["session"]
    data, error = await call(views.cluster, s.client, request.app[SESSION].admin_client if s.cluster_reader else None)
    k8s = None
    if request.app[OPTIONS]["kubernetes"]:
        k8s, _ = await call(kube.store_state, request.app[OPTIONS]["kubernetes"])
    return render(request, "overview.html", cluster=data, error=error, k8s=k8s)


async def topics_page(request: web.Request) -> web.Response:
    s: Session = request["session"]
    rows, error = await call(views.topics, s.client)
    return render(request, "topics.html", rows=rows or [], error=error, perms=views.PERMS, types=views.MESSAGE_TYPES)


async def topic_page(request: web.Request) -> web.Response:
    s: Session = request["session"]
    name = request.match_info["name"]
    request.app[SESSION].watch(s, "topic", name, s.fresh)
    data, error = await call(views.topic, s.client, name, request.app[SESSION].admin_client if s.cluster_reader else None)
    return render(
        request,
        "topic.html",
        name=name,
        topic=data,
        error=error,
        series=series_name("topic", name),
        perms=views.PERMS,
        types=views.MESSAGE_TYPES,
    )


def _int(form, name: str) -> int:
    text = str(form.get(name, "") or "0").strip()
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}: {text!r} is not a whole number") from None


async def topic_change(request: web.Request) -> web.Response:
    """Create a topic or change one (queues, permission, message type): the store's CreateTopic,
    refused as the store refuses the user."""
    s: Session = request["session"]
    form = await request.post()
    name = str(form.get("topic", "")).strip()
    why = _checked_form(request, form)
    if why:
        s.flash.append(("error", f"nothing changed: {why}"))
    else:
        try:
            args = (name, _int(form, "queues"), _int(form, "perm"), str(form.get("message_type", "")))
            done, error = await call(views.change_topic, s.client, *args)
        except ValueError as e:
            done, error = None, str(e)
        s.flash.append(("error", f"topic change refused: {error}") if error else ("ok", done))
    raise web.HTTPFound(_to("/topics/", name) if name and s.flash[-1][0] != "error" else "/topics")


async def group_change(request: web.Request) -> web.Response:
    s: Session = request["session"]
    name = request.match_info["name"]
    form = await request.post()
    why = _checked_form(request, form)
    if why:
        s.flash.append(("error", f"nothing changed: {why}"))
    else:
        fifo = {"on": True, "off": False}.get(str(form.get("fifo", "keep")))  # keep: left as it is (None)
        try:
            done, error = await call(views.change_group, s.client, name, _int(form, "max_deliveries"), fifo)
        except ValueError as e:
            done, error = None, str(e)
        s.flash.append(("error", f"group change refused: {error}") if error else ("ok", done))
    raise web.HTTPFound(_to("/groups/", name))


async def groups_page(request: web.Request) -> web.Response:
    s: Session = request["session"]
    rows, error = await call(views.groups, s.client)
    return render(request, "groups.html", rows=rows or [], error=error)


async def group_page(request: web.Request) -> web.Response:
    s: Session = request["session"]
    name = request.match_info["name"]
    request.app[SESSION].watch(s, "group", name, s.fresh)
    data, error = await call(views.group, s.client, name)
    letters, letters_error = await call(views.dead_letters, s.client, name)
    return render(
        request,
        "group.html",
        name=name,
        group=data,
        error=error,
        letters=letters or [],
        letters_error=letters_error,
        series=series_name("group", name),
    )


async def resend(request: web.Request) -> web.Response:
    s: Session = request["session"]
    name = request.match_info["name"]
    form = await request.post()
    why = _checked_form(request, form)
    if why:
        s.flash.append(("error", f"nothing resent: {why}"))
    else:
        try:
            offset = int(str(form.get("offset", "")))
        except ValueError:
            offset = -1
        node = str(form.get("node", ""))
        async with _resend_lock(request, name, node):  # two clicks (or two people) must not send it twice
            done, error = await call(views.resend_dead_letter, s.client, name, node, offset)
        s.flash.append(("error", f"resend refused: {error}") if error else ("ok", f"dead letter {offset}: {done}"))
    raise web.HTTPFound(_to("/groups/", name))


def _resend_lock(request: web.Request, group: str, node: str) -> asyncio.Lock:
    locks = request.app[OPTIONS].setdefault("resend_locks", {})
    return locks.setdefault((group, node), asyncio.Lock())


async def messages_page(request: web.Request) -> web.Response:
    s: Session = request["session"]
    q = request.query
    mode = q.get("mode", "")
    found: list[views.MessageView] | None = None
    error = ""
    try:
        if mode == "key":
            found, error = await call(views.by_key, s.client, _required(q, "topic"), _required(q, "key"), _ms(q, "begin"), _ms(q, "end"))
        elif mode == "id":
            found, error = await call(views.by_id, s.client, _required(q, "msg_id"), q.get("topic", "").strip())
        elif mode == "time":
            found, error = await call(views.by_time, s.client, _required(q, "topic"), _ms(q, "begin"), _ms(q, "end"))
        elif mode == "offset":
            found, error = await call(
                views.by_offset,
                s.client,
                _required(q, "topic"),
                q.get("node", "").strip(),
                int(_required(q, "queue_id")),
                int(_required(q, "offset")),
            )
        elif mode:
            error = f"mode: {mode!r} is not a search (key, id, time, offset)"
    except ValueError as e:
        error = str(e)
    return render(request, "messages.html", q=q, mode=mode, found=found, error=error, limit=views.SEARCH_LIMIT)


def _required(q, name: str) -> str:
    value = q.get(name, "").strip()
    if not value:
        raise ValueError(f"{name}: required for this search")
    return value


def _ms(q, name: str) -> int:
    """A time field (the browser's datetime-local, in UTC) as epoch milliseconds; 0 when empty."""
    value = q.get(name, "").strip()
    if not value:
        return 0
    try:
        return int(datetime.datetime.fromisoformat(value).replace(tzinfo=datetime.UTC).timestamp() * 1000)
    except ValueError:
        raise ValueError(f"{name}: {value!r} is not a time (YYYY-MM-DDTHH:MM)") from None


async def message_page(request: web.Request) -> web.Response:
    s: Session = request["session"]
    form = request.query.get("form", "text")
    m, error = await call(views.one, s.client, request.query.get("ref", ""))
    return render(request, "message.html", m=m, error=error, form=form if form in ("text", "json", "hex") else "text")


async def scheduled_page(request: web.Request) -> web.Response:
    s: Session = request["session"]
    rows, error = await call(views.scheduled, s.client)
    return render(request, "scheduled.html", rows=rows or [], error=error)


async def recall(request: web.Request) -> web.Response:
    s: Session = request["session"]
    form = await request.post()
    why = _checked_form(request, form)
    if why:
        s.flash.append(("error", f"nothing recalled: {why}"))
    else:
        topic, uniq, group = str(form.get("topic", "")), str(form.get("uniq_key", "")), str(form.get("group", ""))
        try:
            due = _int(form, "due_ms")
            _, error = await call(views.recall, s.client, topic, due, uniq, group)
        except ValueError as e:
            error = str(e)
        s.flash.append(("error", f"recall refused: {error}") if error else ("ok", f"recalled {uniq}: it will not be delivered"))
    raise web.HTTPFound("/scheduled")


async def kubernetes_page(request: web.Request) -> web.Response:
    target = request.app[OPTIONS]["kubernetes"]
    state, error = (
        (await call(kube.store_state, target)) if target else (None, "the console was not started with --kubernetes NAMESPACE/NAME")
    )
    return render(request, "kubernetes.html", state=state, error=error, target=target)


async def series(request: web.Request) -> web.Response:
    """A plot's points: the session's own samples (``lag:GROUP`` as is, ``stored:TOPIC`` as a rate)."""
    s: Session = request["session"]
    name = request.query.get("name", "")
    if name.startswith("stored:"):
        points = s.history.rate(name)
    else:
        points = s.history.points(name)
    return web.json_response({"name": name, "points": [[round(t, 3), v] for t, v in points]})

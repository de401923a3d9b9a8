"""What keeps the local page's server to itself: it answers only the host names it listens on (a page
elsewhere that rebinds its own name to this address is refused), its API answers only its own page
(a page elsewhere cannot post to it), slow or idle clients cannot hold its connections, large images
are decoded one at a time (``DecodeLane``), and an error it answers with a 500 keeps the connection
as a 400 does (``Contained``).

Usage: ``Starlette(..., middleware=middleware(LOOPBACK, 10, 2 ** 20, on_error))``; ``server(app).run()``
"""
from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Awaitable, Callable, TypeVar

import uvicorn
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..core.errors import UserError

T = TypeVar("T")

LOOPBACK = ["127.0.0.1", "localhost", "[::1]"]
WILDCARD = ("", "0.0.0.0", "::")
HEAD_TIMEOUT = 5  # seconds to send a request line and headers, and to keep an idle connection
MAX_CONNECTIONS = 32  # open at once; a request past them gets 503
# A refused upload is read, and dropped, up to this many times the upload limit before it is answered:
# most clients send a body whole before they read the answer, and a socket closed with bytes unread
# makes the kernel reset the connection, so the client saw "connection reset", not the 413.
DISCARD = 10
# Images of more pixels than this are decoded one at a time, in a thread of their own (DecodeLane):
# 1 megapixel costs about 11 MB to decode, and 32 connections at the 25-megapixel bound 9 GB.
DECODE_ALONE = 1_000_000
DECODE_WAIT = 10.0  # seconds a large image waits for its turn, else 503


def allowed_hosts(host: str) -> list[str]:
    """The Host names a server listening on ``host`` answers: the loopback names for a loopback
    address, any name for every address (0.0.0.0, ::), else ``host`` itself."""
    if host in ("127.0.0.1", "localhost", "::1"):
        return LOOPBACK
    if host in WILDCARD:
        return ["*"]
    return [f"[{host}]" if ":" in host else host]


def middleware(hosts: list[str], body_timeout: float, max_body: int,
               on_error: Callable[[Request, Exception], Awaitable[Response]]) -> list[Middleware]:
    """Answer an exception with ``on_error``'s response, the connection kept (``Contained``); refuse
    (400) a Host not in ``hosts`` (Starlette checks the name; a browser writes the port of the
    address it reached, so ports are not checked), then requests from other sites (403), then a
    request whose body has not arrived whole within ``body_timeout`` seconds (408) or is over
    ``max_body`` bytes (413)."""
    return [Middleware(Contained, on_error=on_error),
            Middleware(TrustedHostMiddleware, allowed_hosts=hosts, www_redirect=False), Middleware(SameOrigin),
            Middleware(WholeBody, timeout=body_timeout, limit=max_body)]


class Contained:
    """Answers an exception of the app below with ``on_error``'s response (a 500 that says the log has
    the details), the connection kept for the client's next request, as after a 400. Starlette's own
    handler raises the exception again once it has answered, and uvicorn then closes the connection:
    the client's next request on it failed. An exception after the answer began still reaches the
    server, which can only close the connection then."""

    def __init__(self, app, on_error: Callable[[Request, Exception], Awaitable[Response]]):
        self.app, self.on_error = app, on_error

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def sending(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as err:  # noqa: BLE001 - answered, and logged by on_error
            if started:
                raise
            await (await self.on_error(Request(scope), err))(scope, receive, send)


class Busy(UserError):
    """The server is decoding other large images: answered 503, to be sent again."""

    status = 503


class DecodeLane:
    """Where the page decodes images: one of more than ``alone`` pixels in a thread of its own, one at
    a time, waiting at most ``wait`` seconds for its turn (else Busy: 503); a smaller one where its
    request runs. A decoded pixel costs about 11 bytes on the way to 28x28 (a 31 KB PNG of 5000x4999
    took 278 MB), so the decodes in flight hold one large image and the small ones; and the
    allocator keeps a heap per thread, so large decodes spread over the worker threads, even one at
    a time, each left its peak behind (issue 47: eight such PNGs at once took the server from 0.8
    to 3.1 GB; in one lane, to 1.2 GB)."""

    def __init__(self, alone: int = DECODE_ALONE, wait: float = DECODE_WAIT):
        self.alone, self.wait = alone, wait
        self._lane = ThreadPoolExecutor(1, thread_name_prefix="bnn_zoo_decode")

    def run(self, pixels: int, decode: Callable[[], T]) -> T:
        """``decode()``, of an image of ``pixels`` pixels, where this lane decodes it."""
        if pixels <= self.alone:
            return decode()
        job = self._lane.submit(decode)
        try:
            return job.result(timeout=self.wait)
        except FutureTimeout:
            if not job.cancel():  # its turn came meanwhile: it is decoding
                return job.result()
            raise Busy("the server is decoding other large images one at a time; send this one again in a moment, "
                       "or a smaller one") from None


class SameOrigin:
    """Refuses (403) an API request, or any request but GET and HEAD, that a browser says another site
    made: its Origin is not this server's own (the scheme and the Host it was sent to), or its
    Sec-Fetch-Site is neither same-origin nor none. Clients that send neither header are answered."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and (scope["method"] not in ("GET", "HEAD") or scope["path"].startswith("/api/")):
            headers = Headers(scope=scope)
            origin, site = headers.get("origin"), headers.get("sec-fetch-site")
            own = f"{scope['scheme']}://{headers.get('host', '')}".lower()
            if (origin is not None and origin.lower() != own) or site not in (None, "same-origin", "none"):
                sender = origin or f"Sec-Fetch-Site: {site}"
                await JSONResponse({"error": f"refused a request from another site ({sender}): "
                                             f"this server answers its own page only"}, 403)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class WholeBody:
    """Reads each request's body before the app runs and hands it on whole: it must arrive within
    ``timeout`` seconds of the head (else 408) and hold at most ``limit`` bytes (else 413, once its
    rest is read and dropped: up to DISCARD times the limit, within the timeout). Both answers close
    the connection. Checked only where a handler read its body, a stalled upload held its connection
    for as long as a handler that never reads one (an example's answer, a 404) worked."""

    def __init__(self, app, timeout: float, limit: int):
        self.app, self.timeout, self.limit = app, timeout, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        headers = Headers(scope=scope)
        declared = int(headers["content-length"]) if headers.get("content-length", "").isdigit() else 0  # 0: chunked
        # Answered at once: a client that waits for "100 Continue" before it sends, and one whose body
        # is too large to read only to drop (that one is likely to see a reset connection).
        hopeless = declared > self.limit and ("100-continue" in headers.get("expect", "").lower()
                                              or declared > self.limit * DISCARD)
        body, received, more = bytearray(), 0, not hopeless
        try:
            while more and received <= self.limit * DISCARD:
                message = await asyncio.wait_for(receive(), max(deadline - loop.time(), 0))
                if message["type"] == "http.disconnect":
                    return  # no one is left to answer
                received += len(message.get("body", b""))
                if received <= self.limit:  # past the limit the rest is dropped, never kept
                    body += message.get("body", b"")
                more = message.get("more_body", False)
        except asyncio.TimeoutError:
            if max(declared, received) <= self.limit:
                return await _refuse(408, f"the upload did not arrive within {self.timeout:g} s; send it again",
                                     scope, receive, send)
        if max(declared, received) > self.limit:
            return await _refuse(413, f"the upload is over {self.limit / 2 ** 20:g} MB ({max(declared, received):,} "
                                      "bytes or more); send a smaller image", scope, receive, send)
        whole = {"type": "http.request", "body": bytes(body), "more_body": False}

        async def replay():  # the body once, then what the server says next (the client left)
            nonlocal whole
            message, whole = whole, None
            return message or await receive()

        await self.app(scope, replay, send)


async def _refuse(status: int, message: str, scope, receive, send) -> None:
    """Answer ``status`` with ``message`` and close the connection: the body was not read whole."""
    await JSONResponse({"error": message}, status, headers={"Connection": "close"})(scope, receive, send)


class GuardedH11(H11Protocol):
    """uvicorn's h11 protocol whose keep-alive timeout also bounds each request's head: a connection
    that has not sent a whole request line and headers that many seconds after it opened, or after the
    first byte that follows an answer, is closed. uvicorn's own timer runs only between requests and
    stops at the first byte, so a client that sent half a head held the connection for ever."""

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._head_timer = self.loop.call_later(self.timeout_keep_alive, self.transport.close)

    def data_received(self, data: bytes) -> None:
        if self._head_timer is None and (self.cycle is None or self.cycle.response_complete):  # a new head
            self._head_timer = self.loop.call_later(self.timeout_keep_alive, self.transport.close)
        super().data_received(data)

    def handle_events(self) -> None:
        super().handle_events()
        if self._head_timer is not None and self.cycle is not None and not self.cycle.response_complete:
            self._head_timer.cancel()  # the head is whole: the app answers it, and bounds its body
            self._head_timer = None

    def connection_lost(self, exc) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        super().connection_lost(exc)


def server(app, head_timeout: float = HEAD_TIMEOUT, max_connections: int = MAX_CONNECTIONS) -> uvicorn.Server:
    """uvicorn serving ``app`` over GuardedH11: ``head_timeout`` seconds for each request's head and
    idle connection, ``max_connections`` open connections (a request past them gets 503 at once)."""
    return uvicorn.Server(uvicorn.Config(app, http=GuardedH11, timeout_keep_alive=head_timeout,
                                         limit_concurrency=max_connections, log_level="warning"))

"""What keeps the local page's server to itself: it answers only the host names it listens on (a page
elsewhere that rebinds its own name to this address is refused), its API answers only its own page
(a page elsewhere cannot post to it), and slow or idle clients cannot hold its connections."""
from __future__ import annotations

import asyncio

import uvicorn
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.responses import JSONResponse
from uvicorn.protocols.http.h11_impl import H11Protocol

from .errors import UserError

LOOPBACK = ["127.0.0.1", "localhost", "[::1]"]
WILDCARD = ("", "0.0.0.0", "::")
HEAD_TIMEOUT = 5  # seconds to send a request line and headers, and to keep an idle connection
MAX_CONNECTIONS = 32  # open at once; a request past them gets 503


def allowed_hosts(host: str) -> list[str]:
    """The Host names a server listening on ``host`` answers: the loopback names for a loopback
    address, any name for every address (0.0.0.0, ::), else ``host`` itself."""
    if host in ("127.0.0.1", "localhost", "::1"):
        return LOOPBACK
    if host in WILDCARD:
        return ["*"]
    return [f"[{host}]" if ":" in host else host]


def middleware(hosts: list[str], body_timeout: float) -> list[Middleware]:
    """Refuse (400) a Host not in ``hosts`` (Starlette checks the name; a browser writes the port of
    the address it reached, so ports are not checked), then requests from other sites (403), and give
    each request's body ``body_timeout`` seconds to arrive."""
    return [Middleware(TrustedHostMiddleware, allowed_hosts=hosts, www_redirect=False), Middleware(SameOrigin),
            Middleware(BodyDeadline, timeout=body_timeout)]


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


class Stalled(UserError):
    """A request's body did not arrive in time."""

    status = 408


class BodyDeadline:
    """Gives a request's body ``timeout`` seconds from its head to arrive: a read past them raises
    Stalled, which the app answers (408)."""

    def __init__(self, app, timeout: float):
        self.app, self.timeout = app, timeout

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout

        async def bounded():
            try:
                return await asyncio.wait_for(receive(), max(deadline - loop.time(), 0))
            except asyncio.TimeoutError:
                raise Stalled(f"the upload did not arrive within {self.timeout:g} s; send it again") from None

        await self.app(scope, bounded, send)


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

"""The console in a browser: `llmgw-tui --serve-web` hands each page its own console over textual-serve.

textual-serve (a small aiohttp server kept by the Textual authors) starts one
console process per browser tab and relays its screen and keys over a
websocket. It has no login of its own, and the console it serves holds SSH
access to every node of the fleet, so llmgw puts every route it serves behind
a gate (Jupyter's convention): a random token, printed in the address the
server prints, is traded on the first load for an HttpOnly, SameSite=Strict
cookie; a request without the cookie, the token or an `Authorization: token`
header is refused before textual-serve sees it, and a websocket (the request
that starts a console) must also come from the console's own page (`Origin`).
It listens on the loopback address unless told otherwise, or on a Unix socket
in a folder only its owner can enter.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import logging
import os
import secrets
import shlex
import signal
import socket
import stat
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlsplit

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from rich.logging import RichHandler
from textual_serve.server import Server

from llmgw_core.errors import BadInput

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
FORWARDED_URL = "http://127.0.0.1:8000"
"""Where browsers open a `--unix-socket` console by default: `ssh -L 8000:PATH` on a laptop."""
TOKEN_MIN_CHARS = 16
TOKEN_FILE_MAX_BYTES = 4096

REMOTE_WARNING = (
    "warning: the console served on {host}:{port} holds SSH access to every node of the fleet, "
    "and plain HTTP carries its token readable to anyone on the way: put a TLS proxy in front "
    "(--public-url https://...) or forward the port over SSH instead"
)
NO_TOKEN = (
    "This console needs the token it printed when it started: open the address it printed "
    "(ending in ?token=...), or send the header Authorization: token ... from a script.\n"
)
WRONG_ORIGIN = (
    "This console opens a websocket (or takes a request that changes something) only from "
    "its own page at {origin}: one from another page, or without an Origin header, is refused.\n"
)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
COOKIE_LABEL = b"llmgw console cookie"


@dataclass(frozen=True)
class WebSettings:
    """Where the browser console listens, who may open it and what each tab runs."""

    host: str
    port: int
    console_argv: tuple[str, ...]
    token: str = field(repr=False)  # a repr lands in tracebacks and logs
    public_url: str | None = None
    token_file: str | None = None
    unix_socket: str | None = None

    @property
    def command(self) -> str:
        """The shell line textual-serve runs for each tab, every part quoted (and no token in it)."""
        return shlex.join(self.console_argv)

    @property
    def browser_url(self) -> str:
        """The address browsers open, without a trailing slash: the page's links and its websocket
        are built on it, and a websocket's `Origin` must be its origin."""
        if self.public_url is not None:
            return self.public_url.rstrip("/")
        if self.unix_socket is not None:
            return FORWARDED_URL
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def login_url(self) -> str:
        """The address the server prints: the browser URL with the token, to be opened once."""
        return f"{self.browser_url}/?token={quote(self.token, safe='')}"


def is_loopback(host: str) -> bool:
    """True when `host` is reachable only from this machine (`localhost`, 127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def origin_of(url: str) -> str | None:
    """The `Origin` a browser sends from pages under `url`: scheme://host[:port], lower case,
    the scheme's default port left out; None when `url` is no http or https address."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    if port is None or port == {"http": 80, "https": 443}[parts.scheme]:
        return f"{parts.scheme}://{host}"
    return f"{parts.scheme}://{host}:{port}"


def web_settings(
    *,
    host: str | None,
    port: int | None,
    allow_remote: bool,
    inventory: str | None,
    demo: bool,
    public_url: str | None = None,
    token_file: str | None = None,
    unix_socket: str | None = None,
) -> WebSettings:
    """Check where to listen, find the token and build the console line each tab runs.

    Raises:
        BadInput: a port out of range, a non-loopback host without `allow_remote`, a
            `--public-url` that is no http(s) address, TCP options with `unix_socket`,
            or a token file that others can read or that holds no usable token.
    """
    if unix_socket is not None:
        given = [
            flag
            for flag, is_given in (
                ("--host", host is not None),
                ("--port", port is not None),
                ("--allow-remote", allow_remote),
            )
            if is_given
        ]
        if given:
            raise BadInput(
                f"--unix-socket opens no TCP port, so {given[0]} does not go with it",
                "give --public-url for the address browsers open (the end of ssh -L)",
            )
        if not unix_socket.strip():
            raise BadInput("--unix-socket is empty", "give the path of the socket to create")
    host = DEFAULT_HOST if host is None else host
    port = DEFAULT_PORT if port is None else port
    if not 1 <= port <= 65535:
        raise BadInput(f"--port {port} is not a TCP port", "give one between 1 and 65535")
    if not host.strip():
        raise BadInput("--host is empty", f"leave it out to listen on {DEFAULT_HOST}")
    if not is_loopback(host) and not allow_remote:
        raise BadInput(
            f"--host {host} would let other machines reach a console that holds SSH access to the fleet",
            "add --allow-remote if that is what you want, or leave --host out",
        )
    if public_url is not None and not _is_plain_address(public_url):
        raise BadInput(
            f"--public-url {public_url} is not an http:// or https:// address",
            "give the address browsers open, such as https://console.example:8443",
        )
    argv = [sys.executable, "-m", "llmgw_tui.cli"]
    if inventory:
        argv += ["--inventory", str(Path(inventory).expanduser().resolve())]
    if demo:
        argv.append("--demo")
    return WebSettings(
        host=host,
        port=port,
        console_argv=tuple(argv),
        token=token_from_file(token_file) if token_file else secrets.token_urlsafe(32),
        public_url=public_url,
        token_file=token_file,
        unix_socket=str(Path(unix_socket).expanduser().absolute()) if unix_socket else None,
    )


def _is_plain_address(url: str) -> bool:
    """True for scheme://host[:port][/path]: nothing a page's links or an origin cannot carry."""
    parts = urlsplit(url)
    return origin_of(url) is not None and not (parts.query or parts.fragment or parts.username)


def token_from_file(path: str) -> str:
    """The token written in `path` (surrounding whitespace dropped), read so scripts can know it.

    The file is opened once and checked on what was opened, so it cannot be swapped between
    the check and the read. No message names the token, only the file.

    Raises:
        BadInput: the file is missing, not the operator's own, readable or writable by
            others, empty, not printable ASCII, or shorter than `TOKEN_MIN_CHARS`.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise BadInput(
            f"--token-file {path}: {_reason(exc)}", "write the token into it, mode 600"
        ) from None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise BadInput(f"--token-file {path} is not a file", "give a file that holds the token")
        if info.st_uid != os.getuid():
            raise BadInput(
                f"--token-file {path} belongs to another user", "use a file of your own, mode 600"
            )
        if info.st_mode & 0o077:
            raise BadInput(
                f"--token-file {path} can be read or changed by other users "
                f"(mode {stat.S_IMODE(info.st_mode):o})",
                "chmod 600 it, since the token opens a console with your SSH access to the fleet",
            )
        content = file.read(TOKEN_FILE_MAX_BYTES + 1)
    token = content.strip()
    if not token:
        raise BadInput(
            f"--token-file {path} is empty",
            "write a token into it: python3 -c 'import secrets; print(secrets.token_urlsafe(32))'",
        )
    if len(content) > TOKEN_FILE_MAX_BYTES or not all(0x21 <= byte <= 0x7E for byte in token):
        raise BadInput(
            f"--token-file {path} holds more than a token: spaces, or bytes that are not printable ASCII",
            "write one token of printable ASCII without spaces into it, as secrets.token_urlsafe makes",
        )
    if len(token) < TOKEN_MIN_CHARS:
        raise BadInput(
            f"--token-file {path} holds fewer than {TOKEN_MIN_CHARS} characters",
            "a short token can be guessed: write a longer one, as secrets.token_urlsafe(32) makes",
        )
    return token.decode("ascii")


def _reason(exc: OSError) -> str:
    """What went wrong in an OSError, as the end of a sentence ("address already in use")."""
    return os.strerror(exc.errno).lower() if exc.errno else str(exc)


class ConsoleGate:
    """Who may reach the console: every request passes here before textual-serve sees it.

    A request carries the token in one of three ways: `Authorization: token ...` (scripts),
    `?token=...` (the printed address, opened once) or the cookie that the first load sets.
    The cookie holds an HMAC of the token, not the token: the browser's store never keeps the
    secret a script could reuse.

    SameSite=Strict keeps other sites from sending the cookie, but not another port of the
    same host: a page another user serves on 127.0.0.1:9000 is the same site, and a websocket
    it opens to this console would carry the cookie. Only the Origin names the port, and a
    page cannot forge it, so the websocket (which starts a console process) and any request
    that could change something must come from the console's own origin.
    """

    __middleware_version__ = 1
    """What `aiohttp.web.middleware` marks: a gate is called as `gate(request, handler)`."""

    def __init__(self, settings: WebSettings) -> None:
        origin = origin_of(settings.browser_url)
        assert origin is not None  # web_settings refused any other --public-url
        self.origin = origin
        self.browser_url = settings.browser_url
        self._token = settings.token.encode("ascii")
        self._cookie_value = hmac.new(self._token, COOKIE_LABEL, hashlib.sha256).hexdigest()
        # Cookies are kept per host, not per port: the port in the name keeps two consoles
        # on one machine from overwriting each other's.
        port = urlsplit(settings.browser_url).port or (443 if origin.startswith("https") else 80)
        self.cookie_name = f"llmgw-console-{port}"
        self._secure = origin.startswith("https:")

    async def __call__(
        self,
        request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        """The aiohttp middleware: refuse (403), trade a `?token=` for the cookie, or pass on."""
        credential = self._credential(request)
        if credential is None:
            return _forbidden(NO_TOKEN)
        opens_console = (
            request.match_info.route.name == "websocket"
            or request.headers.get("Upgrade", "").lower() == "websocket"
        )
        if (opens_console or request.method not in SAFE_METHODS) and not self._from_own_page(
            request
        ):
            return _forbidden(WRONG_ORIGIN.format(origin=self.origin))
        if credential == "query" and not opens_console and request.method in ("GET", "HEAD"):
            return self._trade_token_for_cookie(request)
        return await handler(request)

    def _credential(self, request: web.Request) -> str | None:
        """How the request proves it knows the token ("header", "query", "cookie"), or None."""
        scheme, _, value = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "token" and self._is_token(value.strip()):
            return "header"
        if self._is_token(request.query.get("token", "")):
            return "query"
        cookie = request.cookies.get(self.cookie_name, "")
        if hmac.compare_digest(cookie.encode("utf-8", "replace"), self._cookie_value.encode()):
            return "cookie"
        return None

    def _is_token(self, candidate: str) -> bool:
        return hmac.compare_digest(candidate.encode("utf-8", "replace"), self._token)

    def _from_own_page(self, request: web.Request) -> bool:
        return request.headers.get("Origin", "").lower() == self.origin

    def _trade_token_for_cookie(self, request: web.Request) -> web.Response:
        """The redirect to the same address without `?token=`, setting the cookie.

        The token leaves the address bar, the history and the Referer the page's font request
        would carry to another site.
        """
        location = self.browser_url + str(request.rel_url.without_query_params("token"))
        response = web.Response(
            status=302,
            headers={
                "Location": location,
                "Cache-Control": "no-store",
                "Referrer-Policy": "no-referrer",
            },
        )
        response.set_cookie(
            self.cookie_name,
            self._cookie_value,
            path="/",
            httponly=True,
            samesite="Strict",
            secure=self._secure or None,
        )
        return response


def _forbidden(sentence: str) -> web.Response:
    return web.Response(
        status=403, text=sentence, headers={"Cache-Control": "no-store"}, content_type="text/plain"
    )


class PathOnlyAccessLogger(AbstractAccessLogger):
    """One log line a request without its query string or headers: those carry the token."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        self.logger.info(
            '%s "%s %s" %s', request.remote, request.method, request.path, response.status
        )


class ConsoleServer(Server):
    """textual-serve's server with every route behind a `ConsoleGate`, on TCP or a Unix socket."""

    def __init__(self, settings: WebSettings, unix_listener: socket.socket | None = None) -> None:
        super().__init__(
            settings.command,
            host=settings.host,
            port=settings.port,
            title="llmgw",
            public_url=settings.browser_url,
        )
        self.settings = settings
        self.gate = ConsoleGate(settings)
        self.unix_listener = unix_listener

    def initialize_logging(self) -> None:
        """textual-serve's logging, without the local variables it prints in tracebacks:
        a request handler's locals hold its headers, and so the token."""
        logging.basicConfig(
            level="DEBUG" if self.debug else "INFO",
            format="%(message)s",
            datefmt="[%X]",
            handlers=[
                RichHandler(
                    show_path=False,
                    show_time=False,
                    rich_tracebacks=True,
                    tracebacks_show_locals=False,
                    console=self.console,
                )
            ],
        )

    async def _make_app(self) -> web.Application:
        app = await super()._make_app()
        # Every route (the page, /static, /ws, /download, and the 404 of any other path)
        # runs through the app's middlewares, so one gate covers what textual-serve adds.
        app.middlewares.append(self.gate)
        return app

    async def on_startup(self, app: web.Application) -> None:
        """Nothing: textual-serve's banner names the command, not the address to open."""

    def announce(self) -> None:
        """What the operator reads once the server listens: the address to open."""
        settings = self.settings
        if settings.unix_socket is not None:
            print(
                f"listening on {settings.unix_socket}; from a laptop: "
                f"ssh -L 8000:{settings.unix_socket} THIS-HOST",
                flush=True,
            )
        if settings.token_file is not None:
            # A token kept in a file is meant to stay there, not in a terminal or a journal.
            print(
                f"open {settings.browser_url}/?token=... (the token in {settings.token_file})",
                flush=True,
            )
        else:
            print(f"open {settings.login_url}", flush=True)
        print("Ctrl+C stops it", flush=True)

    def serve(self, debug: bool = False) -> None:
        """Serve until SIGINT or SIGTERM, as textual-serve's `serve` does, on the chosen listener."""
        self.debug = debug
        self.initialize_logging()
        loop = asyncio.new_event_loop()
        loop.add_signal_handler(signal.SIGINT, self.request_exit)
        loop.add_signal_handler(signal.SIGTERM, self.request_exit)
        # Given a socket and neither host nor port, aiohttp opens no TCP port at all.
        on_tcp = self.unix_listener is None
        web.run_app(
            self._make_app(),
            host=self.host if on_tcp else None,
            port=self.port if on_tcp else None,
            sock=self.unix_listener,
            handle_signals=False,
            loop=loop,
            # aiohttp calls `print` once every listener is bound: the moment to announce.
            print=lambda _banner: self.announce(),
            access_log_class=PathOnlyAccessLogger,
        )


def listen_on_unix_socket(path: str) -> socket.socket:
    """A Unix socket bound at `path`, mode 0600, in a folder only the operator can enter.

    A missing last folder is made (mode 0700). A stale socket left by a server that died is
    replaced; one a server still answers on is not.

    Raises:
        BadInput: the folder is another user's or others can enter it, the path is taken,
            or the socket cannot be bound (a path too long, say).
    """
    socket_path = Path(path)
    folder = socket_path.parent
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        info = folder.stat()
    except OSError as exc:
        raise BadInput(
            f"--unix-socket {path}: cannot use its folder: {_reason(exc)}",
            "give a path in a folder of yours, mode 700",
        ) from None
    if info.st_uid != os.getuid():
        raise BadInput(
            f"--unix-socket {path}: the folder {folder} belongs to another user",
            "give a path in a folder of yours, mode 700",
        )
    if info.st_mode & 0o077:
        raise BadInput(
            f"--unix-socket {path}: other users can enter {folder} "
            f"(mode {stat.S_IMODE(info.st_mode):o})",
            f"chmod 700 {folder}, or give a path in a folder only you can enter",
        )
    _remove_stale_socket(socket_path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    previous_umask = os.umask(0o177)  # the socket is born 0600: no moment at the default mode
    try:
        listener.bind(path)
    except OSError as exc:
        listener.close()
        raise BadInput(
            f"cannot listen on {path}: {_reason(exc)}", "give a shorter path or another one"
        ) from None
    finally:
        os.umask(previous_umask)
    os.chmod(path, 0o600)
    return listener


def _remove_stale_socket(socket_path: Path) -> None:
    try:
        mode = socket_path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise BadInput(
            f"--unix-socket {socket_path} exists and is not a socket",
            "give a path where nothing is, or remove what is there",
        )
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(socket_path))
        except (ConnectionRefusedError, FileNotFoundError):
            socket_path.unlink(missing_ok=True)
            return
    raise BadInput(
        f"--unix-socket {socket_path}: another server listens there",
        "stop it, or give another path",
    )


def serve_web(settings: WebSettings) -> int:
    """Serve the console until interrupted; the exit code.

    Raises:
        BadInput: the address or the socket cannot be listened on.
    """
    if settings.unix_socket is None and not is_loopback(settings.host):
        print(REMOTE_WARNING.format(host=settings.host, port=settings.port), file=sys.stderr)
    unix_listener = None
    if settings.unix_socket is not None:
        unix_listener = listen_on_unix_socket(settings.unix_socket)
    try:
        ConsoleServer(settings, unix_listener).serve()
    except OSError as exc:  # the port is taken, or the address is not this machine's
        raise BadInput(
            f"cannot listen on {settings.host}:{settings.port}: {_reason(exc)}",
            "choose another --port or --host",
        ) from None
    finally:
        if settings.unix_socket is not None:
            Path(settings.unix_socket).unlink(missing_ok=True)
    return 0

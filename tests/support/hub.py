"""A real JupyterHub for a test: the Hub, its proxy and local single-user servers, on 127.0.0.1 and
free ports, in a temporary folder; everything it started is stopped when the ``with`` block ends.

Each user's server gets its own Jupyter config, data and runtime folders, its own store
(``JUPYTER_PAUSE_STORE``), the thread counts of the harness's own process (``THREAD_VARIABLES``:
one thread each in the tests) and the jupyter_pause server extension (on unless ``create_user``
says otherwise); JupyterLab's server extension only where a browser opens it (``lab=True``). The
harness calls the Hub with an admin token, and a user's server through the proxy.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import nbformat
import psutil
from tornado.httpclient import HTTPClient, HTTPClientError, HTTPRequest
from tornado.simple_httpclient import HTTPStreamClosedError, HTTPTimeoutError
from tornado.websocket import websocket_connect

from tests.support.kernels import KERNEL_PORT_ARGS, THREAD_VARIABLES
from tests.support.ports import Held, free_port
from tests.support.server_process import WITHOUT_LAB

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
PROXY_IN_VENV = REPO / ".venv" / "proxy" / "node_modules" / ".bin" / "configurable-http-proxy"

#: Scopes of the harness's own token: make users, start and stop their servers, call them.
HARNESS_SCOPES = [
    "admin:users",
    "admin:servers",
    "admin:server_state",
    "access:servers",
    "access:services",
    "read:hub",
    "proxy",
]

#: Quick lease and resource polls for the servers' extension (as tests/server_helpers.server_config).
QUICK_PAUSE_SERVER = {"lease_settle": 0.2, "resource_poll_interval": 0.2}


def find_proxy() -> str:
    """configurable-http-proxy: on PATH, else where ``make test`` installs it beside the venv."""
    found = shutil.which("configurable-http-proxy")
    if found:
        return found
    if PROXY_IN_VENV.exists():
        return str(PROXY_IN_VENV)
    raise RuntimeError(
        f"configurable-http-proxy is neither on PATH nor at {PROXY_IN_VENV}; run `make test` (it installs it "
        "with npm) or `npm install -g configurable-http-proxy`"
    )


#: Starts of a Hub before a port taken by another process fails the test (see ``Hub.start``).
START_ATTEMPTS = 3
#: What the Hub (Python) and its proxy (Node.js) log when a port is taken, lower-cased.
PORT_TAKEN = "address already in use"


def wait_for(read: Callable[[], T], until: Callable[[T], bool], timeout: float, what: str, every: float = 0.2) -> T:
    """Call ``read`` until ``until`` holds for its answer; the answer. Fails naming ``what`` and the
    last answer seen.

    A read that times out (an HTTP call no one answered in its own time) is a poll without an
    answer: the wait goes on until its deadline, and says when that happened (a loaded machine
    can stall a process for a while; the captured output then tells it from a hang)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = read()
        except HTTPTimeoutError as e:
            last = f"no answer ({e}) at {time.strftime('%H:%M:%S')}"
            print(f"{what}: {last}", flush=True)
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not reached in {timeout} s; last seen {last}") from None
            continue
        if until(last):
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached in {timeout} s; last seen {last!r}")
        time.sleep(every)


@dataclass
class Service:
    """A Hub service the test declares: its role's scopes, and a command when the Hub runs it.

    Without ``command`` the test runs it itself with ``Hub.service_env(name)``. ``url``: the Hub
    proxies /services/<name>/ to a free port (``{port}`` in the command is replaced by it).
    """

    name: str
    scopes: list[str]
    command: list[str] | None = None
    url: bool = True
    environment: dict[str, str] = field(default_factory=dict)
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    port: int = field(default_factory=free_port)


@dataclass
class Response:
    """An HTTP answer: code and decoded body (JSON when it is JSON)."""

    code: int
    body: Any


class Hub:
    """A running JupyterHub (see ``run_hub``): call its API, start and stop users' servers."""

    def __init__(
        self,
        root: Path,
        *,
        config: str = "",
        services: Iterable[Service] = (),
        debug: bool = False,
        first: str = "",
        lab: bool = False,
    ) -> None:
        self.root = root
        #: Whether users' servers run JupyterLab's server extension (a browser opens /lab on them).
        self.lab = lab
        #: Lines run first, on a fresh config (a block a user pastes, as it is): the harness's
        #: own lines add to what it set (environment, services, roles) rather than replace it.
        self.first_config = first
        self.services = {s.name: s for s in services}
        self.token = secrets.token_hex(16)
        self._held: dict[str, Held] = {}
        self._pick_ports()
        self.extra_config = config
        self.debug = debug
        self.process: subprocess.Popen[bytes] | None = None
        # one blocking client per thread: a benchmark calls the Hub from many threads at once
        self._local = threading.local()
        self._clients: list[HTTPClient] = []

    # --- life cycle -------------------------------------------------------------------------

    def _pick_ports(self) -> None:
        """Free ports for the proxy, the Hub, the proxy's API and each service with a URL."""
        self.port, self.hub_port, self.api_port = free_port(), free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_url = f"http://127.0.0.1:{self.hub_port}/hub/api"
        for held in self._held.values():
            held.release()
        # a service the test runs itself binds its port much later: held until then (ports.Held)
        self._held = {s.name: Held() for s in self.services.values() if s.url and not s.command}
        for service in self.services.values():
            service.port = self._held[service.name].port if service.name in self._held else free_port()

    def config_text(self) -> str:
        """The jupyterhub_config.py this Hub runs with."""
        services = []
        roles = [{"name": "test-harness", "scopes": HARNESS_SCOPES, "services": ["test-harness"]}]
        services.append({"name": "test-harness", "api_token": self.token})
        for s in self.services.values():
            entry: dict[str, Any] = {"name": s.name, "api_token": s.token, "environment": s.environment}
            if s.url:
                entry["url"] = f"http://127.0.0.1:{s.port}"
            if s.command:
                entry["command"] = [part.replace("{port}", str(s.port)) for part in s.command]
            elif s.url:
                entry["timeout"] = 1  # the Hub waits this long at start for a service the test runs itself
            services.append(entry)
            roles.append({"name": f"{s.name}-role", "scopes": s.scopes, "services": [s.name]})
        users = self.root / "users"
        # a spawner passes on only the variables in c.Spawner.env_keep: these are given explicitly
        threads = {name: os.environ[name] for name in THREAD_VARIABLES if name in os.environ}
        args = [*KERNEL_PORT_ARGS, *(["--allow-root"] if os.geteuid() == 0 else [])]
        return f"""# written by tests/support/hub.py
import json, os, sys
from pathlib import Path

sys.path.insert(0, {str(REPO)!r})
from tests.support.ports import free_port

c = get_config()  # noqa
# --- lines run first, on a fresh config ---
{self.first_config}
# --- the harness's lines ---
c.JupyterHub.bind_url = {self.url + "/"!r}
c.JupyterHub.public_url = {self.url + "/"!r}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {self.hub_port}
c.JupyterHub.db_url = "sqlite:///" + {str(self.root / "jupyterhub.sqlite")!r}
c.JupyterHub.cookie_secret_file = {str(self.root / "cookie_secret")!r}
c.JupyterHub.pid_file = {str(self.root / "jupyterhub.pid")!r}
c.JupyterHub.cleanup_servers = True
c.JupyterHub.cleanup_proxy = True
c.JupyterHub.last_activity_interval = 1
# a request to start a server answers at once (202); Hub.wait_ready waits for it
c.JupyterHub.tornado_settings = {{"slow_spawn_timeout": 0}}
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allow_all = True
c.JupyterHub.spawner_class = "simple"
c.ConfigurableHTTPProxy.command = [{find_proxy()!r}]
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{self.api_port}"
c.ConfigurableHTTPProxy.pid_file = {str(self.root / "proxy.pid")!r}
c.ConfigurableHTTPProxy.should_start = True
c.JupyterHub.services = [*(c.JupyterHub.services if "services" in c.JupyterHub else []), *{services!r}]
c.JupyterHub.load_roles = [*(c.JupyterHub.load_roles if "load_roles" in c.JupyterHub else []), *{roles!r}]

USERS = Path({str(users)!r})
c.SimpleLocalProcessSpawner.home_dir_template = str(USERS / "{{username}}" / "home")
c.Spawner.cmd = [{str(VENV_BIN / "jupyterhub-singleuser")!r}]
c.Spawner.args = {args!r}
c.Spawner.start_timeout = 240  # several servers may start at once beside other tests' kernels
c.Spawner.http_timeout = 240


def _dirs(kind):
    return lambda spawner: str(USERS / spawner.user.name / kind)


c.Spawner.environment.update({{
    "JUPYTER_CONFIG_DIR": _dirs("jupyter-config"),
    "JUPYTER_DATA_DIR": _dirs("jupyter-data"),
    "JUPYTER_RUNTIME_DIR": _dirs("jupyter-runtime"),
    "IPYTHONDIR": _dirs("ipython"),
    "JUPYTER_PAUSE_STORE": _dirs("store"),
    "JUPYTER_PAUSE_NODE": lambda spawner: spawner.user.name + "-node",
    "JUPYTER_PLATFORM_DIRS": "1",
    "PYTHONUNBUFFERED": "1",
    # the harness's own thread counts (one each in the tests), for the servers and their kernels
    **{threads!r},
}})


def _per_user(spawner):
    # a port no kernel or connection is given meanwhile, nor another user's server started at once
    # (each draws before any binds): tests/support/ports.py, not the spawner's own pick
    spawner.port = free_port()
    # what create_user wrote for this user: more arguments and environment
    extra = USERS / spawner.user.name / "spawn.json"
    if extra.exists():
        settings = json.loads(extra.read_text())
        spawner.args = list(spawner.args) + settings.get("args", [])
        spawner.environment = {{**spawner.environment, **settings.get("environment", {{}})}}


c.Spawner.pre_spawn_hook = _per_user

# --- the test's own lines ---
{self.extra_config}
"""

    def start(self, timeout: float = 60) -> None:
        """Start the Hub (it starts its proxy and managed services); return once the Hub's API
        answers through the proxy and every managed service with a URL answers.

        Its ports were free when picked; another process may bind one before the Hub does (tests
        run side by side), and then the Hub starts again on new ones, ``START_ATTEMPTS`` in all.
        """
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                return self._start_once(timeout)
            except RuntimeError as e:
                if attempt == START_ATTEMPTS or PORT_TAKEN not in str(e).lower():
                    raise
                self.stop()
                self._local, self._clients = threading.local(), []
                self._pick_ports()

    def _start_once(self, timeout: float) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "jupyterhub_config.py").write_text(self.config_text())
        env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
        for name in ("JUPYTERHUB_API_TOKEN", "JUPYTERHUB_API_URL", "JUPYTER_PAUSE_STORE"):
            env.pop(name, None)
        self.log = open(self.root / "jupyterhub.log", "wb")  # noqa: SIM115 (closed in stop)
        command = [str(VENV_BIN / "jupyterhub"), "-f", str(self.root / "jupyterhub_config.py")]
        if self.debug:
            command.append("--debug")
        self.process = subprocess.Popen(
            command, cwd=self.root, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )
        # the proxy answers 404 for /hub/ until the Hub has added its route; 503 while a target is down
        self._wait_up(lambda: self.fetch(f"{self.url}/hub/api/", token=None), timeout, "the Hub through its proxy")
        for s in self.services.values():
            if s.command and s.url:
                self.wait_service(s.name, timeout)

    def wait_service(self, name: str, timeout: float = 60) -> None:
        """Wait until the proxy routes /services/<name>/ and the service behind it answers."""
        route = f"/services/{name}/"
        wait_for(lambda: self.api("GET", "proxy"), lambda routes: route in routes, timeout, f"the route to {name}")
        up = lambda: self.fetch(self.url + route)  # noqa: E731
        self._wait_up(up, timeout, f"service {name}", ok=lambda code: code != 503)

    def _wait_up(
        self, read: Callable[[], Response], timeout: float, what: str, ok: Callable[[int], bool] = lambda c: c == 200
    ) -> None:
        def attempt() -> Response | None:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"JupyterHub exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                return read()
            except (OSError, HTTPStreamClosedError):
                # nothing listens yet, or another process (a kernel's socket) took the port
                # first: the proxy logs that and runs on without it (start retries)
                if PORT_TAKEN in (tail := self.log_tail()).lower():
                    raise RuntimeError(f"the Hub or its proxy could not listen:\n{tail}") from None
                return None

        wait_for(attempt, lambda r: r is not None and ok(r.code), timeout, what)

    def stop(self, timeout: float = 30) -> None:
        """Stop the Hub, its proxy, every server and service it started (and their kernels)."""
        for held in self._held.values():
            held.release()
        self._held = {}
        if self.process is None:
            return
        try:
            started = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            started = []
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # the Hub stops servers, services and its proxy
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        _end(started, timeout=10)
        self.process = None
        self.log.close()
        for client in self._clients:
            client.close()

    def log_tail(self, chars: int = 6000) -> str:
        """The end of the Hub's log (the proxy's and the servers' output are in it too)."""
        self.log.flush()
        return (self.root / "jupyterhub.log").read_text(errors="replace")[-chars:]

    # --- HTTP -------------------------------------------------------------------------------

    def fetch(
        self, url: str, method: str = "GET", body: Any = None, token: str | None = "", timeout: float = 30
    ) -> Response:
        """One HTTP call; ``token`` "" is the harness's admin token, None is none."""
        headers = {"Authorization": f"token {token or self.token}"} if token is not None else {}
        data = None if body is None else (body if isinstance(body, (bytes, str)) else json.dumps(body))
        if data is None and method in ("POST", "PUT", "PATCH"):
            data = b""
        request = HTTPRequest(
            url, method=method, body=data, headers=headers, request_timeout=timeout, follow_redirects=False
        )
        try:
            answer = self._client().fetch(request)
        except HTTPClientError as e:
            if e.response is None:
                raise
            answer = e.response
        text = (answer.body or b"").decode(errors="replace")
        try:
            parsed: Any = json.loads(text) if text else None
        except json.JSONDecodeError:
            parsed = text
        return Response(answer.code, parsed)

    def _client(self) -> HTTPClient:
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = HTTPClient()
            self._clients.append(client)
        return client

    def api(self, method: str, path: str, body: Any = None, token: str = "", expect: Iterable[int] = ()) -> Any:
        """A Hub API call (``path`` under /hub/api/); its JSON. Fails on an unexpected code."""
        answer = self.fetch(f"{self.api_url}/{path.lstrip('/')}", method, body, token)
        if answer.code >= 400 and answer.code not in set(expect):
            raise AssertionError(f"{method} /hub/api/{path} answered {answer.code}: {answer.body}")
        return answer.body

    def server_fetch(
        self, user: str, path: str, method: str = "GET", body: Any = None, token: str = "", server_name: str = ""
    ) -> Response:
        """Call a user's server through the proxy (``path`` under its base URL, such as
        ``api/kernels``) with a token (default the harness's, which has access:servers)."""
        return self.fetch(f"{self.url}{self.server_path(user, server_name)}{path.lstrip('/')}", method, body, token)

    def server_path(self, user: str, server_name: str = "") -> str:
        base = f"/user/{quote(user, safe='')}/"
        return base + (f"{quote(server_name, safe='')}/" if server_name else "")

    def service_env(self, name: str) -> dict[str, str]:
        """The environment the Hub gives its managed service ``name``, to run it as the test's own
        subprocess instead (the Hub knows its token and proxies its URL all the same). Its port,
        held since it was drawn (``ports.Held``), is let go: start the service next."""
        s = self.services[name]
        if name in self._held:  # the service binds it next
            self._held.pop(name).release()
        env = {
            **os.environ,
            **s.environment,
            "JUPYTERHUB_SERVICE_NAME": name,
            "JUPYTERHUB_API_TOKEN": s.token,
            "JUPYTERHUB_API_URL": self.api_url,
            "JUPYTERHUB_BASE_URL": "/",
            "JUPYTERHUB_CLIENT_ID": f"service-{name}",
        }
        if s.url:
            env["JUPYTERHUB_SERVICE_URL"] = f"http://127.0.0.1:{s.port}"
            env["JUPYTERHUB_SERVICE_PREFIX"] = f"/services/{name}/"
            env["JUPYTERHUB_OAUTH_CALLBACK_URL"] = f"/services/{name}/oauth_callback"
        return env

    # --- users and servers ------------------------------------------------------------------

    def create_user(
        self,
        name: str,
        *,
        extension: bool = True,
        pause_server: dict[str, Any] | None = None,
        environment: dict[str, str] | None = None,
        args: list[str] | None = None,
    ) -> None:
        """Create a user whose server will have its own Jupyter folders and store; ``extension``
        False leaves jupyter_pause off there. ``pause_server``: more c.PauseServer settings."""
        folder = self.root / "users" / name
        config = folder / "jupyter-config"
        config.mkdir(parents=True, exist_ok=True)
        for kind in ("jupyter-data", "jupyter-runtime", "ipython", "store", "home"):
            (folder / kind).mkdir(exist_ok=True)
        server_config = {
            "ServerApp": {"jpserver_extensions": {"jupyter_pause": extension, **({} if self.lab else WITHOUT_LAB)}},
            "PauseServer": {**QUICK_PAUSE_SERVER, **(pause_server or {})},
        }
        (config / "jupyter_server_config.json").write_text(json.dumps(server_config))
        (folder / "spawn.json").write_text(json.dumps({"args": args or [], "environment": environment or {}}))
        self.api("POST", f"users/{quote(name, safe='')}", expect=(409,))

    def store(self, user: str) -> Path:
        """The folder that is the store of ``user``'s server."""
        return self.root / "users" / user / "store"

    def home(self, user: str) -> Path:
        """The folder ``user``'s server runs in (its root)."""
        return self.root / "users" / user / "home"

    def user_model(self, user: str) -> dict[str, Any]:
        """The Hub's model of ``user`` (with running servers only)."""
        return self.api("GET", f"users/{quote(user, safe='')}")

    def server_model(self, user: str, server_name: str = "") -> dict[str, Any] | None:
        """The Hub's model of one of ``user``'s servers; None when it is not running."""
        return self.user_model(user).get("servers", {}).get(server_name)

    def request_server(self, user: str, server_name: str = "", options: dict[str, Any] | None = None) -> None:
        """Ask the Hub to start a server (returns before it is ready: see ``wait_ready``)."""
        self.api("POST", _server_api(user, server_name), body=options or {})

    def wait_spawned(self, user: str, server_name: str = "", timeout: float = 60) -> dict[str, Any]:
        """Wait until the Hub says a server it was asked to start is ready; its model.

        The wait reads the Hub's spawn progress stream, as a browser's spawn page does: the Hub
        answers once the server is ready or its start failed, so a storm of starting servers,
        which keeps the Hub busy enough, is not polled besides.
        """
        url = f"{self.api_url}/{_server_api(user, server_name)}/progress"
        try:
            answer = self.fetch(url, timeout=timeout)
        except HTTPTimeoutError:
            raise AssertionError(f"{user}'s server ready: not reached in {timeout} s:\n{self.log_tail()}") from None
        events = [json.loads(line[5:]) for line in str(answer.body or "").splitlines() if line.startswith("data:")]
        if answer.code != 200 or not events or not events[-1].get("ready"):
            said = events[-1].get("message") if events else f"{answer.code} {answer.body}"
            raise AssertionError(f"{user}'s server did not start: {said}\n{self.log_tail()}")
        model = self.server_model(user, server_name)
        if not (model and model.get("ready")):
            raise AssertionError(f"{user}'s server stopped right after it started: {model}\n{self.log_tail()}")
        return model

    def wait_ready(self, user: str, server_name: str = "", timeout: float = 60) -> dict[str, Any]:
        """Wait until a server the Hub was asked to start is ready and answers through the proxy;
        its model."""
        model = self.wait_spawned(user, server_name, timeout)
        self.wait_proxied(user, server_name)
        return model

    def wait_proxied(self, user: str, server_name: str = "", timeout: float = 30) -> None:
        """Wait until a server the Hub says is ready answers through the proxy."""
        wait_for(
            lambda: self.server_fetch(user, "api/status", server_name=server_name).code,
            lambda c: c == 200,
            timeout,
            f"{user}'s server through the proxy",
        )

    def start_server(
        self, user: str, server_name: str = "", options: dict[str, Any] | None = None, timeout: float = 60
    ) -> dict[str, Any]:
        """Start ``user``'s server and wait until it is ready; its model."""
        self.request_server(user, server_name, options)
        return self.wait_ready(user, server_name, timeout)

    def stop_server(self, user: str, server_name: str = "", timeout: float = 30) -> None:
        """Stop ``user``'s server and wait until the Hub shows it stopped."""
        self.api("DELETE", _server_api(user, server_name), expect=(400, 404))
        wait_for(lambda: self.server_model(user, server_name), lambda m: m is None, timeout, f"{user}'s server stopped")

    # --- notebooks and kernels on a user's server -------------------------------------------

    def open_notebook(self, user: str, path: str, *sources: str, server_name: str = "") -> str:
        """Write a notebook through the contents API and start its kernel session; the kernel id."""
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
        written = self.server_fetch(
            user, f"api/contents/{path}", "PUT", {"type": "notebook", "content": nb}, server_name=server_name
        )
        assert written.code in (200, 201), written
        session = {"path": path, "name": Path(path).name, "type": "notebook", "kernel": {"name": "python3"}}
        answer = self.server_fetch(user, "api/sessions", "POST", session, server_name=server_name)
        assert answer.code == 201, answer
        return answer.body["kernel"]["id"]

    def execute(self, user: str, kernel_id: str, code: str, *, wait: bool = True, server_name: str = "") -> str:
        """Run ``code`` in a kernel over its websocket, through the proxy. ``wait``: until the cell
        ends (its stdout), else until the kernel says it is busy with it (the cell runs on)."""
        url = self.url.replace("http", "ws", 1) + self.server_path(user, server_name)
        url += f"api/kernels/{kernel_id}/channels?session_id={uuid.uuid4().hex}"
        return asyncio.run(_execute(url, self.token, code, wait))


def _server_api(user: str, server_name: str = "") -> str:
    """The Hub API path of one of ``user``'s servers (under /hub/api/)."""
    suffix = f"servers/{quote(server_name, safe='')}" if server_name else "server"
    return f"users/{quote(user, safe='')}/{suffix}"


async def _execute(url: str, token: str, code: str, wait: bool, timeout: float = 120) -> str:
    # The handshake waits for the kernel: one that died at its start (a port taken between the
    # pick and the bind) is started again by the server on new ports, in a few seconds.
    request = HTTPRequest(
        url, headers={"Authorization": f"token {token}"}, connect_timeout=timeout, request_timeout=timeout
    )
    connection = await websocket_connect(request)
    msg_id = uuid.uuid4().hex
    header = {"msg_id": msg_id, "msg_type": "execute_request", "username": "test", "session": uuid.uuid4().hex}
    header["version"] = "5.3"
    content = {"code": code, "silent": False, "store_history": True, "user_expressions": {}, "allow_stdin": False}
    message = {"header": header, "parent_header": {}, "metadata": {}, "content": content, "channel": "shell"}
    await connection.write_message(json.dumps(message))
    out = ""
    try:
        while True:
            raw = await asyncio.wait_for(connection.read_message(), timeout)
            if raw is None:
                raise AssertionError(f"the kernel's websocket closed while running {code!r}")
            msg = json.loads(raw)
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, body = msg["msg_type"], msg["content"]
            if kind == "stream":
                out += body["text"]
            elif kind == "error":
                raise AssertionError(f"{code!r} failed: {body['ename']}: {body['evalue']}")
            elif kind == "status" and body["execution_state"] == ("idle" if wait else "busy"):
                return out
    finally:
        connection.close()


def _end(processes: list[psutil.Process], timeout: float) -> None:
    """SIGTERM what is still running of ``processes``, then SIGKILL what outlives ``timeout``."""
    alive = [p for p in processes if p.is_running()]
    for p in alive:
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _, left = psutil.wait_procs(alive, timeout=timeout)
    for p in left:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(left, timeout=5)


@contextmanager
def run_hub(
    root: Path,
    *,
    config: str = "",
    services: Iterable[Service] = (),
    debug: bool = False,
    timeout: float = 60,
    first: str = "",
    lab: bool = False,
) -> Iterator[Hub]:
    """A started Hub in ``root`` (``config``: more lines of jupyterhub_config.py; ``first``: lines
    run before the harness's, on a fresh config; ``services``: its services; ``lab``: users' servers
    serve JupyterLab); stopped with everything it started when the block ends, even on failure. On
    a failure the Hub's log tail is printed (pytest shows it with the failure)."""
    hub = Hub(root, config=config, services=services, debug=debug, first=first, lab=lab)
    try:
        hub.start(timeout)
        yield hub
    except BaseException:
        if hub.process is not None:
            print(f"--- JupyterHub log ({root / 'jupyterhub.log'}) ---\n{hub.log_tail()}")
        raise
    finally:
        hub.stop()


def readme_hub_config() -> str:
    """The README's jupyterhub_config.py block (under "The Hub's configuration"), as a user copies it."""
    text = (REPO / "README.md").read_text()
    section = text.split("### The Hub's configuration", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]

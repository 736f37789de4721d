"""What a cloud's notice reader is, what one poll of it gives, and the one HTTP call they all make."""

from __future__ import annotations

import abc
import json
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from ...errors import PauseError
from ...vocabulary import Cloud


class Blind(PauseError):
    """A reader could not read its notice (refused, timed out, an answer it does not understand):
    a notice would go unseen. The message says what was asked, what came back, and what to do."""


@dataclass(frozen=True)
class Reading:
    """One poll of a cloud's metadata service."""

    #: The interruption notice as a person reads it; None: no notice now.
    notice: str | None = None
    #: An early warning's identity (AWS's rebalance recommendation: its ``noticeTime``); None: none.
    early: str | None = None
    #: What went wrong reading the early warning, while the notice itself was read ("" when nothing).
    trouble: str = ""


@dataclass(frozen=True)
class Answer:
    """A metadata service's answer: ``code`` 599 when none came (``error`` says why)."""

    code: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    error: str = ""
    url: str = ""  # what was asked

    def describe(self) -> str:
        """The answer as a log line says it: ``HTTP 401 (Unauthorized)`` or ``no answer: <why>``."""
        if self.code == 599:
            return f"no answer: {self.error or 'the connection failed'}"
        text = self.body.decode(errors="replace").strip().replace("\n", " ")[:120]
        return f"HTTP {self.code}" + (f" ({text})" if text else "")

    def json(self) -> Any:
        """The body as JSON; ``Blind`` when it is not."""
        try:
            return json.loads(self.body)
        except ValueError as e:
            raise Blind(f"{self.url}: an answer that is not JSON: {self.body[:120]!r}") from e


async def fetch(
    url: str, timeout: float, method: str = "GET", headers: dict[str, str] | None = None, body: bytes | None = None
) -> Answer:
    """One request to a metadata service; never raises for an HTTP status or a lost connection."""
    request = HTTPRequest(
        url,
        method=method,
        headers=headers or {},
        body=body if body is not None else (b"" if method in ("PUT", "POST") else None),
        connect_timeout=timeout,
        request_timeout=timeout,
        follow_redirects=False,
    )
    try:
        response = await AsyncHTTPClient().fetch(request, raise_error=False)
    except HTTPClientError as e:  # a timeout (tornado's 599)
        return Answer(599, error=str(e.message or e), url=url)
    except OSError as e:  # refused, unreachable, a name that does not resolve
        return Answer(599, error=str(e) or type(e).__name__, url=url)
    if response.code == 599:
        return Answer(599, error=str(response.error or "no answer"), url=url)
    return Answer(response.code, response.body or b"", dict(response.headers.get_all()), url=url)


def origin(url: str) -> str:
    """``scheme://host:port`` of ``url``: where a reader finds the service's other addresses."""
    parts = urllib.parse.urlsplit(url)
    if not parts.scheme or not parts.netloc:
        raise PauseError(f"{url!r} is not an address: give the metadata service's full URL (http://host/path)")
    return f"{parts.scheme}://{parts.netloc}"


class NoticeSource(abc.ABC):
    """A cloud's notice reader: ``read`` polls it, ``probe`` says whether that cloud answers at all."""

    cloud: ClassVar[Cloud]
    #: Seconds between a notice and the machine going away, as the cloud documents it.
    lead_time: ClassVar[float]
    #: Where the notice is on a VM of that cloud (used only when its reader is asked for by name).
    default_url: ClassVar[str]

    def __init__(self, url: str, timeout: float) -> None:
        self.url = url
        self.origin = origin(url)
        self.timeout = timeout

    @abc.abstractmethod
    async def read(self) -> Reading:
        """Poll the notice (and any early warning); ``Blind`` when it cannot be read."""

    @abc.abstractmethod
    async def probe(self) -> str:
        """ "" when this cloud's metadata service answers at ``url``, else what came back instead."""

    async def get(self, url: str, headers: dict[str, str] | None = None, timeout: float | None = None) -> Answer:
        """GET ``url`` within ``timeout`` seconds (default: the reader's)."""
        return await fetch(url, timeout or self.timeout, headers=headers)

    def blind(self, answer: Answer, what: str = "", hint: str = "") -> Blind:
        """The ``Blind`` for an answer that is not one this reader understands."""
        said = f"{what or self.url} answered {answer.describe()}"
        return Blind(f"{said}; {hint}" if hint else said)

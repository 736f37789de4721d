"""AWS: the spot interruption notice and the rebalance recommendation, read through IMDSv2.

IMDSv2 (required on Amazon Linux 2023 and by many account policies) answers a GET without a
session token with 401. The reader asks for a token (``PUT /latest/api/token`` with its lifetime
in ``X-aws-ec2-metadata-token-ttl-seconds``), sends it as ``X-aws-ec2-metadata-token`` with every
request, renews it before it expires and whenever the service answers 401, and falls back to
plain GETs (IMDSv1) only where the token request is refused as unsupported (403, 404, 405). The
token and recommendation addresses come from the notice URL's scheme, host and port.

A token request that gets no answer is the classic container case: the token's answer travels
one network hop more than the instance's ``HttpPutResponseHopLimit`` allows (1 by default on
some images). The reader says so, and never falls back then.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ...vocabulary import Cloud
from .source import Answer, Blind, NoticeSource, Reading, fetch

log = logging.getLogger(__name__)

TOKEN_PATH = "/latest/api/token"
REBALANCE_PATH = "/latest/meta-data/events/recommendations/rebalance"
INSTANCE_ID_PATH = "/latest/meta-data/instance-id"
TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aws-ec2-metadata-token"
#: Seconds a token is asked to live (the most IMDS grants is 21600).
TOKEN_TTL = 21600
#: What a token request answers where IMDSv2 is not offered: plain GETs are the way then.
UNSUPPORTED = frozenset({403, 404, 405})
HOP_LIMIT_HINT = (
    "in a container (a Kubernetes pod, docker with a bridge network) the token's answer must cross "
    "one hop more: set the instance's HttpPutResponseHopLimit to 2 or more "
    "(aws ec2 modify-instance-metadata-options --http-put-response-hop-limit 2)"
)


class Aws(NoticeSource):
    """The spot ``instance-action`` notice (two minutes ahead) and the rebalance recommendation."""

    cloud = Cloud.AWS
    lead_time = 120.0
    default_url = "http://169.254.169.254/latest/meta-data/spot/instance-action"

    def __init__(
        self, url: str, timeout: float, ttl: int = TOKEN_TTL, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(url, timeout)
        self.token_url = self.origin + TOKEN_PATH
        self.rebalance_url = self.origin + REBALANCE_PATH
        self.ttl = ttl
        self.clock = clock
        self.token: str | None = None
        self.renew_at = 0.0
        #: The token request was refused as unsupported: plain GETs (IMDSv1).
        self.v1 = False
        self._v1_said = False

    async def _token(self, renew: bool = False) -> str | None:
        """The session token (None under IMDSv1), asked for again when it is near its end or ``renew``."""
        if self.v1:
            return None
        if self.token is not None and not renew and self.clock() < self.renew_at:
            return self.token
        asked = self.clock()
        answer = await fetch(self.token_url, self.timeout, "PUT", {TTL_HEADER: str(self.ttl)})
        if answer.code == 200 and answer.body.strip():
            self.token = answer.body.decode(errors="replace").strip()
            # renewed with a tenth of its life (at least a second) left
            self.renew_at = asked + self.ttl - max(1.0, self.ttl / 10)
            return self.token
        self.token = None
        if answer.code in UNSUPPORTED:
            self.v1 = True
            if self._v1_said:
                return None
            self._v1_said = True
            log.info(
                "jupyter-pause: %s refused an IMDSv2 token (%s): reading the notice with plain GETs (IMDSv1)",
                self.token_url,
                answer.describe(),
            )
            return None
        hint = HOP_LIMIT_HINT if answer.code == 599 else ""
        raise self.blind(answer, f"the IMDSv2 token request to {self.token_url}", hint)

    async def _get(self, url: str) -> Answer:
        """GET ``url`` with the token; on a 401, once more with a new one (a lapsed token, or a
        service that began to require one)."""
        token = await self._token()
        answer = await self.get(url, {TOKEN_HEADER: token} if token else None)
        if answer.code == 401:
            self.v1 = False
            token = await self._token(renew=True)
            answer = await self.get(url, {TOKEN_HEADER: token} if token else None)
        return answer

    async def read(self) -> Reading:
        answer = await self._get(self.url)
        if answer.code == 404:
            notice = None
        elif answer.code == 200:
            notice = _instance_action(answer)
        else:
            refused = "IMDSv2 refused the token: is this the instance's own metadata service?"
            raise self.blind(answer, hint=refused if answer.code == 401 else "")
        early, trouble = await self._rebalance()
        return Reading(notice, early, trouble)

    async def _rebalance(self) -> tuple[str | None, str]:
        """The rebalance recommendation's ``noticeTime`` (None: none), and what went wrong reading it."""
        answer = await self._get(self.rebalance_url)
        if answer.code == 404:
            return None, ""
        if answer.code != 200:
            return None, f"the rebalance recommendation at {self.rebalance_url} answered {answer.describe()}"
        try:
            data = answer.json()
        except Blind as e:
            return None, f"the rebalance recommendation: {e}"
        when = data.get("noticeTime") if isinstance(data, dict) else None
        if not isinstance(when, str) or not when:
            return None, f"the rebalance recommendation at {self.rebalance_url} has no noticeTime: {answer.describe()}"
        return when, ""

    async def probe(self) -> str:
        answer = await fetch(self.token_url, self.timeout, "PUT", {TTL_HEADER: str(self.ttl)})
        if answer.code == 200 and answer.body.strip():
            return ""
        if answer.code in UNSUPPORTED:  # an IMDSv1-only service still knows its instance
            plain = await self.get(self.origin + INSTANCE_ID_PATH)
            return "" if plain.code == 200 else f"{self.origin + INSTANCE_ID_PATH} answered {plain.describe()}"
        hint = f" (if this is an AWS instance: {HOP_LIMIT_HINT})" if answer.code == 599 else ""
        return f"{self.token_url} answered {answer.describe()}{hint}"


def _instance_action(answer: Answer) -> str:
    """The notice a 200 of ``instance-action`` gives (``{"action": "terminate", "time": ...}``)."""
    data = answer.json()
    action = data.get("action") if isinstance(data, dict) else None
    if not isinstance(action, str) or not action:
        raise Blind(f"{answer.url}: the spot notice has no action: {answer.describe()}")
    return f"AWS spot interruption notice: {action} at {data.get('time', 'an unknown time')}"

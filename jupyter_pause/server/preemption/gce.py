"""GCE: ``instance/preempted`` answers ``TRUE`` once the VM is being preempted (thirty seconds ahead).

The metadata server refuses a request without ``Metadata-Flavor: Google`` (403), and marks its
own answers with the same header, which is how ``probe`` knows it is GCE's.
"""

from __future__ import annotations

from ...vocabulary import Cloud
from .source import NoticeSource, Reading

HEADERS = {"Metadata-Flavor": "Google"}


class Gce(NoticeSource):
    """GCE's preemption flag."""

    cloud = Cloud.GCE
    lead_time = 30.0
    default_url = "http://metadata.google.internal/computeMetadata/v1/instance/preempted"

    async def read(self) -> Reading:
        answer = await self.get(self.url, HEADERS)
        if answer.code != 200:
            raise self.blind(answer)
        flag = answer.body.strip().upper()
        if flag == b"TRUE":
            return Reading("GCE preemption notice")
        if flag == b"FALSE":
            return Reading()
        raise self.blind(answer, hint="expected TRUE or FALSE")

    async def probe(self) -> str:
        answer = await self.get(self.url, HEADERS)
        if answer.code == 200 and answer.headers.get("Metadata-Flavor") == "Google":
            return ""
        return f"{self.url} answered {answer.describe()}" + (
            " without Metadata-Flavor: Google" if answer.code == 200 else ""
        )

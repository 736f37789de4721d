"""Azure: Scheduled Events, where a spot VM's eviction is a ``Preempt`` event (thirty seconds ahead).

``GET .../metadata/scheduledevents?api-version=2020-07-01`` with ``Metadata: true`` answers
``{"DocumentIncarnation": n, "Events": [...]}``; each event names its ``EventType`` and the VMs
it is for (``Resources``). A ``Preempt`` or ``Terminate`` of this VM is the notice. The reader
learns this VM's name from the instance metadata of the same host, only once such an event
shows up; where it cannot, every such event counts as this VM's (a needless pause beats a lost
session). It never approves an event: approving makes the eviction come sooner.

The first request to Scheduled Events turns the service on for the VM, and Azure says its answer
may take up to two minutes; the reader waits that long until it has had one answer.
"""

from __future__ import annotations

import logging
from typing import Any

from ...vocabulary import Cloud
from .source import Blind, NoticeSource, Reading

log = logging.getLogger(__name__)

HEADERS = {"Metadata": "true"}
NAME_PATH = "/metadata/instance/compute/name?api-version=2021-02-01&format=text"
#: The events that end this VM.
ENDINGS = frozenset({"Preempt", "Terminate"})
#: Seconds the first request may take (it turns Scheduled Events on).
FIRST_TIMEOUT = 120.0


class Azure(NoticeSource):
    """Azure's Scheduled Events."""

    cloud = Cloud.AZURE
    lead_time = 30.0
    default_url = "http://169.254.169.254/metadata/scheduledevents?api-version=2020-07-01"

    def __init__(self, url: str, timeout: float) -> None:
        super().__init__(url, timeout)
        self.name_url = self.origin + NAME_PATH
        self.vm_name: str | None = None
        self._name_said = False
        self._answered = False

    async def read(self) -> Reading:
        answer = await self.get(self.url, HEADERS, None if self._answered else max(self.timeout, FIRST_TIMEOUT))
        if answer.code != 200:
            raise self.blind(answer)
        self._answered = True
        data = answer.json()
        events = data.get("Events") if isinstance(data, dict) else None
        if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
            raise self.blind(answer, hint="expected Scheduled Events: {DocumentIncarnation, Events: [...]}")
        endings = [e for e in events if e.get("EventType") in ENDINGS]
        if not endings:
            return Reading()
        name = await self._name()
        ours = [e for e in endings if _for(e, name)]
        if not ours:
            return Reading()
        event = ours[0]
        return Reading(
            f"Azure scheduled event {event.get('EventType')} {event.get('EventId', '')}".rstrip()
            + f" (not before {event.get('NotBefore') or 'now'})"
        )

    async def _name(self) -> str | None:
        """This VM's name as Scheduled Events name it; None when the instance metadata will not say."""
        if self.vm_name is None:
            answer = await self.get(self.name_url, HEADERS)
            name = answer.body.decode(errors="replace").strip() if answer.code == 200 else ""
            if name:
                self.vm_name = name
            elif not self._name_said:
                self._name_said = True
                log.warning(
                    "jupyter-pause: %s answered %s: this VM's name is unknown, so every Preempt or "
                    "Terminate event counts as its own",
                    self.name_url,
                    answer.describe(),
                )
        return self.vm_name

    async def probe(self) -> str:
        answer = await self.get(self.url, HEADERS)
        if answer.code == 200:
            try:
                data = answer.json()
            except Blind as e:
                return str(e)
            if isinstance(data, dict) and "Events" in data:
                return ""
        return f"{self.url} answered {answer.describe()}"


def _for(event: dict[str, Any], name: str | None) -> bool:
    """Whether ``event`` is for the VM called ``name`` (any VM's, when the name is unknown; Azure's
    names are compared as Azure does, ignoring case)."""
    resources = event.get("Resources")
    if name is None or not isinstance(resources, list) or not resources:
        return True
    return name.lower() in {str(r).lower() for r in resources}

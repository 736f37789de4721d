"""jupyter_pause.server.preemption: each cloud's reader against a fake of its metadata service on
127.0.0.1 (IMDSv2 tokens and their renewal, GCE's and Azure's headers, Scheduled Events), the
watcher's choice among them, its warnings said once, and whether a pause fits the notice."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from traitlets.config import Config

import jupyter_pause as jp
from jupyter_pause.protocol import nodestate
from jupyter_pause.server.preemption.aws import Aws
from jupyter_pause.server.preemption.azure import Azure
from jupyter_pause.server.preemption.fit import REFRESH, Fit
from jupyter_pause.server.preemption.gce import Gce
from jupyter_pause.server.preemption.noderecord import Publisher
from jupyter_pause.server.preemption.source import Blind, Reading
from jupyter_pause.server.preemption.watcher import PreemptionWatcher, readers_for
from jupyter_pause.server.settings import PauseServer
from jupyter_pause.store.catalog import Catalog
from jupyter_pause.store.storage import Store
from jupyter_pause.vocabulary import Cloud, WatcherState
from tests.support.metadata import FakeAws, FakeAzure, FakeGce, started

TIMEOUT = 5.0


class Clock:
    """A clock the test moves by hand (the reader's and the fake's, shared)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def aws(clock: Clock) -> Iterator[FakeAws]:
    yield from started(FakeAws(clock=clock))


def aws_reader(fake: FakeAws, clock: Clock, ttl: int = 21600, timeout: float = TIMEOUT) -> Aws:
    return Aws(fake.url(FakeAws.SPOT), timeout, ttl=ttl, clock=clock)


# -- AWS through IMDSv2 -------------------------------------------------------------------------


async def test_aws_reads_the_notice_with_a_token_on_every_request(aws: FakeAws, clock: Clock) -> None:
    reader = aws_reader(aws, clock)
    for _ in range(3):
        assert await reader.read() == Reading()
    aws.interrupt("terminate")
    reading = await reader.read()
    assert reading.notice is not None and reading.notice.startswith("AWS spot interruption notice: terminate at ")
    gets = aws.requests("GET")
    assert gets and all(aws.valid(s.headers.get("X-aws-ec2-metadata-token")) for s in gets), gets
    assert {s.code for s in gets} == {404, 200}  # 404 before the notice, never 401
    (put,) = aws.requests("PUT", FakeAws.TOKEN)  # one token served every poll
    assert put.headers["X-aws-ec2-metadata-token-ttl-seconds"] == "21600"


async def test_the_fake_refuses_a_plain_get(aws: FakeAws, clock: Clock) -> None:
    """What made the old watcher blind: IMDSv2 required, a GET without a token is refused."""
    from urllib.error import HTTPError
    from urllib.request import urlopen

    with pytest.raises(HTTPError) as info:
        urlopen(aws.url(FakeAws.SPOT), timeout=TIMEOUT)
    assert info.value.code == 401


async def test_aws_renews_its_token_before_it_expires(aws: FakeAws, clock: Clock) -> None:
    reader = aws_reader(aws, clock, ttl=100)
    await reader.read()
    clock.now += 80  # within its life: the same token
    await reader.read()
    assert len(aws.requests("PUT")) == 1
    clock.now += 12  # 92 s: under a tenth of its life left, a new one first
    await reader.read()
    assert len(aws.requests("PUT")) == 2
    clock.now += 50  # the first has expired; the second is still good
    assert await reader.read() == Reading()
    assert all(s.code != 401 for s in aws.requests("GET")), "a request went out with an expired token"


async def test_aws_asks_for_a_new_token_on_a_401(aws: FakeAws, clock: Clock) -> None:
    reader = aws_reader(aws, clock)
    await reader.read()
    aws.revoke()  # the service forgot it (a restarted IMDS, a token from before a stop/start)
    aws.interrupt()
    assert (await reader.read()).notice is not None
    assert len(aws.requests("PUT")) == 2
    assert [s.code for s in aws.requests("GET", FakeAws.SPOT)] == [404, 401, 200]


@pytest.mark.parametrize("refusal", [403, 404, 405])
async def test_aws_falls_back_to_plain_gets_where_tokens_are_not_offered(refusal: int, clock: Clock) -> None:
    for fake in started(FakeAws(tokens_required=False, token_answer=refusal, clock=clock)):
        reader = aws_reader(fake, clock)
        assert await reader.read() == Reading()
        fake.interrupt()
        assert (await reader.read()).notice is not None
        assert len(fake.requests("PUT")) == 1  # asked once, then plain GETs
        assert all("X-aws-ec2-metadata-token" not in s.headers for s in fake.requests("GET"))


async def test_a_token_request_without_answer_is_blind_and_names_the_hop_limit(clock: Clock) -> None:
    """A pod behind one hop more than HttpPutResponseHopLimit allows: the PUT's answer never comes."""
    for fake in started(FakeAws(clock=clock)):
        fake.hang = threading.Event()
        with pytest.raises(Blind, match="HttpPutResponseHopLimit to 2") as info:
            await aws_reader(fake, clock, timeout=0.3).read()
        assert "/latest/api/token" in str(info.value)
        fake.hang.set()
        assert not fake.requests("GET"), "fell back to a plain GET after a token request went unanswered"


async def test_aws_refused_forever_is_blind(aws: FakeAws, clock: Clock) -> None:
    aws.refuse_all = True
    with pytest.raises(Blind, match="HTTP 401") as info:
        await aws_reader(aws, clock).read()
    assert aws.url(FakeAws.SPOT) in str(info.value)


async def test_a_notice_aws_does_not_write_is_blind(aws: FakeAws, clock: Clock) -> None:
    aws.interrupt()
    aws.body = "<html>captive portal</html>"
    with pytest.raises(Blind, match="not JSON") as info:
        await aws_reader(aws, clock).read()
    assert str(info.value).startswith(aws.url(FakeAws.SPOT) + ": an answer that is not JSON")


async def test_aws_rebalance_recommendation_is_an_early_warning(aws: FakeAws, clock: Clock) -> None:
    reader = aws_reader(aws, clock)
    assert (await reader.read()).early is None
    when = aws.recommend_rebalance()
    assert await reader.read() == Reading(None, when)
    rebalance = aws.requests("GET", FakeAws.REBALANCE)
    assert rebalance and all(aws.valid(s.headers.get("X-aws-ec2-metadata-token")) for s in rebalance)


# -- GCE ----------------------------------------------------------------------------------------


async def test_gce_reads_its_flag_with_its_header(gce: FakeGce) -> None:
    reader = Gce(gce.url(FakeGce.PREEMPTED), TIMEOUT)
    assert await reader.read() == Reading()
    gce.preempted = True
    assert await reader.read() == Reading("GCE preemption notice")
    assert all(s.headers.get("Metadata-Flavor") == "Google" for s in gce.seen)


async def test_gce_blind_on_a_refusal_or_an_answer_it_does_not_know(gce: FakeGce, azure: FakeAzure) -> None:
    with pytest.raises(Blind, match="HTTP 400"):  # Azure's service wants its own header
        await Gce(azure.url("/metadata/scheduledevents?api-version=2020-07-01"), TIMEOUT).read()
    gce.body = "maybe"
    with pytest.raises(Blind, match="expected TRUE or FALSE"):
        await Gce(gce.url(FakeGce.PREEMPTED), TIMEOUT).read()


# -- Azure --------------------------------------------------------------------------------------


async def test_azure_preempt_or_terminate_of_this_vm_is_the_notice(azure: FakeAzure) -> None:
    reader = Azure(azure.url(FakeAzure.EVENTS), TIMEOUT)
    assert await reader.read() == Reading()
    azure.schedule("Freeze")  # a pause of a few seconds: not the end
    azure.schedule("Preempt", ["another-vm"])  # in the same availability set: not this one
    assert await reader.read() == Reading()
    event = azure.schedule("Preempt", [azure.name.upper()])  # Azure's names ignore case
    notice = (await reader.read()).notice
    assert notice is not None and notice.startswith(f"Azure scheduled event Preempt {event['EventId']}")
    assert all(s.headers.get("Metadata") == "true" for s in azure.seen)
    assert not azure.requests("POST"), "the event was approved (that brings the eviction sooner)"


async def test_azure_terminate_counts_and_a_bad_document_is_blind(azure: FakeAzure) -> None:
    reader = Azure(azure.url(FakeAzure.EVENTS), TIMEOUT)
    azure.schedule("Terminate")
    assert (await reader.read()).notice is not None
    azure.body = json.dumps({"DocumentIncarnation": 3})
    with pytest.raises(Blind, match="Scheduled Events"):
        await reader.read()


# -- the watcher ----------------------------------------------------------------------------------


def manager_with(**settings: Any) -> Any:
    """What the watcher needs of a PauseManager, with no session running."""

    async def notebooks_running() -> list[dict[str, Any]]:
        return []

    return SimpleNamespace(
        settings=PauseServer(**{"preemption_timeout": TIMEOUT, **settings}),
        catalog=None,
        notebooks_running=notebooks_running,
        board=SimpleNamespace(local={}),
    )


def test_nothing_is_watched_unless_asked() -> None:
    assert readers_for(PauseServer()) == ([], False)
    readers, searching = readers_for(PauseServer(preemption_notices="auto"))
    assert searching and [r.cloud for r in readers] == list(Cloud)  # probed only once the server polls
    (named,) = readers_for(PauseServer(preemption_notices="azure"))[0]
    assert named.url == Azure.default_url
    with pytest.raises(Exception, match="preemption_notices"):
        PauseServer(preemption_notices="ibm")


async def test_auto_watches_the_cloud_that_answers(gce: FakeGce, azure: FakeAzure) -> None:
    manager = manager_with(
        preemption_notices="auto",
        aws_spot_url=gce.url(FakeAws.SPOT),  # GCE's server refuses the token request
        gce_preempted_url=gce.url(FakeGce.PREEMPTED),
        azure_scheduled_events_url=gce.url(FakeAzure.EVENTS),  # and Azure's header
    )
    watcher = PreemptionWatcher(manager, *readers_for(manager.settings))
    assert watcher.public()["watchers"][0]["state"] == WatcherState.SEARCHING
    await watcher.poll()
    (watch,) = watcher.public()["watchers"]
    assert (watch["cloud"], watch["state"], watch["url"]) == ("gce", "watching", gce.url(FakeGce.PREEMPTED))
    gce.preempted = True
    await watcher.poll()
    assert watcher.noticed == "GCE preemption notice"
    assert watcher.public()["watchers"][0]["state"] == WatcherState.NOTICED
    assert not azure.seen


async def test_auto_with_no_answer_keeps_searching_and_says_why_once(caplog: pytest.LogCaptureFixture) -> None:
    manager = manager_with(
        preemption_notices="auto",
        preemption_timeout=0.5,
        aws_spot_url="http://127.0.0.1:9/latest/meta-data/spot/instance-action",
        gce_preempted_url="http://127.0.0.1:9/computeMetadata/v1/instance/preempted",
        azure_scheduled_events_url="http://127.0.0.1:9/metadata/scheduledevents?api-version=2020-07-01",
    )
    watcher = PreemptionWatcher(manager, *readers_for(manager.settings))
    with caplog.at_level(logging.WARNING, "jupyter_pause"):
        for _ in range(3):
            await watcher.poll()
    (watch,) = watcher.public()["watchers"]
    assert watch["state"] == "searching" and all(f"{c}: " in watch["error"] for c in Cloud), watch
    assert sum("no cloud metadata service answered" in r.getMessage() for r in caplog.records) == 1


async def test_a_blind_watcher_says_so_once_and_recovers(
    aws: FakeAws, gce: FakeGce, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    aws.refuse_all = True
    manager = manager_with(aws_spot_url=aws.url(FakeAws.SPOT), gce_preempted_url=gce.url(FakeGce.PREEMPTED))
    watcher = PreemptionWatcher(manager, *readers_for(manager.settings))
    with caplog.at_level(logging.WARNING, "jupyter_pause"):
        for _ in range(4):
            await watcher.poll()
    by_cloud = {w["cloud"]: w for w in watcher.public()["watchers"]}
    assert by_cloud["aws"]["state"] == "blind" and "HTTP 401" in by_cloud["aws"]["error"], by_cloud
    assert by_cloud["gce"]["state"] == "watching" and not by_cloud["gce"]["error"]
    said = [r for r in caplog.records if "cannot read its notice" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING and "aws" in said[0].getMessage()
    aws.refuse_all = False
    await watcher.poll()
    assert watcher.public()["watchers"][0] | {"since": 0} == by_cloud["aws"] | {
        "state": "watching",
        "error": "",
        "polls": 5,
        "since": 0,
    }


async def test_the_kernels_are_told_of_a_blind_watcher_until_the_server_stops(
    aws: FakeAws, clock: Clock, tmp_path: Path
) -> None:
    aws.refuse_all = True
    manager = manager_with(aws_spot_url=aws.url(FakeAws.SPOT))
    publisher = Publisher(nodestate.record_path(os.getpid(), tmp_path))
    watcher = PreemptionWatcher(manager, *readers_for(manager.settings), publisher)
    await watcher.poll()
    told = nodestate.read(os.getpid(), tmp_path)
    assert told is not None and told.fit is None  # no session has a checkpoint to go by
    ((cloud, state, error),) = [(w.cloud, w.state, w.error) for w in told.watchers]
    assert (cloud, state) == ("aws", "blind") and "HTTP 401" in error and aws.url(FakeAws.SPOT) in error
    written = publisher.path.stat().st_ino
    await watcher.poll()
    assert publisher.path.stat().st_ino == written  # nothing changed: not rewritten
    aws.refuse_all = False
    await watcher.poll()
    told = nodestate.read(os.getpid(), tmp_path)
    assert told is not None and [(w.state, w.error) for w in told.watchers] == [("watching", "")]
    publisher.remove()  # the server stops
    aws.refuse_all = True
    await watcher.poll()  # a poll still under way
    assert not publisher.path.exists()


# -- does a pause fit the notice? -----------------------------------------------------------------


def test_the_advice_names_the_checkpoint_time_and_the_notice() -> None:
    slow = Fit("gce", 30.0, 95.2, "train.ipynb", "20260101-000000-abcdef")
    assert not slow.fits
    assert slow.advice().startswith("your last checkpoint took 95 s; a GCE notice gives 30 s: ")
    assert "checkpoint periodically" in slow.advice() and "--every" in slow.advice()
    quick = Fit("aws", 120.0, 95.2, "train.ipynb", "20260101-000000-abcdef")
    assert (
        quick.fits
        and quick.public()["advice"] == "your last checkpoint took 95 s; an AWS notice gives 120 s: a pause fits"
    )


def _watching_gce(url: str, clock: Clock) -> tuple[PreemptionWatcher, dict[str, Any]]:
    """A watcher of GCE's notice (its lead time known without a poll) over the store at ``url``,
    on ``clock``; and the server's view of its sessions' states, which the test changes."""
    states: dict[str, Any] = {}
    manager = SimpleNamespace(
        settings=PauseServer(preemption_notices="gce", preemption_timeout=TIMEOUT),
        catalog=Catalog(Store(url)),
        board=SimpleNamespace(local=states),
    )
    watcher = PreemptionWatcher(manager, *readers_for(manager.settings))
    watcher.durations.clock = clock
    return watcher, states


@pytest.mark.usefixtures("new_process")
def test_the_fit_lists_a_sessions_checkpoints_once_a_minute_not_at_every_poll(tmp_path, clock, monkeypatch):
    """The watcher asks at every poll (every 5 s) for every running session; the store is asked
    once, and again only after ``fit.REFRESH``: a checkpoint the kernel took itself shows then."""
    url = str(tmp_path)
    first = {s: jp.checkpoint(store=url, session=s, namespace={"x": 1}).manifest for s in ("a", "b")}
    watcher, _ = _watching_gce(url, clock)
    listed: list[str] = []
    real = Store.list
    monkeypatch.setattr(Store, "list", lambda self, prefix: listed.append(prefix) or real(self, prefix))
    fits = [watcher.fit(["a", "b"]) for _ in range(5)]
    assert fits[0] is not None and fits.count(fits[0]) == 5
    assert sorted(listed) == ["sessions/a/checkpoints/", "sessions/b/checkpoints/"]

    newer = jp.checkpoint(store=url, session="a", namespace={"x": 2}).manifest  # %checkpoint in the kernel
    watcher.fit(["a", "b"])
    assert len(listed) == 2 and watcher.durations.newest("a")[0] == first["a"].id
    clock.now += REFRESH
    watcher.fit(["a", "b"])
    # the newest by id (ids begin with the second they were taken in)
    assert len(listed) == 4 and watcher.durations.newest("a")[0] == max(first["a"].id, newer.id)


@pytest.mark.usefixtures("new_process")
def test_a_checkpoint_this_server_takes_shows_in_the_fit_at_once(tmp_path, clock, monkeypatch):
    """A pause, or an early warning's checkpoint, changes the session's state here: that session's
    checkpoints are listed again at the next poll, the others' are not."""
    url = str(tmp_path)
    watcher, states = _watching_gce(url, clock)
    assert watcher.fit(["a", "b"]) is None  # no checkpoint yet: nothing to go by
    paused = jp.checkpoint(store=url, session="a", namespace={"x": 1}).manifest
    listed: list[str] = []
    real = Store.list
    monkeypatch.setattr(Store, "list", lambda self, prefix: listed.append(prefix) or real(self, prefix))
    states["a"] = SimpleNamespace(updated=clock.now)  # the server's own pause moved its state
    fit = watcher.fit(["a", "b"])
    assert fit is not None and fit["checkpoint"] == paused.id and fit["session"] == "a"
    assert listed == ["sessions/a/checkpoints/"]


# -- the README's block -----------------------------------------------------------------------------

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.mark.skipif(not README.is_file(), reason="no README beside the tests (an installed package)")
def test_the_readme_block_turns_the_watcher_on_as_it_says() -> None:
    """The block a user pastes into jupyter_server_config.py, run as written."""
    section = README.read_text("utf-8").split("## Spot and preemptible VMs\n", 1)[1]
    block = section.split("```python\n", 1)[1].split("```", 1)[0]
    config = Config()
    exec(block, {"c": config})
    settings = PauseServer(config=config)
    assert settings.preemption_notices == "auto" and settings.preemption_grace == 10.0
    readers, searching = readers_for(settings)
    assert searching and [(r.cloud, r.lead_time) for r in readers] == [("aws", 120), ("gce", 30), ("azure", 30)]

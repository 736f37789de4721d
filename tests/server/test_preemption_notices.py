"""Preemption notices through a real Jupyter server with real kernels, each cloud faked on 127.0.0.1
as its metadata service behaves (tests/support/metadata.py): a notice pauses the session by itself and
it resumes ``restored``; no notice, no pause; AWS's rebalance recommendation checkpoints without
pausing, once; a watcher that cannot read its notice is named in the status, the log and its
kernels' own status."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from queue import Empty
from typing import Any

import pytest

from jupyter_pause.notebook import session_from_path
from jupyter_pause.store.catalog import Catalog
from jupyter_pause.store.manifest import Manifest
from jupyter_pause.store.storage import Store
from tests.support.metadata import FakeAws, FakeAzure, FakeGce, until
from tests.support.server_helpers import call, open_kernel, run, server_config, status, wait_state, write_notebook

pytestmark = pytest.mark.integration

#: Seconds between the watcher's polls in these tests.
POLL = 0.2
#: A notice must have paused the session within this many seconds (a kernel's checkpoint and stop included).
PAUSED_WITHIN = 60.0
CELL = "x = 41\nnotes = {'epoch': 3, 'loss': [0.5, 0.25]}"
CHECK = "print(x + 1, notes['loss'][-1])"


# -- the server, its fakes, and what the tests read back ---------------------------------------


@pytest.fixture
def jp_server_config(store: Path, pause_server: dict[str, Any]) -> dict[str, Any]:
    return server_config(str(store), preemption_poll_interval=POLL, **pause_server)


async def preemption(fetch: Any) -> dict[str, Any]:
    """The ``preemption`` part of the server's status (GET .../status without a path)."""
    return json.loads((await fetch("jupyter-pause", "api", "status")).body)["preemption"]


async def watching(fetch: Any, cloud: str, polls: int) -> dict[str, Any]:
    """Wait until the watcher of ``cloud`` has read its notice ``polls`` times more, finding none."""

    async def read() -> dict[str, Any] | None:
        (watch,) = (await preemption(fetch))["watchers"]
        return watch if watch["cloud"] == cloud and watch["state"] == "watching" and watch["polls"] >= polls else None

    return await until(read, 30, f"the {cloud} watcher reading its notice {polls} times")


async def kernel_ids(fetch: Any) -> list[str]:
    return [k["id"] for k in json.loads((await fetch("api", "kernels")).body)]


async def kernel_of(fetch: Any, path: str) -> str:
    (kernel,) = [m["kernel"]["id"] for m in json.loads((await fetch("api", "sessions")).body) if m["path"] == path]
    return kernel


def checkpoints(store: Path, path: str) -> list[Manifest]:
    return Catalog(Store(str(store))).checkpoints(session_from_path(path))


async def running(fetch: Any, serverapp: Any, root: Path, name: str) -> tuple[str, str]:
    """A notebook with a kernel that ran ``CELL``: (path, kernel id)."""
    path = write_notebook(root, name, CELL)
    kernel = await open_kernel(fetch, path)
    await run(serverapp, kernel, CELL)
    return path, kernel


async def left_alone(fetch: Any, path: str, kernel: str, store: Path, cloud: str, polls: int) -> None:
    """No notice, no pause: the watcher reads on, the kernel runs, no checkpoint is taken."""
    await watching(fetch, cloud, polls)
    assert (await status(fetch, path))["state"] == "ready"
    assert kernel in await kernel_ids(fetch)
    assert not checkpoints(store, path)


async def paused_by_itself(fetch: Any, path: str, kernel: str, store: Path) -> Manifest:
    """The notice came: the session ends paused, on a checkpoint the notice triggered, its kernel gone."""
    done = await wait_state(fetch, path, ("paused", "failed"), timeout=PAUSED_WITHIN)
    assert done["state"] == "paused", done
    newest = checkpoints(store, path)[0]
    assert newest.id == done["checkpoint"] and newest.trigger == "spot"
    assert kernel not in await kernel_ids(fetch)
    return newest


async def resumes_restored(fetch: Any, serverapp: Any, path: str, paused: Manifest) -> None:
    await call(fetch, "resume", path=path)
    ready = await wait_state(fetch, path, ("ready", "failed"))
    assert ready["state"] == "ready" and ready["verdict"] == "restored", ready
    assert ready["checkpoint"] == paused.id
    assert (await run(serverapp, await kernel_of(fetch, path), CHECK)).split() == ["42", "0.25"]


# -- one cloud each: a notice pauses, the session comes back ------------------------------------


class TestAws:
    """IMDSv2 required, chosen by name."""

    @pytest.fixture
    def pause_server(self, aws: FakeAws) -> dict[str, Any]:
        return {"preemption_notices": "aws", "aws_spot_url": aws.url(FakeAws.SPOT)}

    async def test_rebalance_checkpoints_and_the_notice_pauses(
        self, jp_fetch, jp_serverapp, jp_root_dir, store, manager, aws
    ):
        path, kernel = await running(jp_fetch, jp_serverapp, jp_root_dir, "spot/train.ipynb")
        await left_alone(jp_fetch, path, kernel, store, "aws", 3)

        # an early warning: one checkpoint of the session, which runs on
        aws.recommend_rebalance()

        async def checkpointed() -> dict[str, Any] | None:
            now = await status(jp_fetch, path)
            return now if now["state"] == "ready" and "rebalance recommendation" in now["detail"] else None

        taken = await until(checkpointed, 60, "a checkpoint on the rebalance recommendation")
        assert "the kernel keeps running" in taken["detail"], taken
        assert taken["kernel"] == "python3"  # what a resume elsewhere starts, should this node be lost
        polls = (await preemption(jp_fetch))["watchers"][0]["polls"]
        await watching(jp_fetch, "aws", polls + 3)  # the recommendation stays up: no second checkpoint
        assert [m.trigger for m in checkpoints(store, path)] == ["rebalance"]
        assert kernel in await kernel_ids(jp_fetch)

        # the interruption notice: paused by itself, then back as it was
        aws.interrupt()
        paused = await paused_by_itself(jp_fetch, path, kernel, store)
        assert paused.parent == checkpoints(store, path)[1].id  # written on top of the rebalance one
        (watch,) = (await preemption(jp_fetch))["watchers"]
        assert watch["state"] == "noticed" and watch["noticed"].startswith("AWS spot interruption notice: terminate")
        gets = aws.requests("GET")
        assert all(aws.valid(s.headers.get("X-aws-ec2-metadata-token")) for s in gets), "a GET without a good token"
        assert {s.code for s in gets} <= {200, 404}
        await resumes_restored(jp_fetch, jp_serverapp, path, paused)
        await manager.wait()

    async def test_a_rebalance_checkpoint_waits_for_the_running_cell(
        self, jp_fetch, jp_serverapp, jp_root_dir, store, manager, aws, tmp_path
    ):
        path, kernel = await running(jp_fetch, jp_serverapp, jp_root_dir, "busy.ipynb")
        go_on = tmp_path / "go-on"
        async with long_cell(jp_serverapp, kernel, go_on):
            aws.recommend_rebalance()
            polls = (await preemption(jp_fetch))["watchers"][0]["polls"]
            await watching(jp_fetch, "aws", polls + 3)
            assert not checkpoints(store, path), "the early warning checkpointed in the middle of a cell"
            assert (await status(jp_fetch, path))["state"] == "ready"

            go_on.touch()  # the cell ends: the checkpoint follows, and the kernel runs on
            await until(lambda: taken(store, path), 60, "the checkpoint after the cell")
            assert [m.trigger for m in checkpoints(store, path)] == ["rebalance"]
            assert kernel in await kernel_ids(jp_fetch)
            await manager.wait()

    async def test_the_notice_does_not_wait_for_a_rebalance_checkpoint_that_waits(
        self, jp_fetch, jp_serverapp, jp_root_dir, store, manager, aws, tmp_path
    ):
        path, kernel = await running(jp_fetch, jp_serverapp, jp_root_dir, "busy.ipynb")
        go_on = tmp_path / "go-on"
        async with long_cell(jp_serverapp, kernel, go_on):
            aws.recommend_rebalance()
            polls = (await preemption(jp_fetch))["watchers"][0]["polls"]
            await watching(jp_fetch, "aws", polls + 2)
            aws.interrupt()

            async def pausing() -> bool:
                return (await status(jp_fetch, path))["state"] == "checkpointing"

            await until(pausing, 30, "the pause on the notice under way while the cell runs")
            go_on.touch()  # the cell ends: the pause takes its checkpoint; the early one is dropped
            paused = await paused_by_itself(jp_fetch, path, kernel, store)
            assert [m.trigger for m in checkpoints(store, path)] == ["spot"]
            await manager.wait()
        await resumes_restored(jp_fetch, jp_serverapp, path, paused)
        await manager.wait()


@asynccontextmanager
async def long_cell(serverapp: Any, kernel: str, go_on: Path) -> AsyncIterator[None]:
    """A cell running in ``kernel`` until the file ``go_on`` exists. The server's view of the
    kernel is then set back to idle, as it is in the moment between a cell's start and the server
    reading its "busy": what acts on the kernel must ask the kernel, not trust that view."""
    managed = serverapp.kernel_manager.get_kernel(kernel)
    client = managed.client()
    client.start_channels()
    try:
        # The kernel says its state around each request: a server whose watch of its output
        # joined after the first cell's last status (both slow on a loaded machine) hears it now.
        await client.wait_for_ready(timeout=30)
        await until(lambda: idle(managed), 30, "the kernel idle after its first cell")
        started = client.execute(f"import os, time\nwhile not os.path.exists({str(go_on)!r}):\n    time.sleep(0.05)")
        await until(lambda: cell_started(client, started), 30, "the long cell started")
        await until(lambda: busy(managed), 30, "the server seeing the kernel busy")
        managed.execution_state = "idle"  # nothing overwrites it before the cell ends
        yield
    finally:
        go_on.touch()
        client.stop_channels()


async def taken(store: Path, path: str) -> list[Manifest]:
    return checkpoints(store, path)


async def idle(managed: Any) -> bool:
    return managed.execution_state == "idle"


async def busy(managed: Any) -> bool:
    return managed.execution_state == "busy"


async def cell_started(client: Any, msg_id: str) -> bool:
    """Whether the kernel began running the cell ``msg_id`` (read from the client's IOPub)."""
    try:
        msg = await client.get_iopub_msg(timeout=0.1)
    except Empty:  # nothing yet
        return False
    return msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "execute_input"


class TestGceFoundByAuto:
    """``"auto"``: the AWS and Azure probes reach GCE's service, which refuses both."""

    @pytest.fixture
    def pause_server(self, gce: FakeGce) -> dict[str, Any]:
        return {
            "preemption_notices": "auto",
            "aws_spot_url": gce.url(FakeAws.SPOT),
            "gce_preempted_url": gce.url(FakeGce.PREEMPTED),
            "azure_scheduled_events_url": gce.url(FakeAzure.EVENTS),
        }

    async def test_notice_pauses_and_the_status_says_whether_a_pause_fits(
        self, jp_fetch, jp_serverapp, jp_root_dir, store, manager, gce
    ):
        path, kernel = await running(jp_fetch, jp_serverapp, jp_root_dir, "gce.ipynb")
        await left_alone(jp_fetch, path, kernel, store, "gce", 3)
        assert (await preemption(jp_fetch))["fit"] is None  # no checkpoint yet: nothing to go by

        gce.preempted = True
        paused = await paused_by_itself(jp_fetch, path, kernel, store)
        polls = gce.requests("GET", FakeGce.PREEMPTED)
        assert polls and all(s.headers.get("Metadata-Flavor") == "Google" for s in polls)
        assert {s.code for s in gce.seen if s not in polls} == {403}  # the other clouds' probes
        gce.preempted = False
        await resumes_restored(jp_fetch, jp_serverapp, path, paused)

        fit = (await preemption(jp_fetch))["fit"]
        took = paused.timings["committed"] - paused.timings["requested"]
        assert fit["cloud"] == "gce" and fit["lead_time"] == 30 and fit["checkpoint"] == paused.id, fit
        assert fit["seconds"] == pytest.approx(took) and fit["fits"] is (took <= 30)
        assert fit["advice"].startswith(f"your last checkpoint took {took:.0f} s; a GCE notice gives 30 s")
        await manager.wait()


class TestAzure:
    """Scheduled Events at the URL setting alone (``preemption_notices`` left empty)."""

    @pytest.fixture
    def pause_server(self, azure: FakeAzure) -> dict[str, Any]:
        return {"azure_scheduled_events_url": azure.url(FakeAzure.EVENTS)}

    async def test_preempt_of_this_vm_pauses(self, jp_fetch, jp_serverapp, jp_root_dir, store, manager, azure):
        path, kernel = await running(jp_fetch, jp_serverapp, jp_root_dir, "azure.ipynb")
        azure.schedule("Preempt", ["another-vm"])  # the same availability set: not this VM
        azure.schedule("Freeze")
        await left_alone(jp_fetch, path, kernel, store, "azure", 3)

        azure.schedule("Preempt")
        paused = await paused_by_itself(jp_fetch, path, kernel, store)
        (watch,) = (await preemption(jp_fetch))["watchers"]
        assert watch["state"] == "noticed" and watch["noticed"].startswith("Azure scheduled event Preempt")
        assert not azure.requests("POST"), "the watcher approved the eviction"
        assert all(s.headers.get("Metadata") == "true" for s in azure.seen)
        await resumes_restored(jp_fetch, jp_serverapp, path, paused)
        await manager.wait()


# -- never silent ---------------------------------------------------------------------------------


class TestBlind:
    """AWS answering 401 to every read; a "GCE" URL that is Azure's service, which wants its own header."""

    @pytest.fixture
    def pause_server(self, aws: FakeAws, azure: FakeAzure) -> dict[str, Any]:
        aws.refuse_all = True
        return {"aws_spot_url": aws.url(FakeAws.SPOT), "gce_preempted_url": azure.url(FakeAzure.EVENTS)}

    async def test_a_watcher_that_cannot_read_is_named_in_the_status_and_the_log(
        self, jp_fetch, store, manager, aws, azure, caplog
    ):
        caplog.set_level(logging.WARNING, "jupyter_pause")

        async def both_blind() -> dict[str, Any] | None:
            watches = {w["cloud"]: w for w in (await preemption(jp_fetch))["watchers"]}
            return watches if all(w["state"] == "blind" and w["polls"] >= 4 for w in watches.values()) else None

        watches = await until(both_blind, 30, "both watchers blind, for four polls")
        assert set(watches) == {"aws", "gce"}
        assert "HTTP 401" in watches["aws"]["error"] and aws.url(FakeAws.SPOT) in watches["aws"]["error"]
        assert "HTTP 400" in watches["gce"]["error"] and "Required metadata header" in watches["gce"]["error"]
        said = [r.getMessage() for r in caplog.records if "cannot read its notice" in r.getMessage()]
        assert len(said) == 2, said  # once each, however many polls
        assert any("aws" in s and "HTTP 401" in s for s in said) and any("gce" in s and "HTTP 400" in s for s in said)
        scraped = (await jp_fetch("metrics")).body.decode()
        for cloud in ("aws", "gce"):
            assert f'jupyter_pause_preemption_watchers{{cloud="{cloud}",state="blind"}} 1.0' in scraped

    async def test_the_kernels_status_names_the_blind_watcher(
        self, jp_fetch, jp_serverapp, jp_root_dir, manager, aws, azure
    ):
        path = write_notebook(jp_root_dir, "blind.ipynb", CELL)
        kernel = await open_kernel(jp_fetch, path)

        async def told(probe: str, *wanted: str) -> str | None:
            out = await run(jp_serverapp, kernel, probe)
            return out if all(w in out for w in wanted) else None

        said = await until(
            lambda: told(TEXT_STATUS, "AWS preemption notice: blind", "GCE preemption notice: blind"),
            60,
            "the kernel's text status naming both blind watchers",
        )
        aws_line = next(line for line in said.splitlines() if line.startswith("AWS preemption notice"))
        assert "HTTP 401" in aws_line and aws.url(FakeAws.SPOT) in aws_line, said
        widget = await run(jp_serverapp, kernel, WIDGET_STATUS)
        assert "AWS preemption notice: blind" in widget and "HTTP 401" in widget, widget

        jp_serverapp.remove_server_info_file()  # what the server does first when it stops
        polls = (await preemption(jp_fetch))["watchers"][0]["polls"]
        await until(lambda: blind_for(jp_fetch, polls + 2), 30, "two more polls after the record was removed")
        assert await run(jp_serverapp, kernel, TEXT_STATUS) == (await run(jp_serverapp, kernel, ACTIVITY_LINE))


class TestAutoFindsNoCloud:
    """``"auto"`` where no metadata service answers: every probe is refused."""

    @pytest.fixture
    def pause_server(self) -> dict[str, Any]:
        nowhere = "http://127.0.0.1:9"
        return {
            "preemption_notices": "auto",
            "preemption_timeout": 0.5,
            "aws_spot_url": f"{nowhere}/latest/meta-data/spot/instance-action",
            "gce_preempted_url": f"{nowhere}/computeMetadata/v1/instance/preempted",
            "azure_scheduled_events_url": f"{nowhere}/metadata/scheduledevents?api-version=2020-07-01",
        }

    async def test_the_kernels_status_says_no_metadata_service_answered_as_the_servers_does(
        self, jp_fetch, jp_serverapp, jp_root_dir, manager
    ):
        async def searched() -> dict[str, Any] | None:
            (watch,) = (await preemption(jp_fetch))["watchers"]
            return watch if watch["state"] == "searching" and watch["error"] else None

        watch = await until(searched, 30, "the server's status naming what each probe got")
        assert watch["cloud"] is None and all(f"{c}: " in watch["error"] for c in ("aws", "gce", "azure")), watch
        path = write_notebook(jp_root_dir, "searching.ipynb", CELL)
        kernel = await open_kernel(jp_fetch, path)

        async def told() -> str | None:
            out = await run(jp_serverapp, kernel, TEXT_STATUS)
            return out if "no cloud metadata service answered yet" in out else None

        said = await until(told, 30, "the kernel's text status saying no metadata service answered")
        line = next(x for x in said.splitlines() if x.startswith("preemption notices:"))
        assert "a preemption would go unseen until one does" in line, line
        assert all(f"{c}: " in line for c in ("aws", "gce", "azure")), line
        widget = await run(jp_serverapp, kernel, WIDGET_STATUS)
        assert "no cloud metadata service answered yet" in widget, widget


#: The kernel's text status, as a user calls it.
TEXT_STATUS = "import jupyter_pause\nprint(repr(jupyter_pause.status(widget=False)))"
#: The kernel's own line alone (what the text status is with nothing from the server).
ACTIVITY_LINE = "from jupyter_pause.session import activity\nprint(activity.current.text())"
#: What the status widget shows of the server's record.
WIDGET_STATUS = "import jupyter_pause\nw = jupyter_pause.status(widget=True)\nprint(w.server.value)\nw.close()"


async def blind_for(fetch: Any, polls: int) -> bool:
    """Whether the watchers, still blind, have each read their notice ``polls`` times."""
    return all(w["state"] == "blind" and w["polls"] >= polls for w in (await preemption(fetch))["watchers"])

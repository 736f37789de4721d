"""The status widget's model and view, in a real kernel: states, progress values, last outcome."""

from __future__ import annotations

import json
import os
import threading

import pytest

from jupyter_pause import units
from jupyter_pause.kernel.noderecord import Follower, lines
from jupyter_pause.kernel.widget import status
from jupyter_pause.protocol import nodestate
from jupyter_pause.protocol.nodestate import SERVER_PID, FitRecord, NodeState, WatcherRecord
from jupyter_pause.session import activity
from jupyter_pause.session.activity import Activity

#: What a server whose AWS watcher gets 401, and whose last checkpoint took too long, tells its kernels.
TROUBLE = NodeState(
    os.getpid(),
    (
        WatcherRecord("aws", "blind", "http://127.0.0.1:9/latest/meta-data/spot/instance-action answered HTTP 401"),
        WatcherRecord("azure", "watching"),
    ),
    FitRecord(False, "your last checkpoint took 95 s; an AZURE notice gives 30 s: checkpoint periodically"),
)


def test_activity_transitions_and_text():
    seen = []
    act = Activity()
    act.observers.append(lambda a: seen.append((a.state, a.done, a.total)))
    act.begin("checkpointing", "writing", total=1000)
    act.progress(400)
    act.progress(5000)  # never past the total
    act.finish("20261129-000000-abcdef", 0.0, verdict=None)
    assert seen == [
        ("checkpointing", 0, 1000),
        ("checkpointing", 400, 1000),
        ("checkpointing", 1000, 1000),
        ("ready", 1000, 1000),
    ]
    assert "last checkpoint 20261129-000000-abcdef" in act.text()
    act.fail("store unreachable")
    assert act.text().startswith("failed: store unreachable")
    with pytest.raises(ValueError):
        act.begin("sleeping")


def test_progress_reaches_observers_at_most_every_interval_and_at_the_end(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(activity.time, "monotonic", lambda: clock[0])
    seen = []
    act = Activity()
    act.observers.append(lambda a: seen.append(a.done))
    act.begin("restoring", "reading", total=1000)
    for done in range(1, 999):  # hundreds of blobs arriving within one interval
        act.progress(done)
    assert seen == [0, 1] and act.done == 998  # the first is shown; the rest are kept, not sent
    clock[0] += 2 * activity.PROGRESS_INTERVAL
    act.progress(999)
    act.progress(1000)  # all through: shown at once
    assert seen == [0, 1, 999, 1000]
    act.begin("checkpointing", "writing")  # of a size not known yet: each byte count throttled alike
    act.progress(10)
    act.progress(20)
    assert seen[-2:] == [0, 10] and act.done == 20


def test_status_outside_a_kernel_is_text():
    shown = status()
    assert not hasattr(shown, "view")  # no widget without a kernel front end
    assert repr(shown) == activity.current.text()


def test_the_text_status_says_what_the_servers_record_needs_attention_for(jp_environ, monkeypatch):
    monkeypatch.setenv(SERVER_PID, str(os.getpid()))
    path = nodestate.record_path(os.getpid())
    nodestate.write(TROUBLE, path)
    first, *said = repr(status(widget=False)).splitlines()
    assert first == activity.current.text()
    assert said == [
        "AWS preemption notice: blind, a preemption would go unseen: "
        "http://127.0.0.1:9/latest/meta-data/spot/instance-action answered HTTP 401",
        "preemption: your last checkpoint took 95 s; an AZURE notice gives 30 s: checkpoint periodically",
    ]  # the watcher that reads its notice is not named
    nodestate.write(NodeState(os.getpid(), TROUBLE.watchers[1:], FitRecord(True, "a pause fits")), path)
    assert repr(status(widget=False)) == activity.current.text()  # all is well: nothing more
    nodestate.remove(path)
    assert lines(nodestate.read()) == []


def test_auto_that_found_no_cloud_is_said_with_what_each_probe_got(jp_environ, monkeypatch):
    monkeypatch.setenv(SERVER_PID, str(os.getpid()))
    path = nodestate.record_path(os.getpid())
    probes = "aws: http://127.0.0.1:9/latest/api/token answered connection refused; gce: timed out"
    nodestate.write(NodeState(os.getpid(), (WatcherRecord("", "searching", probes),), None), path)
    assert repr(status(widget=False)).splitlines()[1:] == [
        "preemption notices: no cloud metadata service answered yet, a preemption would go unseen until one "
        f"does ({probes})"
    ]
    nodestate.write(NodeState(os.getpid(), (WatcherRecord("", "searching", ""),), None), path)
    assert lines(nodestate.read()) == []  # the first search has not ended: nothing to say yet
    nodestate.remove(path)


def test_a_change_of_the_record_reaches_its_followers_within_the_refresh_period(jp_environ, monkeypatch):
    monkeypatch.setenv(SERVER_PID, str(os.getpid()))
    follower = Follower(period=0.05)
    heard: list[NodeState | None] = []
    changed = threading.Event()

    def hear(state: NodeState | None) -> None:
        heard.append(state)
        changed.set()

    follower.follow(hear)
    thread = follower._thread
    try:
        nodestate.write(TROUBLE, nodestate.record_path(os.getpid()))  # written while no one asks
        assert changed.wait(10), "the change never reached the follower"
        assert heard == [TROUBLE] and follower.current == TROUBLE
    finally:
        follower.unfollow(hear)
    assert thread is not None
    thread.join(10)
    assert not thread.is_alive()  # the last follower gone, the thread ends


WIDGET_PROBE = r"""
import json, jupyter_pause
from jupyter_pause.session import activity
w = jupyter_pause.status()
states = []
activity.current.observers.append(
    lambda a: states.append([a.state, a.done, a.total, round(w.bar.value, 3), w.bytes.value])
)
import torch
big = torch.zeros(3_000_000)
r = jupyter_pause.checkpoint(session="w")
print(json.dumps({"kind": type(w).__name__, "states": states, "info": w.info.value, "state": w.state.value}))
"""


@pytest.mark.integration
def test_widget_follows_a_real_checkpoint_in_a_kernel(start_kernel, tmp_path):
    (tmp_path / "a").mkdir()
    kernel = start_kernel(tmp_path / "a", JUPYTER_PAUSE_STORE=str(tmp_path / "store"))
    out = kernel.run(WIDGET_PROBE).ok().stdout
    data = json.loads(out.strip().splitlines()[-1])
    assert data["kind"] == "StatusWidget"
    states = data["states"]
    assert states[0][0] == "checkpointing" and states[-1][0] == "ready"
    writing = [s for s in states if s[0] == "checkpointing" and s[2] > 12_000_000]
    assert writing, states  # the write step knows its total
    done = [s[1] for s in writing]
    assert done == sorted(done) and done[-1] == writing[-1][2]  # progress only grows, to the total
    total = units.size(writing[-1][2])
    assert writing[-1][3] == 1.0 and writing[-1][4] == f"{total} / {total}"  # "12 MB / 12 MB"
    assert "last checkpoint" in data["info"] and ">ready<" in data["state"]

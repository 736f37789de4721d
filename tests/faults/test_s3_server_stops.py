"""The S3 server (a real SeaweedFS, this test's own) stops in the middle of a checkpoint."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid

import pytest

import tests.support.s3_server as s3
from jupyter_pause.store.catalog import Catalog
from jupyter_pause.store.storage import Store
from tests.support.verifying import check_verify_rows, cli_verify, wait_cell

pytestmark = pytest.mark.integration

SESSION = "s3fault"
#: Fail fast while the server is down instead of retrying for minutes.
OPTIONS = {"config_kwargs": {"connect_timeout": 2, "read_timeout": 5, "retries": {"max_attempts": 2}}}


def _hard_stop(server: s3.S3Server) -> None:
    """Stop the server mid-request, as a store going down would.

    SIGTERM rather than SIGKILL: a SIGKILLed ``weed mini`` can lose metadata it had already
    acknowledged (once seen here: the checkpoint committed just before vanished), which would
    test SeaweedFS's durability rather than ours. It still drops our in-flight writes.
    """
    if server.process.poll() is None:
        server.process.terminate()
        try:
            server.process.wait(s3.STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait(s3.STOP_TIMEOUT)
    s3._remove_grpc_sockets(server.ports)


def _restart(server: s3.S3Server) -> None:
    """Start ``weed mini`` again on the same ports and the same data folder."""
    pairs = [(server.ports[f"{name}.port"], server.ports[f"{name}.port.grpc"]) for name in s3.SERVICES]
    problem = "not started"
    for _ in range(3):  # a port of the killed server can take a moment to be free again
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(s3, "free_port_pairs", lambda count: pairs)
            server.process, ports = s3._launch(s3.weed_binary(), server.directory, server.log)
        assert ports == server.ports
        problem = s3._wait_ready(server, ports["s3.port"], time.monotonic() + s3.START_TIMEOUT)
        if problem is None:
            return
        _hard_stop(server)
        time.sleep(1)
    pytest.fail(f"SeaweedFS did not come back: {problem}\n{server.log_tail()}")


@pytest.fixture
def own_s3():
    """A SeaweedFS server for this test alone (the session's shared one is never stopped)."""
    with s3.running_server() as server:
        yield server


def _pending(fs, server: s3.S3Server, prefix: str) -> set[str]:
    """Pending notes (checkpoints being written) in the store, read from the server itself."""
    fs.invalidate_cache()
    try:
        found = fs.find(f"{server.bucket}/{prefix}/sessions/{SESSION}/pending/", detail=True)
    except FileNotFoundError:
        return set()
    return {path for path, info in found.items() if path.endswith(".json") and info.get("size")}


@pytest.mark.s3
def test_store_stops_mid_checkpoint_then_comes_back(own_s3, start_kernel, tmp_path, monkeypatch, tally):
    s3.use_aws_env(monkeypatch, own_s3.env())
    prefix = uuid.uuid4().hex
    url = f"s3://{own_s3.bucket}/{prefix}"
    env = {
        "JUPYTER_PAUSE_STORE": url,
        "JUPYTER_PAUSE_SESSION": SESSION,
        "JUPYTER_PAUSE_STORAGE_OPTIONS": json.dumps(OPTIONS),
    }
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = start_kernel(tmp_path / "a", **env)
    a.run(
        "%load_ext jupyter_pause\nimport numpy as np\nmarker = 'first'\nsmall = np.arange(1000.)\n"
        "%checkpoint --tag first"
    ).ok()
    a.run("g = np.random.default_rng(7); big = [g.random(2_000_000) for _ in range(16)]\nmarker = 'second'").ok()

    fs = own_s3.filesystem()
    before = _pending(fs, own_s3, prefix)
    msg_id = a.send("%checkpoint --tag second")
    deadline = time.monotonic() + 30
    while not _pending(fs, own_s3, prefix) - before:  # the data write starts right after its pending note
        assert time.monotonic() < deadline, "the checkpoint never started writing"
        time.sleep(0.02)
    _hard_stop(own_s3)
    tally.fault("S3 server stopped mid-checkpoint")
    stopped = time.monotonic()
    result = wait_cell(a, msg_id, timeout=120)
    took = time.monotonic() - stopped
    assert result.ename == "UsageError", f"expected a clear error, got {result.ename}: {result.error}"
    assert url in result.error and "cannot " in result.error, result.error
    assert took < 60, f"the checkpoint took {took:.0f} s to fail with the store down"
    assert a.value("marker") == "second"  # the kernel is alive and its state untouched
    tally.outcome(f"S3 stop: error after {took:.1f} s", 1)

    _restart(own_s3)
    store = Store(url, OPTIONS)
    # A restarted weed answers "internal error, please try again" for a few seconds while its
    # filer catches up: the manifest is then reported unreadable (never listed). Wait that out.
    deadline = time.monotonic() + 30
    listing = Catalog(store).listing(SESSION)
    while listing.unreadable and time.monotonic() < deadline:
        time.sleep(0.5)
        listing = Catalog(store).listing(SESSION)
    tags = [m.tag for m in listing.checkpoints]
    assert tags == ["first"], f"after the restart: {tags} (unreadable {listing.unreadable}, pending {listing.pending})"
    sizes = {m.id: m.stats.get("bytes_total", 0) for m in listing.checkpoints}
    code, rows = cli_verify(url, SESSION, env={**os.environ, "JUPYTER_PAUSE_STORAGE_OPTIONS": json.dumps(OPTIONS)})
    committed, incomplete = check_verify_rows(rows, sizes)
    assert code == 0 and [r["ok"] for r in committed] == [True], rows

    a.run("marker = 'third'").ok()
    out = a.run("%checkpoint --tag third").ok().stdout
    assert "checkpoint " in out and "saved" in out
    b = start_kernel(tmp_path / "b", **env)
    resumed = b.run("%load_ext jupyter_pause\n%resume").ok().stdout
    tally.resumed("verdict: restored" in resumed)
    assert "verdict: restored" in resumed, resumed
    assert b.value("marker") == "third" and b.value("len(big)") == 16

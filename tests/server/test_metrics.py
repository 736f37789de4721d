"""The server's Prometheus series, read from jupyter-server's own ``/metrics`` on a real server
around a real pause and resume (the registry is the process's: each test reads differences)."""

from __future__ import annotations

import pytest

from tests.support.server_helpers import call, open_kernel, run, wait_state, write_notebook

pytestmark = pytest.mark.integration


def _series(text: str) -> dict[str, float]:
    """Every sample of Prometheus's text format, ``name{labels}`` to value."""
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


async def _metrics(jp_fetch) -> dict[str, float]:
    response = await jp_fetch("metrics")
    return _series(response.body.decode())


async def test_a_pause_and_a_resume_are_counted_in_the_servers_metrics(jp_fetch, jp_serverapp, jp_root_dir):
    path = write_notebook(jp_root_dir, "work/counted.ipynb")
    kernel = await open_kernel(jp_fetch, path)
    await run(jp_serverapp, kernel, "import numpy as np\nweights = np.ones(500_000)")
    before = await _metrics(jp_fetch)
    ok = 'jupyter_pause_checkpoints_total{outcome="ok",trigger="button"}'

    await call(jp_fetch, "pause", path=path)
    await wait_state(jp_fetch, path, ("paused", "failed"))
    paused = await _metrics(jp_fetch)
    assert paused[ok] - before.get(ok, 0) == 1
    assert (
        paused["jupyter_pause_checkpoint_seconds_count"] - before.get("jupyter_pause_checkpoint_seconds_count", 0) == 1
    )
    grown = paused["jupyter_pause_checkpoint_bytes_sum"] - before.get("jupyter_pause_checkpoint_bytes_sum", 0)
    assert grown >= 4_000_000  # the 4 MB array, at least
    assert paused['jupyter_pause_sessions{state="paused"}'] >= 1

    await call(jp_fetch, "resume", path=path)
    await wait_state(jp_fetch, path, ("ready", "failed"))
    await jp_serverapp.web_app.settings["jupyter_pause"].wait()
    resumed = await _metrics(jp_fetch)
    restored = 'jupyter_pause_resumes_total{verdict="restored"}'
    assert resumed[restored] - paused.get(restored, 0) == 1
    waits = "jupyter_pause_resume_wait_seconds_count"
    assert resumed[waits] - paused.get(waits, 0) == 1
    assert resumed['jupyter_pause_sessions{state="ready"}'] >= 1
    # low cardinality: no session, path or checkpoint in any label
    assert not [name for name in resumed if name.startswith("jupyter_pause") and ("work" in name or "counted" in name)]

    # the server stops (jupyter-server removes its runtime file first): its sessions count no more,
    # though its objects may live on in this process beside the next server's
    ready = 'jupyter_pause_sessions{state="ready"}'
    jp_serverapp.remove_server_info_file()
    assert (await _metrics(jp_fetch))[ready] == resumed[ready] - 1


async def test_a_release_is_counted_by_how_it_ended(jp_fetch, jp_serverapp, jp_root_dir):
    before = await _metrics(jp_fetch)
    await call(jp_fetch, "release", trigger="button")  # nothing to pause: it ends "paused", not stopped
    manager = jp_serverapp.web_app.settings["jupyter_pause"]
    await manager.wait()
    after = await _metrics(jp_fetch)
    ended = {k: v - before.get(k, 0) for k, v in after.items() if k.startswith("jupyter_pause_releases_total")}
    assert sum(ended.values()) == 1 and ended.get('jupyter_pause_releases_total{state="paused"}') == 1, ended

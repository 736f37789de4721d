"""jupyter_pause.server.kernelspecs with a real Jupyter server and real kernels: a notebook comes back
in the kernelspec it ran on, not in the server's ``kernel_name``; one this server lacks fails the
resume, naming it and the kernelspecs that are here, and the resume's ``kernel_name`` picks another.
A kernelspec whose kernel never answers fails the resume within ``kernel_start_timeout``, leaving
no kernel behind."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from tests.support.server_helpers import call, kernel_ids, open_kernel, run, wait_state, write_notebook

pytestmark = pytest.mark.integration

#: The second kernelspec: this venv's Python and ipykernel, under another name.
SECOND = "pause-second"
#: The variable its ``env`` sets: a kernel shows which kernelspec started it.
MARKER = "JUPYTER_PAUSE_TEST_KERNELSPEC"
#: A cell printing the marker (None in a kernel of another kernelspec) and ``x``.
SHOW = f"import os, json\nprint(json.dumps([os.environ.get({MARKER!r}), x]))"
#: A kernelspec whose kernel never answers: its process starts, then waits for a signal, as a kernel
#: hung at its start does (an import that deadlocks, a file system that no longer answers).
HUNG = "pause-hung"
#: A folder with spaces and letters outside ASCII, as users name them.
FOLDER = "Ünïcode folder/with spaces"


@pytest.fixture
def second_kernelspec(jp_kernel_dir: Any) -> Path:
    """The second kernelspec, installed in the test's own Jupyter data folder."""
    folder = Path(jp_kernel_dir) / SECOND
    folder.mkdir()
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Second environment",
        "language": "python",
        "env": {MARKER: SECOND},
    }
    (folder / "kernel.json").write_text(json.dumps(spec))
    return folder


async def kernels_of(fetch: Any, path: str) -> list[dict[str, Any]]:
    """The kernels (id, name) the server runs for the notebook at ``path``."""
    sessions = json.loads((await fetch("api", "sessions")).body)
    return [s["kernel"] for s in sessions if s["path"] == path]


async def paused_on_second(fetch: Any, serverapp: Any, path: str) -> dict[str, Any]:
    """``x = 41`` in a kernel of the second kernelspec for ``path``, then Pause; the paused status."""
    kernel = await open_kernel(fetch, path, SECOND)
    assert json.loads(await run(serverapp, kernel, "x = 41\n" + SHOW)) == [SECOND, 41]
    await call(fetch, "pause", path=path)
    paused = await wait_state(fetch, path, ("paused", "failed"))
    assert paused["state"] == "paused" and paused["kernel"] == SECOND, paused
    return paused


async def test_a_notebook_on_a_second_kernelspec_resumes_in_it(
    jp_fetch, jp_serverapp, jp_root_dir, second_kernelspec, manager
):
    # The notebook's metadata names no kernelspec: what the pause recorded is what comes back.
    path = write_notebook(jp_root_dir, f"{FOLDER}/实验 second.ipynb", "x = 41")
    paused = await paused_on_second(jp_fetch, jp_serverapp, path)

    await call(jp_fetch, "resume", path=path)
    ready = await wait_state(jp_fetch, path, ("ready", "failed"))
    assert ready["state"] == "ready" and ready["verdict"] == "restored", ready
    assert ready["checkpoint"] == paused["checkpoint"] and ready["kernel"] == SECOND
    (kernel,) = await kernels_of(jp_fetch, path)
    assert kernel["name"] == SECOND
    assert json.loads(await run(jp_serverapp, kernel["id"], SHOW)) == [SECOND, 41]
    await manager.wait()


async def test_a_checkpoint_taken_in_the_kernel_resumes_in_the_notebooks_kernelspec(
    jp_fetch, jp_serverapp, jp_root_dir, second_kernelspec, manager
):
    """No server paused it (``%checkpoint``, then the kernel shut down): the notebook's
    ``metadata.kernelspec`` says which kernelspec it ran on."""
    kernelspec = {"name": SECOND, "display_name": "Second environment", "language": "python"}
    path = write_notebook(jp_root_dir, f"{FOLDER}/magic.ipynb", "x = 41", kernelspec=kernelspec)
    kernel = await open_kernel(jp_fetch, path, SECOND)
    await run(jp_serverapp, kernel, "x = 41\n%load_ext jupyter_pause\n%checkpoint")
    for session in json.loads((await jp_fetch("api", "sessions")).body):
        await jp_fetch("api", "sessions", session["id"], method="DELETE")

    await call(jp_fetch, "resume", path=path)
    ready = await wait_state(jp_fetch, path, ("ready", "failed"))
    assert ready["state"] == "ready" and ready["verdict"] == "restored", ready
    (kernel,) = await kernels_of(jp_fetch, path)
    assert json.loads(await run(jp_serverapp, kernel["id"], SHOW)) == [SECOND, 41]
    await manager.wait()


async def test_a_missing_kernelspec_fails_naming_it_and_a_picked_one_resumes(
    jp_fetch, jp_serverapp, jp_root_dir, second_kernelspec, manager
):
    path = write_notebook(jp_root_dir, "proj/nb.ipynb", "x = 41")
    paused = await paused_on_second(jp_fetch, jp_serverapp, path)
    shutil.rmtree(second_kernelspec)  # as on a node without that environment

    await call(jp_fetch, "resume", path=path)
    failed = await wait_state(jp_fetch, path, ("ready", "failed"))
    assert failed["state"] == "failed", failed
    detail = failed["detail"]
    assert f"kernelspec '{SECOND}' (recorded when the session was paused) is not installed on this server" in detail
    assert "the kernelspecs here are: echo, python3 (Python 3" in detail, detail
    assert f"Checkpoint {paused['checkpoint']} stays in the store" in detail
    assert failed["kernel"] == SECOND  # still recorded: Resume asks which kernelspec to use instead
    assert await kernels_of(jp_fetch, path) == []

    with pytest.raises(HTTPClientError) as info:
        await call(jp_fetch, "resume", path=path, kernel_name=SECOND)
    message = json.loads(info.value.response.body)["message"]
    assert info.value.code == 400 and f"no kernelspec '{SECOND}' on this server" in message
    assert "the kernelspecs here are: echo, python3 (Python 3" in message

    await call(jp_fetch, "resume", path=path, kernel_name="python3")
    ready = await wait_state(jp_fetch, path, ("ready", "failed"))
    assert ready["state"] == "ready" and ready["verdict"] == "restored", ready
    assert ready["checkpoint"] == paused["checkpoint"] and ready["kernel"] == "python3"
    (kernel,) = await kernels_of(jp_fetch, path)
    assert kernel["name"] == "python3"
    assert json.loads(await run(jp_serverapp, kernel["id"], SHOW)) == [None, 41]
    await manager.wait()


@pytest.mark.parametrize("pick", [3, ["python3"]])
async def test_a_kernel_name_that_is_not_a_name_is_400(jp_fetch, jp_root_dir, pick):
    path = write_notebook(jp_root_dir, "never.ipynb", "x = 1")
    with pytest.raises(HTTPClientError) as info:
        await call(jp_fetch, "resume", path=path, kernel_name=pick)
    assert info.value.code == 400
    assert '"kernel_name" must be the name of a kernelspec' in json.loads(info.value.response.body)["message"]


async def test_a_kernel_that_never_answers_fails_the_resume_and_is_shut_down(
    jp_fetch, jp_serverapp, jp_root_dir, jp_kernel_dir, manager
):
    folder = Path(jp_kernel_dir) / HUNG
    folder.mkdir()
    argv = [sys.executable, "-c", "import signal; signal.pause()", "{connection_file}"]
    (folder / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "Hung", "language": "python"}))
    path = write_notebook(jp_root_dir, "hung.ipynb", "x = 41")
    kernel = await open_kernel(jp_fetch, path)
    await run(jp_serverapp, kernel, "x = 41")
    await call(jp_fetch, "pause", path=path)
    paused = await wait_state(jp_fetch, path, ("paused", "failed"))
    assert paused["state"] == "paused", paused
    manager.settings.kernel_start_timeout = 3.0

    await call(jp_fetch, "resume", path=path, kernel_name=HUNG)
    failed = await wait_state(jp_fetch, path, ("ready", "failed"))
    assert failed["state"] == "failed", failed
    assert "the new kernel did not answer within 3 s; the checkpoint is untouched: resume again" in failed["detail"]
    assert await kernel_ids(jp_fetch) == [] and await kernels_of(jp_fetch, path) == []

    await call(jp_fetch, "resume", path=path, kernel_name="python3")
    ready = await wait_state(jp_fetch, path, ("ready", "failed"))
    assert ready["state"] == "ready" and ready["verdict"] == "restored", ready
    assert ready["checkpoint"] == paused["checkpoint"]
    (kernel,) = await kernels_of(jp_fetch, path)
    assert json.loads(await run(jp_serverapp, kernel["id"], SHOW)) == [None, 41]
    await manager.wait()

"""Local modules through the server's resume path, with a real Jupyter server and real kernels: a
module the notebook imported from a ``sys.path`` folder it added comes back where the folder is
missing, though the notebook had changed its working directory."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.support.server_helpers import call, open_kernel, run, user_cell, wait_state, write_notebook

pytestmark = pytest.mark.integration

HELPERS = "class Box:\n    def __init__(self, v):\n        self.v = v\n\n\ndef scale(x):\n    return 3 * x\n"


async def test_the_servers_resume_puts_back_a_module_from_an_added_folder(
    jp_fetch, jp_serverapp, jp_root_dir, tmp_path
):
    path = write_notebook(jp_root_dir, "project/nb.ipynb", "x = 1")
    folder = jp_root_dir / "project"
    (folder / "lib").mkdir()
    (folder / "data").mkdir()
    (folder / "lib" / "helpers.py").write_text(HELPERS)
    kernel = await open_kernel(jp_fetch, path)
    await user_cell(jp_serverapp, kernel, "%load_ext jupyter_pause")
    await user_cell(
        jp_serverapp,
        kernel,
        "import os, sys\nsys.path.insert(0, os.path.abspath('lib'))\nfrom helpers import Box, scale\n"
        "box = Box(scale(7))\nf = scale\nos.chdir('data')",
    )
    log = tmp_path / "outside.log"  # outside the notebook's folder: the pause says so
    log.write_text("step 1\n")
    await user_cell(jp_serverapp, kernel, f"fh = open({str(log)!r})")
    await call(jp_fetch, "pause", path=path)
    paused = await wait_state(jp_fetch, path, ("paused", "failed"))
    assert paused["state"] == "paused", paused
    assert f"not on another node, or not provably: fh (open file {log}): lies outside" in paused["detail"], paused
    shutil.rmtree(folder / "lib")  # the other node has data/ but not lib/helpers.py

    await call(jp_fetch, "resume", path=path)
    ready = await wait_state(jp_fetch, path, ("ready", "failed"))
    assert ready["state"] == "ready" and ready["verdict"] == "restored", ready
    sessions = json.loads((await jp_fetch("api", "sessions")).body)
    (new,) = [s["kernel"]["id"] for s in sessions if s["path"] == path]
    output = await run(jp_serverapp, new, "print(box.v, f(2), os.path.basename(os.getcwd()))")
    assert output.split() == ["21", "6", "data"]
    assert (folder / "lib" / "helpers.py").read_text() == HELPERS

"""The server extension with a real Jupyter server and real kernels: pause, resume, status."""

from __future__ import annotations

import json

import pytest
from tornado.httpclient import HTTPClientError

from tests.support.server_helpers import (
    call,
    open_kernel,
    run,
    status,
    wait_state,
    write_notebook,
)

pytestmark = pytest.mark.integration


async def test_pause_then_resume_brings_the_model_back(jp_fetch, jp_serverapp, jp_root_dir):
    path = write_notebook(jp_root_dir, "work/train.ipynb", "x = 1")
    kernel = await open_kernel(jp_fetch, path)
    before = await run(
        jp_serverapp,
        kernel,
        (
            "import torch, json\ntorch.manual_seed(0)\nmodel = torch.nn.Linear(4, 2)\n"
            "opt = torch.optim.Adam(model.parameters())\nsauce = 'kept'\n"
            "print(json.dumps(model.weight.sum().item()))"
        ),
    )
    paused = await call(jp_fetch, "pause", path=path)
    assert paused["state"] == "checkpointing"
    done = await wait_state(jp_fetch, path, ("paused", "failed"))
    assert done["state"] == "paused", done
    kernels = json.loads((await jp_fetch("api", "kernels")).body)
    assert kernel not in [k["id"] for k in kernels]

    await call(jp_fetch, "resume", path=path)
    ready = await wait_state(jp_fetch, path, ("ready", "failed"))
    assert ready["state"] == "ready" and ready["verdict"] == "restored", ready
    assert ready["checkpoint"] == done["checkpoint"]
    sessions = json.loads((await jp_fetch("api", "sessions")).body)
    (new,) = [s["kernel"]["id"] for s in sessions if s["path"] == path]
    after = await run(jp_serverapp, new, "print(json.dumps(model.weight.sum().item()))\nprint(sauce)")
    assert after.split()[0] == before.split()[-1] and after.split()[-1] == "kept"
    assert opt_is_bound(await run(jp_serverapp, new, "print(opt.param_groups[0]['params'][0] is model.weight)"))


def opt_is_bound(output: str) -> bool:
    return output.strip() == "True"


async def test_status_of_an_untouched_notebook_is_ready(jp_fetch, jp_root_dir):
    path = write_notebook(jp_root_dir, "fresh.ipynb", "x = 1")
    current = await status(jp_fetch, path)
    assert current["state"] == "ready" and current["checkpoint"] is None


@pytest.mark.parametrize(
    ("body", "code", "message"),
    [
        ({"path": "../outside.ipynb"}, 404, ""),
        ({"path": "notes.txt"}, 400, "not a notebook"),
        ({"path": "idle.ipynb"}, 409, "no running kernel"),
        ({}, 400, "give the notebook's path"),
    ],
)
async def test_pause_bad_requests(jp_fetch, jp_root_dir, body, code, message):
    (jp_root_dir / "notes.txt").write_text("hello")
    write_notebook(jp_root_dir, "idle.ipynb", "x = 1")
    with pytest.raises(HTTPClientError) as info:
        await call(jp_fetch, "pause", **body)
    assert info.value.code == code
    assert message in info.value.response.body.decode()


async def test_malformed_json_is_400(jp_fetch):
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch("jupyter-pause", "api", "pause", method="POST", body="{not json")
    assert info.value.code == 400


async def test_unauthenticated_request_is_refused(jp_fetch, jp_serverapp):
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch("jupyter-pause", "api", "sessions", headers={"Authorization": "token wrong"})
    assert info.value.code == 403


async def test_error_messages_reach_the_client_as_written(jp_fetch, jp_root_dir):
    path = write_notebook(jp_root_dir, "never.ipynb", "x = 1")
    with pytest.raises(HTTPClientError) as info:
        await call(jp_fetch, "resume", path=path)
    body = json.loads(info.value.response.body)
    assert info.value.code == 404
    assert "run %checkpoint first" in body["message"] and "%%" not in body["message"]

"""Two Jupyter servers on two "nodes" sharing one S3 store (a real SeaweedFS server).

Server A is the in-process pytest-jupyter server (node ``node-a``); server B is a real
``python -m jupyter_server`` subprocess with its own root folder and Jupyter folders (node
``node-b``). Both point at the same ``s3://`` store. The tests pause on A and resume on B, race
resumes of one session on one server and across both, and check that a lease left by a crashed
holder blocks nobody once it has expired.

Nothing here talks to any address but 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
import pytest
from tornado.httpclient import HTTPClientError

from jupyter_pause import ledger
from jupyter_pause.notebook import session_from_path
from jupyter_pause.server import lease
from jupyter_pause.server.status import StatusBoard
from jupyter_pause.store import layout
from jupyter_pause.store import report as reports
from jupyter_pause.store.storage import Store
from jupyter_pause.vocabulary import LedgerEvent
from tests.support.s3_server import S3Server
from tests.support.server_helpers import (
    call,
    open_kernel,
    run,
    server_config,
    status,
    wait_state,
    write_notebook,
)
from tests.support.server_process import ServerProcess, running_server

pytestmark = [pytest.mark.s3, pytest.mark.integration]

NOTEBOOK = "proj/exp.ipynb"
LEASE_SETTLE = 0.3

#: State built in A's kernel: a model, an optimizer and a value that exists only in memory.
BUILD_STATE = (
    "import torch, json\ntorch.manual_seed(0)\nmodel = torch.nn.Linear(4, 2)\n"
    "opt = torch.optim.Adam(model.parameters())\nmemo = {'secret': %r}\n"
    "print(json.dumps(model(torch.ones(1, 4)).tolist()))"
)
PROBE = "import torch, json\nprint(json.dumps([model(torch.ones(1, 4)).tolist(), memo['secret']]))"


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared_store(s3_server: S3Server) -> str:
    """One store for the module: server B lives as long as the module, A is started per test.

    Each test uses its own notebook, hence its own session, so tests do not see each other's.
    """
    return f"s3://{s3_server.bucket}/{uuid.uuid4().hex}"


@pytest.fixture
def s3_url(s3_env: str, shared_store: str) -> str:
    """The shared store, with the AWS variables (set by ``s3_env``) that A and its kernels use."""
    return shared_store


@dataclass
class Nb:
    """The notebook of one test: its path under each server root and its session."""

    path: str

    @property
    def session(self) -> str:
        return session_from_path(self.path)


@pytest.fixture
def nb(request: pytest.FixtureRequest) -> Nb:
    """``proj/exp.ipynb`` for the node-to-node test, ``other/<test name>.ipynb`` for the others."""
    name = request.node.name.removeprefix("test_")
    return Nb(NOTEBOOK if name == "pause_on_node_a_resume_on_node_b" else f"other/{name}.ipynb")


@pytest.fixture
def jp_server_config(s3_url: str) -> dict[str, Any]:
    return server_config(s3_url, lease_settle=LEASE_SETTLE)


@pytest.fixture(scope="module")
def server_b(
    shared_store: str, s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """Jupyter server B (node ``node-b``) on the same store as A, with its own root and folders.
    Only the standard AWS variables configure it (as s3_env does for A): no profile, no config file."""
    base = tmp_path_factory.mktemp("server-b")
    env = {**s3_server.env(), "AWS_CONFIG_FILE": str(base / "no-aws-config")}
    env["AWS_SHARED_CREDENTIALS_FILE"] = env["AWS_CONFIG_FILE"]
    with running_server(base, shared_store, "node-b", f"--PauseServer.lease_settle={LEASE_SETTLE}", env=env) as b:
        yield b


# -- helpers ----------------------------------------------------------------------------------


async def paused_on_a(
    jp_fetch: Any, jp_serverapp: Any, jp_root_dir: Path, nb: Nb, secret: str
) -> tuple[dict[str, Any], list]:
    """``nb`` on A with a model in its kernel, paused; (paused status, the model's output)."""
    write_notebook(jp_root_dir, nb.path, "x = 1")
    kernel = await open_kernel(jp_fetch, nb.path)
    before = json.loads((await run(jp_serverapp, kernel, BUILD_STATE % secret)).strip().splitlines()[-1])
    started = await call(jp_fetch, "pause", path=nb.path)
    assert started["state"] == "checkpointing", started
    done = await wait_state(jp_fetch, nb.path, ("paused", "failed"))
    assert done["state"] == "paused", done
    assert kernel not in await a_kernel_ids(jp_fetch)
    return done, before


async def a_kernel_ids(jp_fetch: Any) -> list[str]:
    return [k["id"] for k in json.loads((await jp_fetch("api", "kernels")).body)]


async def a_kernels_of(jp_fetch: Any, path: str) -> list[str]:
    sessions = json.loads((await jp_fetch("api", "sessions")).body)
    return [s["kernel"]["id"] for s in sessions if s["path"] == path and s.get("kernel")]


async def a_resume(jp_fetch: Any, path: str) -> tuple[int, Any]:
    """POST resume to A; ``(status code, body)`` whatever the code."""
    try:
        response = await jp_fetch("jupyter-pause", "api", "resume", method="POST", body=json.dumps({"path": path}))
    except HTTPClientError as e:
        text = e.response.body.decode() if e.response is not None and e.response.body else ""
        try:
            return e.code, json.loads(text)
        except ValueError:
            return e.code, text
    return response.code, json.loads(response.body)


def message(body: Any) -> str:
    return body.get("message", "") if isinstance(body, dict) else str(body)


def last_json(output: str) -> Any:
    return json.loads(output.strip().splitlines()[-1])


def store_of(url: str) -> Store:
    return Store(url, {})


def put_lease(url: str, session: str, epoch: int | None = None, **fields: Any) -> lease.Lease:
    """Write a lease into the store as another resume would have (``jupyter_pause.server.lease``):
    at the next epoch, or over the record of ``epoch`` (as if time had passed for it)."""
    store = store_of(url)
    assert lease.protocol(store) == "create-if-absent"
    if epoch is None:
        found = [layout.lease_epoch(key) for key in store.list(layout.lease_prefix(session))]
        epoch = max((e for e, _ in filter(None, found)), default=0) + 1
    held = lease.Lease(
        **{
            "holder": "server pid 424242",
            "node": "node-crashed",
            "token": secrets.token_hex(8),
            "expires": time.time() + 600,
            "what": "resumed",
            "epoch": epoch,
            **fields,
        }
    )
    store.write(layout.lease_epoch_key(session, epoch), held.record())
    return held


def lease_held(url: str, session: str) -> bool:
    return lease.current(store_of(url), session) is not None


# -- 1. restore on another node ---------------------------------------------------------------


async def test_pause_on_node_a_resume_on_node_b(jp_fetch, jp_serverapp, jp_root_dir, server_b, s3_url, nb):
    secret = secrets.token_hex(6)
    done, before = await paused_on_a(jp_fetch, jp_serverapp, jp_root_dir, nb, secret)

    code, listing = await server_b.request("GET", "jupyter-pause/api/sessions")
    assert code == 200 and listing["node"] == "node-b", (code, listing)
    (row,) = [r for r in listing["sessions"] if r["session"] == nb.session]
    assert row["node"] == "node-a" and row["state"] == "paused", row
    assert row["checkpoint"] == done["checkpoint"] and row["path"] == nb.path, row

    target = server_b.root / nb.path
    assert not target.parent.exists()
    code, pulled = await server_b.call("pull", session=nb.session)
    assert code == 200, (code, pulled)
    assert pulled == {"path": nb.path, "session": nb.session, "checkpoint": done["checkpoint"], "written": True}
    assert target.is_file()
    assert nbformat.read(str(target), as_version=4).cells[0].source == "x = 1"

    code, started = await server_b.call("resume", path=nb.path, checkpoint="latest")
    assert code == 202 and started["state"] == "waiting" and started["node"] == "node-b", (code, started)
    ready = await server_b.wait_state(nb.path, ("ready", "failed"))
    assert ready["state"] == "ready" and ready["verdict"] == "restored", ready
    assert ready["checkpoint"] == done["checkpoint"] and ready["node"] == "node-b", ready
    assert not lease_held(s3_url, nb.session), "the lease outlived the resume"

    (kernel,) = await server_b.kernels_of(nb.path)
    output, kept = last_json(await server_b.run(kernel, PROBE))
    assert output == before and kept == secret
    bound = await server_b.run(kernel, "print(opt.param_groups[0]['params'][0] is model.weight)")
    assert bound.strip() == "True"
    assert await a_kernels_of(jp_fetch, nb.path) == [], "A started a kernel for a session resumed on B"
    # B fetched the blobs onto the node and handed the kernel the manifest it read: the kernel
    # opened no S3 client. B's server wrote the run report and the resume's ledger events.
    assert (await server_b.run(kernel, "import sys; print('s3fs' in sys.modules)")).strip() == "False"
    (report,) = [r for r in reports.load(store_of(s3_url), nb.session) if r.resume_node == "node-b"]
    assert (report.checkpoint, report.verdict, report.moments["kernel_ready"] is not None) == (
        done["checkpoint"],
        "restored",
        True,
    )
    events, _ = ledger.read(store_of(s3_url))
    resumed = [e.event for e in events if e.session == nb.session and e.node == "node-b"]
    moments = [LedgerEvent.RESUME_REQUESTED, LedgerEvent.RESOURCES_AVAILABLE, LedgerEvent.KERNEL_READY]
    assert [e for e in resumed if e in moments or e == LedgerEvent.NEXT_CELL_RUN] == [
        *moments,
        LedgerEvent.NEXT_CELL_RUN,
    ]

    # Pulling again: the same file is left alone, a different one only goes with "overwrite".
    code, again = await server_b.call("pull", session=nb.session)
    assert code == 200 and again["written"] is False, (code, again)
    original = target.read_bytes()
    changed = nbformat.v4.new_notebook()
    changed.cells = [nbformat.v4.new_code_cell("edited on node b")]
    nbformat.write(changed, str(target))
    code, refused = await server_b.call("pull", session=nb.session)
    assert code == 409 and "overwrite" in message(refused), (code, refused)
    assert nbformat.read(str(target), as_version=4).cells[0].source == "edited on node b"
    code, replaced = await server_b.call("pull", session=nb.session, overwrite=True)
    assert code == 200 and replaced["written"] is True, (code, replaced)
    assert nbformat.read(str(target), as_version=4).cells[0].source == "x = 1"
    assert json.loads(target.read_bytes()) == json.loads(original)

    # A path that would be another session, and a session the store does not have.
    code, body = await server_b.call("pull", session=nb.session, path="elsewhere/exp.ipynb")
    assert code == 400 and "keep the path" in message(body), (code, body)
    assert not (server_b.root / "elsewhere").exists()
    code, body = await server_b.call("pull", session="no-such-session")
    assert code == 404, (code, body)


# -- 2. concurrent resumes --------------------------------------------------------------------


async def test_two_resumes_at_once_on_one_server(jp_fetch, jp_serverapp, jp_root_dir, s3_url, nb):
    secret = secrets.token_hex(6)
    _, before = await paused_on_a(jp_fetch, jp_serverapp, jp_root_dir, nb, secret)

    results = await asyncio.gather(a_resume(jp_fetch, nb.path), a_resume(jp_fetch, nb.path))
    assert sorted(code for code, _ in results) == [202, 409], results
    (refused,) = [body for code, body in results if code == 409]
    assert "is being resumed by server pid" in message(refused) and "on node-a" in message(refused), refused

    ready = await wait_state(jp_fetch, nb.path, ("ready", "failed"))
    assert ready["state"] == "ready" and ready["verdict"] == "restored", ready
    (kernel,) = await a_kernels_of(jp_fetch, nb.path)
    assert await a_kernel_ids(jp_fetch) == [kernel]
    output, kept = last_json(await run(jp_serverapp, kernel, PROBE))
    assert output == before and kept == secret
    assert not lease_held(s3_url, nb.session)


async def test_two_resumes_at_once_on_two_servers(jp_fetch, jp_serverapp, jp_root_dir, server_b, s3_url, nb):
    secret = secrets.token_hex(6)
    _, before = await paused_on_a(jp_fetch, jp_serverapp, jp_root_dir, nb, secret)
    code, pulled = await server_b.call("pull", session=nb.session)
    assert code == 200 and pulled["written"] is True, (code, pulled)

    (a_code, a_body), (b_code, b_body) = await asyncio.gather(
        a_resume(jp_fetch, nb.path), server_b.call("resume", path=nb.path)
    )
    assert sorted([a_code, b_code]) == [202, 409], ((a_code, a_body), (b_code, b_body))
    if a_code == 202:
        winner_node, refused = "node-a", b_body
        ready = await wait_state(jp_fetch, nb.path, ("ready", "failed"))
    else:
        winner_node, refused = "node-b", a_body
        ready = await server_b.wait_state(nb.path, ("ready", "failed"))
    assert "is being resumed by server pid" in message(refused) and f"on {winner_node}" in message(refused), refused
    assert ready["state"] == "ready" and ready["verdict"] == "restored" and ready["node"] == winner_node, ready

    a_kernels, b_kernels = await a_kernels_of(jp_fetch, nb.path), await server_b.kernels_of(nb.path)
    assert len(a_kernels) + len(b_kernels) == 1, (a_kernels, b_kernels)
    assert len(await a_kernel_ids(jp_fetch)) == len(a_kernels)
    if a_kernels:
        out = await run(jp_serverapp, a_kernels[0], PROBE)
    else:
        out = await server_b.run(b_kernels[0], PROBE)
    output, kept = last_json(out)
    assert output == before and kept == secret
    assert not lease_held(s3_url, nb.session)


# -- 3. leases left behind --------------------------------------------------------------------


async def test_a_live_lease_refuses_and_an_expired_one_does_not(jp_fetch, jp_serverapp, jp_root_dir, s3_url, nb):
    secret = secrets.token_hex(6)
    _, before = await paused_on_a(jp_fetch, jp_serverapp, jp_root_dir, nb, secret)

    crashed = put_lease(s3_url, nb.session, holder="server pid 424242", node="node-crashed")
    code, body = await a_resume(jp_fetch, nb.path)
    assert code == 409, (code, body)
    assert "server pid 424242" in message(body) and "node-crashed" in message(body), body
    assert (await status(jp_fetch, nb.path))["state"] == "paused"
    assert await a_kernels_of(jp_fetch, nb.path) == []
    assert lease.current(store_of(s3_url), nb.session) == crashed, "a refused resume touched someone else's lease"

    # The holder crashed: its lease ran out a minute ago.
    put_lease(s3_url, nb.session, crashed.epoch, holder="server pid 424242", expires=time.time() - 60)
    code, body = await a_resume(jp_fetch, nb.path)
    assert code == 202 and body["state"] == "waiting", (code, body)
    ready = await wait_state(jp_fetch, nb.path, ("ready", "failed"))
    assert ready["state"] == "ready" and ready["verdict"] == "restored", ready
    (kernel,) = await a_kernels_of(jp_fetch, nb.path)
    output, kept = last_json(await run(jp_serverapp, kernel, PROBE))
    assert output == before and kept == secret
    assert not lease_held(s3_url, nb.session)


async def test_a_torn_lease_is_no_lease(s3_url, nb):
    """A lease record that is not a lease (a torn write) does not block: it is taken over."""
    store = store_of(s3_url)
    torn = put_lease(s3_url, nb.session)
    store.write(layout.lease_epoch_key(nb.session, torn.epoch), b'{"holder": "server pid 1", "node": "no')
    held = await lease.acquire(store, nb.session, "server pid 7", "node-x", "resumed", 60, LEASE_SETTLE)
    assert held.holder == "server pid 7" and held.expires > time.time() and held.epoch == torn.epoch + 1
    with pytest.raises(lease.LeaseHeld, match="server pid 7 on node-x"):
        await lease.acquire(store, nb.session, "server pid 8", "node-y", "resumed", 60, LEASE_SETTLE)
    lease.release(store, nb.session, held)
    assert not lease_held(s3_url, nb.session)


# -- 4. what the other node sees afterwards ---------------------------------------------------


async def resumed_on_b(jp_fetch, jp_serverapp, jp_root_dir, server_b, nb) -> dict[str, Any]:
    """``nb`` paused on A, pulled to B and resumed there; B's ``ready`` status."""
    await paused_on_a(jp_fetch, jp_serverapp, jp_root_dir, nb, secrets.token_hex(6))
    assert (await server_b.call("pull", session=nb.session))[0] == 200
    code, started = await server_b.call("resume", path=nb.path)
    assert code == 202, (code, started)
    ready = await server_b.wait_state(nb.path, ("ready", "failed"))
    assert ready["state"] == "ready" and ready["verdict"] == "restored", ready
    return ready


async def test_node_a_sees_the_session_resumed_on_node_b(jp_fetch, jp_serverapp, jp_root_dir, server_b, nb):
    ready = await resumed_on_b(jp_fetch, jp_serverapp, jp_root_dir, server_b, nb)
    # A's status view reuses what it read from the store for a moment (StatusBoard.cache_seconds)
    deadline = time.monotonic() + StatusBoard.cache_seconds + 5
    on_a = await status(jp_fetch, nb.path)
    while on_a["state"] != "ready" and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        on_a = await status(jp_fetch, nb.path)
    assert (on_a["state"], on_a["node"], on_a["verdict"]) == ("ready", "node-b", "restored"), on_a
    assert on_a["updated"] == ready["updated"]
    rows = json.loads((await jp_fetch("jupyter-pause", "api", "sessions")).body)["sessions"]
    (row,) = [r for r in rows if r["session"] == nb.session]
    assert row["state"] == "ready", row


async def test_node_a_refuses_to_resume_a_session_running_on_node_b(
    jp_fetch, jp_serverapp, jp_root_dir, server_b, nb, monkeypatch
):
    # A's status view may be stale (here: for ten minutes); its resume check must not be.
    monkeypatch.setattr(StatusBoard, "cache_seconds", 600.0)
    await resumed_on_b(jp_fetch, jp_serverapp, jp_root_dir, server_b, nb)
    code, body = await a_resume(jp_fetch, nb.path)
    try:
        assert code == 409 and "node-b" in message(body), (code, body)
        assert await a_kernel_ids(jp_fetch) == []
    finally:
        if code == 202:  # let the second resume finish before A is stopped
            await wait_state(jp_fetch, nb.path, ("ready", "failed"))

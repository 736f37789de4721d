"""Two servers on two nodes resume one paused session at the same moment, round after round, on a
real S3 store (SeaweedFS): exactly one of them wins each round, and the session runs once."""

from __future__ import annotations

import asyncio
import uuid

import nbformat
import pytest

from tests.support.s3_server import S3Server
from tests.support.server_process import running_server

pytestmark = [pytest.mark.s3, pytest.mark.integration]

ROUNDS = 5
NOTEBOOK = "race/contended.ipynb"


async def test_concurrent_resumes_from_two_servers_have_exactly_one_winner_every_round(s3_server: S3Server, tmp_path):
    store = f"s3://{s3_server.bucket}/{uuid.uuid4().hex}"
    root = tmp_path / "disk"
    (root / "race").mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(), str(root / NOTEBOOK))
    env = s3_server.env()
    with (
        running_server(tmp_path / "a", store, "node-a", env=env, root=root) as a,
        running_server(tmp_path / "b", store, "node-b", env=env, root=root) as b,
    ):
        servers = {"node-a": a, "node-b": b}
        kernel = await a.open_kernel(NOTEBOOK)
        await a.run(kernel, "counter = 0")
        code, answer = await a.call("pause", path=NOTEBOOK)
        assert code == 202, answer
        assert (await a.wait_state(NOTEBOOK, ("paused", "failed")))["state"] == "paused"

        winners = []
        for round_ in range(ROUNDS):
            answers = await asyncio.gather(a.call("resume", path=NOTEBOOK), b.call("resume", path=NOTEBOOK))
            codes = sorted(code for code, _ in answers)
            assert codes == [202, 409], (round_, answers)
            loser = next(body for code, body in answers if code == 409)
            assert "being resumed" in loser["message"] or "on node-" in loser["message"], loser
            (winner,) = [body["node"] for code, body in answers if code == 202]
            winners.append(winner)
            server = servers[winner]
            resumed = await server.wait_state(NOTEBOOK, ("ready", "failed"))
            assert resumed["verdict"] == "restored", resumed

            # the session runs on the winner only, and its state is the one paused last round
            running = {node: await s.kernels_of(NOTEBOOK) for node, s in servers.items()}
            assert [node for node, kernels in running.items() if kernels] == [winner], running
            (kernel,) = running[winner]
            assert (await server.run(kernel, "print(counter)\ncounter += 1")).strip() == str(round_)
            code, answer = await server.call("pause", path=NOTEBOOK)
            assert code == 202, answer
            assert (await server.wait_state(NOTEBOOK, ("paused", "failed")))["state"] == "paused"
        print(f"winners over {ROUNDS} rounds: {winners}")

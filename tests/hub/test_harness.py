"""tests/support/hub.py starts a real JupyterHub whose users' servers run jupyter_pause, each in its own
folders, and stops all of it afterwards."""

from __future__ import annotations

import os
import socket
import sys
import threading

import psutil
import pytest
from tornado.httpclient import HTTPClient

from tests.support import ports as port_draws
from tests.support.hub import Hub, Service, run_hub, wait_for
from tests.support.ports import free_port

pytestmark = pytest.mark.integration


def test_a_user_server_runs_jupyter_pause_behind_the_hub_and_everything_stops(tmp_path):
    www = tmp_path / "www" / "services" / "files"
    www.mkdir(parents=True)
    (www / "index.html").write_text("served by the service")
    command = [sys.executable, "-m", "http.server", "-b", "127.0.0.1", "-d", str(tmp_path / "www"), "{port}"]
    service = Service("files", scopes=["read:hub"], command=command)
    with run_hub(tmp_path / "hub", services=[service]) as hub:
        hub.create_user("ann")
        model = hub.start_server("ann", options={"profile": "quick"})
        assert model["user_options"] == {"profile": "quick"}

        status = hub.server_fetch("ann", "jupyter-pause/api/status")
        assert status.code == 200, status
        assert status.body["hub"] == {"user": "ann", "server_name": ""}
        assert status.body["store"] == str(hub.store("ann"))

        served = hub.fetch(f"{hub.url}/services/files/")  # the managed service, through the proxy
        assert (served.code, served.body) == (200, "served by the service")
        started = psutil.Process(hub.process.pid).children(recursive=True)
        assert len(started) >= 3  # the proxy, ann's server, the service

        kernel = hub.open_notebook("ann", "a.ipynb", "x = 41")
        assert hub.execute("ann", kernel, "x = 41\nprint(x + 1)") == "42\n"
        # the harness's thread counts reach the kernel (a spawner passes on only c.Spawner.env_keep)
        threads = "import os, torch\nprint(os.environ['OMP_NUM_THREADS'], torch.get_num_threads())"
        n = os.environ["OMP_NUM_THREADS"]
        assert hub.execute("ann", kernel, threads) == f"{n} {n}\n"
        assert (hub.home("ann") / "a.ipynb").exists()

        hub.stop_server("ann")
        assert hub.server_model("ann") is None
    assert not [p for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_a_hub_whose_port_another_process_took_meanwhile_starts_on_new_ports(tmp_path):
    """Ports are picked free, then bound by the Hub seconds later: tests side by side may take one."""
    hub = Hub(tmp_path / "hub")
    taken = hub.hub_port
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", taken))  # bound: the Hub cannot bind it (and nothing answers there)
        try:
            hub.start()
            assert hub.hub_port != taken
            assert hub.api("GET", "users") == []
        finally:
            hub.stop()


def test_a_hub_whose_proxy_port_a_kernels_socket_took_meanwhile_starts_on_new_ports(tmp_path):
    """The proxy logs that its port is taken and runs on without it; the socket there (a kernel's,
    say) takes connections and closes them unanswered. The Hub starts again on new ports."""
    hub = Hub(tmp_path / "hub")
    taken = hub.port
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        closer = threading.Thread(target=_close_each_connection, args=(squatter,), daemon=True)
        closer.start()
        try:
            hub.start()
            assert hub.port != taken
            assert hub.fetch(f"{hub.url}/hub/api/", token=None).code == 200
        finally:
            hub.stop()


def test_no_two_of_a_hubs_ports_are_the_same_nor_any_port_this_process_drew_before(tmp_path, monkeypatch):
    """A Hub's ports and its services' are all drawn before any is bound: each draw must avoid the
    others (two services once shared a port, and the proxy sent one's page to the other)."""
    monkeypatch.setattr(port_draws, "_given", set())  # the thousand draws are not kept from this process's later tests
    services = [Service(f"s{i}", scopes=["read:hub"]) for i in range(20)]
    hub = Hub(tmp_path / "hub", services=services)
    try:
        ports = [hub.port, hub.hub_port, hub.api_port, *(s.port for s in services)]
        drawn = [free_port() for _ in range(1000)]  # a tenth of the range: without memory, repeats are certain
        assert len(set(ports + drawn)) == len(ports) + len(drawn)
    finally:
        hub.stop()


def test_a_service_the_test_starts_itself_keeps_its_port_from_every_draw_until_it_starts(tmp_path):
    """Such a service binds its port minutes after the draw; meanwhile the Hub's process draws its
    users' servers' ports, knowing nothing of this process's draws (a user's server once took a
    service's port, and the proxy sent the service's page to it)."""
    own, managed = Service("own", scopes=["read:hub"]), Service("managed", ["read:hub"], command=["true"])
    hub = Hub(tmp_path / "hub", services=[own, managed])
    try:
        assert not port_draws.bindable(own.port)  # no process's draw takes it
        assert port_draws.bindable(managed.port)  # the Hub starts that one itself, at its own start
        env = hub.service_env("own")
        assert env["JUPYTERHUB_SERVICE_URL"] == f"http://127.0.0.1:{own.port}"
        assert port_draws.bindable(own.port)  # let go: the service binds it next
    finally:
        hub.stop()
    assert port_draws.bindable(own.port)


def _close_each_connection(listener: socket.socket) -> None:
    while True:
        try:
            connection, _ = listener.accept()
        except OSError:  # the listener was closed: the test is over
            return
        connection.close()


def test_a_poll_no_one_answers_in_time_is_a_poll_without_an_answer_until_the_deadline(capsys):
    silent = socket.create_server(("127.0.0.1", 0))  # accepts and never answers
    url = f"http://127.0.0.1:{silent.getsockname()[1]}/"
    client = HTTPClient()
    calls: list[str] = []

    def read() -> str:
        calls.append("asked")
        if len(calls) == 1:
            client.fetch(url, request_timeout=0.2)
        return "answered"

    try:
        assert wait_for(read, lambda seen: seen == "answered", 30, "the status") == "answered"
        assert len(calls) == 2
        assert "the status: no answer (Timeout during request)" in capsys.readouterr().out
        with pytest.raises(AssertionError, match=r"the status: not reached in 0.1 s; last seen no answer"):
            wait_for(lambda: client.fetch(url, request_timeout=0.2), lambda seen: True, 0.1, "the status")
    finally:
        client.close()
        silent.close()

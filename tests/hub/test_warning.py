"""The warning before a release, on the service's side: ``--warn-before`` is checked as written,
and a server whose jupyter_pause takes no warnings (an older version, stood in for here by an
HTTP server that answers as one does) is released at once, saying so.

The whole cycle on a real Hub (warned, released when due, kept when used) is in test_hub_service.py."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from tornado import web
from tornado.httpserver import HTTPServer

from jupyter_pause.hub import release
from jupyter_pause.hub.hubapi import HubClient, ServerClient
from jupyter_pause.hub.options import DEFAULT_WARN_BEFORE, configure
from jupyter_pause.hub.policy import Decision, ServerView
from tests.support.ports import free_port


def test_warn_before_is_five_minutes_unless_given_and_never_longer_than_a_timeout():
    args, _, settings = configure([], {})
    assert args.warn_before == settings.warn_before == DEFAULT_WARN_BEFORE == 300.0
    _, _, settings = configure(["--warn-before=0"], {})
    assert settings.warn_before == 0.0
    _, _, settings = configure(["--warn-before=90s", "--profile-timeout=gpu=15m"], {})
    assert settings.warn_before == 90.0


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--warn-before=-5m"], "a warning comes before the release, write 0 or more"),
        (["--warn-before=soon"], "is not a duration: write 0 (no warning), 90s, 5m"),
        (["--warn-before=2h", "--idle-timeout=1h"], "--warn-before 2h is longer than --idle-timeout (1.0 h)"),
        (["--warn-before=10m", "--profile-timeout=gpu=5m"], "longer than --profile-timeout gpu (5.0 min)"),
    ],
)
def test_a_bad_warn_before_stops_the_service_saying_what_to_write(argv, says, capsys):
    with pytest.raises(SystemExit):
        configure(argv, {})
    assert says in capsys.readouterr().err


class _OlderServer(web.RequestHandler):
    """A user's server whose jupyter_pause predates warnings: 404 on the warning, a release as ever."""

    def post(self, what: str) -> None:
        if what == "release":
            self.set_status(202)
            self.finish(json.dumps({"id": "r1", "state": "stopped", "detail": "every session paused"}))
        else:
            self.set_status(404)
            self.finish(json.dumps({"message": "Not Found"}))


@pytest.fixture
def older_server():
    port = free_port()
    server = HTTPServer(web.Application([(r"/user/ann/jupyter-pause/api/(.*)", _OlderServer)]))
    server.listen(port, "127.0.0.1")
    yield f"http://127.0.0.1:{port}"
    server.stop()


async def test_a_server_that_takes_no_warning_is_released_at_once_and_the_outcome_says_so(older_server):
    now = datetime.now(timezone.utc)
    view = ServerView("ann", "", "/user/ann/", True, None, now - timedelta(hours=3), now - timedelta(hours=2))
    decision = Decision("release", "idle", "no activity for 7200 s (timeout 3600 s)", 3600.0, 7200.0)
    hub = HubClient("http://127.0.0.1:9/hub/api", "unused")  # never asked: the release says "stopped"
    outcome = await release.warn(
        view, decision, hub, ServerClient(older_server, "t"), release.Settings(warn_before=300)
    )
    assert outcome.released, outcome
    assert "released without a warning: its jupyter_pause takes none, 404: Not Found)" in outcome.detail

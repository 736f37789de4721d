"""``jupyter-pause-hub``'s command line (hub/options.py): defaults from the Hub's environment,
options checked with a message that says what to write, and the options the service's page shows."""

from __future__ import annotations

import pytest

from jupyter_pause.hub.options import configure, default_proxy_url, parser, shown


def test_servers_are_reached_at_the_hubs_public_origin_else_its_default_bind_url():
    assert default_proxy_url({"JUPYTERHUB_PUBLIC_URL": "https://hub.example.org/prefix/"}) == "https://hub.example.org"
    assert default_proxy_url({}) == "http://127.0.0.1:8000"
    assert default_proxy_url({"JUPYTERHUB_PUBLIC_URL": "not a url"}) == "http://127.0.0.1:8000"


def test_the_hubs_api_url_and_the_durations_come_as_a_managed_service_gets_them():
    args, rules, settings = configure(
        ["--idle-timeout=15m", "--profile-timeout=gpu=10m", "--users=ann,bob", "--dry-run"],
        {"JUPYTERHUB_API_URL": "http://hub:8081/hub/api"},
    )
    assert args.url == "http://hub:8081/hub/api"
    assert rules.idle_timeout == 900.0 and rules.profile_timeouts == {"gpu": 600.0}
    assert rules.users == frozenset({"ann", "bob"}) and settings.dry_run


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--concurrency=0"], "--concurrency must be 1 or more"),
        (["--profile-timeout=gpu"], "write PROFILE=SECONDS"),
        (["--server-gpus=-1"], "--server-gpus must be 0 or more"),
        (["--idle-timeout=soon"], "--idle-timeout"),
    ],
)
def test_a_bad_option_stops_with_what_to_write(argv, said, capsys):
    with pytest.raises(SystemExit) as stopped:
        configure(argv, {})
    assert stopped.value.code == 2
    assert said in capsys.readouterr().err


def test_the_page_shows_the_options_without_a_stores_credentials():
    args, rules, _ = configure(["--store=s3://AKIAXXX:s3cret@bucket/pause", "--exclude-users=zed,amy"], {})
    options = shown(args, rules)
    assert "s3cret" not in str(options) and options["store"] == "s3://***@bucket/pause"
    assert options["exclude_users"] == ["amy", "zed"] and options["profile_timeouts"] == {}


def test_help_says_what_the_service_does():
    assert "pauses idle servers instead of culling them" in parser({}).format_help()

"""The service's decisions: which timeout applies, who is looked after, idle, too old, busy."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from jupyter_pause.hub import policy
from jupyter_pause.hub.policy import Policy, ServerView

NOW = datetime(2026, 11, 30, 16, 0, tzinfo=timezone.utc)


def server(user="ann", *, idle=0.0, age=None, ready=True, pending=None, profile=None, name=""):
    """A server idle for ``idle`` seconds that started ``age`` seconds ago (default: as idle)."""
    started = NOW - timedelta(seconds=idle if age is None else age)
    options = {"profile": profile} if profile is not None else {}
    return ServerView(user, name, f"/user/{user}/", ready, pending, started, NOW - timedelta(seconds=idle), options)


def look(rules: Policy, view: ServerView) -> tuple[str, str]:
    decision = policy.first_look(rules, view, NOW)
    return decision.action, decision.reason


def test_a_server_idle_past_its_timeout_goes_on_to_its_kernels_and_an_active_one_is_kept():
    rules = Policy(idle_timeout=600)
    assert look(rules, server(idle=601)) == ("check-kernels", policy.IDLE)
    assert look(rules, server(idle=599)) == ("keep", policy.ACTIVE)


def test_the_profile_in_user_options_chooses_its_timeout_and_others_get_the_default():
    rules = Policy(idle_timeout=3600, profile_timeouts={"gpu": 900})
    assert look(rules, server(idle=1000, profile="gpu")) == ("check-kernels", policy.IDLE)
    assert look(rules, server(idle=1000, profile="cpu")) == ("keep", policy.ACTIVE)
    assert look(rules, server(idle=1000)) == ("keep", policy.ACTIVE)
    assert policy.first_look(rules, server(idle=1000, profile="gpu"), NOW).timeout == 900


def test_users_and_exclude_users_choose_whose_servers_are_released():
    only = Policy(idle_timeout=10, users=frozenset({"ann"}))
    assert look(only, server("ann", idle=60))[0] == "check-kernels"
    assert look(only, server("bob", idle=60)) == ("keep", policy.EXCLUDED)
    but = Policy(idle_timeout=10, exclude_users=frozenset({"bob"}))
    assert look(but, server("bob", idle=60)) == ("keep", policy.EXCLUDED)
    assert look(but, server("cat", idle=60))[0] == "check-kernels"


def test_a_server_starting_or_stopping_is_left_alone():
    rules = Policy(idle_timeout=10)
    assert look(rules, server(idle=60, ready=False, pending="spawn")) == ("keep", policy.PENDING)
    assert look(rules, server(idle=60, pending="stop")) == ("keep", policy.PENDING)


def test_max_age_releases_an_active_server_and_zero_turns_it_off():
    assert look(Policy(idle_timeout=3600, max_age=7200), server(idle=5, age=7201)) == ("check-kernels", policy.MAX_AGE)
    assert look(Policy(idle_timeout=3600, max_age=7200), server(idle=5, age=7199)) == ("keep", policy.ACTIVE)
    assert look(Policy(idle_timeout=3600), server(idle=5, age=10**6)) == ("keep", policy.ACTIVE)


def test_a_busy_kernel_keeps_an_idle_or_old_server_and_idle_kernels_release_it():
    for view, rules in ((server(idle=60), Policy(idle_timeout=10)), (server(age=10**5), Policy(max_age=60))):
        decision = policy.first_look(rules, view, NOW)
        kernels = [{"id": "k1", "execution_state": "idle"}, {"id": "k2", "execution_state": "busy"}]
        kept = policy.after_kernels(decision, kernels)
        assert (kept.action, kept.reason) == ("keep", policy.BUSY)
        assert "k2" in kept.detail
        released = policy.after_kernels(decision, [{"id": "k1", "execution_state": "idle"}])
        assert (released.action, released.reason) == ("release", decision.reason)
        assert policy.after_kernels(decision, []).action == "release"


def test_a_server_the_hub_has_no_times_for_is_kept():
    view = ServerView("ann", "", "/user/ann/", True, None, None, None)
    assert look(Policy(idle_timeout=0), view) == ("keep", policy.ACTIVE)


def test_a_named_server_is_written_user_slash_name():
    assert server("ann", name="gpu").label == "ann/gpu"
    assert server("ann").label == "ann"


def test_profile_timeouts_and_user_lists_are_read_as_written():
    assert policy.parse_profile_timeouts(["gpu=900", "cpu=2h", " big = 15m"]) == {"gpu": 900, "cpu": 7200, "big": 900}
    for bad in ("gpu", "=900", "gpu=soon"):
        with pytest.raises(ValueError):
            policy.parse_profile_timeouts([bad])
    assert policy.parse_users(" ann, bob,,") == {"ann", "bob"}
    assert policy.parse_users(None) == frozenset()

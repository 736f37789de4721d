"""``{user}`` and ``{server}`` in store URLs: expanded from the Hub's variables (else the OS user),
and anything else in braces refused before a store is opened."""

from __future__ import annotations

import getpass

import pytest

from jupyter_pause.errors import StoreError
from jupyter_pause.store.placeholders import expand, user_of
from jupyter_pause.store.storage import Store


@pytest.fixture
def on_a_hub(monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_USER", "alice")
    monkeypatch.setenv("JUPYTERHUB_SERVER_NAME", "gpu")


@pytest.fixture
def off_a_hub(monkeypatch):
    monkeypatch.delenv("JUPYTERHUB_USER", raising=False)
    monkeypatch.delenv("JUPYTERHUB_SERVER_NAME", raising=False)


def test_user_and_server_come_from_the_hub(on_a_hub):
    assert expand("s3://team-bucket/pause/{user}/{server}") == "s3://team-bucket/pause/alice/gpu"


def test_a_default_server_is_default(on_a_hub, monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_SERVER_NAME", "")
    assert expand("gs://b/{user}-{server}") == "gs://b/alice-default"


def test_outside_a_hub_user_is_the_os_user(off_a_hub):
    assert expand("/data/pause/{user}") == f"/data/pause/{getpass.getuser()}"
    assert expand("/data/{server}") == "/data/default"


def test_a_url_without_braces_is_left_alone_and_doubled_braces_are_literal(on_a_hub):
    assert expand("s3://b/pause") == "s3://b/pause"
    assert expand("s3://b/{{weird}}/{user}") == "s3://b/{weird}/alice"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("s3://b/pause/{username}", "placeholder {username}, which jupyter-pause does not know"),
        ("s3://b/pause/{}", "placeholder {}, which"),
        ("s3://b/pause/{user!r}", "write placeholders plainly"),
        ("s3://b/pause/{user:>9}", "write placeholders plainly"),
        ("s3://b/pause/{user", "unmatched brace"),
        ("s3://b/pause/user}", "unmatched brace"),
    ],
)
def test_anything_else_in_braces_is_a_clear_error(on_a_hub, url, says):
    with pytest.raises(StoreError, match="store URL") as caught:
        expand(url)
    assert says in str(caught.value)
    assert "{user}" in str(caught.value)  # says what it does know


def test_a_value_that_is_not_one_folder_name_is_refused(on_a_hub, monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_USER", "../bob")
    with pytest.raises(StoreError, match="not one folder name"):
        expand("s3://b/pause/{user}")


def test_every_store_opens_the_expanded_url(on_a_hub, tmp_path):
    store = Store(str(tmp_path / "{user}"))
    store.write("k", b"v")
    assert (tmp_path / "alice" / "k").read_bytes() == b"v"
    assert store.url == str(tmp_path / "alice")


def test_an_unknown_placeholder_opens_nothing(on_a_hub, tmp_path):
    with pytest.raises(StoreError, match=r"\{usr\}"):
        Store(str(tmp_path / "{usr}"))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("url", "template", "user"),
    [
        ("s3://team/pause/ana", "s3://team/pause/{user}", "ana"),
        ("s3://team/pause/ana/", "s3://team/pause/{user}", "ana"),
        ("s3://team/pause/ana/gpu", "s3://team/pause/{user}/{server}", "ana"),
        ("s3://team/x{y}/ana", "s3://team/x{{y}}/{user}", "ana"),
        ("s3://team/pause/{user}", "s3://team/pause/{user}", "alice"),  # the configured store itself: this user's
        ("s3://team/pause", "s3://team/pause/{user}", None),  # the shared root
        ("s3://team/pause/ana/more", "s3://team/pause/{user}", None),
        ("s3://other/pause/ana", "s3://team/pause/{user}", None),
        ("s3://team/pause/gpu", "s3://team/pause/{server}", None),  # no user in the template
    ],
)
def test_the_user_whose_prefix_a_store_url_is(on_a_hub, url, template, user):
    """Whose records a prefix holds: what ``{user}`` stands for in the URL, under the configured one."""
    assert user_of(url, template) == user

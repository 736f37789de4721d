"""jupyter_pause.store.credentials: nothing secret is ever printed; the S3 endpoint from the environment."""

from __future__ import annotations

import pytest

from jupyter_pause.store.credentials import redact, secrets, storage_options


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("s3://AKID:hunter2@bucket/x", "s3://***@bucket/x"),
        ("https://user:hunter2@example.org/a/b", "https://***@example.org/a/b"),
        ("gs://token@bucket", "gs://***@bucket"),
        ("s3://bucket/a@b", "s3://bucket/a@b"),
        ("/plain/local/path", "/plain/local/path"),
    ],
)
def test_redact_hides_user_and_password(url: str, shown: str) -> None:
    assert redact(url) == shown
    assert "hunter2" not in redact(url)


def test_secrets_are_url_credentials_and_secret_looking_options_at_any_depth() -> None:
    options = {"key": "AKIDEXAMPLE", "client_kwargs": {"region": "eu"}, "nested": [{"session_token": "tok-123"}]}
    found = secrets("s3://user:pw-456@bucket/x", options)
    assert {"AKIDEXAMPLE", "tok-123", "user:pw-456", "user", "pw-456"} <= set(found)
    assert "eu" not in found
    assert found == sorted(found, key=len, reverse=True)  # longest first: replaced before their parts


def test_the_s3_endpoint_comes_from_the_environment_unless_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    assert storage_options("s3://b", {}) == {"endpoint_url": "http://127.0.0.1:9"}
    given = {"client_kwargs": {"endpoint_url": "http://127.0.0.1:8"}}
    assert storage_options("s3://b", given) == given
    assert storage_options("gs://b", {}) == {}


def test_an_azure_connection_string_is_a_secret() -> None:
    text = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=c2VjcmV0;EndpointSuffix=core.windows.net"
    assert secrets("az://container/pause", {"connection_string": text}) == [text]

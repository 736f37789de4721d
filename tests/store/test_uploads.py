"""Incomplete multipart uploads: found under a store's prefix, sized, and aborted by a plain gc.

On the SeaweedFS server of ``tests/support/s3_server.py``, an upload is begun with botocore (through s3fs,
as a write cut off by a SIGKILL leaves it) and never completed.
"""

from __future__ import annotations

import json

import pytest
import torch

import jupyter_pause as jp
from jupyter_pause import units
from jupyter_pause.cli import main
from jupyter_pause.store.layout import blob_key, pool_key, pool_prefix
from jupyter_pause.store.storage import Store
from jupyter_pause.store.uploads import incomplete, unlisted
from tests.support.s3_server import S3Server

PART = 5 << 20  # the smallest part S3 takes (but the last)


def begin_upload(s3: S3Server, url: str, key: str, parts: int = 1) -> str:
    """Begin a multipart upload of ``key`` in the store at ``url``, send ``parts`` parts, and stop."""
    fs = s3.filesystem()
    bucket, name, _ = fs.split_path(f"{url}/{key}")
    upload_id = fs.call_s3("create_multipart_upload", Bucket=bucket, Key=name)["UploadId"]
    for number in range(1, parts + 1):
        fs.call_s3("upload_part", Bucket=bucket, Key=name, UploadId=upload_id, PartNumber=number, Body=b"x" * PART)
    return upload_id


def uploads_under(s3: S3Server, url: str) -> list[str]:
    fs = s3.filesystem()
    bucket, name, _ = fs.split_path(url)
    return [
        u["Key"] for u in fs.call_s3("list_multipart_uploads", Bucket=bucket, Prefix=f"{name}/").get("Uploads") or []
    ]


def test_local_and_memory_stores_have_no_uploads_to_list(tmp_path) -> None:
    for store in (Store(str(tmp_path)), Store("memory://pause-uploads")):
        assert unlisted(store) is None and incomplete(store, "sessions/s/") == []


@pytest.mark.integration
@pytest.mark.s3
@pytest.mark.usefixtures("new_process")
def test_plain_gc_aborts_an_incomplete_upload_and_keeps_every_checkpoint(
    s3_env: str, s3_server: S3Server, capsys: pytest.CaptureFixture[str]
) -> None:
    done = jp.checkpoint(store=s3_env, session="s", namespace={"t": torch.ones(1000)}).manifest
    cut_off = blob_key("s", "ef" * 16)  # in the session's own folder, as before the store had a pool
    begin_upload(s3_server, s3_env, cut_off, parts=2)
    pooled = pool_key("ef" * 16)  # into the store's pool, as a checkpoint writes now
    begin_upload(s3_server, s3_env, pooled)
    elsewhere = f"{s3_env}-other"  # another store's upload, beside this one's prefix
    begin_upload(s3_server, elsewhere, cut_off)
    found = incomplete(Store(s3_env), "sessions/s/")
    assert [(u.key, u.size) for u in found] == [(cut_off, 2 * PART)] and found[0].initiated is not None
    assert [(u.key, u.size) for u in incomplete(Store(s3_env), pool_prefix())] == [(pooled, PART)]

    assert main(["gc", "--store", s3_env]) == 0  # within the grace period: left alone
    out = capsys.readouterr().out
    assert "0 incomplete upload(s)" in out and "0 unfinished write(s)" in out
    assert main(["gc", "--store", s3_env, "--grace", "0", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"would remove upload {cut_off} ({units.size(2 * PART)}, " in out
    assert f"would remove upload {pooled} ({units.size(PART)}, " in out
    assert len(uploads_under(s3_server, s3_env)) == 2

    assert main(["gc", "--store", s3_env, "--grace", "0", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["counts"]["upload"] == 2 and result["counts"]["checkpoint"] == 0
    assert result["bytes_freed"] == 3 * PART and result["uploads_unlisted"] is None
    assert uploads_under(s3_server, s3_env) == [] and len(uploads_under(s3_server, elsewhere)) == 1
    target: dict = {}
    assert jp.resume(store=s3_env, session="s", namespace=target).manifest.id == done.id
    assert torch.equal(target["t"], torch.ones(1000))

"""The README's team bucket on the test S3 server: one bucket and one credential for every user of
a Hub, a ``{user}`` prefix each, as the README's Hub block configures it.

``TeamBucket`` makes the bucket the README's store URL names on the SeaweedFS server of
``tests/support/s3_server.py``, gives a Hub the lines that point its users' servers at that
server with the shared credential, and reads the bucket as its owner would (every object's raw
bytes) and as a user's server does (with that user's key).
"""

from __future__ import annotations

import os
import re
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from jupyter_pause.hub.keys import SECRET_ENV
from jupyter_pause.store.layout import manifest_id, manifest_key, manifest_prefix
from jupyter_pause.store.manifest import Manifest
from jupyter_pause.store.signing import user_key
from jupyter_pause.store.storage import Store
from tests.support.hub import readme_hub_config
from tests.support.s3_server import HOST, S3Server, use_aws_env


def readme_store() -> str:
    """The store URL the README's Hub block gives every server (``s3://<bucket>/<prefix>/{user}``)."""
    found = re.search(r"[\"']JUPYTER_PAUSE_STORE[\"']:\s*[\"']([^\"']+)[\"']", readme_hub_config())
    if found is None:
        raise AssertionError("the README's Hub block sets no JUPYTER_PAUSE_STORE")
    return found.group(1)


@dataclass
class TeamBucket:
    """The bucket of ``store`` (a URL with ``{user}``) on ``server``; users' keys from ``secret``."""

    server: S3Server
    store: str
    secret: str

    @property
    def bucket(self) -> str:
        """The bucket's name."""
        return self.store.removeprefix("s3://").split("/", 1)[0]

    def url(self, user: str) -> str:
        """The store URL of ``user``'s server."""
        return self.store.replace("{user}", user)

    def hub_config(self) -> str:
        """jupyterhub_config.py lines after the harness's: every server's store the README's, on
        this server, with the one credential the team shares (and no AWS file or proxy in the way)."""
        missing = os.path.join(tempfile.gettempdir(), f"pause-no-aws-config-{uuid.uuid4().hex}")
        environment = {
            **self.server.env(),
            "AWS_CONFIG_FILE": missing,
            "AWS_SHARED_CREDENTIALS_FILE": missing,
            "NO_PROXY": f"{HOST},localhost",
            "no_proxy": f"{HOST},localhost",
            "JUPYTER_PAUSE_STORE": self.store,  # the harness's lines gave each server a folder
        }
        # The README's pause service listens on a fixed port: only the test of the README block runs it.
        lines = [
            f"c.Spawner.environment.update({environment!r})",
            'c.JupyterHub.services = [s for s in c.JupyterHub.services if s["name"] != "jupyter-pause"]',
            'c.JupyterHub.load_roles = [r for r in c.JupyterHub.load_roles if r["name"] != "jupyter-pause"]',
        ]
        return "\n".join(lines) + "\n"

    def opened(self, user: str) -> Store:
        """``user``'s store opened with ``user``'s key, as their server opens it."""
        return Store(self.url(user), keys=user_key(self.secret, user))

    def objects(self, under: str = "") -> dict[str, bytes]:
        """Every object of the bucket (whose key starts with ``under``), as stored: path -> bytes."""
        fs = self.server.filesystem()
        paths = [p for p in fs.find(self.bucket) if p.removeprefix(f"{self.bucket}/").startswith(under)]
        return fs.cat(paths) if paths else {}

    def manifests(self, user: str, session: str) -> list[Manifest]:
        """``user``'s checkpoints of ``session``, oldest first, read with their key."""
        store = self.opened(user)
        ids = sorted(i for key in store.list(manifest_prefix(session)) if (i := manifest_id(key)))
        return [Manifest.from_bytes(store.read(manifest_key(session, i))) for i in ids]


@contextmanager
def team_bucket(server: S3Server, secret: str) -> Iterator[TeamBucket]:
    """The README's bucket made on ``server``; for the block, this process's AWS variables point at
    it (as a user's do) and the Hub's secret is in its environment, where a Hub started now takes it."""
    team = TeamBucket(server, readme_store(), secret)
    with pytest.MonkeyPatch.context() as mp:
        use_aws_env(mp, server.env())
        mp.setenv(SECRET_ENV, secret)
        fs = server.filesystem()
        if not fs.exists(team.bucket):
            fs.mkdir(team.bucket)
        yield team

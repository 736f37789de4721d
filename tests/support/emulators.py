"""Local emulators of cloud object stores for tests, on 127.0.0.1 only, started and stopped by fixtures.

- GCS: ``gcp-storage-emulator`` (PyPI), in memory, with the bucket ``pause-test``; gcsfs reaches it
  through the storage options ``{"endpoint_url": ..., "token": "anon"}``.
- Azure Blob: Azurite (npm ``azurite``, installed by ``make`` beside the venv), with the container
  ``pause-test``; adlfs reaches it through Azurite's well-known ``devstoreaccount1`` connection string.

``gcs_env`` and ``azure_env`` set ``JUPYTER_PAUSE_STORAGE_OPTIONS`` as a user would, and yield a
fresh store URL under the bucket or container.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fsspec.registry import _registry as fsspec_classes

from tests.support.children import spawn
from tests.support.ports import free_port
from tests.support.s3_server import answers_http

HOST = "127.0.0.1"
BUCKET = "pause-test"
#: Seconds an emulator gets to answer on its port.
START_TIMEOUT = 30.0
REPO = Path(__file__).resolve().parents[2]
AZURITE_IN_VENV = REPO / ".venv" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
#: Azurite's fixed development account and key (public, the same in every Azurite).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
#: gcsfs probes a bucket's type over gRPC first (and waits a minute for an emulator that has no
#: gRPC); with this off, gcsfs is its plain JSON-API filesystem.
GCSFS_GRPC_PROBE = "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"


@dataclass
class Emulator:
    """A running emulator: its endpoint, process, folder and log."""

    endpoint: str
    process: subprocess.Popen
    directory: Path
    log: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        shutil.rmtree(self.directory, ignore_errors=True)


def start(name: str, command: list[str], port: int, directory: Path) -> Emulator:
    """Run ``command`` (listening on ``port``) until it answers HTTP; fail the test if it never does."""
    log = directory / f"{name}.log"
    process = spawn(command, directory, {**_env(), "PYTHONUNBUFFERED": "1"}, log)
    emulator = Emulator(f"http://{HOST}:{port}", process, directory, log)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline and process.poll() is None:
        if answers_http(port):
            return emulator
        time.sleep(0.1)
    tail = log.read_text(errors="replace")[-3000:]
    emulator.stop()
    pytest.fail(f"{name} did not answer on {emulator.endpoint} within {START_TIMEOUT:.0f} s:\n{tail}", pytrace=False)


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "AZURE_", "GOOGLE_", "STORAGE_"))}


@pytest.fixture(scope="module")
def gcs_emulator() -> Iterator[Emulator]:
    """gcp-storage-emulator on 127.0.0.1, in memory, with bucket ``pause-test``."""
    for module in ("gcsfs", "gcp_storage_emulator"):  # found, not imported (see gcs_env)
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"no {module}: install the test extra: pip install -e '.[test]'")
    port = free_port()
    directory = Path(tempfile.mkdtemp(prefix="pause-gcs-"))
    command = [sys.executable, "-m", "gcp_storage_emulator", "start", f"--host={HOST}", f"--port={port}"]
    emulator = start("gcp-storage-emulator", [*command, "--in-memory", f"--default-bucket={BUCKET}"], port, directory)
    yield emulator
    emulator.stop()


def gcs_options(emulator: Emulator) -> dict[str, Any]:
    return {"endpoint_url": emulator.endpoint, "token": "anon"}


@pytest.fixture
def gcs_env(gcs_emulator: Emulator, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh ``gs://pause-test/<uuid>`` store URL, with the storage options that reach the emulator."""
    monkeypatch.setenv(GCSFS_GRPC_PROBE, "false")  # read when gcsfs is imported (by this process or a child)
    import gcsfs.core

    for protocol in ("gs", "gcs"):  # and where gcsfs was imported already: its plain filesystem
        monkeypatch.setitem(fsspec_classes, protocol, gcsfs.core.GCSFileSystem)
    monkeypatch.setenv("JUPYTER_PAUSE_STORAGE_OPTIONS", json.dumps(gcs_options(gcs_emulator)))
    yield f"gs://{BUCKET}/{uuid.uuid4().hex}"


def azurite_binary() -> str:
    found = shutil.which("azurite-blob") or (str(AZURITE_IN_VENV) if AZURITE_IN_VENV.exists() else None)
    if found is None:
        pytest.fail(
            f"azurite-blob is neither on PATH nor at {AZURITE_IN_VENV}; run `make test` (it installs it with npm) "
            "or `npm install -g azurite`",
            pytrace=False,
        )
    return found


def azurite_connection_string(emulator: Emulator) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
        f"BlobEndpoint={emulator.endpoint}/{AZURITE_ACCOUNT};"
    )


@pytest.fixture(scope="module")
def azurite() -> Iterator[Emulator]:
    """Azurite's blob service on 127.0.0.1, its data in a temp folder, with container ``pause-test``."""
    adlfs = pytest.importorskip("adlfs", reason="install the test extra: pip install -e '.[test]'")
    port = free_port()
    directory = Path(tempfile.mkdtemp(prefix="pause-azurite-"))
    command = [azurite_binary(), "--blobHost", HOST, "--blobPort", str(port), "--location", str(directory / "data")]
    emulator = start("azurite", [*command, "--silent", "--skipApiVersionCheck"], port, directory)
    try:
        fs = adlfs.AzureBlobFileSystem(connection_string=azurite_connection_string(emulator), skip_instance_cache=True)
        fs.mkdir(BUCKET)
        yield emulator
    finally:
        emulator.stop()


@pytest.fixture
def azure_env(azurite: Emulator, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh ``az://pause-test/<uuid>`` store URL, with the storage options that reach Azurite."""
    options = {"connection_string": azurite_connection_string(azurite)}
    monkeypatch.setenv("JUPYTER_PAUSE_STORAGE_OPTIONS", json.dumps(options))
    yield f"az://{BUCKET}/{uuid.uuid4().hex}"

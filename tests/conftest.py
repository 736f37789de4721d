"""Shared fixtures: real kernels (tests/support/kernels.py), a real S3 server
(tests/support/s3_server.py), a store URL on every backend (tests/support/stores.py), a real
Jupyter server with the extension on a local store (``jp_server_config``: a module overrides
``store`` or ``pause_server`` for another store or more settings), and a clean slate of this
process's session state (``new_process``); tests that start processes must be marked
``integration``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_pause import config
from jupyter_pause.proof import fingerprint
from tests.support.kernels import THREAD_VARIABLES, jupyter_dirs, start_kernel  # noqa: F401
from tests.support.processes import forget_session_state
from tests.support.s3_server import s3_env, s3_server  # noqa: F401
from tests.support.server_helpers import server_config
from tests.support.stores import no_pause_env, store_url  # noqa: F401
from tests.support.tally import TALLY

pytest_plugins = ["pytest_jupyter.jupyter_server"]

# Every kernel, server and Hub a test starts computes on one thread (set before any test module
# imports torch): the test workers already use every core, and a test's tensors are small.
for _variable in THREAD_VARIABLES:
    os.environ.setdefault(_variable, "1")

#: Fixtures that start a kernel, a Jupyter server, the S3 server or an emulator (a test marked ``s3`` starts S3 too).
STARTS_PROCESSES = frozenset({"start_kernel", "jp_serverapp", "s3_server", "gcs_emulator", "azurite"})


@pytest.fixture(autouse=True)
def plaintext_where_a_signature_is_edited(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test of the ``signature`` damage (tests/support/damage.py) edits a signed manifest's
    plaintext: its store is written unencrypted, as ``JUPYTER_PAUSE_ENCRYPT=0`` writes one (an
    encrypted manifest edited is the ``sealed`` damage)."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and callspec.params.get("kind") == "signature":
        monkeypatch.setenv("JUPYTER_PAUSE_ENCRYPT", "0")


@pytest.fixture(autouse=True)
def shared_memory_of_the_test(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The folder this process's prefetches take for the node's shared memory, by default: one
    of the test's own, rather than this machine's ``/dev/shm``."""
    folder = tmp_path / "shm"
    monkeypatch.setattr(config, "shared_memory_folder", lambda: str(folder))
    return folder


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def pause_server() -> dict[str, Any]:
    """Extra ``c.PauseServer`` settings of the test (a module or class overrides this)."""
    return {}


@pytest.fixture
def jp_server_config(store: Path, pause_server: dict[str, Any]) -> dict[str, Any]:
    return server_config(str(store), **pause_server)


@pytest.fixture
def manager(jp_serverapp: Any) -> Iterator[Any]:
    """The extension's PauseManager; its watchers stop when the test ends."""
    pause = jp_serverapp.web_app.settings["jupyter_pause"]
    yield pause
    for callback in getattr(pause, "watchers", []):
        callback.stop()


@pytest.fixture
def new_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The test runs as a fresh kernel would: no lineage position, no probe value held; the process
    token that ``tests.support.processes.another_process`` replaces is this process's again afterwards."""
    monkeypatch.setattr(fingerprint, "PROCESS_TOKEN", fingerprint.PROCESS_TOKEN)  # restored at teardown
    forget_session_state()
    yield
    forget_session_state()


def _starts_processes(item: pytest.Item) -> bool:
    return bool(STARTS_PROCESSES & set(getattr(item, "fixturenames", ()))) or item.get_closest_marker("s3") is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse a test that starts a kernel, a Jupyter server or S3 without the ``integration``
    marker: ``make test-fast`` would start it too."""
    unmarked = [item.nodeid for item in items if _starts_processes(item) and not item.get_closest_marker("integration")]
    if unmarked:
        listed = "\n  ".join(unmarked)
        raise pytest.UsageError(
            f"{len(unmarked)} test(s) start a kernel, a Jupyter server or S3 but are not marked integration; "
            f"add pytestmark = pytest.mark.integration to the module, or the mark to each test:\n  {listed}"
        )
    missing = [name for name in SLOWEST_FIRST if not (TESTS / name).is_file()]
    if missing:
        raise pytest.UsageError(f"SLOWEST_FIRST in tests/conftest.py names files that are not there: {missing}")
    items.sort(key=_slowest_first)


#: The test files that take longest (seconds of one test worker in a whole run on two cores, four
#: workers: a real Hub, a browser, servers and kernels killed on purpose), slowest first, each
#: file's tests' ``--durations`` summed (setup and teardown included).
#: They run first and every other file after them: the test workers take whole files in this
#: order (``make test`` passes ``--no-loadscope-reorder``, or pytest-xdist would order the files
#: by how many tests they hold), and a long file taken last would leave the other workers idle.
SLOWEST_FIRST = (
    "server/test_safepoints.py",  # 116 s
    "benchmarks/test_run.py",  # 114 s
    "labextension/test_browser.py",  # 101 s
    "loops/test_safepoints_kernels.py",  # 95 s
    "hub/test_shared_store.py",  # 92 s
    "server/test_faults.py",  # 88 s
    "faults/test_kill_during_checkpoint.py",  # 87 s
    "server/test_nodes.py",  # 78 s
    "fidelity/test_libraries.py",  # 73 s
    "hub/test_release.py",  # 57 s
    "proof/test_verdict_kernels.py",  # 55 s
    "hub/test_storm.py",  # 54 s
    "hub/test_service.py",  # 47 s
    "faults/test_s3_server_stops.py",  # 46 s
    "ledger/test_rollup.py",  # 43 s
    "session/test_modelfiles.py",  # 42 s
    "test_packaging.py",  # 40 s
    "session/test_kernel_roundtrip.py",  # 40 s
    "store/test_storage.py",  # 39 s
    "faults/test_kill_during_checkpoint_s3.py",  # 38 s
    "store/test_s3_scoped_identities.py",  # 34 s
    "server/test_culler.py",  # 34 s
    "server/test_damage.py",  # 33 s
    "serialize/test_digests.py",  # 30 s
    "session/test_modelfiles_shared_store.py",  # 30 s
    "benchmarks/test_gpu_check.py",  # 30 s
    "cli/test_drill.py",  # 29 s
    "hub/test_harness.py",  # 28 s
    "server/test_preemption_notices.py",  # 28 s
    "process/test_localmodules.py",  # 27 s
    "replay/test_rebuild_kernels.py",  # 27 s
    "serialize/test_reducers.py",  # 22 s
    "test_kernel_ports.py",  # 19 s
)
TESTS = Path(__file__).parent


def _slowest_first(item: pytest.Item) -> int:
    try:
        return SLOWEST_FIRST.index(item.path.relative_to(TESTS).as_posix())
    except ValueError:
        return len(SLOWEST_FIRST)


# -- the fault-injection counts, summed over the test workers (pytest-xdist) and printed last --


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a worker: hand its counts to the controller
        workeroutput["fault_tally"] = TALLY.to_dict()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    counts = getattr(node, "workeroutput", {}).get("fault_tally")
    if counts:
        TALLY.add(counts)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if hasattr(terminalreporter.config, "workeroutput") or not TALLY.ran():
        return  # a worker, or the fault tests did not run in this session
    terminalreporter.section("fault injection")
    for line in TALLY.lines():
        terminalreporter.write_line(line)

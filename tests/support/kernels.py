"""Real IPython kernels for tests: start in a chosen folder, run cells, kill with SIGKILL."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty
from typing import Any, Iterator

import pytest
from jupyter_client.manager import KernelManager

from jupyter_pause.server import kernelports

#: The variables that set how many threads a process computes on (OpenMP, MKL, OpenBLAS: torch's
#: and numpy's thread pools). ``tests/conftest.py`` sets each to 1; every kernel and server a test
#: starts inherits them, and the Hub harness passes them to its users' servers.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")

#: What every test server is configured with so that a kernel which cannot bind its ports starts
#: again on new ones. jupyter-client's port cache (on by default over TCP) hands a restart the very
#: ports the failed start had, so a kernel whose port another local process took between the pick
#: and the bind (every process here draws from the same ephemeral range, and the test workers run
#: side by side) failed all five restarts, and its test with it.
KERNEL_PORT_CONFIG = {"KernelManager": {"cache_ports": False}}
#: The same, on a server's command line.
KERNEL_PORT_ARGS = tuple(
    f"--{section}.{name}={value}" for section, names in KERNEL_PORT_CONFIG.items() for name, value in names.items()
)
#: How many times a test's own kernel is started before its start counts as failed: a kernel that
#: dies before it answers is started again on new ports, as a server's restarter does.
STARTS = 3
#: Seconds a test's own kernel may take to answer, and how long each wait for it lasts before the
#: test looks again at whether it died or lost a port.
ANSWER_WITHIN = 60.0
ANSWER_ATTEMPT = 2.0


class OneKernel:
    """What the server's code reads of jupyter-server's kernel manager, holding one kernel, ``k``
    (a stand-in object of the test's)."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel

    def __contains__(self, kernel_id: str) -> bool:
        return kernel_id == "k"

    def get_kernel(self, kernel_id: str) -> Any:
        return self.kernel


@dataclass
class CellResult:
    """What a cell printed and the error it raised, if any."""

    stdout: str = ""
    error: str | None = None
    ename: str | None = None
    data: list[dict[str, Any]] = field(default_factory=list)

    def ok(self) -> CellResult:
        assert self.error is None, f"cell failed: {self.ename}: {self.error}\n{self.stdout}"
        return self


class Kernel:
    """One running kernel process and a blocking client for it."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        for start in range(1, STARTS + 1):
            self.manager = KernelManager(kernel_name="python3", **KERNEL_PORT_CONFIG["KernelManager"])
            self.manager.start_kernel(cwd=str(cwd), env=env)
            self.client = self.manager.client()
            self.client.start_channels(hb=False)  # its manager says whether it lives
            if self._answered():
                return
            self.close()  # it died, or lost a port: taken between the pick and the bind, or worse
            if start == STARTS:
                raise RuntimeError(f"a kernel in {cwd} did not answer, {STARTS} starts in a row")

    def _answered(self) -> bool:
        """Whether the kernel answered within ``ANSWER_WITHIN`` seconds; False at once where it
        died, or another process holds one of its ports (it may wait rather than exit then:
        ``jupyter_pause.server.kernelports``)."""
        deadline = time.monotonic() + ANSWER_WITHIN
        while True:
            try:
                self.client.wait_for_ready(timeout=ANSWER_ATTEMPT)
                return True
            except RuntimeError:
                lost = kernelports.look(self.manager)[0] is not None
                if lost or not self.manager.is_alive() or time.monotonic() > deadline:
                    return False

    @property
    def pid(self) -> int:
        return self.manager.provisioner.process.pid  # type: ignore[union-attr]

    def send(self, code: str) -> str:
        """Start a cell without waiting for it (to kill the kernel mid-cell)."""
        return self.client.execute(code)

    def run(self, code: str, timeout: float = 120) -> CellResult:
        """Run a cell and collect its output."""
        return self.collect(self.client.execute(code), timeout)

    def collect(self, msg_id: str, timeout: float = 120) -> CellResult:
        """Wait for a cell started with ``send`` (or ``run``) and collect its output and error."""
        result = CellResult()
        while True:
            try:
                msg = self.client.get_iopub_msg(timeout=timeout)
            except Empty as e:
                raise TimeoutError(f"cell {msg_id} did not finish in {timeout} s") from e
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                result.stdout += content["text"]
            elif kind == "error":
                result.ename = content["ename"]
                result.error = content["evalue"]
            elif kind in ("execute_result", "display_data"):
                result.data.append(content["data"])
            elif kind == "status" and content["execution_state"] == "idle":
                break
        while True:
            reply = self.client.get_shell_msg(timeout=timeout)
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        if reply["content"]["status"] == "error" and result.ename is None:
            result.ename = reply["content"].get("ename")
            result.error = reply["content"].get("evalue")
        return result

    def value(self, expr: str) -> Any:
        """Evaluate ``expr`` in the kernel and return it (via JSON)."""
        import json

        out = self.run(f"import json as _j; print(_j.dumps({expr}))").ok().stdout
        return json.loads(out.strip().splitlines()[-1])

    def kill(self) -> None:
        """SIGKILL the kernel process: no cleanup, no atexit, like a preempted machine."""
        os.kill(self.pid, signal.SIGKILL)
        self.manager.provisioner.process.wait(timeout=30)  # type: ignore[union-attr]
        self.close()

    def close(self) -> None:
        self.client.stop_channels()
        if self.manager.has_kernel:
            self.manager.shutdown_kernel(now=True)


#: What a test's kernels never inherit from the test process: they are given their own or none.
NOT_INHERITED = ("JUPYTER_PAUSE_STORE", "JUPYTER_PAUSE_SESSION", "JPY_SESSION_NAME", "JPY_PARENT_PID")


def private_dirs(root: Path) -> dict[str, str]:
    """Private Jupyter and IPython folders, made under ``root``, as environment variables."""
    dirs = {
        "JUPYTER_CONFIG_DIR": root / "jupyter-config",
        "JUPYTER_DATA_DIR": root / "jupyter-data",
        "JUPYTER_RUNTIME_DIR": root / "jupyter-runtime",
        "IPYTHONDIR": root / "ipython",
    }
    for path in dirs.values():
        path.mkdir()
    return {name: str(path) for name, path in dirs.items()}


def kernel_of_its_own(root: Path) -> Kernel:
    """A kernel in ``root`` with private Jupyter folders there, for fixtures wider than a test
    (``start_kernel`` is the test's own); the caller closes it."""
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    return Kernel(root, {**env, **private_dirs(root)})


@pytest.fixture
def jupyter_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Private Jupyter and IPython folders for this test, in the environment."""
    env = private_dirs(tmp_path)
    for name, path in env.items():
        monkeypatch.setenv(name, path)
    for name in NOT_INHERITED:
        monkeypatch.delenv(name, raising=False)
    return env


@pytest.fixture
def start_kernel(jupyter_dirs: dict[str, str]) -> Iterator[Any]:
    """``start_kernel(cwd, **env)``: a real kernel in ``cwd``; all are shut down after the test."""
    started: list[Kernel] = []

    def start(cwd: Path, **env: str) -> Kernel:
        full = {**os.environ, **jupyter_dirs, **env}
        kernel = Kernel(cwd, full)
        started.append(kernel)
        return kernel

    yield start
    for kernel in started:
        try:
            kernel.close()
        except Exception:  # already killed: nothing left to close
            continue

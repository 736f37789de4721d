"""One test process playing the kernel processes of a story: what each new one starts without."""

from __future__ import annotations

import multiprocessing
import os
import secrets
from multiprocessing.context import BaseContext

from jupyter_pause.loops import positions
from jupyter_pause.proof import fingerprint, probe
from jupyter_pause.serialize import devicehash, writewatch
from jupyter_pause.session import holding, lineage
from jupyter_pause.store import datafiles, modelfiles, pool, references


def forget_session_state() -> None:
    """Hold no lineage position, probe value, remembered fingerprints or blobs, as a new kernel process."""
    lineage.forget()
    holding.forget()
    probe.forget()
    devicehash.forget()
    positions.forget()
    pool.forget()
    modelfiles.forget()
    references.forget()
    datafiles.forget()
    writewatch.forget()


def another_process() -> None:
    """Go on as a new kernel process would: another process token, no lineage position, no probe.

    Use it in tests under the ``new_process`` fixture, which puts this process's token back after.
    """
    fingerprint.PROCESS_TOKEN = secrets.token_hex(16)
    forget_session_state()


#: The environment of a process that computes like an older processor: torch's plain CPU kernels
#: (no AVX2 or AVX-512) and MKL limited to SSE4.2. A resume there is "on another processor".
OLDER_PROCESSOR = {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}


def best_cpu_capability() -> str:
    """The CPU kernels torch picks in a process not told otherwise (this one may have been)."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in OLDER_PROCESSOR}
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


def racing_processes(module: str) -> BaseContext:
    """Where a test's racing processes come from: forked from a fresh process that imported
    ``module`` (their target's) once, not spawned (each importing it again: 1.2 CPU-s) nor forked
    from the test process (with s3fs's IO thread in it). The forked processes inherit that fresh
    process's environment, not the test's: pass them what they need of it."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([module])
    return context

"""One test process playing the kernel processes of a story: what each new one starts without."""

from __future__ import annotations

import secrets

from jupyter_pause.proof import fingerprint, probe
from jupyter_pause.serialize import devicehash
from jupyter_pause.session import lineage, positions


def forget_session_state() -> None:
    """Hold no lineage position, probe value or remembered fingerprints, as a kernel process that just started."""
    lineage.forget()
    probe.forget()
    devicehash.forget()
    positions.forget()


def another_process() -> None:
    """Go on as a new kernel process would: another process token, no lineage position, no probe.

    Use it in tests under the ``new_process`` fixture, which puts this process's token back after.
    """
    fingerprint.PROCESS_TOKEN = secrets.token_hex(16)
    forget_session_state()

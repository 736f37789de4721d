"""Recording the cells a kernel runs into the cell history (``replay.history``), for rebuild by replay.

Installed by ``%load_ext jupyter_pause`` and by the server's resume, on IPython's ``post_run_cell``
event, as ``%checkpoint --every`` hooks it. Cells that ran before the extension loaded are taken
from IPython's own input history when it installs (which of their statements raised is not known
then: all are taken). Cells run with ``store_history=False`` (the server's own calls) are not
recorded.
"""

from __future__ import annotations

from typing import Any

from ..replay import history

#: The attribute that marks a shell whose cells are being recorded.
MARK = "_jupyter_pause_recorder"


def record(shell: Any, result: Any) -> None:
    """Add the cell ``result`` reports (an IPython ``ExecutionResult``) to the history."""
    info = result.info
    if info is None or info.silent or not info.store_history or result.error_before_exec is not None:
        return
    source = shell.transform_cell(info.raw_cell)
    history.current.record_cell(source, result.execution_count or 0, result.error_in_exec)


def install(shell: Any = None) -> bool:
    """Record every cell ``shell`` (default: the running IPython, if any) runs from now on; False
    when there is no IPython. Installing twice records once."""
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return False
        shell = get_ipython()
    if shell is None:
        return False
    history.current.recording = True
    if getattr(shell, MARK, None) is not None:
        return True
    _earlier_cells(shell)

    def after(result: Any) -> None:
        record(shell, result)

    setattr(shell, MARK, after)
    shell.events.register("post_run_cell", after)
    return True


def _earlier_cells(shell: Any) -> None:
    """The cells this shell ran before recording began (IPython's own input history, not a
    user's variable named ``In``), but for the one running now."""
    manager = getattr(shell, "history_manager", None)
    inputs = getattr(manager, "input_hist_parsed", None)
    running = getattr(shell, "execution_count", 0)
    if not isinstance(inputs, list) or history.current.statements:
        return
    for number, source in enumerate(inputs[1:running], start=1):
        if isinstance(source, str):
            history.current.record_cell(source, number)

"""The status widget: the kernel's jupyter-pause state, live, as ipywidgets (text where none).

``jupyter_pause.status()`` shows it: the state, a progress bar with bytes done and total during
long saves and restores, the last checkpoint with its time, and the last verdict; then what the
server's node record says needs attention (``noderecord``): a preemption watcher that cannot
read its notice, a pause that would not fit the notice. The widget follows both as they change;
the text reads both when it is shown.
"""

from __future__ import annotations

import html
import sys
import time
from typing import Any

from .. import units
from ..protocol import nodestate
from ..protocol.nodestate import NodeState
from ..session import activity
from ..session.activity import Activity
from ..vocabulary import STEP_STATES, SessionState
from . import noderecord

#: A colour for each of ``vocabulary.KERNEL_STATES``.
_COLOURS = {
    SessionState.READY: "#2e7d32",
    SessionState.CHECKPOINTING: "#1565c0",
    SessionState.RESTORING: "#1565c0",
    SessionState.FAILED: "#c62828",
}
#: The colour of what the server's record says needs attention.
_ATTENTION = "#c62828"


def widgets_available() -> bool:
    """Whether this process runs in a kernel whose front end can show widgets."""
    if "ipykernel" not in sys.modules:
        return False
    try:
        import ipywidgets  # noqa: F401
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


class StatusWidget:
    """An ipywidgets view of an ``Activity`` and of the server's node record; it follows both until closed."""

    def __init__(self, source: Activity | None = None, node: noderecord.Follower | None = None) -> None:
        import ipywidgets as w

        self.source = source or activity.current
        self.node = node or noderecord.follower
        self.state = w.HTML()
        self.bar = w.FloatProgress(min=0.0, max=1.0, layout=w.Layout(width="260px"))
        self.bytes = w.HTML()
        self.info = w.HTML()
        self.server = w.HTML()
        self.view = w.VBox([w.HBox([self.state, self.bar, self.bytes]), self.info, self.server])
        self.source.observers.append(self.update)
        self.update(self.source)
        self.node.follow(self.show_node)
        self.show_node(self.node.refresh())

    def update(self, source: Activity) -> None:
        """Render the activity's current values into the widgets."""
        colour = _COLOURS.get(source.state, "#444")
        detail = f" &mdash; {html.escape(source.detail)}" if source.detail else ""
        self.state.value = f"<b style='color:{colour}'>{source.state}</b>{detail}"
        busy = source.state in STEP_STATES and source.total > 0
        self.bar.layout.visibility = "visible" if busy else "hidden"
        self.bar.value = source.done / source.total if source.total else 0.0
        self.bytes.value = f"{units.size(source.done)} / {units.size(source.total)}" if busy else ""
        facts = []
        if source.checkpoint:
            when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(source.checkpoint_time or 0))
            facts.append(f"last checkpoint <code>{source.checkpoint}</code> at {when}")
        if source.verdict:
            facts.append(f"last verdict <b>{source.verdict}</b>")
        self.info.value = " &middot; ".join(facts)

    def show_node(self, state: NodeState | None) -> None:
        """Render what the server's record says needs attention (nothing when all is well)."""
        said = noderecord.lines(state)
        self.server.value = "<br>".join(f"<span style='color:{_ATTENTION}'>{html.escape(line)}</span>" for line in said)

    def close(self) -> None:
        """Stop following the activity and the server's record, and close the widgets."""
        if self.update in self.source.observers:
            self.source.observers.remove(self.update)
        self.node.unfollow(self.show_node)
        self.view.close()

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.view)


def status(widget: bool | None = None) -> Any:
    """Show jupyter-pause's state in this kernel: a live widget, or one line of text.

    Parameters
    ----------
    widget
        Force (True) or refuse (False) the widget; default: a widget where the front end has them.
    """
    if widget is None:
        widget = widgets_available()
    if widget:
        return StatusWidget()
    return _Text(activity.current)


class _Text:
    """The plain-text status (a terminal, or a front end without widgets): the activity's line,
    then the widget's lines from the server's record, read now."""

    def __init__(self, source: Activity) -> None:
        self.source = source

    def __repr__(self) -> str:
        return "\n".join([self.source.text(), *noderecord.lines(nodestate.read())])

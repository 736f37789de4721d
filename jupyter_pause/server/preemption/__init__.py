"""Cloud preemption notices: one reader per cloud behind one interface, and the watcher that polls them.

- ``source``: what a reader is (``NoticeSource``), what one poll gives (``Reading``), ``Blind``
  when it cannot read its notice, and the one HTTP call every reader makes (``fetch``).
- ``aws``: the spot interruption notice and the rebalance recommendation, through IMDSv2.
- ``gce``: ``instance/preempted``.
- ``azure``: Scheduled Events (``Preempt`` and ``Terminate`` of this VM).
- ``fit``: whether the last checkpoint of each running session would fit in the notice's lead time.
- ``watcher``: the settings to readers (``preemption_notices``, ``"auto"``'s probe), the polling,
  the pause on a notice, the checkpoints on an early warning, and the state the status shows.

Nothing here has a default that reaches a metadata service: the server watches only when
``PauseServer.preemption_notices`` or one of the per-cloud URLs says so.
"""

from __future__ import annotations

from .watcher import PreemptionWatcher, watcher_for

__all__ = ["PreemptionWatcher", "watcher_for"]

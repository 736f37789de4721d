"""What the pause service counts, for Prometheus: served at ``/services/jupyter-pause/metrics``
behind the same Hub auth as its page.

Series (Prometheus names; no server, session or checkpoint ids as labels):

- ``jupyter_pause_hub_releases_total{outcome}``: releases tried, by how they ended (``released``,
  ``paused-not-stopped``, ``no-extension``, ``release-failed``, ...);
- ``jupyter_pause_hub_decisions_total{reason}``: the decision on each server at each check;
- ``jupyter_pause_hub_warnings_issued_total`` / ``_cancelled_total``: warnings before a release,
  and those that ended because the server was used (or Keep working);
- ``jupyter_pause_hub_kept_busy_total``: servers kept because a cell was running;
- ``jupyter_pause_hub_last_check_timestamp_seconds`` and ``_check_errors_total``;
- with ``--store``: ``jupyter_pause_hub_gpu_hours{user,kind}`` over the last ``--metrics-window``
  (kind ``held``, ``active``, ``released``), as ``jupyter pause hours`` adds them up (the lower
  bound where the ledger leaves a range), recomputed at most every ``refresh`` seconds; and, where
  the service has the Hub's secret, ``jupyter_pause_hub_ledger_records{verdict}``: the records read
  for them, counted (``verified``, ``unsigned``) or refused (``bad_signature``, ``foreign``,
  ``replayed``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from .. import ledger
from ..hours import records, timeline, totals
from ..store.storage import Store
from . import policy
from .policy import Decision
from .release import WARNED, Outcome

log = logging.getLogger("jupyter_pause.hub")

#: Seconds of ledger read before the window, to know each session's state when it opens.
LOOKBACK = 7 * 86400.0
#: The kinds of GPU-hours, as the report names them.
KINDS = ("held", "active", "released")


class ServiceMetrics:
    """The service's counters, in a registry of its own (never the process's default one)."""

    def __init__(self, hours: Callable[[], dict[str, dict[str, float]]] | None = None) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.releases = Counter("jupyter_pause_hub_releases", "Releases tried, by outcome.", ["outcome"], registry=r)
        self.decisions = Counter(
            "jupyter_pause_hub_decisions", "Decisions on servers at each check, by reason.", ["reason"], registry=r
        )
        self.warnings_issued = Counter(
            "jupyter_pause_hub_warnings_issued", "Warnings given before a release.", registry=r
        )
        self.warnings_cancelled = Counter(
            "jupyter_pause_hub_warnings_cancelled", "Warnings that ended because the server was used.", registry=r
        )
        self.kept_busy = Counter("jupyter_pause_hub_kept_busy", "Servers kept because a cell was running.", registry=r)
        self.last_check = Gauge(
            "jupyter_pause_hub_last_check_timestamp_seconds", "When the last check ended.", registry=r
        )
        self.check_errors = Counter(
            "jupyter_pause_hub_check_errors", "Checks that could not list the servers.", registry=r
        )
        if hours is not None:
            r.register(_HoursCollector(hours))

    def decided(self, decision: Decision, outcome: Outcome | None) -> None:
        """One decision the report records at a check (with the outcome it stands on, if any)."""
        reason = outcome.reason if outcome is not None else decision.reason
        self.decisions.labels(reason).inc()
        if reason == policy.BUSY:
            self.kept_busy.inc()
        if decision.reason == policy.WARNING_ENDED:
            self.warnings_cancelled.inc()

    def ended(self, outcome: Outcome) -> None:
        """A release tried (or a warning given) just now: counted once, where it happened."""
        if outcome.reason == WARNED:
            self.warnings_issued.inc()
        else:
            self.releases.labels(outcome.reason).inc()

    def checked(self, at: float, error: str | None) -> None:
        self.last_check.set(at)
        if error is not None:
            self.check_errors.inc()

    def exposition(self) -> bytes:
        """The text format Prometheus scrapes."""
        return generate_latest(self.registry)


class _HoursCollector(Collector):
    def __init__(self, hours: Callable[[], dict[str, dict[str, float]]]) -> None:
        self.hours = hours

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "jupyter_pause_hub_gpu_hours", "GPU-hours over the metrics window, per user.", labels=["user", "kind"]
        )
        for user, kinds in sorted(self.hours().items()):
            for kind in KINDS:
                family.add_metric([user, kind], kinds.get(kind, 0.0))
        yield family
        counts = getattr(self.hours, "records", None)
        if counts:
            checked = GaugeMetricFamily(
                "jupyter_pause_hub_ledger_records",
                "Ledger records over the metrics window by verdict: verified and unsigned ones count; those with a "
                "signature that does not verify, naming another user, or replayed copies are refused.",
                labels=["verdict"],
            )
            for verdict, n in counts.items():
                checked.add_metric([verdict.replace(" ", "_")], n)
            yield checked


class LedgerHours:
    """GPU-hours per user over the last ``window`` seconds of the ledger in ``store``, computed in
    a thread and kept for ``refresh`` seconds (a scrape never waits for the ledger).

    ``keys`` (``ledger.KeysFor``: each user's keys, ``signing.hub_keyrings``): the Hub's, where it
    signs records, so the roll-ups this reader writes merge and sign each user's verified records
    instead of keeping every signed one whole."""

    def __init__(self, store: Store, window: float, refresh: float = 300.0, keys: ledger.KeysFor | None = None) -> None:
        self.store, self.window, self.refresh, self.keys = store, window, refresh, keys
        self._value: dict[str, dict[str, float]] = {}
        #: Records read for the last figures, by verdict (``ledger.checked``); empty without keys.
        self.records: dict[str, int] = {}
        self._at = 0.0
        self._busy = threading.Lock()

    def __call__(self) -> dict[str, dict[str, float]]:
        if time.monotonic() - self._at > self.refresh and self._busy.acquire(blocking=False):
            threading.Thread(target=self._update, name="jupyter-pause-hub-hours", daemon=True).start()
        return self._value

    def _update(self) -> None:
        try:
            self._value, counts = checked_per_user(self.store, time.time() - self.window, time.time(), self.keys)
            self.records = counts or {}
            self._at = time.monotonic()
        except Exception as e:  # the metrics go on with the last figures; the log says why
            log.warning("GPU-hours for the metrics could not be read from the ledger: %s", e)
        finally:
            self._busy.release()


def per_user(
    store: Store, since: float, until: float, keys: ledger.KeysFor | None = None
) -> dict[str, dict[str, float]]:
    """Held, active and released GPU-hours of each user in ``since..until``, from the ledger (its
    settled days from their roll-ups, written where missing; ``keys``: as for ``LedgerHours``)."""
    return checked_per_user(store, since, until, keys)[0]


def checked_per_user(
    store: Store, since: float, until: float, keys: ledger.KeysFor | None = None
) -> tuple[dict[str, dict[str, float]], dict[str, int] | None]:
    """``per_user``, and how many records were counted or refused, by verdict (``ledger.checked``:
    with ``keys``, a record counts only where the key of the user it names verifies it, and a
    replayed copy once); None without keys."""
    events, _ = ledger.read(store, since - LOOKBACK, until, keys=keys)
    events, counts = ledger.checked(events, keys, False)
    parsed, _ = records.parse_all(events)
    hours = totals.compute(timeline.timelines(parsed), totals.Window(since, until))
    out: dict[str, dict[str, float]] = {}
    for row in hours.sessions:
        user = row.user or "unknown"
        kinds = out.setdefault(user, dict.fromkeys(KINDS, 0.0))
        for kind in KINDS:
            kinds[kind] += _low(getattr(row, kind))
    return out, counts


def _low(value: Any) -> float:
    return float(getattr(value, "low", value) or 0.0)

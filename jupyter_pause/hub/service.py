"""``jupyter-pause-hub``: a JupyterHub service that pauses idle servers instead of culling them.

Every ``--check-every`` seconds it lists the running servers through the Hub's API. A server whose
Hub ``last_activity`` is older than its idle timeout (``--idle-timeout``, or the
``--profile-timeout`` of the profile in its ``user_options``), or that started longer ago than
``--max-age``, is asked for its kernels; unless one of them is running a cell, the service asks
the server to release itself (``POST jupyter-pause/api/release``): it pauses every notebook
session into the store, then stops itself through the Hub. A server without jupyter_pause, or
whose release fails, is left running and reported, never stopped; one whose token cannot stop it
stays running, paused, unless ``--stop-paused`` (the service's own ``delete:servers``).

Options (durations in seconds, or written ``90s``, ``15m``, ``1h``):

- ``--url``: the Hub's API (default ``$JUPYTERHUB_API_URL``, which a managed service gets).
- ``--proxy-url``: where users' servers are reached (see below).
- ``--idle-timeout`` (3600): idle time before a release.
- ``--profile-timeout PROFILE=SECONDS`` (repeatable): the idle timeout of servers started with
  that profile (``user_options["profile"]``, as KubeSpawner's profile list sets it).
- ``--max-age`` (0, off): release a server that started longer ago than this even while the Hub
  sees activity (an open browser tab), at the next check when no kernel is busy.
- ``--check-every`` (60), ``--concurrency`` (10 releases at a time), ``--release-timeout`` (600:
  how long a release is followed before it is reported as stuck).
- ``--users``, ``--exclude-users``: comma lists of the users whose servers it releases / never.
- ``--stop-paused``: stop a server whose release paused everything but could not stop it. Off,
  the server stays running, paused, and is not asked again until it restarts or is used again.
- ``--warn-before`` (5m; 0 turns it off): warn a server this long before releasing it. The first
  check that finds it idle warns it (its JupyterLab shows a countdown with Keep working and Pause
  now) and releases nothing; a later check releases it once ``release_at`` has come, unless it
  was used since (a cell ran, something was saved or started, Keep working): then the next idle
  period warns again. Never more than the server's idle timeout; a server whose jupyter_pause
  takes no warnings (an older version) is released without one, and its row says so.
- ``--metrics-window`` (1d): the window of the GPU-hours series of the metrics (with ``--store``).
- ``--dry-run``: decide and report, release nothing. ``--log-level DEBUG``: every decision at
  every check (INFO logs a decision when it changes, and every release).
- ``--store URL`` (storage options from ``$JUPYTER_PAUSE_STORAGE_OPTIONS``): write each server's
  start and stop to the GPU-hours ledger there (see ``hub/server_events.py``), with ``--server-gpus N``
  GPUs per server, or ``--profile-gpus PROFILE=N`` (repeatable) for a profile. Without
  ``--store`` the service writes nothing.

The Hub updates ``last_activity`` every ``c.JupyterHub.last_activity_interval`` (300 s by default).

The service's page, ``/services/jupyter-pause/`` (JSON: options, last check, servers with the
decision on each, releases, servers left running with the reason, pending warnings), and its
Prometheus metrics, ``/services/jupyter-pause/metrics`` (see ``hub.metrics``), need a token or
login with access to the service (``access:services!service=jupyter-pause``; admins have it).

In ``jupyterhub_config.py``::

    c.JupyterHub.services = [
        {
            "name": "jupyter-pause",
            "command": ["jupyter-pause-hub", "--idle-timeout=3600", "--profile-timeout=gpu=900"],
            "url": "http://127.0.0.1:10101",
        }
    ]
    c.JupyterHub.load_roles = [
        {
            "name": "jupyter-pause",
            "scopes": ["list:users", "read:servers", "delete:servers", "access:servers"],
            "services": ["jupyter-pause"],
        }
    ]
    # so that a server can stop itself once every session is paused
    c.Spawner.server_token_scopes = ["access:servers!server", "users:activity!user", "delete:servers!server"]
    # required on a shared store: one prefix and one signing key per user (see ``hub.keys``)
    from jupyter_pause.hub.keys import signing_environment
    c.Spawner.environment.update({"JUPYTER_PAUSE_STORE": "s3://team-bucket/pause/{user}"})
    c.Spawner.environment.update(signing_environment(c))

``list:users`` lists users, ``read:servers`` gives each server's ``last_activity``, ``started``
and ``user_options``, ``access:servers`` lets the service call a user's server (kernels, release)
through the proxy, and ``delete:servers`` is used only by ``--stop-paused``.

Single-user servers are reached through the proxy at ``--proxy-url``: default the origin of
``JUPYTERHUB_PUBLIC_URL`` (set when ``c.JupyterHub.public_url`` is), else
``http://127.0.0.1:8000`` (JupyterHub's default ``bind_url``); under Zero to JupyterHub,
``http://proxy-public``. Requests through the proxy count as activity for the Hub, so the service
asks a server for its kernels only once the Hub already shows it idle.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import signal
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from .. import ledger as records
from ..config import ENV_VARS, parse_storage_options
from ..errors import PauseError
from ..store import signing
from ..store.storage import Store
from . import policy, release
from .hubapi import HubClient, HubError, ServerClient
from .metrics import LedgerHours, ServiceMetrics
from .options import configure, shown
from .policy import Decision, Policy, ServerView
from .release import NO_EXTENSION, PAUSED_NOT_STOPPED, Outcome, Settings
from .report import Report
from .server_events import ServerLedger
from .web import serve

log = logging.getLogger("jupyter_pause.hub")

#: Outcomes that hold until the server restarts or is used again: asking again would change nothing.
SETTLED = (NO_EXTENSION, PAUSED_NOT_STOPPED)


class PauseService:
    """The check loop: decide on every running server, release the idle ones (at most
    ``concurrency`` at a time, in the background), keep the report."""

    def __init__(
        self,
        rules: Policy,
        settings: Settings,
        hub: HubClient,
        servers: ServerClient,
        report: Report,
        concurrency: int,
        ledger: ServerLedger | None = None,
    ) -> None:
        self.rules = rules
        self.settings = settings
        self.hub = hub
        self.servers = servers
        self.report = report
        self.slots = asyncio.Semaphore(concurrency)
        self.running: dict[tuple[str, str], asyncio.Task[None]] = {}
        self.settled: dict[tuple[str, str], tuple[datetime | None, Outcome]] = {}
        #: Servers warned of their release: when each started, and its warning (see ``release.warn``).
        self.warned: dict[tuple[str, str], tuple[datetime | None, dict[str, Any]]] = {}
        self.ledger = ledger

    async def check(self) -> None:
        """One pass over the running servers."""
        try:
            views = await self.hub.servers()
        except HubError as e:
            log.error("check failed: %s", e)
            self.report.checked(str(e))
            return
        self.report.listed(views)
        if self.ledger is not None:
            await self.ledger.seen(views)
        now = datetime.now(timezone.utc)
        for view in views:
            self._decide(view, now)
        self.report.checked()

    def _decide(self, view: ServerView, now: datetime) -> None:
        key = (view.user, view.server_name)
        if key in self.running:
            return  # its release is under way; its row says so
        warned = self._warned(view)
        if warned is not None:  # the Hub saw the warning's own requests: the server tells whether it was used
            self._spawn(key, self._follow_warning(view, warned))
            return
        decision = policy.first_look(self.rules, view, now)
        settled = self._settled(view)
        if decision.action == "check-kernels" and settled is not None:
            decision = dataclasses.replace(decision, action="keep")
            self.report.record(view, decision, settled)
            return
        if decision.action != "check-kernels":
            changed = self.report.servers.get(view.label, {}).get("reason") != decision.reason
            log.log(
                logging.INFO if changed else logging.DEBUG,
                "%s: keep (%s: %s)",
                view.label,
                decision.reason,
                decision.detail,
            )
            self.report.record(view, decision, None)
            return
        log.info("%s: %s (%s); checking its kernels", view.label, decision.reason, decision.detail)
        self.report.record(view, dataclasses.replace(decision, reason="releasing"), None)
        if self.ledger is not None:  # a stop seen while the release runs is the release's
            self.ledger.released.add(view.label)
        self._spawn(key, self._release(view, decision))

    def _spawn(self, key: tuple[str, str], work: Any) -> None:
        task = asyncio.create_task(work)
        self.running[key] = task
        task.add_done_callback(lambda _: self.running.pop(key, None))

    def _warned(self, view: ServerView) -> dict[str, Any] | None:
        """The warning ``view`` holds from this service, unless it restarted or stopped since."""
        key = (view.user, view.server_name)
        started, warning = self.warned.get(key, (None, None))
        if warning is None:
            return None
        if started != view.started or view.pending or not view.ready:
            del self.warned[key]
            self.report.unwarn(view)
            return None
        return warning

    async def _follow_warning(self, view: ServerView, warned: dict[str, Any]) -> None:
        if self.ledger is not None:  # a stop seen while this runs is a release's (``_ended`` takes it back)
            self.ledger.released.add(view.label)
        async with self.slots:
            try:
                final, outcome, holds = await release.after_warning(view, warned, self.hub, self.servers, self.settings)
            except (HubError, OSError) as e:
                final = Decision("keep", release.WARNED, f"{view.label}: {e}; asking again at the next check", 0.0)
                outcome, holds = None, True
        if not holds:
            self.warned.pop((view.user, view.server_name), None)
            self.report.unwarn(view)
        self._ended(view, final, outcome)

    async def _release(self, view: ServerView, decision: Decision) -> None:
        async with self.slots:
            try:
                final, outcome = await release.handle(view, decision, self.hub, self.servers, self.settings)
            except (HubError, OSError) as e:
                final, outcome = decision, Outcome(release.RELEASE_FAILED, f"{view.label}: {e}; left running")
        if outcome is not None and outcome.reason == release.WARNED and outcome.warning is not None:
            warning = {**outcome.warning, "timeout": final.timeout, "reason_kind": final.reason}
            self.warned[(view.user, view.server_name)] = (view.started, warning)
            log.info("%s", outcome.detail)
            if self.ledger is not None:
                self.ledger.released.discard(view.label)
            self._count(outcome)
            self.report.record(view, final, outcome)
            return
        self._ended(view, final, outcome)

    def _count(self, outcome: Outcome) -> None:
        if self.report.metrics is not None:
            self.report.metrics.ended(outcome)

    def _ended(self, view: ServerView, final: Decision, outcome: Outcome | None) -> None:
        """Log, count and record what a release (or a check of a warned server) came to."""
        if outcome is not None:
            self._count(outcome)
        if outcome is None:
            log.info("%s: keep (%s: %s)", view.label, final.reason, final.detail)
        elif outcome.released:
            log.info("%s: released: %s", view.label, outcome.detail)
        else:
            log.warning("%s: left running (%s): %s", view.label, outcome.reason, outcome.detail)
            if outcome.reason in SETTLED:
                self.settled[(view.user, view.server_name)] = (view.started, outcome)
        if self.ledger is not None and (outcome is None or not outcome.released):
            self.ledger.released.discard(view.label)
        self.report.record(view, final, outcome)

    def _settled(self, view: ServerView) -> Outcome | None:
        """The outcome that still holds for ``view``: none once the server restarted or the Hub
        saw activity after it (the service's own calls all came before)."""
        started, outcome = self.settled.get((view.user, view.server_name), (None, None))
        if outcome is None:
            return None
        used_since = view.last_activity is not None and view.last_activity.timestamp() > outcome.at
        if started != view.started or used_since:
            del self.settled[(view.user, view.server_name)]
            return None
        return outcome

    async def run(self, every: float) -> None:
        """Check every ``every`` seconds, forever."""
        while True:
            await self.check()
            await asyncio.sleep(every)


async def serve_forever(args: argparse.Namespace, rules: Policy, settings: Settings, env: dict[str, str]) -> None:
    """Run the service: the check loop, and the page when the Hub gave the service a URL."""
    token = env.get("JUPYTERHUB_API_TOKEN")
    if not token:
        raise PauseError("JUPYTERHUB_API_TOKEN is not set: run jupyter-pause-hub as a Hub service (see its docstring)")
    report = Report(shown(args, rules))
    hub, servers = HubClient(args.url, token), ServerClient(args.proxy_url, token)
    ledger = server_ledger(args, env)
    hours = ledger_hours(ledger, args, env)
    report.metrics = ServiceMetrics(hours)
    service = PauseService(rules, settings, hub, servers, report, args.concurrency, ledger)
    if env.get("JUPYTERHUB_SERVICE_URL"):
        prefix = env.get("JUPYTERHUB_SERVICE_PREFIX", "/services/jupyter-pause/")
        serve(report, env["JUPYTERHUB_SERVICE_URL"], prefix, report.metrics)
    log.info("jupyter-pause-hub: Hub %s, servers through %s, options %s", args.url, args.proxy_url, report.options)
    await service.run(args.check_every)


def server_ledger(args: argparse.Namespace, env: dict[str, str]) -> ServerLedger | None:
    """The ledger of ``--store`` (storage options from the environment), or None without one."""
    if not args.store:
        return None
    options = parse_storage_options(env.get(ENV_VARS["storage_options"], "") or "{}")
    store = Store(args.store, options)
    store.check()
    per_user = signing.hub_keyrings(env)
    if per_user is not None:  # each server's records signed with its user's key, as its server signs its own
        records.sign_with(lambda event: per_user(event.user))
    return ServerLedger(store, args.server_gpus, args.profile_gpus)


def ledger_hours(book: ServerLedger | None, args: argparse.Namespace, env: dict[str, str]) -> LedgerHours | None:
    """The metrics' GPU-hours from ``book``'s store (None without one), read with each user's keys
    where the Hub has a secret: the roll-ups it writes then merge and sign each user's verified
    records, as ``jupyter pause hours`` with the secret would, instead of keeping them whole."""
    if book is None:
        return None
    return LedgerHours(book.store, args.metrics_window, keys=signing.hub_keyrings(env))


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point."""
    env = dict(os.environ)
    args, rules, settings = configure(sys.argv[1:] if argv is None else argv, env)
    logging.basicConfig(level=args.log_level.upper(), format="[%(levelname)1.1s %(asctime)s %(name)s] %(message)s")
    # The Hub stops a managed service with SIGINT, which a Hub started with it ignored (a shell's
    # background job) passes on ignored: the Hub then waited (30 s in a test) before SIGTERM.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        asyncio.run(serve_forever(args, rules, settings, env))
    except PauseError as e:
        sys.exit(f"jupyter-pause-hub: {e}")
    except KeyboardInterrupt:
        pass

#!/usr/bin/env python
"""The 9:00 storm: many users of one JupyterHub and one S3 store release and resume at once.

    .venv/bin/python benchmarks/hub_storm.py [--users N] [--no-sequential] [--json FILE]

A real JupyterHub (simple local-process spawner, configurable-http-proxy, ``tests/support/hub.py``), a
real S3 store (SeaweedFS on 127.0.0.1, ``tests/support/s3_server.py``) holding every user's prefix
(``s3://pause-test/<run>/{user}``, per-user signing keys from one Hub secret), and ``--users``
users (default 6), each with a notebook holding a torch model, its optimizer and some values.

Two rounds, each a release of every server then a start and resume of every server:

- **storm**: every release at once, then every start (and, once its server answers, its resume)
  at once;
- **sequential**: the same, one user after another; each of these runs alone, so its median is
  the "one user alone" figure.

Per user: seconds from the release request until the Hub shows the server stopped, and from the
start request until the server answers through the proxy and until the resumed notebook is
ready; the verdict; whether the values came back. Per round: the time until all are stopped and
all are ready. The harness waits as a browser would: for a server to start, on the Hub's spawn
progress stream (the Hub answers when it is ready, nothing polls it); for the resume, by asking
the server's status every ``POLL`` seconds (four times as often as the indicator does, for the
timing's sake). Ratios, from the same run: the storm's time until all are ready over the
sequential round's total, and a storm user's median over a user alone. The ledger: each user's
``jupyter pause hours --json`` (signatures checked with the Hub's secret) must count every pause
and resume exactly once, as must the raw ``pause_requested`` / ``resume_requested`` records.

Results: stdout and benchmarks/results/hub_storm.json. A run that stops or finds a problem keeps
the Hub's folder (its log holds the users' servers' and kernels' output too) and says where.
``run_storm(users=3)`` is what the test suite runs (tests/hub/test_storm.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:  # run from a checkout even where the package is not installed
    sys.path.insert(0, str(HERE.parent))

from jupyter_pause import ledger  # noqa: E402
from jupyter_pause.hub.keys import user_key  # noqa: E402
from jupyter_pause.store.layout import release_key  # noqa: E402
from jupyter_pause.store.storage import Store  # noqa: E402
from jupyter_pause.vocabulary import LedgerEvent  # noqa: E402
from tests.support.hub import Hub, run_hub, wait_for  # noqa: E402
from tests.support.s3_server import S3Server, start_server  # noqa: E402

NOTEBOOK = "model.ipynb"
#: The notebook's state: a torch model after one optimizer step, and plain values.
BUILD = (
    "import torch\ntorch.manual_seed(sum(map(ord, {user!r})))\n"
    "model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))\n"
    "opt = torch.optim.AdamW(model.parameters(), lr=1e-3)\n"
    "model(torch.randn(32, 64)).pow(2).mean().backward()\nopt.step()\n"
    "values = {{'user': {user!r}, 'epoch': 7, 'losses': [0.5, 0.25, 0.125]}}\n"
)
PROBE = (
    "import json\nwith torch.no_grad():\n    out = round(float(model(torch.ones(1, 64)).sum()), 6)\n"
    "print(json.dumps([out, values, len(opt.state)]))"
)
#: Users whose notebooks are set up at once before the rounds (not timed): twenty kernels
#: importing torch at once on two cores answer too late, and the server drops their websockets.
PREPARE_AT_ONCE = 4
#: Seconds one user's release, or start and resume, may take before it counts as failed.
STEP_TIMEOUT = 300.0
#: Seconds between the harness's looks at a release (the Hub's model) or a resume (its status).
POLL = 0.25
#: Ledger events each pause or resume writes exactly once.
COUNTED = (LedgerEvent.PAUSE_REQUESTED, LedgerEvent.RESUME_REQUESTED, LedgerEvent.KERNEL_READY)


@dataclass
class UserRun:
    """One user's release and return in one round."""

    user: str
    release_s: float | None = None  # release request -> the Hub shows the server stopped
    release_id: str | None = None
    release_state: str | None = None  # the release record's last state
    server_s: float | None = None  # start request -> the Hub says ready and the proxy answers 200
    ready_s: float | None = None  # start request -> the resumed notebook is ready
    verdict: str | None = None
    values_back: bool = False
    problems: list[str] = field(default_factory=list)


@dataclass
class Round:
    """All users' runs in one round, and the time until all were stopped and all were ready."""

    name: str
    runs: list[UserRun]
    all_stopped_s: float
    all_ready_s: float

    def ready(self) -> list[float]:
        return [r.ready_s for r in self.runs if r.ready_s is not None]


@dataclass
class Storm:
    """Everything one benchmark run measured and checked."""

    users: int
    rounds: dict[str, Round]
    ledger: dict[str, dict[str, Any]]
    ratios: dict[str, float]
    machine: dict[str, Any]
    problems: list[str]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def hub_config(s3: S3Server, prefix: str, secret: str) -> str:
    """jupyterhub_config.py lines: every server's store a prefix of the S3 bucket, per-user keys."""
    env = {
        **s3.env(),
        "JUPYTER_PAUSE_STORE": f"s3://{s3.bucket}/{prefix}/{{user}}",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }
    return (
        f"c.Spawner.environment.update({env!r})\n"
        'c.Spawner.server_token_scopes = ["users:activity!user", "access:servers!server", "delete:servers!server"]\n'
        f"c.PauseHubKeys.secret = {secret!r}\n"
        "from jupyter_pause.hub.keys import signing_environment\n"
        "c.Spawner.environment.update(signing_environment(c))\n"
    )


def _probe(hub: Hub, user: str) -> Any:
    sessions = [s for s in hub.server_fetch(user, "api/sessions").body if s["path"] == NOTEBOOK]
    if len(sessions) != 1:
        raise AssertionError(f"{user}'s server has {len(sessions)} sessions of {NOTEBOOK}")
    out = hub.execute(user, sessions[0]["kernel"]["id"], PROBE)
    return json.loads(out.strip().splitlines()[-1])  # the probe's line comes last


def prepare(hub: Hub, user: str) -> Any:
    """Start ``user``'s server, build the notebook's state; what the probe printed."""
    hub.create_user(user)
    hub.start_server(user, timeout=STEP_TIMEOUT)
    kernel = hub.open_notebook(user, NOTEBOOK)
    hub.execute(user, kernel, BUILD.format(user=user))
    return _probe(hub, user)


def release(hub: Hub, user: str, run: UserRun) -> None:
    """Release ``user``'s server and wait until the Hub shows it stopped."""
    started = time.monotonic()
    answer = hub.server_fetch(user, "jupyter-pause/api/release", "POST", {})
    if answer.code != 202:
        run.problems.append(f"release answered {answer.code}: {answer.body}")
        return
    run.release_id = answer.body["id"]
    try:
        wait_for(lambda: hub.server_model(user), lambda m: m is None, STEP_TIMEOUT, f"{user}'s server stopped", POLL)
    except AssertionError as e:
        run.problems.append(str(e))
        return
    run.release_s = time.monotonic() - started


def read_releases(store: Callable[[str], Store], runs: list[UserRun]) -> None:
    """Each run's release record, as its server left it in the store: its last state."""
    for run in runs:
        if run.release_id is None:
            continue
        run.release_state = json.loads(bytes(store(run.user).read(release_key(run.release_id))))["state"]
        # the Hub may stop a server before it records "stopped": it had asked for the stop
        if run.release_state not in ("stopping", "stopped"):
            run.problems.append(f"release ended {run.release_state}")


def come_back(hub: Hub, user: str, want: Any, run: UserRun) -> None:
    """Start ``user``'s server, resume the notebook once the server answers; check its values."""
    started = time.monotonic()
    try:
        hub.request_server(user)
        hub.wait_spawned(user, timeout=STEP_TIMEOUT)
        first = hub.server_fetch(user, "api/status")  # what a user's browser gets once the Hub says ready
        if first.code != 200:
            run.problems.append(f"the proxy answered {first.code} after the Hub said the server was ready")
            hub.wait_proxied(user)
        run.server_s = time.monotonic() - started
        answer = hub.server_fetch(user, "jupyter-pause/api/resume", "POST", {"path": NOTEBOOK})
        if answer.code != 202:
            run.problems.append(f"resume answered {answer.code}: {answer.body}")
            return
        status = wait_for(
            lambda: hub.server_fetch(user, f"jupyter-pause/api/status?path={NOTEBOOK}").body,
            lambda s: isinstance(s, dict) and s.get("state") in ("ready", "failed"),
            STEP_TIMEOUT,
            f"{user}'s resume",
            POLL,
        )
    except AssertionError as e:
        run.problems.append(str(e))
        return
    run.ready_s = time.monotonic() - started
    run.verdict = status.get("verdict")
    if status["state"] != "ready":
        run.problems.append(f"resume {status['state']}: {status.get('detail')}")
        return
    run.values_back = _probe(hub, user) == want
    if not run.values_back:
        run.problems.append("the values that came back differ from those paused")


def close_notebooks(hub: Hub, user: str) -> None:
    """Shut down ``user``'s notebook sessions: a server the Hub stops with running notebooks
    pauses them first, and that pause would count in the ledger beside the rounds'."""
    listed = hub.server_fetch(user, "api/sessions")
    if listed.code != 200:  # the proxy has no route to it (302 to the Hub), or another server answered
        raise RuntimeError(f"{user}'s server did not list its sessions: {listed.code} {listed.body}")
    for session in listed.body:
        answer = hub.server_fetch(user, f"api/sessions/{session['id']}", "DELETE")
        if answer.code != 204:
            raise RuntimeError(f"{user}'s session {session['path']} did not shut down: {answer.code} {answer.body}")


def storm_round(hub: Hub, wants: dict[str, Any]) -> Round:
    """Every release at once, then every start and resume at once."""
    runs = {user: UserRun(user) for user in wants}
    with ThreadPoolExecutor(len(runs)) as pool:
        started = time.monotonic()
        list(pool.map(lambda u: release(hub, u, runs[u]), runs))
        stopped = time.monotonic() - started
        started = time.monotonic()
        list(pool.map(lambda u: come_back(hub, u, wants[u], runs[u]), runs))
        ready = time.monotonic() - started
    return Round("storm", list(runs.values()), stopped, ready)


def sequential_round(hub: Hub, wants: dict[str, Any]) -> Round:
    """The same, one user after another (each alone)."""
    runs = {user: UserRun(user) for user in wants}
    started = time.monotonic()
    for user, run in runs.items():
        release(hub, user, run)
    stopped = time.monotonic() - started
    started = time.monotonic()
    for user, run in runs.items():
        come_back(hub, user, wants[user], run)
    return Round("sequential", list(runs.values()), stopped, time.monotonic() - started)


def user_store(s3: S3Server, prefix: str, secret: str) -> Callable[[str], Store]:
    """A user's store, as the benchmark reads it (explicit credentials, no environment), with the
    user's key as the Hub derives it from ``secret``: their server encrypts what it writes."""
    options = {"key": s3.key, "secret": s3.secret, "endpoint_url": s3.endpoint}
    return lambda user: Store(f"s3://{s3.bucket}/{prefix}/{user}", options, keys=user_key(secret, user))


def ledger_counts(store: Store, user: str, s3: S3Server, secret: str, since: float) -> dict[str, Any]:
    """The user's ``jupyter pause hours --json`` pauses and resumes, and the raw records behind
    them: how many of each event (and trigger) were written, and how many carry no signature."""
    env = {**os.environ, **s3.env(), "JUPYTER_PAUSE_HUB_SECRET": secret, "NO_PROXY": "127.0.0.1,localhost"}
    env.update(AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)
    since_arg = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(since - 60))
    command = [sys.executable, "-m", "jupyter_pause.cli", "hours", "--store", store.url, "--user", user]
    command += ["--since", since_arg, "--json"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"jupyter pause hours failed for {store.url}: {done.stderr.strip()}")
    report = json.loads(done.stdout)
    events, _ = ledger.read(store, since - 60)
    written = Counter(f"{e.event}:{e.trigger}" if e.trigger else e.event for e in events)
    unsigned = Counter(e.event for e in events if ledger.SIGNATURE not in e.extra)
    sessions = [s for s in report["sessions"] if s["kind"] == "kernel"]
    return {
        "pauses": sum(s["pauses"] for s in sessions),
        "resumes": sum(s["resumes"] for s in sessions),
        "raw": {name: sum(e.event == name for e in events) for name in COUNTED},
        "written": dict(sorted(written.items())),
        "unsigned": dict(sorted(unsigned.items())),
        "signatures": report["signatures"],
    }


def _ratio(a: float | None, b: float | None) -> float:
    return round(a / b, 3) if a and b else float("nan")


def _kept(folder: Path, why: str) -> None:
    """Say where the Hub's folder is kept: what went wrong is in the log of the Hub, its servers and kernels."""
    print(f"hub storm: {why}; the Hub's folder, its log included, is kept in {folder}", file=sys.stderr)


def run_storm(users: int = 6, sequential: bool = True, root: Path | None = None) -> Storm:
    """Set up the Hub, the store and ``users`` users; run the rounds; check the ledger."""
    s3 = start_server()
    folder = Path(tempfile.mkdtemp(prefix="hub-storm-")) if root is None else root
    prefix, secret = f"storm-{secrets.token_hex(4)}", secrets.token_hex(32)
    names = [f"user{i:02d}" for i in range(users)]
    rounds: dict[str, Round] = {}
    finished = False
    try:
        # users' servers as they are on a Hub, JupyterLab's server extension included
        with run_hub(folder / "hub", config=hub_config(s3, prefix, secret), timeout=120, lab=True) as hub:
            since = time.time()
            with ThreadPoolExecutor(min(users, PREPARE_AT_ONCE)) as pool:
                wants = dict(zip(names, pool.map(lambda u: prepare(hub, u), names), strict=True))
            rounds["storm"] = storm_round(hub, wants)
            if sequential:
                rounds["sequential"] = sequential_round(hub, wants)
            for user in names:  # else the Hub's stop at its exit pauses them once more
                close_notebooks(hub, user)
        store = user_store(s3, prefix, secret)
        for r in rounds.values():
            read_releases(store, r.runs)
        counts = {u: ledger_counts(store(u), u, s3, secret, since) for u in names}
        finished = True
    finally:
        s3.stop()
        shutil.rmtree(s3.directory, ignore_errors=True)
        if root is None and not finished:
            _kept(folder, "stopped")
    problems = [f"{r.name} round, {run.user}: {p}" for r in rounds.values() for run in r.runs for p in run.problems]
    cycles = len(rounds)
    for user, c in counts.items():
        seen = (c["pauses"], c["resumes"], *c["raw"].values())
        if seen != (cycles,) * len(seen):
            problems.append(f"ledger of {user}: {c} (want {cycles} of each)")
        if c["signatures"].get("bad_signature") or c["unsigned"]:
            problems.append(f"ledger of {user}: records not signed by the user's key: {c['signatures']}")
    if root is None and problems:
        _kept(folder, "problems")
    elif root is None:
        shutil.rmtree(folder, ignore_errors=True)
    storm = rounds["storm"]
    ratios = {}
    if "sequential" in rounds:
        alone = rounds["sequential"].ready()
        ratios = {
            "storm_all_ready_over_sequential_total": _ratio(storm.all_ready_s, rounds["sequential"].all_ready_s),
            "storm_median_over_alone_median": _ratio(
                statistics.median(storm.ready()) if storm.ready() else None,
                statistics.median(alone) if alone else None,
            ),
        }
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "store": "SeaweedFS on 127.0.0.1"}
    return Storm(users, rounds, counts, ratios, machine, problems)


def table(storm: Storm) -> str:
    """The figures as text."""
    lines = [f"hub storm: {storm.users} users, one Hub, one S3 store ({storm.machine['cpus']} CPU cores)"]
    for r in storm.rounds.values():
        lines.append(f"\n{r.name}: all stopped {r.all_stopped_s:.1f} s, all ready {r.all_ready_s:.1f} s")
        lines.append(f"{'USER':8} {'RELEASE s':>9} {'SERVER s':>8} {'READY s':>8} {'VERDICT':10} VALUES")
        for u in r.runs:
            cells = [f"{v:.1f}" if v is not None else "-" for v in (u.release_s, u.server_s, u.ready_s)]
            lines.append(
                f"{u.user:8} {cells[0]:>9} {cells[1]:>8} {cells[2]:>8} {u.verdict or '-':10} "
                f"{'back' if u.values_back else 'NOT BACK'}"
            )
    for name, value in storm.ratios.items():
        lines.append(f"{name}: {value}")
    counted = {json.dumps({k: c[k] for k in ("pauses", "resumes", "raw")}) for c in storm.ledger.values()}
    lines.append(f"ledger per user: {' | '.join(sorted(counted))}")
    lines.append("problems: " + ("; ".join(storm.problems) if storm.problems else "none"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=6, help="how many users (default 6)")
    parser.add_argument("--no-sequential", action="store_true", help="only the storm round")
    parser.add_argument("--json", type=Path, default=HERE / "results" / "hub_storm.json", help="where the figures go")
    args = parser.parse_args(argv)
    if args.users < 1:
        parser.error("--users must be 1 or more")
    storm = run_storm(args.users, sequential=not args.no_sequential)
    print(table(storm))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(storm.to_json(), indent=2))
    return 1 if storm.problems else 0


if __name__ == "__main__":
    sys.exit(main())

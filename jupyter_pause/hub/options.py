"""``jupyter-pause-hub``'s command line: its options, checked, and the policy and release settings they make.

The options themselves are described in ``hub.service``, the service they configure.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlparse

from .. import units
from ..store.credentials import redact
from . import policy
from .policy import Policy
from .release import Settings
from .server_events import parse_profile_gpus

#: What the service does, as ``--help`` says it.
DESCRIPTION = "a JupyterHub service that pauses idle servers instead of culling them."


def default_proxy_url(env: dict[str, str]) -> str:
    """Where users' servers are reached: the origin of JUPYTERHUB_PUBLIC_URL, else JupyterHub's
    default bind URL."""
    public = urlparse(env.get("JUPYTERHUB_PUBLIC_URL", ""))
    if public.scheme and public.netloc:
        return f"{public.scheme}://{public.netloc}"
    return "http://127.0.0.1:8000"


def parser(env: dict[str, str]) -> argparse.ArgumentParser:
    """The command line (defaults from the environment a managed service gets)."""
    p = argparse.ArgumentParser(prog="jupyter-pause-hub", description=DESCRIPTION)
    p.add_argument(
        "--url", default=env.get("JUPYTERHUB_API_URL", "http://127.0.0.1:8081/hub/api"), help="the Hub's API URL"
    )
    p.add_argument("--proxy-url", default=default_proxy_url(env), help="where users' servers are reached (the proxy)")
    duration = units.seconds
    p.add_argument("--idle-timeout", type=duration, default=3600.0, help="idle seconds before a release (or 15m, 1h)")
    p.add_argument("--check-every", type=duration, default=60.0, help="seconds between checks")
    p.add_argument(
        "--max-age", type=duration, default=0.0, help="release servers older than this when no kernel is busy (0: off)"
    )
    p.add_argument(
        "--profile-timeout",
        action="append",
        default=[],
        metavar="PROFILE=SECONDS",
        help="idle timeout of a profile (repeat)",
    )
    p.add_argument("--concurrency", type=int, default=10, help="releases at the same time")
    p.add_argument("--users", default="", help="comma list: only these users' servers")
    p.add_argument("--exclude-users", default="", help="comma list: never these users' servers")
    p.add_argument(
        "--stop-paused", action="store_true", help="stop a server whose release paused everything but could not stop it"
    )
    p.add_argument("--release-timeout", type=duration, default=600.0, help="seconds a release may take")
    p.add_argument(
        "--warn-before", default=None, help="warn a server this long before its release (default 5m; 0: off)"
    )
    p.add_argument(
        "--metrics-window", type=duration, default=86400.0, help="window of the GPU-hours metrics (with --store)"
    )
    p.add_argument("--dry-run", action="store_true", help="decide and report, release nothing")
    p.add_argument("--log-level", default="INFO", help="DEBUG shows the decision on every server at every check")
    p.add_argument("--store", default=None, help="write server starts and stops to the ledger of this store")
    p.add_argument("--server-gpus", type=int, default=0, help="GPUs a server holds, for the ledger")
    p.add_argument(
        "--profile-gpus", action="append", default=[], metavar="PROFILE=COUNT", help="GPUs of a profile (repeat)"
    )
    return p


def configure(argv: Sequence[str], env: dict[str, str]) -> tuple[argparse.Namespace, Policy, Settings]:
    """The parsed options, the policy and the release settings; argparse exits on a bad option."""
    p = parser(env)
    args = p.parse_args(argv)
    try:
        profiles = policy.parse_profile_timeouts(args.profile_timeout)
    except ValueError as e:
        p.error(str(e))
    if args.concurrency < 1:
        p.error("--concurrency must be 1 or more")
    try:
        args.warn_before = warn_before(args.warn_before, args.idle_timeout, profiles)
    except ValueError as e:
        p.error(str(e))
    if args.server_gpus < 0:
        p.error("--server-gpus must be 0 or more")
    try:
        args.profile_gpus = parse_profile_gpus(args.profile_gpus)
    except ValueError as e:
        p.error(str(e))
    rules = Policy(
        idle_timeout=args.idle_timeout,
        max_age=args.max_age,
        profile_timeouts=profiles,
        users=policy.parse_users(args.users),
        exclude_users=policy.parse_users(args.exclude_users),
    )
    settings = Settings(
        stop_paused=args.stop_paused, dry_run=args.dry_run, timeout=args.release_timeout, warn_before=args.warn_before
    )
    return args, rules, settings


#: The warning before a release when ``--warn-before`` is not given (shortened to a server's idle
#: timeout when that is shorter).
DEFAULT_WARN_BEFORE = 300.0


def warn_before(written: str | None, idle_timeout: float, profiles: dict[str, float]) -> float:
    """The seconds of ``--warn-before``; ``ValueError`` saying what to write for a bad value, a
    negative one, or one longer than an idle timeout it applies to."""
    if written is None:
        return DEFAULT_WARN_BEFORE
    try:
        value = units.seconds(written.lstrip("-"))
    except ValueError:
        raise ValueError(f"--warn-before {written!r} is not a duration: write 0 (no warning), 90s, 5m...") from None
    if written.strip().startswith("-"):
        raise ValueError(f"--warn-before {written}: a warning comes before the release, write 0 or more (e.g. 5m)")
    longest = {"--idle-timeout": idle_timeout, **{f"--profile-timeout {k}": v for k, v in profiles.items()}}
    for name, timeout in longest.items():
        if value > timeout:
            raise ValueError(
                f"--warn-before {written} is longer than {name} ({units.duration(timeout)}): "
                "a warning never lasts longer than the idle time that leads to it; shorten it"
            )
    return value


def shown(args: argparse.Namespace, rules: Policy) -> dict[str, Any]:
    """The options in force, as the page shows them."""
    plain = {k: v for k, v in vars(args).items() if k not in ("profile_timeout", "users", "exclude_users", "log_level")}
    if plain.get("store"):
        plain["store"] = redact(plain["store"])  # the page never shows credentials
    return {
        **plain,
        "profile_timeouts": dict(rules.profile_timeouts),
        "users": sorted(rules.users),
        "exclude_users": sorted(rules.exclude_users),
    }

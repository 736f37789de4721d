"""``jupyter pause``: list, show, verify and clean up checkpoints from a terminal."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from typing import Any

from .. import units
from ..config import PauseConfig
from ..errors import CheckpointNotFound, PauseError
from ..journal.journal import Journal
from ..store import report as reports
from ..store import signing
from ..store.catalog import Catalog
from ..store.integrity import check, describe
from ..store.layout import check_session, journal_versions_prefix
from ..store.manifest import Manifest
from ..store.signing import Keyring
from ..store.storage import Store
from . import gc, hours
from .drill import drill_options, run_drill


def duration(text: str) -> float:
    """Seconds from ``90s``, ``30m``, ``12h``, ``7d`` or ``2w`` (a bare number: seconds)."""
    try:
        return units.seconds(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def _when(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(epoch))


def _catalog(args: argparse.Namespace) -> Catalog:
    """The store of ``--store`` (else the configured one), opened with ``_keys``."""
    config = PauseConfig()
    url = args.store or config.store
    return Catalog(Store(url, dict(config.storage_options), keys=_keys(args, config), encrypt=config.encrypt))


def _keys(args: argparse.Namespace, config: PauseConfig) -> Keyring | None:
    """The keys the store is read with (a checkpoint none of them signed is damaged): this
    process's signing keys; else, beside a Hub (its secret here, ``JUPYTER_PAUSE_HUB_SECRET``),
    those of the user whose prefix the store is (``hours --user``, else what ``{user}`` of the
    configured store URL stands for in ``--store``), so an operator reads a user's encrypted
    prefix as the user's server does."""
    if config.keyring is not None:
        return config.keyring
    per_user = signing.hub_keyrings(dict(os.environ))
    user = hours.owner(args, per_user) if per_user is not None else None
    return per_user(user) if per_user is not None and user else None


def _sessions(catalog: Catalog, session: str | None) -> list[str]:
    return [check_session(session)] if session else catalog.sessions()


def _named(sessions: list[str], session: str | None, ref: str | None) -> tuple[str | None, str | None]:
    """(session, checkpoint) for what a command was given: a session name as ``jupyter pause
    list`` prints it (one of ``sessions``), without ``--session``, means its newest checkpoint."""
    if not session and ref and ref != "latest" and ref in sessions:
        return ref, "latest"
    return session, ref


def _find(catalog: Catalog, session: str | None, ref: str) -> Manifest:
    if session:
        return catalog.resolve(session, ref, catalog.store.keys)
    sessions = catalog.sessions()
    named, ref = _named(sessions, None, ref)
    if named:
        return catalog.resolve(named, ref, catalog.store.keys)  # type: ignore[arg-type]
    for name in sessions:
        try:  # a damaged one (CheckpointDamaged) is named, not passed over
            return catalog.resolve(name, ref, catalog.store.keys)
        except CheckpointNotFound:
            continue
    raise CheckpointNotFound(f"no checkpoint {ref!r} in store {catalog.store.display_url}; see `jupyter pause list`")


def cmd_list(args: argparse.Namespace) -> tuple[Any, str]:
    catalog = _catalog(args)
    rows = []
    for session in _sessions(catalog, args.session):
        listing = catalog.listing(session, catalog.store.keys)
        found = []
        for m in listing.checkpoints:
            found.append(
                {
                    "session": session,
                    "id": m.id,
                    "created": m.created,
                    "node": m.node,
                    "trigger": m.trigger,
                    "lineage": m.lineage,
                    "variables": len(m.variables),
                    "bytes": m.stats.get("bytes_total", 0),
                    "tag": m.tag,
                    "notebook": (m.notebook or {}).get("path"),
                }
            )
        found += [{"session": session, "id": i, "damaged": why} for i, why in listing.damaged.items()]
        rows += sorted(found, key=lambda r: r["id"][:15], reverse=True)  # by the time in the id; stable
        for checkpoint_id in listing.pending:
            if checkpoint_id not in listing.damaged:
                rows.append({"session": session, "id": checkpoint_id, "incomplete": "never committed"})
        for checkpoint_id, reason in listing.unreadable.items():
            rows.append({"session": session, "id": checkpoint_id, "incomplete": reason})
    lines = [
        f"{'SESSION':24} {'CHECKPOINT':24} {'TAKEN (UTC)':19}  {'NODE':12} {'TRIGGER':8} {'VARS':>4} {'SIZE':>10}  TAG"
    ]
    for r in rows:
        if "damaged" in r:
            lines.append(f"{r['session']:24} {r['id']:24} damaged: {r['damaged']}")
        elif "incomplete" not in r:
            lines.append(
                f"{r['session']:24} {r['id']:24} {_when(r['created'])}  {r['node'][:12]:12} "
                f"{r['trigger']:8} {r['variables']:>4} {units.size(r['bytes']):>10}  {r['tag'] or ''}"
            )
    if any("damaged" in r for r in rows):
        lines.append("a resume of 'latest' skips damaged checkpoints and uses the newest intact one")
    incomplete = [r for r in rows if "incomplete" in r]
    if incomplete:
        lines.append(f"{len(incomplete)} incomplete write(s), never listed as checkpoints (see `jupyter pause verify`)")
    if len(lines) == 1:
        lines = [f"no checkpoints in {catalog.store.display_url}"]
    return rows, "\n".join(lines)


def cmd_show(args: argparse.Namespace) -> tuple[Any, str]:
    catalog = _catalog(args)
    m = _find(catalog, args.session, args.checkpoint)
    lines = [
        f"checkpoint {m.id}  session {m.session!r}  lineage {m.lineage}  parent {m.parent or '-'}",
        f"taken {_when(m.created)} UTC on {m.node} ({m.trigger}){'  tag: ' + m.tag if m.tag else ''}",
        f"size {units.size(m.stats.get('bytes_total', 0))} "
        f"({units.size(m.stats.get('bytes_written', 0))} written by it)",
        f"notebook: {m.notebook['path'] if m.notebook else '-'}",
        "variables:",
    ]
    for v in m.variables:
        data = v.blob.size + sum(m.arrays[a].nbytes for a in v.arrays if a in m.arrays)
        lines.append(f"  {v.name:20} {v.kind:10} {v.type:40} {units.size(data):>10}")
    for s in m.skipped:
        lines.append(f"  skipped {s.name} ({s.type}): {s.reason}")
    for name, why in m.inexact.items():
        lines.append(f"  named {name} (saved all the same): {why}")
    lines += [f"  not on another node: {line}" for line in m.elsewhere]  # said when it was taken
    devices = ", ".join(sorted(m.devices())) or "-"
    env = m.environment
    lines.append(
        f"tensors on: {devices}   python {env.get('python')}   torch {env.get('packages', {}).get('torch', '-')}"
    )
    data = asdict(m)
    del data["canonical"]  # the exact bytes of the body above, kept for the signature check
    return data, "\n".join(lines)


def cmd_verify(args: argparse.Namespace) -> tuple[Any, str]:
    catalog = _catalog(args)
    key = catalog.store.keys
    sessions = _sessions(catalog, args.session)
    args.session, args.checkpoint = _named(sessions, args.session, args.checkpoint)
    results = []
    for session in [args.session] if args.session else sessions:
        listing = catalog.listing(session, key)
        chosen = listing.checkpoints
        if args.checkpoint:
            try:
                chosen = [listing.resolve(args.checkpoint).manifest]  # a damaged one raises, saying why
            except CheckpointNotFound:
                if args.session:
                    raise
                continue
        for m in chosen:
            problems = check(catalog.store, m)
            results.append(
                {
                    "session": session,
                    "id": m.id,
                    "ok": not problems,
                    "problems": describe(m, problems) if problems else "",
                }
            )
        if args.checkpoint:
            continue
        for checkpoint_id, why in listing.damaged.items():
            row = {"session": session, "id": checkpoint_id, "ok": False, "damaged": why, "problems": f"damaged: {why}"}
            # A manifest torn while it was being committed: the checkpoint never existed.
            results.append({**row, "incomplete": True} if checkpoint_id in listing.pending else row)
        for checkpoint_id in listing.pending:
            if checkpoint_id in listing.damaged:
                continue
            results.append(
                {
                    "session": session,
                    "id": checkpoint_id,
                    "ok": False,
                    "incomplete": True,
                    "problems": "partial write: data without a manifest (not a checkpoint)",
                }
            )
        for checkpoint_id, reason in listing.unreadable.items():
            results.append(
                {"session": session, "id": checkpoint_id, "ok": False, "incomplete": True, "problems": reason}
            )
    if args.checkpoint and not results:
        raise CheckpointNotFound(f"no checkpoint {args.checkpoint!r} in store {catalog.store.display_url}")
    lines = [
        f"{_verdict(r)} {r['session']} {r['id']}" + (f": {r['problems']}" if r["problems"] else "") for r in results
    ]
    damaged = [r for r in results if _damaged(r)]
    lines.append(
        f"{sum(r['ok'] for r in results)} verified, {len(damaged)} damaged, "
        f"{sum(bool(r.get('incomplete')) and not _damaged(r) for r in results)} incomplete (never committed)"
    )
    return results, "\n".join(lines)


def _damaged(row: dict[str, Any]) -> bool:
    """A verify row of a damaged checkpoint: blobs or manifest (a torn commit too), not a partial write."""
    return not row["ok"] and (bool(row.get("damaged")) or not row.get("incomplete"))


def _verdict(row: dict[str, Any]) -> str:
    return "ok     " if row["ok"] else ("DAMAGED" if _damaged(row) else "partial")


def cmd_gc(args: argparse.Namespace) -> tuple[Any, str]:
    return gc.run(args, _catalog(args))


def cmd_report(args: argparse.Namespace) -> tuple[Any, str]:
    catalog = _catalog(args)
    data, blocks = [], []
    for session in _sessions(catalog, args.session):
        runs = reports.load(catalog.store, session)
        if not runs:
            continue
        paused = sum(r.durations()["paused"] or 0 for r in runs)
        data += [r.to_dict() for r in runs]
        blocks.append(
            "\n".join(r.text() for r in runs)
            + f"\n  {session}: {len(runs)} resume(s), paused {units.duration(paused)} in all"
        )
    return data, "\n".join(blocks) or f"no run reports in {catalog.store.display_url}"


def cmd_journal(args: argparse.Namespace) -> tuple[Any, str]:
    catalog = _catalog(args)
    found = [
        Journal(catalog.store, session, args.name, version, "", catalog.store.keys)
        for session in _sessions(catalog, args.session)
        for version in journal_versions(catalog.store, session, args.name, args.version)
    ]
    if not found:
        where = f"session {args.session!r}" if args.session else catalog.store.display_url
        raise PauseError(f"no journal {args.name!r} in {where}; a notebook starts one with jupyter_pause.journal(name)")
    summaries = [j.summary() for j in found]
    return [asdict(s) for s in summaries], "\n".join(s.text() for s in summaries)


def journal_versions(store: Store, session: str, name: str, version: str | None) -> list[str]:
    """Versions of journal ``name`` that have records in ``session`` (or just ``version``, if it has)."""
    prefix = journal_versions_prefix(session, name)
    versions = sorted({key[len(prefix) :].split("/", 1)[0] for key in store.list(prefix)})
    return [v for v in versions if version in (None, v)]


def cmd_drill(args: argparse.Namespace) -> tuple[Any, str]:
    echo = (lambda *_: None) if args.json else print
    pause, resume = drill_options(args)
    result = run_drill(
        args.notebook,
        pause,
        resume,
        kill=args.kill,
        another_node=args.another_node,
        report_file=args.report,
        timeout=args.timeout,
        echo=echo,
    )
    args.exit_code = 0 if result.passed else 1
    return result.report, ""


def cmd_hours(args: argparse.Namespace) -> tuple[Any, str]:
    return hours.run(args, _catalog(args).store)


def parser() -> argparse.ArgumentParser:
    """The ``jupyter pause`` argument parser."""
    top = argparse.ArgumentParser(prog="jupyter pause", description="Inspect and manage jupyter-pause checkpoints.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--store", help="store URL or folder (default: JUPYTER_PAUSE_STORE or the local default)")
    common.add_argument("--session", help="only this session (default: all sessions)")
    common.add_argument("--json", action="store_true", help="print JSON for programs")
    sub = top.add_subparsers(dest="command", required=True)
    sub.add_parser("list", parents=[common], help="sessions and their checkpoints").set_defaults(run=cmd_list)
    show = sub.add_parser("show", parents=[common], help="one checkpoint in detail")
    show.add_argument(
        "checkpoint", help="checkpoint id or unique prefix, a session name (its newest), or 'latest' (with --session)"
    )
    show.set_defaults(run=cmd_show)
    verify = sub.add_parser("verify", parents=[common], help="check every blob against its checksum")
    verify.add_argument(
        "checkpoint", nargs="?", help="just this checkpoint (id or prefix), or a session's newest (default: all)"
    )
    verify.set_defaults(run=cmd_verify)
    gc.add_parser(sub, common, duration).set_defaults(run=cmd_gc)
    sub.add_parser("report", parents=[common], help="run reports: verdicts and timings of resumes").set_defaults(
        run=cmd_report
    )
    journal = sub.add_parser("journal", parents=[common], help="a work journal: done, failed, pending, runs")
    journal.add_argument("name", help="the journal's name, as given to jupyter_pause.journal(name)")
    journal.add_argument("--version", help="only this processing version (default: every version)")
    journal.set_defaults(run=cmd_journal)
    drill = sub.add_parser("drill", parents=[common], help="pause and resume a notebook end to end, and prove it")
    drill.add_argument("notebook", help="the .ipynb file to drill")
    drill.add_argument("--report", metavar="FILE", help="also write the run report (JSON) here")
    drill.add_argument("--kill", action="store_true", help="stop the first kernel with SIGKILL, as a preemption would")
    drill.add_argument(
        "--another-node",
        action="store_true",
        help="resume where this node's HOME, caches, temp folder and notebook folder are hidden, as on another node",
    )
    drill.add_argument("--timeout", type=duration, default=600.0, help="limit for each cell (default 10m)")
    drill.set_defaults(run=cmd_drill)
    hours.add_parser(sub, common).set_defaults(run=cmd_hours)
    return top


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``jupyter pause`` (and ``jupyter-pause``)."""
    args = parser().parse_args(argv)
    args.exit_code = 0
    try:
        data, text = args.run(args)
    except (PauseError, ValueError) as e:
        print(f"jupyter pause {args.command}: {e}", file=sys.stderr)
        return 2
    if args.json or text:
        print(json.dumps(data, indent=1, default=str) if args.json else text)
    if args.command == "verify" and any(_damaged(r) for r in data):
        return 1
    return int(args.exit_code)

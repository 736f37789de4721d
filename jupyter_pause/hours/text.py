"""The report as a person reads it (tables) and as a program reads it (JSON)."""

from __future__ import annotations

import time
from typing import Any

from .. import units
from .totals import Hours, Range, SessionHours, median, percentile
from .whatif import ASSUMPTIONS, Outcome, WaitModel

HOURS_ONLY = "hours only: give --price GPU_HOUR (and --storage-price GB_MONTH) for money"


def when(epoch: float) -> str:
    """``2026-11-16 09:00`` (UTC)."""
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(epoch))


def amount(r: Range, digits: int = 1) -> str:
    """A range as text: ``12.5``, ``>= 12.5`` (no upper bound), ``12.5..14.0``."""
    if r.known:
        return f"{r.low:.{digits}f}"
    if r.high is None:
        return f">= {r.low:.{digits}f}"
    return f"{r.low:.{digits}f}..{r.high:.{digits}f}"


def wait(seconds: float | None) -> str:
    """A wait as text, ``-`` for none."""
    return "-" if seconds is None else units.duration(seconds)


def gpus(s: SessionHours) -> str:
    """``2xH100``: the GPU count and a short model name; ``none`` for a session that held no GPU."""
    if s.gpus == 0:
        return "none"
    model = (s.gpu_model or "").replace("NVIDIA ", "").split(" ")[0].split("-")[0]
    count = "?" if s.gpus is None else str(s.gpus)
    return f"{count}x{model}" if model else count


def _share(part: Range, whole: Range) -> str:
    return f" ({100 * part.low / whole.low:.0f}%)" if whole.known and part.known and whole.low else ""


def rows(h: Hours) -> str:
    """``5 session(s), 1 server(s)``: what the rows are."""
    servers = sum(s.kind == "server" for s in h.sessions)
    return f"{len(h.sessions) - servers} session(s)" + (f", {servers} server(s)" if servers else "")


def report(h: Hours) -> str:
    """The per-session table, the totals and the money."""
    w = h.window
    span = f"{when(w.since)} -> {when(w.until)} UTC" if w.since is not None else f"up to {when(w.until)} UTC"
    lines = [f"GPU hours {span}: {rows(h)}, {h.malformed} malformed record(s) skipped"]
    if not h.sessions:
        return lines[0] + "\nno ledger records in this window"
    head = f"{'SESSION':22} {'USER':8} {'GPUS':10} {'HELD':>9} {'ACTIVE':>8} {'RELEASED':>9} {'PAUSES':>6} "
    lines.append(head + f"{'RESUMES':>7} {'WAIT MED':>9} {'WAIT P95':>9} {'SNAPSHOT':>9}")
    for s in h.sessions:
        lines.append(
            f"{s.key[:22]:22} {(s.user or '-')[:8]:8} {gpus(s)[:10]:10} {amount(s.held):>9} {amount(s.active):>8} "
            f"{amount(s.released):>9} {s.pauses:>6} {s.resumes:>7} {wait(s.median_wait):>9} "
            f"{wait(s.p95_wait):>9} {units.size(s.snapshot_bytes) if s.snapshot_bytes is not None else '-':>9}"
        )
    held, active, released = h.total("held"), h.total("active"), h.total("released")
    waits = h.waits
    lines += [
        f"total: {amount(held)} GPU-h held, {amount(active)} active{_share(active, held)}, "
        f"{amount(released)} released by {sum(s.pauses for s in h.sessions)} pause(s); "
        f"{sum(s.resumes for s in h.sessions)} resume(s), wait median {wait(median(waits))}, "
        f"p95 {wait(percentile(waits, 95))} ({len(waits)} measured)",
    ]
    if died := deaths(h):
        lines.append(f"kernels that died and were restarted by Jupyter (out of memory, say): {died}")
    if h.shared.high != 0:
        lines.append(
            f"{amount(h.shared)} GPU-h of the sessions' HELD is shared (notebooks of one server running at once "
            "on its GPUs): the total counts it once"
        )
    stored = [s.store_bytes for s in h.sessions if s.store_bytes is not None]
    if sum(stored):
        lines.append(f"store: {units.size(sum(stored))} held now by these sessions")
    if any(not s.held.known or not s.released.known for s in h.sessions):
        lines.append("a range (a..b, >= a) is a session whose records begin mid-way: its state before is unknown")
    lines.append(money(h))
    return "\n".join(lines)


def deaths(h: Hours) -> str:
    """The sessions whose kernel died (and Jupyter restarted it), with how often: "a 2, b 1"; "" for none."""
    return ", ".join(f"{s.key} {s.deaths}" for s in h.sessions if s.deaths)


def money(h: Hours) -> str:
    """The money line: costs where prices were given, else hours only."""
    if h.price is None and h.storage_price is None:
        return HOURS_ONLY
    parts = []
    if h.price is not None:
        parts.append(
            f"GPUs held {amount(h.money('held'), 2)}, released by pauses {amount(h.money('released'), 2)} "
            f"(at {h.price:g}/GPU-hour)"
        )
    else:
        parts.append("GPU cost unknown (no --price)")
    storage = h.storage_money()
    if storage is not None:
        parts.append(f"snapshot storage {amount(storage, 2)} (at {h.storage_price:g}/GB-month)")
    else:
        parts.append("storage cost unknown (no --storage-price)")
    return "money: " + "; ".join(parts)


def what_if(model: WaitModel, outcomes: list[Outcome], price: float | None = None) -> str:
    """The what-if table beside the current policy, with its model and assumptions."""
    extra = f" {'RELEASED $':>11}" if price is not None else ""
    lines = [
        "what-if: the recorded activity replayed against idle thresholds (kernels only)",
        f"{'POLICY':12} {'HELD GPU-h':>11} {'RELEASED GPU-h':>15} {'PAUSES':>7} {'RESUMES':>8} "
        f"{'USER WAITING':>13} {'PER RESUME':>11}" + extra,
    ]
    for o in outcomes:
        waiting = "unknown" if o.waiting is None else units.duration(o.waiting)
        if o.unknown_waits:
            waiting += f" +{o.unknown_waits}?"
        each = units.duration(o.waiting / o.resumes) if o.resumes and o.waiting is not None else "-"
        cost = f" {o.released * price:>11.2f}" if price is not None else ""
        lines.append(
            f"{o.policy:12} {o.held:>11.1f} {o.released:>15.1f} {o.pauses:>7} {o.resumes:>8} {waiting:>13} {each:>11}"
            + cost
        )
    lines.append(f"resume wait model: {model.describe()}")
    lines.append("current: measured waits; a '+N?' is N resume(s) whose wait is unknown (no next cell yet)")
    lines.append("assumptions:")
    lines += ["  " + line for line in ASSUMPTIONS.splitlines()]
    return "\n".join(lines)


def _row(s: SessionHours) -> dict[str, Any]:
    return {
        "session": s.key,
        "kind": s.kind,
        "user": s.user,
        "node": s.node,
        "gpu_model": s.gpu_model,
        "gpus": s.gpus,
        "held_gpu_hours": s.held.to_json(),
        "active_gpu_hours": s.active.to_json(),
        "released_gpu_hours": s.released.to_json(),
        "held_hours": s.held_hours.to_json(),
        "pauses": s.pauses,
        "resumes": s.resumes,
        "resume_wait_seconds": {
            "median": median(s.waits),
            "p95": percentile(s.waits, 95),
            "count": len(s.waits),
            "unfinished": s.unfinished_resumes,
        },
        "kernel_deaths": s.deaths,
        "snapshot_bytes": s.snapshot_bytes,
        "bytes_written": s.written_bytes,
        "store_bytes": s.store_bytes,
        "storage_gb_months": s.storage_gb_months.to_json(),
    }


def to_json(h: Hours, what: tuple[WaitModel, list[Outcome]] | None = None) -> dict[str, Any]:
    """Everything the text shows, for programs."""
    waits = h.waits
    money: dict[str, Any] | str = HOURS_ONLY
    if h.price is not None or h.storage_price is not None:
        gpu, storage = h.money("held"), h.storage_money()
        released = h.money("released")
        money = {
            "price_gpu_hour": h.price,
            "price_gb_month": h.storage_price,
            "gpus_held": gpu.to_json() if gpu else "unknown",
            "released_by_pauses": released.to_json() if released else "unknown",
            "storage": storage.to_json() if storage else "unknown",
        }
    out: dict[str, Any] = {
        "window": {"since": h.window.since, "until": h.window.until},
        "malformed_records": h.malformed,
        "sessions": [_row(s) for s in h.sessions],
        "total": {
            "held_gpu_hours": h.total("held").to_json(),
            "shared_gpu_hours": h.shared.to_json(),
            "active_gpu_hours": h.total("active").to_json(),
            "released_gpu_hours": h.total("released").to_json(),
            "pauses": sum(s.pauses for s in h.sessions),
            "resumes": sum(s.resumes for s in h.sessions),
            "kernel_deaths": sum(s.deaths for s in h.sessions),
            "resume_wait_seconds": {"median": median(waits), "p95": percentile(waits, 95), "count": len(waits)},
            "storage_gb_months": h.total("storage_gb_months").to_json(),
        },
        "money": money,
    }
    if what is not None:
        model, outcomes = what
        out["what_if"] = {
            "model": model.describe(),
            "assumptions": ASSUMPTIONS.splitlines(),
            "policies": [o.to_json() for o in outcomes],
        }
    return out

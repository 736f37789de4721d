"""The report as one self-contained HTML page: charts drawn by matplotlib as SVG, inlined as data
URIs, and the tables; nothing is fetched when it is viewed and no script runs."""

from __future__ import annotations

import base64
import html as escape
import io
from datetime import UTC, datetime
from typing import Any

from .. import units
from ..errors import PauseError
from . import text
from .totals import Hours, median, percentile
from .whatif import ASSUMPTIONS, Outcome, WaitModel

COLOURS = {"held": "#8fb3d9", "active": "#1f5f99", "released": "#f2b366"}
STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;max-width:1180px;color:#1d2733}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}.sub{color:#5a6773;margin:0 0 16px}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin:12px 0}
.card{border:1px solid #d8dee5;border-radius:8px;padding:10px 14px;min-width:150px}
.card b{display:block;font-size:22px}.card span{color:#5a6773;font-size:12px}
table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}
th,td{padding:4px 8px;border-bottom:1px solid #e5e9ee;text-align:right}th{background:#f4f6f8}
td:first-child,th:first-child,.sessions td:nth-child(-n+3),.sessions th:nth-child(-n+3){text-align:left}
img{max-width:100%;display:block}.note{color:#5a6773;font-size:12px}ul.note{margin:4px 0;padding-left:18px}
"""


def _figure(width: float, height: float) -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError as e:
        raise PauseError(
            "--html draws its charts with matplotlib, which is not installed: pip install 'jupyter-pause[hours]'"
        ) from e
    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def _img(fig: Any, alt: str) -> str:
    import matplotlib

    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": "jupyter-pause-hours", "svg.fonttype": "path"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    data = base64.b64encode(buf.getvalue()).decode()
    return f'<img alt="{escape.escape(alt)}" src="data:image/svg+xml;base64,{data}">'


def _dates(epochs: list[float]) -> list[datetime]:
    return [datetime.fromtimestamp(e, UTC) for e in epochs]


#: Tick labels by the window's length: (shorter than, strftime), the first that fits wins.
TIME_LABELS = ((600.0, "%H:%M:%S"), (86400.0, "%H:%M"), (3 * 86400.0, "%a %H:%M"), (float("inf"), "%a %d %b"))


def time_axis(ax: Any, since: float, until: float) -> None:
    """Ticks at real moments of ``[since, until]`` (UTC), labelled for the window's length: seconds
    for a few minutes, clock times within a day, the day and time over a few days, days beyond."""
    from matplotlib import dates

    span = until - since
    label = next(form for longest, form in TIME_LABELS if span < longest)
    ax.set_xlim(dates.date2num(datetime.fromtimestamp(since, UTC)), dates.date2num(datetime.fromtimestamp(until, UTC)))
    ax.xaxis.set_major_locator(dates.AutoDateLocator(tz=UTC, minticks=4, maxticks=10))
    ax.xaxis.set_major_formatter(dates.DateFormatter(label, tz=UTC))
    day = text.when(since)[:10]
    ax.set_xlabel(f"UTC, {day}" if span < 86400.0 and text.when(until)[:10] == day else "UTC")


def chart_start(h: Hours) -> float:
    """Where the timeline begins: the window's start, else the first moment any row shows (an
    hour before the window's end when none shows anything)."""
    if h.window.since is not None:
        return h.window.since
    starts = [a for s in h.sessions for spans in s.spans.values() for a, _ in spans]
    return min(starts) if starts else h.window.until - 3600.0


def without_gpus(h: Hours) -> list[str]:
    """Rows that held no GPU: a kernel or server that ran on CPUs only."""
    return [s.key for s in h.sessions if s.gpus == 0]


def timeline_figure(h: Hours) -> Any:
    """The timeline chart as a matplotlib figure (see ``timeline_chart``)."""
    from matplotlib import dates
    from matplotlib.patches import Patch

    rows = h.sessions
    none = set(without_gpus(h))
    fig = _figure(11.5, 1.2 + 0.55 * len(rows))
    ax = fig.add_subplot()
    for y, s in enumerate(reversed(rows)):
        for name, top, tall in (("released", 0.3, 0.4), ("held", 0.3, 0.4), ("active", 0.4, 0.2)):
            bars = [(dates.date2num(a), dates.date2num(b) - dates.date2num(a)) for a, b in _pairs(s.spans[name])]
            hatch = "//" if s.key in none else None  # no GPU: the kernel's life, not GPUs held
            ax.broken_barh(bars, (y - 0.5 + top, tall), facecolors=COLOURS[name], label=name, hatch=hatch)
    ax.set_yticks(range(len(rows)), [s.key + (" (no GPUs)" if s.key in none else "") for s in reversed(rows)])
    time_axis(ax, chart_start(h), h.window.until)
    ax.grid(axis="x", color="#e5e9ee")
    names = {"released": "released by pauses", "held": "held", "active": "active"}
    handles = [Patch(facecolor=COLOURS[name], label=label) for name, label in names.items()]
    ax.legend(handles=handles, loc="lower center", ncols=3, bbox_to_anchor=(0.5, 1.0), frameon=False)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    return fig


def timeline_chart(h: Hours) -> str:
    """One row per session: held, active (inside held) and released by pauses, over the window."""
    return _img(timeline_figure(h), "timeline per session: held, active and released")


def _pairs(spans: list[tuple[float, float]]) -> list[tuple[datetime, datetime]]:
    return [(datetime.fromtimestamp(a, UTC), datetime.fromtimestamp(b, UTC)) for a, b in spans]


def daily_chart(h: Hours) -> str:
    """GPU-hours held, active and released by pauses on each UTC day."""
    return _img(daily_figure(h), "GPU-hours per day: held, active and released by pauses")


def daily_figure(h: Hours) -> Any:
    """The per-day chart as a matplotlib figure (see ``daily_chart``)."""
    per = {name: h.per_day(name) for name in ("held", "active", "released")}
    days = sorted(set().union(*per.values()))
    fig = _figure(11.5, 3.2)
    ax = fig.add_subplot()
    x = range(len(days))
    for i, name in enumerate(("held", "active", "released")):
        values = [per[name].get(d, 0.0) for d in days]
        ax.bar([v + (i - 1) * 0.27 for v in x], values, 0.27, color=COLOURS[name], label=name)
        if name == "released":
            for xi, v in zip(x, values, strict=True):
                if v:
                    ax.annotate(
                        f"{v:.1f}" if v < 10 else f"{v:.0f}", (xi + 0.27, v), ha="center", va="bottom", fontsize=8
                    )
    ax.set_xticks(list(x), [datetime.fromtimestamp(d, UTC).strftime("%a %d %b") for d in days])
    ax.set_ylabel("GPU-hours")
    ax.legend(
        ["held", "active", "released by pauses"], frameon=False, ncols=3, loc="lower right", bbox_to_anchor=(1, 1)
    )
    ax.grid(axis="y", color="#e5e9ee")
    ax.set_axisbelow(True)
    return fig


def no_gpu_hours(h: Hours) -> str | None:
    """Why the GPU-hours per day would be an empty chart; None when it has bars to show."""
    if any(v > 0 for name in ("held", "active", "released") for v in h.per_day(name).values()):
        return None
    none, unknown = without_gpus(h), [s.key for s in h.sessions if s.gpus is None]
    if none and len(none) == len(h.sessions):
        return (
            f"No GPU-hours to chart: {_names(none)} held no GPUs (CPUs only), and a session without GPUs holds "
            "no GPU-hours; the timeline shows when each ran, worked and was paused."
        )
    if unknown:
        return f"No GPU-hours to chart: the ledger does not say how many GPUs {_names(unknown)} held."
    return "No GPU-hours to chart: no session held its GPUs inside this window."


def _names(keys: list[str]) -> str:
    shown = ", ".join(keys[:5]) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")
    return f"{'the session' if len(keys) == 1 else f'all {len(keys)} sessions'} ({shown})"


def whatif_chart(outcomes: list[Outcome]) -> str:
    """Per policy: GPU-hours released (bars) and hours users waited (line)."""
    fig = _figure(11.5, 2.8)
    ax = fig.add_subplot()
    names = [o.policy for o in outcomes]
    ax.bar(names, [o.released for o in outcomes], color=[COLOURS["active"]] + [COLOURS["released"]] * (len(names) - 1))
    ax.set_ylabel("GPU-hours released")
    other = ax.twinx()
    other.plot(names, [(o.waiting or 0) / 3600 for o in outcomes], "o-", color="#b03a2e")
    other.set_ylabel("hours users waited", color="#b03a2e")
    other.set_ylim(bottom=0)
    return _img(fig, "what-if: GPU-hours released and user waiting per idle threshold")


def _table(head: list[str], rows: list[list[str]], css: str = "") -> str:
    cells = "".join(f"<th>{escape.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{escape.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{css}"><tr>{cells}</tr>{body}</table>'


def _card(value: str, label: str) -> str:
    return f'<div class="card"><b>{escape.escape(value)}</b><span>{escape.escape(label)}</span></div>'


def _summary(h: Hours) -> str:
    """The cards: totals, pauses and resumes, the resume waits."""
    waits = h.waits
    cards = [
        _card(
            text.amount(h.total("held")),
            "GPU-hours held"
            + (f" ({text.amount(h.shared)} shared by notebooks of one server)" if h.shared.high else ""),
        ),
        _card(text.amount(h.total("active")), "GPU-hours active"),
        _card(text.amount(h.total("released")), "GPU-hours released by pauses"),
        _card(f"{sum(s.pauses for s in h.sessions)} / {sum(s.resumes for s in h.sessions)}", "pauses / resumes"),
        _card(text.wait(median(waits)), "median resume wait"),
        _card(text.wait(percentile(waits, 95)), "p95 resume wait"),
    ]
    return '<div class="cards">' + "".join(cards) + "</div>"


def _sessions(h: Hours) -> str:
    """The per-session table."""
    head = ["session", "user", "GPUs", "held", "active", "released", "pauses", "resumes", "wait median", "wait p95"]
    rows = [
        [
            s.key,
            s.user or "-",
            text.gpus(s),
            text.amount(s.held),
            text.amount(s.active),
            text.amount(s.released),
            str(s.pauses),
            str(s.resumes),
            text.wait(s.median_wait),
            text.wait(s.p95_wait),
            "-" if s.snapshot_bytes is None else units.size(s.snapshot_bytes),
        ]
        for s in h.sessions
    ]
    return _table([*head, "snapshot"], rows, "sessions")


def _what_if(model: WaitModel, outcomes: list[Outcome]) -> list[str]:
    """The what-if: its chart, its table, its model and assumptions."""
    rows = [
        [
            o.policy,
            f"{o.held:.1f}",
            f"{o.released:.1f}",
            str(o.pauses),
            str(o.resumes),
            "unknown" if o.waiting is None else units.duration(o.waiting),
        ]
        for o in outcomes
    ]
    empty = not any(o.released or o.waiting for o in outcomes)
    note = "Nothing to chart: under every threshold no GPU-hours are released and no user waits."
    return [
        "<h2>What-if: idle thresholds</h2>",
        f'<p class="note">{escape.escape(note)}</p>' if empty else whatif_chart(outcomes),
        _table(["policy", "held GPU-h", "released GPU-h", "pauses", "resumes", "user waiting"], rows),
        f'<p class="note">Resume wait model: {escape.escape(model.describe())}</p><ul class="note">',
        *(f"<li>{escape.escape(item)}</li>" for item in _items(ASSUMPTIONS)),
        "</ul>",
    ]


def html(h: Hours, what: tuple[WaitModel, list[Outcome]] | None = None) -> str:
    """The whole page: totals, charts, tables and (with ``what``) the what-if."""
    w = h.window
    since = text.when(w.since) if w.since is not None else "the first record"
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        "<title>GPU hours</title><style>" + STYLE + "</style></head><body>",
        "<h1>Where the GPU hours go</h1>",
        f'<p class="sub">{escape.escape(since)} to {escape.escape(text.when(w.until))} UTC &middot; '
        f"{text.rows(h)} &middot; {h.malformed} malformed record(s) skipped</p>",
        _summary(h),
        f'<p class="note">{escape.escape(text.money(h))}</p>',
    ]
    if none := without_gpus(h):
        said = f"{_names(none).capitalize()} held no GPUs (CPUs only): each holds none, and counts no GPU-hours."
        parts.append(f'<p class="note">{escape.escape(said)}</p>')
    if h.sessions:
        parts += ["<h2>Timeline per session</h2>", timeline_chart(h), "<h2>GPU-hours per day</h2>"]
        empty = no_gpu_hours(h)
        parts.append(daily_chart(h) if empty is None else f'<p class="note">{escape.escape(empty)}</p>')
    else:
        parts.append('<p class="note">No ledger records in this window: nothing to chart.</p>')
    parts += ["<h2>Sessions (GPU-hours)</h2>", _sessions(h)]
    if died := text.deaths(h):
        parts.append(f'<p class="note">Kernels that died and were restarted by Jupyter: {escape.escape(died)}</p>')
    if what is not None:
        parts += _what_if(*what)
    parts.append("</body></html>")
    return "\n".join(parts)


def _items(assumptions: str) -> list[str]:
    return [" ".join(item.split()).removeprefix("- ") for item in assumptions.split("\n- ")]

"""plotly figures and bokeh models: checkpointed in one process and resumed in another, they come
back with the same JSON, the restore test says ``restored``, and the next cell gives what it gives
in the process that took the checkpoint.

Both processes are new Python processes (bokeh numbers its models with a per-process counter, and
plotly caches its templates per process): the first runs the cells, checkpoints, then runs the
next cell; the second resumes, runs the restore test, then runs the same next cell.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("plotly")
pytest.importorskip("bokeh")

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

SAVE = r"""
import json, sys
import jupyter_pause as jp
store, cell, names, next_cell = sys.argv[1:]
ns = {"__name__": "__main__"}
exec(compile(cell, "<cell>", "exec", dont_inherit=True), ns)
result = jp.checkpoint(names.split(), store=store, session="plots", namespace=ns)
exec(compile(next_cell, "<next cell>", "exec", dont_inherit=True), ns)
named = {r.name: r.reason for r in result.skipped}
print("REPORT " + json.dumps({"named": named, "inexact": result.manifest.inexact, "out": ns["out"]}))
"""

RESUME = r"""
import json, sys
import jupyter_pause as jp
store, next_cell = sys.argv[1:]
ns = {"__name__": "__main__"}
resumed = jp.resume(store=store, session="plots", namespace=ns)
verdict = jp.verify(store=store, session="plots", namespace=ns)
exec(compile(next_cell, "<next cell>", "exec", dont_inherit=True), ns)
report = {"not_restored": resumed.skipped, "verdict": verdict.kind, "summary": verdict.summary(), "out": ns["out"]}
print("REPORT " + json.dumps(report))
"""


def _python(script: str, *args: str, cwd: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BOKEH_SIMPLE_IDS": "yes"}
    proc = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("REPORT "))
    return json.loads(line[len("REPORT ") :])


def paused_and_resumed(cell: str, names: str, next_cell: str, tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run ``cell`` and checkpoint ``names`` in one process, resume in another; ``next_cell`` in both."""
    store = str(tmp_path / "store")
    cell, next_cell = textwrap.dedent(cell), textwrap.dedent(next_cell)
    paused = _python(SAVE, store, cell, names, next_cell, cwd=tmp_path)
    resumed = _python(RESUME, store, next_cell, cwd=tmp_path)
    return paused, resumed


def assert_back_exactly(paused: dict[str, Any], resumed: dict[str, Any]) -> None:
    assert paused["named"] == {} and paused["inexact"] == {}, paused
    assert resumed["not_restored"] == {}, resumed["not_restored"]
    assert resumed["verdict"] == "restored", resumed["summary"]
    assert "differs" not in resumed["summary"], resumed["summary"]
    for key, value in paused["out"].items():
        assert resumed["out"][key] == value, f"{key}: the next cell gives another result after resume"


# -- plotly ----------------------------------------------------------------------------------------

PLOTLY = """
import plotly.graph_objects as go
from plotly.subplots import make_subplots
fig = go.Figure(data=go.Bar(x=[1, 2, 3], y=[4, 5, 6]))
grid = make_subplots(rows=1, cols=2, subplot_titles=("left", "right"))
grid.add_trace(go.Scatter(x=[1, 2], y=[3, 4], name="a"), row=1, col=1)
grid.add_trace(go.Bar(x=["p", "q"], y=[2, 1], name="b"), row=1, col=2)
layout = grid.layout
"""

PLOTLY_NEXT = """
import plotly.graph_objects as go
out = {"fig": fig.to_json(), "grid": grid.to_json()}
layout.title = "both"  # the layout is the grid's own, not a copy
fig.update_layout(title="bars").add_scatter(x=[1, 3], y=[6, 4])
grid.add_trace(go.Scatter(x=[0], y=[1]), row=1, col=2)
try:
    fig.layout.title.font.size = "big"
    out["refused"] = None
except ValueError as e:
    out["refused"] = type(e).__name__
out["fig after"], out["grid after"] = fig.to_json(), grid.to_json()
"""


def test_plotly_figures_come_back_with_the_same_json_and_go_on_the_same(tmp_path: Path) -> None:
    paused, resumed = paused_and_resumed(PLOTLY, "fig grid layout", PLOTLY_NEXT, tmp_path)
    assert paused["out"]["refused"] == "ValueError"  # still validated after resume (compared below)
    assert json.loads(paused["out"]["grid after"])["layout"]["title"]["text"] == "both"
    assert_back_exactly(paused, resumed)


# -- bokeh -----------------------------------------------------------------------------------------

BOKEH = """
from bokeh.models import ColumnDataSource
from bokeh.plotting import figure
plot = figure(title="t")
r = plot.line([1, 2], [3, 4])
source = ColumnDataSource(data=dict(x=[1, 2, 3], y=[3, 1, 2]))
dots = plot.scatter("x", "y", source=source)
"""

BOKEH_NEXT = """
import json
from bokeh.embed import json_item
from bokeh.layouts import column
from bokeh.plotting import figure as new_figure
out = {"r is plot's": r in plot.renderers}
source.stream({"x": [4], "y": [5]})  # notifies the owners the source's data keeps
plot.title.text = "t2"
r.glyph.line_width = 3
extra = new_figure(title="u")
extra.scatter([1], [2])
out["both"] = json.dumps(json_item(column(plot, extra)))
"""


def test_bokeh_models_come_back_with_the_same_json_and_go_on_the_same(tmp_path: Path) -> None:
    paused, resumed = paused_and_resumed(BOKEH, "plot r source dots", BOKEH_NEXT, tmp_path)
    assert paused["out"]["r is plot's"] is True
    assert '"t2"' in paused["out"]["both"]
    assert_back_exactly(paused, resumed)

"""The Grafana dashboard in docs/ is built on series the server and the Hub service export."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import REGISTRY

from jupyter_pause.hub.metrics import ServiceMetrics
from jupyter_pause.server import metrics as server_metrics

DASHBOARD = Path(__file__).resolve().parent.parent / "docs" / "grafana-jupyter-pause.json"
SUFFIXES = ("_bucket", "_count", "_sum", "_total")


def _exported() -> set[str]:
    """Every sample name the two registries expose (histograms' buckets, counters' totals)."""
    assert server_metrics.CHECKPOINTS is not None  # registered in the default registry on import
    names = set()
    for registry in (REGISTRY, ServiceMetrics(hours=lambda: {"ann": {"held": 1.0}}).registry):
        for family in registry.collect():
            names.add(family.name)
            if family.type == "counter":  # a labelled counter has no sample before its first count
                names.add(family.name + "_total")
            elif family.type == "histogram":
                names.update(family.name + s for s in ("_bucket", "_count", "_sum"))
    return {n for n in names if n.startswith("jupyter_pause")}


def test_every_series_the_dashboard_queries_is_exported_and_every_one_exported_is_shown():
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    queried = {m for e in exprs for m in re.findall(r"jupyter_pause_[a-z_]+", e)}
    exported = _exported()
    assert queried and queried <= exported, sorted(queried - exported)
    families = {re.sub("(" + "|".join(SUFFIXES) + ")$", "", n) for n in exported}
    shown = {re.sub("(" + "|".join(SUFFIXES) + ")$", "", n) for n in queried}
    assert families <= shown, sorted(families - shown)

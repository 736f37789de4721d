"""Case 8: a resume on a new node, on a local folder and on S3, beside a raw parallel read of the same objects.

The session: ``shared.build_model``'s model and AdamW after a step (``new_node_bytes``, about 1 GB),
paused here into a fresh store (a local folder, or SeaweedFS started on 127.0.0.1 as
``benchmarks/stores.py`` starts it) as notebook ``new-node.ipynb``. It is resumed on a new node
(``freshnode``: a Jupyter server whose kernels get empty HOME, caches and temp folder, with the
page cache dropped before every run where that is allowed). Each round runs four contenders, one
after another in rotating order (``shared.orders``), each in a kernel of its own:

- **by hand**: a kernel is started for the notebook and runs ``%load_ext jupyter_pause`` and
  ``%resume`` in one cell, then a next cell (what a user does without the server's button);
- **click**: Resume is clicked (``POST jupyter-pause/api/resume``) and a next cell is run at once,
  as in JupyterLab: the notebook connects to the resume's kernel once its session names one
  (looked for at each status poll, every ``freshnode.POLL`` s, while the resume restores), which
  is once the restore's request is on its way, and the cell waits in the kernel until the
  restore is done; the resume must end ``restored``. Every contender's client is ready as
  JupyterLab's is, once the kernel answers (``freshnode._lab_client``);
- **waited**: the same click while the resources check names a lack (the node's gate), for
  ``wait`` seconds: the largest of ``new_node_wait_s``, twice the raw read of the warm-up round
  and that round's raw total, long enough to fetch the whole checkpoint at the raw read's speed
  and to start a kernel and import torch, which the server does while a resume waits (a wait for
  a GPU lasts minutes; on two cores with torch importing in 2.1 s, 3 s had the resume wait for
  the kernel's imports, 1.6-1.7 s after the wait where a longer one left 0.5-0.7 s); timed from the
  server's first resources check that found nothing lacking to the next cell's end;
- **raw**: a kernel is started, imports torch, then reads the same objects (the manifest and every
  blob the checkpoint names) in parallel: 8 threads on a folder, one ``fs.cat`` of them all on S3
  (the raw get of ``benchmarks/stores.py``), timed inside the kernel; then a next cell.

Rows per store, each a median of per-round ratios:

- ``8a``: cold, the by-hand ``%resume`` cell over the raw read (target 1.2); its note gives it
  over import torch + the read too, and the by-hand kernel start to next cell over raw's;
- ``8b``: after a wait, lack's end to next cell over a cold click to next cell (target 0.3);
- ``8c``: click to next cell over raw's kernel start + import torch + read + next cell (target
  1.0), saying whether the server fetched anything while the kernel started (the overlap).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import statistics
from collections.abc import Iterator
from typing import Any

import jupyter_pause
from benchmarks.stores import STARTERS, Place
from jupyter_pause.notebook import session_from_path
from jupyter_pause.session import lineage
from jupyter_pause.store import layout
from jupyter_pause.store.storage import PARALLELISM, Store

from . import shared
from .freshnode import NOTEBOOK, FreshNode, fresh_node
from .shared import Scratch

SESSION = session_from_path(NOTEBOOK)
CONTENDERS = ("by_hand", "click", "waited", "raw")

RAW_LOCAL = """\
import json, time, torch
from concurrent.futures import ThreadPoolExecutor
_paths = json.loads({paths!r})
def _whole(path):
    with open(path, "rb") as f:
        return len(f.read())
_t = time.perf_counter()
with ThreadPoolExecutor({threads}) as _pool:
    _n = sum(_pool.map(_whole, _paths))
print(json.dumps({{"seconds": time.perf_counter() - _t, "bytes": _n}}))
"""

RAW_REMOTE = """\
import json, time, torch, fsspec
_fs = fsspec.filesystem({protocol!r}, **json.loads({options!r}))
_paths = json.loads({paths!r})
_t = time.perf_counter()
_n = sum(len(data) for data in _fs.cat(_paths).values())
print(json.dumps({{"seconds": time.perf_counter() - _t, "bytes": _n}}))
"""


@contextlib.contextmanager
def storage_options(options: dict[str, Any]) -> Iterator[None]:
    """This process's store options (``JUPYTER_PAUSE_STORAGE_OPTIONS``) while the block runs."""
    name = "JUPYTER_PAUSE_STORAGE_OPTIONS"
    before = os.environ.get(name)
    os.environ[name] = json.dumps(options)
    try:
        yield
    finally:
        os.environ.pop(name) if before is None else os.environ.__setitem__(name, before)


def pause_session(place: Place, ns: dict[str, Any]) -> tuple[list[str], int]:
    """Pause ``ns`` into ``place`` as the notebook's session; the paths of the objects a resume
    reads (its manifest, every blob) and their bytes."""
    lineage.forget()
    with storage_options(place.options):
        manifest = jupyter_pause.checkpoint(store=place.url, session=SESSION, namespace=ns).manifest
    store = Store(place.url, place.options)
    keys = [layout.manifest_key(SESSION, manifest.id), *manifest.blob_keys(manifest.blobs)]
    sizes = store.sizes(keys)
    return [store.path(key) for key in keys], sum(sizes[key] or 0 for key in keys)


def raw_cell(place: Place, paths: list[str]) -> str:
    """The raw contender's cell: import torch, then read ``paths`` in parallel, timed."""
    if place.store().local:
        return RAW_LOCAL.format(paths=json.dumps(paths), threads=PARALLELISM)
    protocol = place.url.partition("://")[0]
    return RAW_REMOTE.format(protocol=protocol, options=json.dumps(place.options), paths=json.dumps(paths))


class Contenders:
    """The four runs of a round on one node (see the module's docstring)."""

    def __init__(self, node: FreshNode, place: Place, paths: list[str], size: int) -> None:
        self.node, self.size = node, size
        self.raw = raw_cell(place, paths)
        where = f"--store {shlex.quote(place.url)} --session {SESSION}"
        self.by_hand_cell = f"%load_ext jupyter_pause\n%resume {where}"
        self.cold = shared.drop_page_cache()
        self.wait = 0.0

    def run(self, which: str) -> dict[str, Any]:
        """One run of ``which``, on a node emptied (and a page cache dropped) first."""
        self.node.forget()
        if self.cold:
            shared.drop_page_cache()
        if which == "raw":
            out = self.node.kernel_cells(NOTEBOOK, [self.raw, "1 + 1"])
            read = json.loads(out["outputs"][0].strip().splitlines()[-1])
            if read["bytes"] != self.size:
                raise RuntimeError(f"the raw read got {read['bytes']} bytes of {self.size}")
            cell = out["cells"][0]  # import torch (and the reader's client), then the read
            return {"total": out["total"], "read": read["seconds"], "torch_read": cell, "kernel_ready": out["ready"]}
        if which == "by_hand":
            out = self.node.kernel_cells(NOTEBOOK, [self.by_hand_cell, "1 + 1"])
            if "verdict: restored" not in out["outputs"][0]:
                raise RuntimeError(f"%resume did not restore the session:\n{out['outputs'][0]}")
            return {"total": out["total"], "resume": out["cells"][0], "kernel_ready": out["ready"]}
        return self.node.click_resume(self.wait if which == "waited" else 0.0)


def one_round(contenders: Contenders, i: int, sequence: list[tuple[str, ...]], store: str) -> dict[str, Any]:
    """Round ``i``: each contender once, in this round's order; the round's ratios."""
    pair: dict[str, Any] = {"order": list(sequence[i])}
    for which in sequence[i]:
        pair[which] = contenders.run(which)
        shared.settle()
    by_hand, click, waited, raw = (pair[k] for k in CONTENDERS)
    pair["ratio_cold"] = by_hand["resume"] / raw["read"]
    pair["ratio_cold_torch"] = by_hand["resume"] / raw["torch_read"]
    pair["ratio_cold_next_cell"] = by_hand["total"] / raw["total"]
    pair["ratio_after_wait"] = waited["after_wait"] / click["total"]
    pair["ratio_after_wait_raw"] = waited["after_wait"] / raw["total"]
    pair["ratio_click"] = click["total"] / raw["total"]
    shared.log(
        f"  {store} round {i + 1} ({'-'.join(sequence[i])}): %resume {by_hand['resume']:.2f} s vs raw read "
        f"{raw['read']:.2f} s ({pair['ratio_cold']:.2f}x); after a wait {waited['after_wait']:.2f} s vs cold "
        f"click {click['total']:.2f} s ({pair['ratio_after_wait']:.2f}x); click to next cell {click['total']:.2f} s "
        f"vs kernel + torch + read {raw['total']:.2f} s ({pair['ratio_click']:.2f}x)"
    )
    return pair


def rows(store: str, runs: list[dict[str, Any]], contenders: Contenders, objects: int) -> dict[str, dict[str, Any]]:
    """The store's rows 8a, 8b and 8c."""

    def median(key: str, field: str | None = None) -> float:
        return statistics.median(p[key] if field is None else p[key][field] for p in runs)

    def ratio(key: str) -> dict[str, float]:
        return shared.summarise([p[key] for p in runs])

    cache = "page cache dropped before each run" if contenders.cold else "page cache NOT dropped: warm reads"
    size = f"{contenders.size / 1e9:.2f} GB in {objects} objects; empty HOME, caches, TMPDIR; {cache}"
    fetched = {k: max(p[k]["prefetched"] for p in runs) for k in ("click", "waited")}
    common = {"size": size, "n": len(runs), "store": store}
    return {
        f"8a-{store}": {
            **common,
            "name": f"8a new node, {store}: cold %resume vs raw read",
            "ours_s": median("by_hand", "resume"),
            "base_s": median("raw", "read"),
            "ratio": ratio("ratio_cold"),
            "figure": f"{median('ratio_cold_torch'):.2f}x import torch + read; kernel start to next cell "
            f"{median('ratio_cold_next_cell'):.2f}x kernel + torch + read",
            "pairs": runs,
        },
        f"8b-{store}": {
            **common,
            "name": f"8b new node, {store}: after a wait vs cold Resume",
            "ours_s": median("waited", "after_wait"),
            "base_s": median("click", "total"),
            "ratio": ratio("ratio_after_wait"),
            "figure": f"{median('ratio_after_wait_raw'):.2f}x kernel + torch + read; waited {contenders.wait:.1f} s, "
            f"{fetched['waited'] / 1e6:.0f} MB fetched meanwhile",
        },
        f"8c-{store}": {
            **common,
            "name": f"8c new node, {store}: Resume->next cell vs kernel+torch+read",
            "ours_s": median("click", "total"),
            "base_s": median("raw", "total"),
            "ratio": ratio("ratio_click"),
            "figure": f"kernel start overlapped: {fetched['click'] / 1e6:.0f} MB fetched ahead of the kernel"
            if fetched["click"]
            else "read in place: nothing is copied ahead (a local folder's files are read into the page cache)",
        },
    }


def bench_store(place: Place, ns: dict[str, Any], scratch: Scratch, cfg: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Pause ``ns`` into ``place``, then the rounds on a new node; the store's rows."""
    paths, size = pause_session(place, ns)
    shared.log(f"  {place.name}: paused {size / 1e9:.2f} GB in {len(paths)} objects into {place.url}")
    with fresh_node(scratch.fresh(f"c8-{place.name}-node"), place.url, place.options) as node:
        contenders = Contenders(node, place, paths, size)
        warm = contenders.run("raw")  # untimed, as the click after it: first starts of this server
        contenders.run("click")
        contenders.wait = max(cfg["new_node_wait_s"], 2 * warm["read"], warm["total"])
        shared.log(f"  {place.name}: raw read {warm['read']:.2f} s; a wait for resources lasts {contenders.wait:.1f} s")
        sequence = shared.orders(cfg["pairs"]["8"], CONTENDERS)
        runs = shared.pair_loop("8", cfg, lambda i: one_round(contenders, i, sequence, place.name))
    return rows(place.name, runs, contenders, len(paths))


def case_new_node(scratch: Scratch, cfg: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Case 8 on each store of ``new_node_stores`` (a store that cannot start is skipped, and said so)."""
    model, opt, _ = shared.build_model({"layers": cfg["layers"], "state_bytes": cfg["new_node_bytes"]})
    ns = {"model": model, "opt": opt}
    results: dict[str, dict[str, Any]] = {}
    for name in [s.strip() for s in cfg["new_node_stores"].split(",") if s.strip()]:
        try:
            place = STARTERS[name](scratch.fresh(f"c8-{name}"))
        except Exception as e:  # S3 where SeaweedFS is not installed: named, the other store still runs
            shared.log(f"  case 8 on {name}: not measured ({type(e).__name__}: {e})")
            continue
        try:
            results.update(bench_store(place, ns, scratch, cfg))
        finally:
            place.stop()
    return results

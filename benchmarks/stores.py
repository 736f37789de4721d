#!/usr/bin/env python
"""Checkpoint and resume throughput per object store, against a raw put and get of the same bytes.

    .venv/bin/python benchmarks/stores.py [--stores local,s3,gcs,azure] [--gb 2] [--pairs 3] [--json FILE]

The state is a model of bias-free ``nn.Linear`` layers and its AdamW optimizer after one step,
``--gb`` GB in all (the parameters and the two moments of each). Each store is started here on
127.0.0.1 and stopped afterwards: a local folder, SeaweedFS for S3 (``tests/support/s3_server.py``), the
GCS emulator and Azurite (``tests/support/emulators.py``; each is skipped, and said so, where it is not
installed).

Per store, each pair times, side by side and in alternating order:

- **checkpoint**: ``jupyter_pause.checkpoint`` of ``{"model", "opt"}`` into a fresh store, against
  a **raw put** of the same tensor bytes, one object per tensor, through the same fsspec filesystem
  the store uses: ``fs.pipe`` of them all at once, which sends the objects, and the parts of each,
  concurrently (a local folder: one file per tensor from 8 threads, each fsynced, as the store does);
  the clients take ``bytes``, so the tensors are copied to bytes once, before any pair;
- **resume**: ``jupyter_pause.resume`` of that checkpoint into an empty namespace, against a
  **raw get** of the same objects (``fs.cat`` of them all at once).

The figure is the median over pairs of ours / raw, with the range. The **peak extra host
memory** of a checkpoint and a resume (the highest resident size sampled every 5 ms while it
runs, less the size when it starts) is given as a fraction of the state's bytes: a resume must
hold the state it brings back (about 1.0), a checkpoint nothing more than a few parts in flight.
Objects written by a run are removed before the next, outside the timed region. Each store's
pairs follow one untimed pair, so that memory the process touches for the first time (slow in a
VM) is not charged to whichever contender comes first.

Results: stdout and benchmarks/results/stores.json.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:  # run from a checkout even where the package is not installed
    sys.path.insert(0, str(HERE.parent))

import psutil  # noqa: E402
import torch  # noqa: E402

import jupyter_pause  # noqa: E402
from benchmarks.cases.shared import as_new_kernel, build_model  # noqa: E402  (the model benchmarks/run.py measures)
from jupyter_pause.session import lineage  # noqa: E402
from jupyter_pause.store.storage import PARALLELISM, Store  # noqa: E402

GB = 1e9
STORES = ("local", "s3", "gcs", "azure")
#: Resident-size samples per second while a run is measured.
SAMPLE_EVERY = 0.005
#: A checkpoint slower than this many times the raw put of its bytes is worth a look.
TARGET = 1.1


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# -- the state ---------------------------------------------------------------------------------------


def build_state(state_bytes: float, layers: int = 16) -> dict[str, Any]:
    """The paired benchmark's model and AdamW after one step (``benchmarks/cases/shared.py``), as a namespace."""
    model, opt, _ = build_model({"layers": layers, "state_bytes": state_bytes})
    return {"model": model, "opt": opt}


def tensor_bytes(state: dict[str, Any]) -> list[memoryview]:
    """The bytes of every tensor of the state, as views (no copy)."""
    tensors = list(state["model"].parameters())
    for entry in state["opt"].state.values():
        tensors += [v for v in entry.values() if isinstance(v, torch.Tensor) and v.numel() > 1]
    return [memoryview(t.detach().reshape(-1).view(torch.uint8).numpy()) for t in tensors]


# -- the stores --------------------------------------------------------------------------------------


@dataclass
class Place:
    """A running store: its URL, storage options, and how to stop it."""

    name: str
    url: str
    options: dict[str, Any]
    stop: Callable[[], None]

    def store(self) -> Store:
        return Store(self.url, self.options)


def _local(base: Path) -> Place:
    root = Path(tempfile.mkdtemp(prefix="pause-stores-local-", dir=base))
    return Place("local", str(root), {}, lambda: _rmtree(root))


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def _s3(base: Path) -> Place:
    from tests.support.s3_server import start_server

    server = start_server()
    options = {"key": server.key, "secret": server.secret, "endpoint_url": server.endpoint}

    def stop() -> None:
        server.stop()
        _rmtree(server.directory)

    return Place("s3", f"s3://{server.bucket}/bench", options, stop)


def _gcs(base: Path) -> Place:
    from tests.support import emulators
    from tests.support.ports import free_port

    os.environ[emulators.GCSFS_GRPC_PROBE] = "false"  # before gcsfs is imported
    import gcsfs  # noqa: F401  (fails here, with its name, where it is not installed)

    port = free_port()
    directory = Path(tempfile.mkdtemp(prefix="pause-stores-gcs-", dir=base))
    command = [sys.executable, "-m", "gcp_storage_emulator", "start", f"--host={emulators.HOST}", f"--port={port}"]
    # On disk (the emulator's default, under its working folder): the state would not fit twice in memory.
    command.append(f"--default-bucket={emulators.BUCKET}")
    emulator = emulators.start("gcp-storage-emulator", command, port, directory)
    return Place("gcs", f"gs://{emulators.BUCKET}/bench", emulators.gcs_options(emulator), emulator.stop)


def _azure(base: Path) -> Place:
    import adlfs

    from tests.support import emulators
    from tests.support.ports import free_port

    port = free_port()
    directory = Path(tempfile.mkdtemp(prefix="pause-stores-azure-", dir=base))
    command = [
        emulators.azurite_binary(),
        *("--blobHost", emulators.HOST, "--blobPort", str(port), "--location", str(directory / "data")),
    ]
    emulator = emulators.start("azurite", [*command, "--silent", "--skipApiVersionCheck"], port, directory)
    options = {"connection_string": emulators.azurite_connection_string(emulator)}
    adlfs.AzureBlobFileSystem(**options, skip_instance_cache=True).mkdir(emulators.BUCKET)
    return Place("azure", f"az://{emulators.BUCKET}/bench", options, emulator.stop)


STARTERS: dict[str, Callable[[Path], Place]] = {"local": _local, "s3": _s3, "gcs": _gcs, "azure": _azure}


# -- measuring ---------------------------------------------------------------------------------------


class PeakMemory:
    """The highest resident size of this process while the block runs, less its size at the start."""

    def __init__(self) -> None:
        self._process = psutil.Process()
        self._stop = threading.Event()
        self.start = self.peak = 0

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY):
            self.peak = max(self.peak, self._process.memory_info().rss)

    @contextlib.contextmanager
    def watch(self) -> Iterator[PeakMemory]:
        self.start = self.peak = self._process.memory_info().rss
        sampler = threading.Thread(target=self._sample, daemon=True)
        sampler.start()
        try:
            yield self
        finally:
            self._stop.set()
            sampler.join()
            self.peak = max(self.peak, self._process.memory_info().rss)

    @property
    def extra(self) -> int:
        return self.peak - self.start


def timed(fn: Callable[[], Any]) -> tuple[float, int, Any]:
    """Seconds, peak extra resident bytes and result of ``fn()``."""
    gc.collect()
    with PeakMemory().watch() as memory:
        t0 = time.perf_counter()
        out = fn()
        seconds = time.perf_counter() - t0
    return seconds, memory.extra, out


def raw_put(place: Place, prefix: str, views: list[Any]) -> list[str]:
    """Every buffer as its own object under ``prefix``, all at once; the paths written."""
    store = place.store()
    paths = [store.path(f"{prefix}/{i:04d}") for i in range(len(views))]
    if store.local:

        def one(path: str, view: memoryview) -> None:
            with open(path, "wb") as f:
                f.write(view)
                f.flush()
                os.fsync(f.fileno())

        os.makedirs(store.path(prefix), exist_ok=True)
        with ThreadPoolExecutor(PARALLELISM) as pool:
            list(pool.map(one, paths, views))
    else:
        store.fs.pipe(dict(zip(paths, views, strict=True)))
    return paths


def raw_get(place: Place, paths: list[str]) -> int:
    store = place.store()
    if store.local:

        def one(path: str) -> int:
            with open(path, "rb") as f:
                return len(f.read())

        with ThreadPoolExecutor(PARALLELISM) as pool:
            return sum(pool.map(one, paths))
    return sum(len(data) for data in store.fs.cat(paths).values())


def remove(place: Place, prefix: str) -> None:
    store = place.store()
    path = store.path(prefix)
    with contextlib.suppress(FileNotFoundError):
        store.fs.rm(path, recursive=True)
    gc.collect()


def ratio_range(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def one_pair(place: Place, state: dict[str, Any], views: list[Any], size: int, i: int) -> dict[str, Any]:
    """Checkpoint vs raw put, then resume vs raw get, in the order of pair ``i``; objects removed after."""
    run_id = uuid.uuid4().hex[:8]
    ours, raw = f"ours-{run_id}", f"raw-{run_id}"
    url = f"{place.url.rstrip('/')}/{ours}"
    paths: list[str] = []
    restored: dict[str, Any] = {}

    def checkpoint() -> None:
        as_new_kernel()  # a first checkpoint, as a new kernel takes it: every byte hashed
        jupyter_pause.checkpoint(store=url, session="bench", namespace=state)

    def put() -> None:
        paths.extend(raw_put(place, raw, views))

    def resume() -> None:
        lineage.forget()
        jupyter_pause.resume(store=url, session="bench", namespace=restored)

    def get() -> None:
        got = raw_get(place, paths)
        assert got == size, f"raw get read {got} bytes of {size}"

    pair: dict[str, Any] = {}
    for order in ([("checkpoint", checkpoint), ("put", put)], [("resume", resume), ("get", get)]):
        for name, fn in order if i % 2 == 0 else order[::-1]:
            seconds, extra, _ = timed(fn)
            pair[name] = {"seconds": seconds, "extra_bytes": extra}
    back = next(iter(restored["model"].parameters()))
    assert torch.equal(back, next(iter(state["model"].parameters()))), "the resumed parameters differ"
    restored.clear()
    remove(place, ours)
    remove(place, raw)
    pair["checkpoint_ratio"] = pair["checkpoint"]["seconds"] / pair["put"]["seconds"]
    pair["resume_ratio"] = pair["resume"]["seconds"] / pair["get"]["seconds"]
    return pair


def bench_store(place: Place, state: dict[str, Any], views: list[memoryview], pairs: int) -> dict[str, Any]:
    size = sum(len(v) for v in views)
    payload: list[Any] = list(views)
    if not place.store().local:
        # fsspec's object store clients take bytes, not views: copied once, before anything is timed.
        payload = [bytes(v) for v in views]
    os.environ["JUPYTER_PAUSE_STORAGE_OPTIONS"] = json.dumps(place.options)
    # One pair untimed first: the first touch of memory a process has never used costs far more
    # than the copy itself in some VMs (2.4 s for a fresh GiB on one here, 0.08 s after).
    one_pair(place, state, payload, size, 0)
    runs = []
    for i in range(pairs):
        pair = one_pair(place, state, payload, size, i)
        log(
            f"  {place.name} pair {i + 1}: checkpoint {pair['checkpoint']['seconds']:.2f} s vs put "
            f"{pair['put']['seconds']:.2f} s ({pair['checkpoint_ratio']:.2f}x); resume "
            f"{pair['resume']['seconds']:.2f} s vs get {pair['get']['seconds']:.2f} s ({pair['resume_ratio']:.2f}x)"
        )
        runs.append(pair)
    return {
        "store": place.name,
        "bytes": size,
        "checkpoint_ratio": ratio_range([p["checkpoint_ratio"] for p in runs]),
        "resume_ratio": ratio_range([p["resume_ratio"] for p in runs]),
        "checkpoint_s": statistics.median(p["checkpoint"]["seconds"] for p in runs),
        "put_s": statistics.median(p["put"]["seconds"] for p in runs),
        "resume_s": statistics.median(p["resume"]["seconds"] for p in runs),
        "get_s": statistics.median(p["get"]["seconds"] for p in runs),
        "checkpoint_memory": max(p["checkpoint"]["extra_bytes"] for p in runs) / size,
        "resume_memory": max(p["resume"]["extra_bytes"] for p in runs) / size,
        "pairs": runs,
    }


def print_table(results: list[dict[str, Any]]) -> None:
    print()
    print(
        f"{'store':<7} {'GB':>5} {'checkpoint/put':>22} {'resume/get':>22} {'ckpt s':>7} {'put s':>7} "
        f"{'resume s':>8} {'get s':>7} {'mem ckpt':>8} {'mem resume':>10}"
    )
    for r in results:

        def fmt(x: dict[str, float]) -> str:
            return f"{x['median']:.2f} ({x['min']:.2f}-{x['max']:.2f})"

        print(
            f"{r['store']:<7} {r['bytes'] / GB:>5.2f} {fmt(r['checkpoint_ratio']):>22} {fmt(r['resume_ratio']):>22} "
            f"{r['checkpoint_s']:>7.2f} {r['put_s']:>7.2f} {r['resume_s']:>8.2f} {r['get_s']:>7.2f} "
            f"{r['checkpoint_memory']:>8.2f} {r['resume_memory']:>10.2f}"
        )
    slow = [r["store"] for r in results if r["checkpoint_ratio"]["median"] > TARGET]
    if slow:
        print(f"checkpoint slower than {TARGET}x the raw put on: {', '.join(slow)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", default=",".join(STORES), help=f"comma-separated, of {', '.join(STORES)}")
    parser.add_argument("--gb", type=float, default=2.0, help="state size in GB (default 2)")
    parser.add_argument("--pairs", type=int, default=3, help="pairs per store (default 3)")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()), help="where data goes (deleted after)")
    parser.add_argument("--json", type=Path, default=HERE / "results" / "stores.json")
    args = parser.parse_args(argv)
    names = [s.strip() for s in args.stores.split(",") if s.strip()]
    unknown = sorted(set(names) - set(STORES))
    if unknown:
        parser.error(f"unknown store {', '.join(unknown)}: choose among {', '.join(STORES)}")
    if args.pairs < 1 or args.gb <= 0:
        parser.error("--pairs must be at least 1 and --gb above 0")

    log(f"building a {args.gb:g} GB model + AdamW state")
    state = build_state(args.gb * GB)
    views = tensor_bytes(state)
    results, skipped = [], {}
    for name in names:
        try:
            place = STARTERS[name](args.dir)
        except BaseException as e:  # an emulator that is not installed: named, the rest still run
            if isinstance(e, KeyboardInterrupt):
                raise
            skipped[name] = f"{type(e).__name__}: {e}"
            log(f"{name}: not measured ({skipped[name]})")
            continue
        try:
            log(f"{name}: {place.url}")
            results.append(bench_store(place, state, views, args.pairs))
        finally:
            place.stop()
    print_table(results)
    for name, why in skipped.items():
        print(f"{name}: not measured: {why}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    meta = {"gb": args.gb, "pairs": args.pairs, "machine": platform.platform(), "cpus": os.cpu_count()}
    args.json.write_text(json.dumps({"config": meta, "results": results, "skipped": skipped}, indent=1))
    log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""A LoRA-style session on a base model loaded from a model file: what a pause moves.

    .venv/bin/python benchmarks/models.py [--stores local,s3] [--mb 2048] [--pairs 3] [--json FILE]

The base model is a Llama of about ``--mb`` MB (float32), saved with ``save_pretrained`` and loaded
back with ``from_pretrained``, frozen; a small adapter (rank 8 down and up projections per layer)
and its AdamW optimizer take one training step. Per store (a local folder; SeaweedFS for S3,
``tests/s3_server.py``), each pair times, beside a **raw put** of the full state's tensor bytes
(base, adapter and optimizer, one object per tensor, as ``benchmarks/stores.py`` puts them),
in alternating order:

- **first**: the first checkpoint after the model is loaded (it references the model file, which
  it uploads into the pool and waits for);
- **pause**: after one more training step, a checkpoint once the background upload has finished;
- **second session**: another session's first checkpoint with the same base model (a new process
  as far as jupyter-pause knows: the file is indexed again, found in the store, not uploaded).

For each: seconds, bytes the store grew by, and the ratio to the raw put's seconds. Then a new
Python process resumes the first session and must hold the same bytes (bit-exact).
Targets: a pause writes at most 2% of the model's bytes and takes at most 0.1x the raw put on S3;
the second session grows the store by at most 5% of the model.

Results: stdout and benchmarks/results/models.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
for path in (HERE.parent, HERE):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import torch  # noqa: E402
import transformers  # noqa: E402
from stores import Place, _local, _s3, raw_put, remove  # noqa: E402

import jupyter_pause  # noqa: E402
from jupyter_pause.config import PauseConfig  # noqa: E402
from jupyter_pause.store import modelfiles  # noqa: E402
from tests.support.processes import another_process  # noqa: E402

STORES = {"local": _local, "s3": _s3}
RANK = 8


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def save_base(folder: Path, mb: float) -> None:
    """A Llama of about ``mb`` MB of float32 weights, saved as a safetensors model file."""
    hidden, inter, vocab = 512, 1376, 4000
    per_layer = 4 * hidden * hidden + 3 * hidden * inter
    layers = max(1, round((mb * 1e6 / 4 - 2 * vocab * hidden) / per_layer))
    config = transformers.LlamaConfig(
        hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers, num_attention_heads=8, vocab_size=vocab
    )
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(folder)


def session_state(folder: Path) -> dict[str, Any]:
    """The base model loaded from its file and frozen, an adapter and its optimizer after one step."""
    base = transformers.AutoModelForCausalLM.from_pretrained(folder).eval().requires_grad_(False)
    hidden, layers = base.config.hidden_size, base.config.num_hidden_layers
    torch.manual_seed(1)
    adapter = torch.nn.ModuleList(
        torch.nn.Sequential(torch.nn.Linear(hidden, RANK, bias=False), torch.nn.Linear(RANK, hidden, bias=False))
        for _ in range(layers)
    )
    opt = torch.optim.AdamW(adapter.parameters(), lr=1e-3)
    state = {"base": base, "adapter": adapter, "opt": opt}
    train_step(state)
    return state


def train_step(state: dict[str, Any]) -> None:
    x = torch.randn(4, state["base"].config.hidden_size)
    loss = sum(layer(x).pow(2).mean() for layer in state["adapter"])
    state["opt"].zero_grad()
    loss.backward()
    state["opt"].step()


def views(state: dict[str, Any]) -> list[bytes]:
    """The full state's tensor bytes, as a raw put sends them."""
    tensors = list(state["base"].state_dict().values()) + list(state["adapter"].state_dict().values())
    tensors += [t for s in state["opt"].state.values() for t in s.values() if torch.is_tensor(t) and t.dim()]
    return [t.detach().contiguous().view(torch.uint8).reshape(-1).numpy().tobytes() for t in tensors]


def grown(place: Place, before: int) -> int:
    return sum(e.size for e in place.store().list("").values()) - before


def checkpoint(place: Place, session: str, state: dict[str, Any]) -> tuple[float, int, Any]:
    before = grown(place, 0)
    t0 = time.perf_counter()
    result = jupyter_pause.checkpoint(
        store=place.url, session=session, namespace=dict(state), config=PauseConfig(storage_options=place.options)
    )
    return time.perf_counter() - t0, grown(place, before), result.manifest


def raw(place: Place, data: list[bytes], i: int) -> float:
    t0 = time.perf_counter()
    raw_put(place, f"raw-{i}", data)
    seconds = time.perf_counter() - t0
    remove(place, f"raw-{i}")
    return seconds


def one_pair(place: Place, folder: Path, data: list[bytes], i: int) -> dict[str, Any]:
    """First checkpoint, pause after the upload, second session: each beside a raw put, on an
    empty store (what an earlier pair wrote is removed first, outside the timed region)."""
    store = place.store()
    store.delete(list(store.list("")))
    another_process()
    state = session_state(folder)
    out: dict[str, Any] = {}
    for step in ("first", "pause", "second"):
        if step == "pause":
            train_step(state)
        if step == "second":
            another_process()
            state = session_state(folder)
        session = f"lora-{i}" if step != "second" else f"lora-{i}-b"
        raw_first = (i + len(out)) % 2 == 0
        raw_s = raw(place, data, i) if raw_first else 0.0
        seconds, grew, manifest = checkpoint(place, session, state)
        raw_s = raw_s or raw(place, data, i)
        out[step] = {"seconds": seconds, "grew": grew, "raw_seconds": raw_s, "ratio": seconds / raw_s}
        out[step]["referenced"] = manifest.stats.get("bytes_referenced", 0)
        log(f"  {place.name} pair {i} {step}: {seconds:.2f} s, grew {grew / 1e6:.1f} MB, raw {raw_s:.2f} s")
    return out


_RESUME = """
import ast, hashlib, sys, torch, jupyter_pause
from jupyter_pause.config import PauseConfig
ns = {}
config = PauseConfig(storage_options=ast.literal_eval(sys.argv[3]))
jupyter_pause.resume(store=sys.argv[1], session=sys.argv[2], namespace=ns, config=config)
h = hashlib.sha256()
for name in ("base", "adapter"):
    for t in ns[name].state_dict().values():
        h.update(t.contiguous().view(torch.uint8).reshape(-1).numpy().tobytes())
print(h.hexdigest())
"""


def digest(state: dict[str, Any]) -> str:
    h = hashlib.sha256()
    for name in ("base", "adapter"):
        for t in state[name].state_dict().values():
            h.update(t.contiguous().view(torch.uint8).reshape(-1).numpy().tobytes())
    return h.hexdigest()


def bit_exact(place: Place, folder: Path) -> bool:
    """A new process resumes a fresh session's checkpoint: the same bytes come back."""
    another_process()
    state = session_state(folder)
    checkpoint(place, "exact", state)
    done = subprocess.run(
        [sys.executable, "-c", _RESUME, place.url, "exact", repr(place.options)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(HERE.parent)},
        timeout=600,
    )
    if done.returncode != 0:
        log(done.stderr[-2000:])
        return False
    return done.stdout.strip().splitlines()[-1] == digest(state)


def bench_store(name: str, base: Path, folder: Path, model_bytes: int, pairs: int) -> dict[str, Any]:
    place = STORES[name](base)
    try:
        data = views(session_state(folder))
        runs = [one_pair(place, folder, data, i) for i in range(pairs)]
        summary: dict[str, Any] = {"store": name, "model_bytes": model_bytes, "pairs": runs}
        for step in ("first", "pause", "second"):
            summary[step] = {
                "seconds": statistics.median(r[step]["seconds"] for r in runs),
                "grew_share_of_model": statistics.median(r[step]["grew"] for r in runs) / model_bytes,
                "ratio_to_raw_put": statistics.median(r[step]["ratio"] for r in runs),
            }
        summary["resume_bit_exact"] = bit_exact(place, folder)
        return summary
    finally:
        modelfiles.forget()
        place.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", default="local,s3", help="comma-separated, of local, s3")
    parser.add_argument("--mb", type=float, default=2048.0, help="base model size in MB (default 2048)")
    parser.add_argument("--pairs", type=int, default=3, help="pairs per store (default 3)")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()), help="where data goes (deleted after)")
    parser.add_argument("--json", type=Path, default=HERE / "results" / "models.json")
    args = parser.parse_args(argv)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        folder = Path(scratch) / "base"
        save_base(folder, args.mb)
        model_bytes = (folder / "model.safetensors").stat().st_size
        log(f"base model file: {model_bytes / 1e6:.0f} MB")
        results = [bench_store(s, Path(scratch), folder, model_bytes, args.pairs) for s in args.stores.split(",")]
    for r in results:
        print(f"{r['store']}: model {r['model_bytes'] / 1e6:.0f} MB, resume bit-exact: {r['resume_bit_exact']}")
        for step in ("first", "pause", "second"):
            s = r[step]
            print(
                f"  {step:7s} {s['seconds']:7.2f} s  grew {100 * s['grew_share_of_model']:6.2f}% of the model  "
                f"{s['ratio_to_raw_put']:.3f}x raw put"
            )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

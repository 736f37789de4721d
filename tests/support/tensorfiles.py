"""Small ``safetensors`` files written byte by byte, for tests of model files that need no torch."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path


def tiny_safetensors(path: Path, seed: int) -> Path:
    """A ``safetensors`` file at ``path`` of three byte tensors drawn from ``seed`` (the same
    layout for every seed, other bytes)."""
    tensors = {f"w{i}": hashlib.sha256(f"{seed}-{i}".encode()).digest() * (64 + 32 * i) for i in range(3)}
    header, at = {}, 0
    for name, data in tensors.items():
        header[name] = {"dtype": "U8", "shape": [len(data)], "data_offsets": [at, at + len(data)]}
        at += len(data)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(tensors.values()))
    return path


def tiny_llama(folder: Path, seed: int) -> dict[str, float]:
    """A tiny Llama saved with ``save_pretrained`` into ``folder`` (the same layout and size for
    every seed, other weights); the sum of each of its tensors."""
    import torch
    import transformers

    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64, vocab_size=300
    )
    model = transformers.LlamaForCausalLM(config)
    model.save_pretrained(folder)
    return {k: float(v.double().sum()) for k, v in model.state_dict().items()}


def hub_cached(folder: Path, hub: Path, repo: str = "org/tiny", data: bytes | None = None) -> tuple[Path, str]:
    """Put the model saved in ``folder`` into the Hugging Face cache at ``hub`` as ``repo``, laid out
    as the cache lays it out (its ``model.safetensors`` a blob named by its sha256, linked from a
    snapshot); ``data``: other bytes to store under that name instead. The snapshot folder (what
    ``from_pretrained`` loads) and the blob's name."""
    real = (folder / "model.safetensors").read_bytes()
    sha = hashlib.sha256(real).hexdigest()
    cached = hub / ("models--" + repo.replace("/", "--"))
    snapshot = cached / "snapshots" / ("a" * 40)
    (cached / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (cached / "blobs" / sha).write_bytes(real if data is None else data)
    (snapshot / "model.safetensors").symlink_to(Path("..", "..", "blobs", sha))
    (snapshot / "config.json").write_bytes((folder / "config.json").read_bytes())
    (cached / "refs").mkdir()
    (cached / "refs" / "main").write_text("a" * 40)
    return snapshot, sha

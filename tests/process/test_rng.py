"""jupyter_pause.process.rng: a checkpoint does not change what the session draws next; resume restores it."""

from __future__ import annotations

import random
from collections.abc import Iterator

import numpy as np
import pytest

from jupyter_pause.process import rng

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def keep_global_generators() -> Iterator[None]:
    """These tests reseed the global generators; give other tests back what they had."""
    state = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    yield
    random.setstate(state[0])
    np.random.set_state(state[1])
    torch.set_rng_state(state[2])


def seed(n: int = 1234) -> None:
    random.seed(n)
    np.random.seed(n)
    torch.manual_seed(n)


def draws() -> tuple:
    return (random.random(), random.randint(0, 10**9), float(np.random.rand()), torch.rand(3).tolist())


def test_capture_does_not_consume_draws() -> None:
    seed()
    expected = draws()
    seed()
    rng.capture()
    assert draws() == expected


def test_capture_covers_python_numpy_and_torch() -> None:
    assert {"python", "numpy", "torch"} <= set(rng.capture())


def test_restore_replays_the_draws_after_capture() -> None:
    seed()
    draws()
    state = rng.capture()
    expected = draws()
    for _ in range(5):
        draws()
    assert rng.restore(state) == []
    assert draws() == expected


def test_bytes_round_trip_restores_the_same_stream() -> None:
    seed(7)
    data = rng.to_bytes(rng.capture())
    expected = draws()
    seed(99)
    rng.restore(rng.from_bytes(bytearray(data)))
    assert draws() == expected


def test_cuda_state_for_missing_devices_is_noted_not_raised() -> None:
    if torch.cuda.is_available():
        pytest.skip("needs a process without CUDA devices")
    seed()
    state = rng.capture()
    state["cuda"] = [b"\x00" * 16, b"\x00" * 16]  # as saved on a node with two GPUs
    expected = draws()
    notes = rng.restore(state)
    assert len(notes) == 1
    assert "2 device(s) not restored" in notes[0] and "0 CUDA device(s) visible" in notes[0]
    assert draws() == expected  # the CPU generators were still restored

"""Which GPUs a process can use, as the ledger records them: the driver's list, narrowed by
CUDA_VISIBLE_DEVICES the way CUDA narrows it, without torch."""

from __future__ import annotations

import pytest

from jupyter_pause import gpus


@pytest.fixture
def node(tmp_path, monkeypatch: pytest.MonkeyPatch):
    """A node whose driver lists two H200s and an A100, in bus order."""
    for bus, model in [("0000:1b:00.0", "NVIDIA H200"), ("0000:2c:00.0", "NVIDIA H200"), ("0000:9d:00.0", "A100")]:
        (tmp_path / bus).mkdir()
        (tmp_path / bus / "information").write_text(f"Model: \t\t {model}\nIRQ:   \t\t 42\n")
    monkeypatch.setattr(gpus, "DRIVER", str(tmp_path))
    monkeypatch.delitem(__import__("sys").modules, "torch", raising=False)
    gpus.installed.cache_clear()
    yield
    gpus.installed.cache_clear()


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        (None, ("A100, NVIDIA H200", 3)),
        ("0,1", ("NVIDIA H200", 2)),
        ("2", ("A100", 1)),
        ("", (None, 0)),
        ("-1", (None, 0)),
        ("1,7,0", ("NVIDIA H200", 1)),  # CUDA stops at the first invalid index
        ("GPU-5f1c2d3e-0000-0000-0000-000000000000", ("NVIDIA H200", 1)),
    ],
)
def test_visible_follows_cuda_visible_devices(node, monkeypatch, visible, expected) -> None:
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert gpus.visible() == expected


def test_a_configured_count_wins(node, monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert gpus.visible(configured=4) == ("NVIDIA H200", 4)
    assert gpus.visible(configured=0) == (None, 0)


def test_no_driver_no_gpus(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(gpus, "DRIVER", str(tmp_path / "none"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi either
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    gpus.installed.cache_clear()
    try:
        assert gpus.visible() == (None, 0)
    finally:
        gpus.installed.cache_clear()

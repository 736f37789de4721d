"""benchmarks/gpu_check.py: its CPU mode runs every step the GPU check runs, so it cannot rot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_the_gpu_check_passes_in_cpu_mode(tmp_path):
    figures = tmp_path / "figures.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks/gpu_check.py"),
            "--device",
            "cpu",
            "--size-gb",
            "0.02",
            "--frozen-gb",
            "0.125",
            "--store",
            str(tmp_path / "store"),
            "--json",
            str(figures),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith("PASS")
    table = done.stdout.splitlines()
    assert [c.strip() for c in table[1].split("|")] == ["measure", "jupyter-pause", "beside it", "ratio", "note"]
    for row in ("--async checkpoint: kernel blocked", "in-loop periodic checkpoint: loop blocked", "frozen backbone"):
        assert any(line.startswith(row) for line in table), (row, done.stdout)
    out = json.loads(figures.read_text())
    assert out["verdict"] == "restored"  # resumed in a new process, told apart from this one
    assert out["bit_identical"] and out["optimizer_shares_parameters"] and out["map_location_cpu"]
    assert out["bytes"] > 15_000_000
    # a periodic checkpoint of a steps(..., every=2) training loop held it for a time, then committed
    assert out["in_loop_committed"] and out["in_loop_blocked_s"] > 0
    frozen = out["frozen"]  # CPU tensors take the device path here: fingerprinted, kept when unchanged
    assert frozen["kept_on_device"] == frozen["frozen_bytes"] > 100_000_000
    assert frozen["first_copied"] >= frozen["frozen_bytes"] and 0 < frozen["copied"] <= 3 * frozen["trainable_bytes"]
    assert frozen["only_trainable_copied"] and frozen["bit_identical"]
    # the restore test across matmul precisions and a bf16 model (on a CPU: the same path, no TF32)
    assert [p["case"] for p in out["precision"]] == ["fp32, TF32 off -> on", "fp32, TF32 on -> off", "bf16 weights"]
    assert all(p["verdict"] == "restored" and "model outputs" in p["said"] for p in out["precision"]), out["precision"]
    assert any(line.startswith("restore test, bf16 weights") for line in table)


def test_the_shell_wrapper_refuses_a_machine_without_a_gpu():
    import torch

    if torch.cuda.is_available():
        return
    done = subprocess.run(["bash", str(ROOT / "benchmarks/gpu_check.sh")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "run it on a GPU machine" in done.stderr

"""jupyter_pause.proof.hardware: what a forward pass ran on, and where a resume runs relative to it."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from jupyter_pause.proof import fingerprint, hardware
from tests.support.processes import OLDER_PROCESSOR

AVX512 = {"cpu": "Xeon", "cpu_capability": "AVX512", "torch": "2.13.0", "threads": 2}


def test_this_node_is_described_with_its_processor_kernels_threads_and_precision() -> None:
    found = hardware.describe()
    assert found["cpu"] and found["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert found["torch"] == torch.__version__ and found["threads"] == torch.get_num_threads()
    assert found["precision"]["float32_matmul_precision"] == torch.get_float32_matmul_precision()
    assert "gpus" not in found or torch.cuda.is_initialized()  # never starts CUDA to describe it
    assert fingerprint.environment("node")["hardware"]["cpu"] == found["cpu"]


def test_a_kernel_told_to_use_older_kernels_describes_itself_so() -> None:
    code = "import torch, json; from jupyter_pause.proof import hardware; print(json.dumps(hardware.describe()))"
    out = subprocess.run([sys.executable, "-c", code], env={**OLDER_PROCESSOR}, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert '"cpu_capability": "DEFAULT"' in out.stdout


@pytest.mark.parametrize(
    ("now", "said"),
    [
        (AVX512, "on the same processor"),
        ({**AVX512, "cpu_capability": "DEFAULT"}, "on another processor (AVX512 -> DEFAULT)"),
        ({**AVX512, "cpu": "EPYC"}, "on another processor (Xeon -> EPYC)"),
        ({**AVX512, "threads": 16}, "on the same processor, with 2 -> 16 threads"),
        ({**AVX512, "torch": "2.14.0"}, "on the same processor, with torch 2.13.0 -> 2.14.0"),
        (
            {**AVX512, "gpus": ["NVIDIA H100 (9.0)"]},
            "on the same processor and another GPU (none -> NVIDIA H100 (9.0))",
        ),
    ],
)
def test_where_a_resume_runs_is_said_relative_to_the_checkpoint(now, said) -> None:
    assert hardware.where(AVX512, now) == said


def test_gpus_and_cuda_libraries_are_compared() -> None:
    a100 = {**AVX512, "gpus": ["NVIDIA A100 (8.0)"], "cuda": "12.8", "cudnn": 91002, "cublas": "12.8.4"}
    h100 = {**a100, "gpus": ["NVIDIA H100 (9.0)"], "cublas": "12.9.1"}
    assert hardware.where(a100, a100) == "on the same processor and the same GPU"
    assert hardware.where(a100, h100) == (
        "on the same processor and another GPU (NVIDIA A100 (8.0) -> NVIDIA H100 (9.0)), with cuBLAS 12.8.4 -> 12.9.1"
    )


def test_a_checkpoint_of_an_older_release_has_no_description() -> None:
    assert "older release" in hardware.where(None, AVX512)


@pytest.mark.parametrize(
    ("settings", "on_cuda", "mode"),
    [
        ({"float32_matmul_precision": "highest"}, False, "ieee"),
        ({"float32_matmul_precision": "high"}, False, "tf32"),
        ({"float32_matmul_precision": "medium"}, True, "bf16"),
        ({"float32_matmul_precision": "highest", "cudnn_tf32": True}, False, "ieee"),
        ({"float32_matmul_precision": "highest", "cudnn_tf32": True}, True, "tf32"),
        ({"float32_matmul_precision": "highest", "cuda_matmul_fp32": "tf32"}, True, "tf32"),
        (None, True, "ieee"),
    ],
)
def test_the_matmul_precision_follows_the_settings_and_the_device(settings, on_cuda, mode) -> None:
    assert hardware.matmul_mode(settings, on_cuda) == mode


def test_the_loosest_precision_wins() -> None:
    assert hardware.loosest("ieee", "tf32") == "tf32"
    assert hardware.loosest("bf16", "tf32", "ieee") == "bf16"
    assert hardware.loosest() == "ieee"


def test_environment_differences_name_a_processor_change_in_words() -> None:
    env = fingerprint.environment("n")
    moved = {**env, "hardware": {**env["hardware"], "cpu_capability": "SOMETHING-ELSE"}}
    notes = fingerprint.differences(moved, env)
    assert notes == [f"hardware: resumed on another processor (SOMETHING-ELSE -> {env['hardware']['cpu_capability']})"]
    assert fingerprint.differences(env, env) == []

"""benchmarks/run.py: every case runs end to end at toy sizes (6 and 8, which start kernels, as an
integration test), so the script and its case modules cannot rot."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]

TOY = {
    "dicts": 2_000,
    "array_bytes": 400_000,
    "arrays": 2,
    "state_bytes": 3_000_000,
    "layers": 3,
    "pairs": dict.fromkeys("123456789", 1),
    "budget_s": dict.fromkeys("123456789", 60),
    "frozen_bytes": 8 << 20,
    "frozen_layers": 2,
    "new_node_bytes": 3_000_000,
    "new_node_stores": "local",
    "new_node_wait_s": 0.5,
    "detect_bytes": 1 << 20,
}


@pytest.fixture
def bench(monkeypatch):
    """benchmarks/run.py as a module, at toy sizes, leaving the machine's page cache alone."""
    from benchmarks import run
    from benchmarks.cases import shared

    monkeypatch.setitem(shared.CONFIGS, "quick", TOY)
    monkeypatch.setattr(shared, "drop_page_cache", lambda: False)  # never the machine's page cache
    # collections and syncs only steady the timings; in a test process full of objects they are slow
    monkeypatch.setattr(shared, "settle", lambda: None)
    monkeypatch.setattr(shared, "gc", SimpleNamespace(collect=lambda: 0))
    return run


@pytest.mark.usefixtures("new_process")
def test_the_benchmark_cases_run_at_toy_sizes_and_report_every_ratio(bench, tmp_path, capsys):
    results = tmp_path / "latest.json"
    argv = ["--quick", "--only", "1,2,3,4,5", "--dir", str(tmp_path / "data"), "--json", str(results)]
    assert bench.main(argv) == 0
    report = json.loads(results.read_text())["results"]
    assert sorted(report) == ["1", "2a", "2b", "3", "3b", "4", "5"]
    assert all(r["n"] == 1 and r["ratio"]["median"] > 0 for r in report.values())
    table = capsys.readouterr().out
    assert all(r["name"] in table for r in report.values())


@pytest.mark.usefixtures("new_process")
def test_the_frozen_backbone_and_detection_cases_run_at_toy_sizes(bench, tmp_path):
    results = tmp_path / "latest.json"
    argv = ["--quick", "--only", "7,9", "--dir", str(tmp_path / "data"), "--json", str(results)]
    assert bench.main(argv) == 0
    report = json.loads(results.read_text())["results"]
    assert sorted(report) == ["7", "9"] and report["9"]["verdict"] == "info"
    periodic = report["7"]["pairs"][0]["second"]
    assert 0 < periodic["bytes_written"] < report["7"]["pairs"][0]["first"]["bytes_written"]


@pytest.mark.integration
@pytest.mark.usefixtures("new_process")
def test_the_kernel_cases_resume_in_new_kernels_beside_a_raw_read(bench, tmp_path):
    """Case 6, and case 8 on a local folder: each contender ran in a kernel of a fresh server, the
    click after a wait waited on the gated resources check, and each row says the overlap."""
    results = tmp_path / "latest.json"
    argv = ["--quick", "--only", "6,8", "--dir", str(tmp_path / "data"), "--json", str(results)]
    assert bench.main(argv) == 0
    report = json.loads(results.read_text())["results"]
    assert sorted(report) == ["6", "8a-local", "8b-local", "8c-local"]
    assert all(r["n"] == 1 and r["ratio"]["median"] > 0 for r in report.values())
    assert [r["target"] for r in report.values()] == [1.0, 1.2, 0.3, 1.0]
    (pair,) = report["8a-local"]["pairs"]
    assert sorted(pair["order"]) == ["by_hand", "click", "raw", "waited"]
    assert pair["raw"]["read"] > 0 and pair["by_hand"]["resume"] > 0
    waited = [detail for state, detail, _ in pair["waited"]["seen"] if state == "waiting"]
    assert any("stand-in for a busy GPU" in detail for detail in waited), pair["waited"]["seen"]
    assert pair["waited"]["seen"][-1][0] == "ready" and pair["click"]["seen"][-1][0] == "ready"
    moments = [at for _, _, at in pair["click"]["seen"]]  # seconds from the click, as polled
    assert moments == sorted(moments) and 0 < moments[0] and pair["click"]["total"] > 0
    assert 0 < pair["waited"]["after_wait"] < pair["waited"]["total"]
    assert report["8c-local"]["figure"].startswith("read in place")  # a local folder: nothing copied ahead


@pytest.mark.parametrize("script", ["loops.py", pytest.param("journal.py", marks=pytest.mark.integration)])
def test_side_benchmarks_run_at_toy_sizes(script, tmp_path):
    """benchmarks/loops.py and benchmarks/journal.py run end to end and write their figures."""
    import subprocess
    import sys

    toy_loop = "--period 0.2 --state-mb 8 --periods 1 --runs 1".split()  # one tiny training loop
    args = {
        "loops.py": ["--items", "2000", "--pairs", "1", *toy_loop],
        "journal.py": ["--quick", "--dir", str(tmp_path)],
    }
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args[script], "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text()), f"{script} wrote no figures"


@pytest.mark.integration
def test_the_store_benchmark_measures_each_store_it_starts(tmp_path):
    """benchmarks/stores.py starts each store, times both directions against raw, and stops them."""
    import subprocess
    import sys

    out = tmp_path / "stores.json"
    args = ["--stores", "local,s3,azure", "--gb", "0.01", "--pairs", "1", "--dir", str(tmp_path), "--json", str(out)]
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "stores.py"), *args], capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr
    figures = json.loads(out.read_text())
    assert [r["store"] for r in figures["results"]] == ["local", "s3", "azure"], figures["skipped"]
    for result in figures["results"]:
        assert result["checkpoint_ratio"]["median"] > 0 and result["resume_ratio"]["median"] > 0
        assert result["bytes"] > 0.009e9 and result["checkpoint_memory"] >= 0 and result["resume_memory"] >= 0


@pytest.mark.s3
@pytest.mark.integration
def test_the_model_file_benchmark_runs_at_a_tiny_size_and_resumes_bit_exact(tmp_path):
    """benchmarks/models.py: a LoRA-style session on a loaded model file, on a local folder and S3."""
    import subprocess
    import sys

    out = tmp_path / "models.json"
    args = ["--mb", "8", "--pairs", "1", "--dir", str(tmp_path), "--json", str(out)]
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "models.py"), *args], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())["results"]
    assert [r["store"] for r in results] == ["local", "s3"]
    for r in results:
        assert r["resume_bit_exact"], r
        assert r["pause"]["grew_share_of_model"] < 0.1 and r["second"]["grew_share_of_model"] < 0.1, r
        assert r["first"]["grew_share_of_model"] >= 1.0, r  # the model file went into the pool, once

"""How much memory this process can still take (store/memory.py): the node's, bounded by its
control group's limit, read from files laid out as Linux lays them out."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_pause.store import memory

GIB = 1 << 30


def _meminfo(tmp_path: Path, available_kib: int) -> str:
    path = tmp_path / "meminfo"
    path.write_text(f"MemTotal:       32000000 kB\nMemFree:         1000000 kB\nMemAvailable:   {available_kib} kB\n")
    return str(path)


def _cgroup(tmp_path: Path, line: str) -> str:
    path = tmp_path / "cgroup"
    path.write_text(line + "\n")
    return str(path)


def _group(folder: Path, files: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)


def test_without_a_limit_the_nodes_available_memory_is_what_is_left(tmp_path):
    root = tmp_path / "sys"
    _group(root / "pod", {"memory.max": "max\n", "memory.current": str(5 * GIB)})
    own = _cgroup(tmp_path, "0::/pod")
    assert memory.available(_meminfo(tmp_path, 8 * 1024 * 1024), root, own) == 8 * GIB


def test_a_version_2_limit_bounds_it_with_the_page_cache_counted_as_available(tmp_path):
    root = tmp_path / "sys"
    _group(root / "kubepods" / "pod", {"memory.max": str(4 * GIB), "memory.current": str(3 * GIB)})
    _group(root / "kubepods" / "pod", {"memory.stat": f"anon {2 * GIB}\ninactive_file {GIB}\nactive_file 0\n"})
    own = _cgroup(tmp_path, "0::/kubepods/pod")
    assert memory.available(_meminfo(tmp_path, 30 * 1024 * 1024), root, own) == 4 * GIB - 2 * GIB


def test_the_tightest_limit_above_the_process_counts(tmp_path):
    root = tmp_path / "sys"
    _group(root / "user", {"memory.max": str(3 * GIB), "memory.current": str(2 * GIB)})
    _group(root / "user" / "kernel", {"memory.max": "max\n", "memory.current": str(GIB)})
    own = _cgroup(tmp_path, "0::/user/kernel")
    assert memory.available(_meminfo(tmp_path, 30 * 1024 * 1024), root, own) == GIB


def test_a_version_1_memory_controller_is_read_too(tmp_path):
    root = tmp_path / "sys"
    folder = root / "memory" / "docker" / "abc"
    _group(folder, {"memory.limit_in_bytes": str(6 * GIB), "memory.usage_in_bytes": str(5 * GIB)})
    _group(folder, {"memory.stat": f"cache {GIB}\ntotal_inactive_file {GIB}\n"})
    _group(root / "memory", {"memory.limit_in_bytes": str(memory.NO_LIMIT)})  # the root: no limit
    own = _cgroup(tmp_path, "12:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n0::/")
    assert memory.available(_meminfo(tmp_path, 30 * 1024 * 1024), root, own) == 2 * GIB


def test_a_limit_above_what_the_node_has_leaves_the_nodes_figure(tmp_path):
    root = tmp_path / "sys"
    _group(root, {"memory.max": str(64 * GIB), "memory.current": str(GIB)})
    assert memory.available(_meminfo(tmp_path, 2 * 1024 * 1024), root, _cgroup(tmp_path, "0::/")) == 2 * GIB


def test_where_nothing_can_be_read_it_is_zero(tmp_path):
    missing = str(tmp_path / "missing")
    assert memory.available(missing, tmp_path / "no-sys", missing) == 0


@pytest.mark.skipif(not Path("/proc/meminfo").exists(), reason="Linux only")
def test_this_process_has_some():
    assert memory.available() > 0


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm here")
def test_each_user_has_a_shared_memory_folder_of_their_own_name():
    import os

    assert memory.shared_memory_folder() == f"/dev/shm/jupyter-pause-{os.getuid()}"

"""How much memory this process can still take: the node's, bounded by its container's limit.

``/proc/meminfo``'s ``MemAvailable`` is the node's: in a container (a Kubernetes pod, a Docker
container) the limit that matters is the control group's, and shared memory (``/dev/shm``) is
charged to it too. ``available`` takes the smaller of the two, counting the group's page cache
that can be dropped (``inactive_file``) as available, as the kernel's reclaim would.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Where the control groups are mounted (version 2 unified, or version 1's memory controller below it).
CGROUP_ROOT = Path("/sys/fs/cgroup")
#: A version 1 limit this large or larger means "no limit" (the kernel's page-rounded maximum).
NO_LIMIT = 1 << 60


def available(meminfo: str = "/proc/meminfo", cgroups: Path = CGROUP_ROOT, own: str = "/proc/self/cgroup") -> int:
    """Bytes of memory this process can still take, or 0 where unknown (not Linux)."""
    node = _meminfo_available(meminfo)
    group = _cgroup_available(cgroups, own)
    if node and group is not None:
        return min(node, group)
    return node if group is None else group


def _meminfo_available(path: str) -> int:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _cgroup_available(root: Path, own: str) -> int | None:
    """The room left under the tightest memory limit of this process's control group and those
    above it; None where no limit is set (or none can be read)."""
    rooms = [room for folder in _groups(root, own) if (room := _room(folder)) is not None]
    return min(rooms) if rooms else None


def _groups(root: Path, own: str) -> list[Path]:
    """This process's control group folders (version 2's, version 1's memory controller's), each
    with every folder above it."""
    try:
        with open(own) as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    found: list[Path] = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # version 2: one hierarchy
            base = root
        elif "memory" in controllers.split(","):  # version 1: the memory controller's own
            base = root / "memory"
        else:
            continue
        folder = base / path.lstrip("/")
        found.append(folder)
        found += [above for above in folder.parents if above == base or base in above.parents]
    return found


def _room(folder: Path) -> int | None:
    """Bytes left under ``folder``'s limit (its page cache counted as available); None without one."""
    limit = _number(folder / "memory.max") or _number(folder / "memory.limit_in_bytes")
    if limit is None or limit >= NO_LIMIT:
        return None
    used = _number(folder / "memory.current") or _number(folder / "memory.usage_in_bytes") or 0
    stats = _stats(folder / "memory.stat")
    reclaimable = stats.get("inactive_file") or stats.get("total_inactive_file", 0)  # version 2, version 1
    return max(0, limit - max(0, used - reclaimable))


def _number(path: Path) -> int | None:
    """The number in a control group file; None where it is missing or says ``max``."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _stats(path: Path) -> dict[str, int]:
    """The counters of a control group's ``memory.stat``, by name; empty where it cannot be read."""
    try:
        with open(path) as f:
            pairs = [line.split() for line in f]
    except OSError:
        return {}
    return {pair[0]: int(pair[1]) for pair in pairs if len(pair) == 2 and pair[1].isdigit()}


def shared_memory_folder() -> str:
    """This user's folder in the node's shared memory (``/dev/shm``), or "" where there is none."""
    if not os.path.isdir("/dev/shm") or not hasattr(os, "getuid"):
        return ""
    return f"/dev/shm/jupyter-pause-{os.getuid()}"

"""How much memory this process can still fill: what Linux reports available, within the
memory limit of its cgroup (a container sees the host's ``/proc/meminfo``).

Checked before allocating big arrays: where the kernel overcommits, numpy gets any allocation
and the machine thrashes, or the OOM killer ends the process, while the array is filled.
"""

from __future__ import annotations

from pathlib import Path

_NO_LIMIT = 1 << 60
"""cgroup v1 writes "no limit" as a number near 2**63."""
_CGROUP_FILES = {
    True: ("memory.max", "memory.current", "inactive_file"),  # cgroup v2
    False: ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"),  # v1
}
"""Per cgroup version: the limit, the usage, and the page cache in ``memory.stat`` that the
kernel drops before it fails an allocation."""


def available_bytes() -> int | None:
    """The least of MemAvailable and the memory cgroups' headroom; None where neither is
    known (not Linux)."""
    known = [size for size in (_mem_available(), *_cgroup_headrooms()) if size is not None]
    return min(known, default=None)


def size_text(size: int) -> str:
    """``size`` bytes for a message: GiB, or MiB below one GiB."""
    return f"{size / 2**30:,.1f} GiB" if size >= 2**30 else f"{size / 2**20:,.1f} MiB"


def _mem_available() -> int | None:
    kib = _fields(Path("/proc/meminfo")).get("MemAvailable")
    return None if kib is None else kib * 1024


def _cgroup_headrooms(
    membership: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")
) -> list[int]:
    """Per memory cgroup of this process that has a limit: limit - usage + droppable cache."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        return []
    headrooms = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        v2 = controllers == ""
        if not v2 and "memory" not in controllers.split(","):
            continue
        directory = (root if v2 else root / "memory") / path.lstrip("/")
        limit_file, usage_file, cache_key = _CGROUP_FILES[v2]
        try:
            limit = (directory / limit_file).read_text().strip()
            usage = int((directory / usage_file).read_text())
        except (OSError, ValueError):
            continue  # not this version's hierarchy (a hybrid host lists both), or unreadable
        if limit != "max" and int(limit) < _NO_LIMIT:
            cache = _fields(directory / "memory.stat").get(cache_key, 0)
            headrooms.append(int(limit) - usage + cache)
    return headrooms


def _fields(path: Path) -> dict[str, int]:
    """``name value`` lines (``Name:  value kB`` in /proc/meminfo) as a dict; empty if
    unreadable."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    fields = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[1].isdigit():
            fields[parts[0].rstrip(":")] = int(parts[1])
    return fields

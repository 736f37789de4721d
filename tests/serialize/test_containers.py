"""List and dict subclasses whose own mutators need their attributes come back with their items and
attributes as they were, and no mutator runs while they load (``serialize.containers``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_pause.serialize import containers
from tests.support.dumping import notebook, pick, resume_elsewhere, roundtrip

CONTAINERS = """
class Tracked(list):
    "A list that logs each change in an attribute its own mutators need."
    def __init__(self, *items):
        self.log = []
        super().__init__(*items)
    def append(self, item):
        self.log.append(("append", item))
        super().append(item)
    def extend(self, items):
        items = list(items)
        self.log.append(("extend", items))
        super().extend(items)

class Counted(dict):
    "A dict that counts its writes in an attribute its own __setitem__ needs."
    def __init__(self):
        self.writes = 0
        super().__init__()
    def __setitem__(self, key, value):
        self.writes += 1
        super().__setitem__(key, value)

tracked = Tracked([1, 2])
tracked.append(3)
tracked.append(tracked)  # holds itself
counted = Counted()
counted["a"] = 1
counted["b"] = [counted]
both = {"tracked": tracked, "counted": counted}
"""

NEXT_CELL = """
tracked.append(4)
counted["c"] = 3
out = {
    "tracked": [x for x in tracked if x is not tracked],
    "holds itself": tracked[3] is tracked,
    "log": [[what, "itself" if item is tracked else item] for what, item in tracked.log],
    "counted": sorted(counted),
    "writes": counted.writes,
    "shared": both["tracked"] is tracked and counted["b"][0] is counted,
}
"""


def test_items_and_attributes_come_back_without_running_mutators() -> None:
    ns = notebook(CONTAINERS)
    _, loaded, failed = roundtrip(pick(ns, "tracked counted both"))
    assert failed == {}
    tracked, counted = loaded["tracked"], loaded["counted"]
    assert type(tracked).__name__ == "Tracked" and tracked[:3] == [1, 2, 3] and tracked[3] is tracked
    assert tracked.log == [("append", 3), ("append", tracked)]  # loading logged nothing
    assert dict(counted) == {"a": 1, "b": [counted]} and counted.writes == 2
    assert loaded["both"]["tracked"] is tracked


@pytest.mark.integration  # a new process
def test_the_next_cell_goes_on_as_in_the_paused_kernel(tmp_path: Path) -> None:
    ns = notebook(CONTAINERS)
    got = resume_elsewhere(pick(ns, "tracked counted both"), NEXT_CELL, tmp_path)
    exec(NEXT_CELL, ns)
    assert got == ns["out"]
    assert got["log"] == [["append", 3], ["append", "itself"], ["append", 4]] and got["writes"] == 3


def test_only_subclasses_whose_mutators_pickle_would_call_are_reordered() -> None:
    class Plain(list):
        pass

    class OwnState(dict):
        def __setitem__(self, key: object, value: object) -> None:
            super().__setitem__(key, value)

        def __setstate__(self, state: dict) -> None:
            self.__dict__.update(state)

    class Logged(list):
        def append(self, item: object) -> None:
            super().append(item)

    assert containers.reducer_for(Plain) is None  # pickle's own order is right for it
    assert containers.reducer_for(OwnState) is None  # its __setstate__ may expect the items first
    assert containers.reducer_for(list) is None and containers.reducer_for(dict) is None
    assert containers.reducer_for(Logged) is containers.reduce_container

"""Starting a pass over an iterable again at its k-th item, in the same order.

Ranges, sequences and mappings continue by position. A ``torch.utils.data.DataLoader`` draws
its shuffle from torch's RNG when its iterator is created: the state at that moment is kept,
and continuing recreates the iterator under it, skips the batches already done (for a
single-process map-style loader without loading them), then puts the RNG back as it was. A
loader with ``state_dict``/``load_state_dict`` (torchdata's ``StatefulDataLoader``) continues
through its own state. Any other iterable (a generator, an iterator, a set) continues by
drawing the items already done again and dropping them; that is exact only if it yields the
same items again, and the checkpoint says so.

Never imports torch: a loader is recognised only when ``torch.utils.data`` is already loaded.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, Sequence, ValuesView
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from ..process import rng

#: Where a DataLoader keeps ``torch.Generator`` objects that its shuffle may draw from.
GENERATOR_PATHS = (("generator",), ("sampler", "generator"), ("batch_sampler", "sampler", "generator"))


@dataclass(frozen=True)
class Kind:
    """How a pass over an iterable is continued, and whether that is exact (else why not)."""

    name: str  # range, sequence, mapping, dataloader, stateful, iterator
    exact: bool = True
    reason: str = ""


def kind_of(iterable: Iterable[Any]) -> Kind:
    """Recognise how ``iterable`` can be continued."""
    type_name = type(iterable).__name__
    if isinstance(iterable, range):
        return Kind("range")
    if _is_stateful(iterable):
        return Kind("stateful")
    loader = _dataloader_type()
    if loader is not None and isinstance(iterable, loader):
        return _dataloader_kind(iterable)
    if isinstance(iterable, (Mapping, KeysView, ValuesView, ItemsView)):
        return Kind("mapping")
    if isinstance(iterable, AbstractSet):
        return Kind(
            "iterator",
            False,
            f"a {type_name}: its order can differ from one process to the next, so the items "
            "dropped on resume may not be the ones done",
        )
    if isinstance(iterable, Sequence) or (hasattr(iterable, "__len__") and hasattr(iterable, "__getitem__")):
        return Kind("sequence")
    what = "a generator" if type(iterable).__name__ == "generator" else f"a {type_name}"
    return Kind(
        "iterator",
        False,
        f"{what}: on resume the items already done are drawn from it again and dropped; "
        "exact only if it yields the same items again (loop over a list, a range or a DataLoader to be sure)",
    )


def _is_stateful(iterable: Any) -> bool:
    """A loader that can say where it is (``state_dict``) and go back there; a torch module (a
    ``Sequential`` is iterable too) is not one: loading its state would reset its weights."""
    if callable(getattr(iterable, "parameters", None)):
        return False
    return callable(getattr(iterable, "state_dict", None)) and callable(getattr(iterable, "load_state_dict", None))


def _dataloader_type() -> type | None:
    data = sys.modules.get("torch.utils.data")
    return getattr(data, "DataLoader", None)


def _dataloader_kind(loader: Any) -> Kind:
    if getattr(loader, "_dataset_kind", 0) != 0:  # an IterableDataset: no sampler, its own order
        return Kind(
            "dataloader",
            False,
            "a DataLoader over an IterableDataset: on resume the batches already done are "
            "loaded again and dropped; exact only if the dataset yields them in the same order",
        )
    if getattr(loader, "in_order", True) is False:
        return Kind(
            "dataloader", False, "a DataLoader with in_order=False: its workers' batches can arrive in another order"
        )
    return Kind("dataloader")


def start(iterable: Iterable[Any], kind: Kind) -> tuple[Iterator[Any], Any]:
    """Begin a pass; returns the iterator and what continuing it later needs (``None`` if nothing).

    For a DataLoader, that is the RNG state (and its samplers' generators') just before the
    iterator is created, when the shuffle draws.
    """
    if kind.name != "dataloader":
        return iter(iterable), None
    created = _generator_states(iterable)
    return iter(iterable), created


def state_now(iterable: Any, kind: Kind) -> Any:
    """For a stateful loader, its state now (before its next item); ``None`` for other kinds."""
    return iterable.state_dict() if kind.name == "stateful" else None


def release_workers(iterator: Any, source: Any) -> bool:
    """Stop the worker processes of a DataLoader's ``iterator`` now; whether it had any.

    A ``persistent_workers`` loader keeps its iterator for the next pass: it is dropped too, so
    that pass starts workers of its own rather than reuse stopped ones.
    """
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if not callable(shutdown) or not getattr(iterator, "_num_workers", 0):
        return False
    shutdown()
    if getattr(source, "_iterator", None) is iterator:
        source._iterator = None
    return True


def after_pass(iterable: Any, kind: Kind) -> Any:
    """What a loader carries from one pass to the next, taken when a pass ends: a stateful
    loader's state, a DataLoader's own generators (its next shuffle draws from them); ``None``
    when the next pass depends on nothing but the session's RNG."""
    if kind.name == "stateful":
        return {"carried": iterable.state_dict()}
    if kind.name == "dataloader":
        states = _generator_states(iterable)
        del states["session"]
        return {"carried": states} if states else None
    return None


def resume(iterable: Iterable[Any], kind: Kind, done: int, saved: Any) -> tuple[Iterator[Any], Any]:
    """Begin a pass at item ``done`` (0-based: the first item not done), in the original order.

    ``saved`` is what ``start`` (or ``state_now``) returned when the checkpoint was taken.
    Returns the iterator and, like ``start``, what continuing it again would need. The
    session's RNG state is the same afterwards as before.
    """
    if isinstance(saved, dict) and "carried" in saved:  # a new pass, after one that ended
        if kind.name == "stateful":
            return _stateful_next_pass(iterable, saved["carried"]), None
        _set_generator_states(iterable, saved["carried"])
        return start(iterable, kind)
    if kind.name == "range":
        return iter(iterable[done:]), None  # type: ignore[index]
    if kind.name == "stateful" and saved is not None:
        with _rng_kept():
            iterable.load_state_dict(saved)  # type: ignore[attr-defined]
            return iter(iterable), None
    if kind.name == "dataloader" and saved is not None:
        # The loader's own generators are left as the replay leaves them: as they were then.
        with _rng_kept():
            _set_generator_states(iterable, saved)
            iterator = iter(iterable)
            _skip_batches(iterable, iterator, done)
        return iterator, saved
    iterator = iter(iterable)
    with _rng_kept():
        _drop(iterator, done)
    return iterator, None


def _stateful_next_pass(loader: Any, state: Any) -> Iterator[Any]:
    """A stateful loader's next pass from the state its last one ended in.

    Loading a state makes a ``StatefulDataLoader`` draw a seed more than a plain new pass does
    (it rebuilds its sampler); the session's RNG is put back, then draws what a plain pass of a
    DataLoader draws at its start (its base seed), so the random streams go on identically.
    """
    loader_type = _dataloader_type()
    if loader_type is None or not isinstance(loader, loader_type):
        loader.load_state_dict(state)
        return iter(loader)
    import torch

    with _rng_kept():
        loader.load_state_dict(state)
        iterator = iter(loader)
    torch.empty((), dtype=torch.int64).random_(generator=loader.generator)
    return iterator


def _drop(iterator: Iterator[Any], n: int) -> None:
    """Draw ``n`` items and drop them."""
    next(itertools.islice(iterator, n, n), None)


def _skip_batches(loader: Any, iterator: Iterator[Any], n: int) -> None:
    """Skip ``n`` batches; a single-process map-style loader advances its sampler only, without
    loading the data (the batch indices are all the order depends on)."""
    next_index = getattr(iterator, "_next_index", None)
    if loader.num_workers == 0 and getattr(iterator, "_dataset_kind", None) == 0 and callable(next_index):
        skipped = 0
        try:
            for _ in range(n):
                next_index()
                skipped += 1
        except StopIteration:
            pass
        iterator._num_yielded += skipped  # type: ignore[attr-defined]
        return
    _drop(iterator, n)


class _rng_kept:
    """Whatever draws inside the block, the session's random streams are as before afterwards."""

    def __enter__(self) -> None:
        self.state = rng.capture()

    def __exit__(self, *exc: object) -> None:
        rng.restore(self.state)


def _generator_states(loader: Any) -> dict[str, Any]:
    """The session's RNG state (torch's, and Python's and NumPy's for samplers that draw from
    those) and the state of each generator of the loader's own that its shuffle may use."""
    import torch

    states: dict[str, Any] = {"session": rng.capture()}
    for path in GENERATOR_PATHS:
        generator = _follow(loader, path)
        if isinstance(generator, torch.Generator):
            states[".".join(path)] = generator.get_state()
    return states


def _set_generator_states(loader: Any, states: dict[str, Any]) -> None:
    import torch

    if "session" in states:
        rng.restore(states["session"])
    for path in GENERATOR_PATHS:
        generator = _follow(loader, path)
        key = ".".join(path)
        if key in states and isinstance(generator, torch.Generator):
            generator.set_state(states[key])


def _follow(obj: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        obj = getattr(obj, name, None)
        if obj is None:
            return None
    return obj

"""torch DataLoader iterators saved at their place: the same batches left, in the same order, the same seeds.

A single-process iterator is its attributes, with its sampler's place (``samplerplace``) for the
generator torch keeps there. A multi-process one has batches in flight with its workers, whose
indices torch does not keep: their data are received now (as the iterator itself does when they
arrive out of order), so the checkpoint holds them beside the index batches left; it comes back
with new workers started with the same base seed, which deliver the rest in the same order. Those
workers start from their seeds again: a dataset that draws random numbers inside its workers
draws, for the rest of this pass, what a new pass's workers would (not what the old ones would
have). An iterator over an ``IterableDataset`` is refused: its place is inside the dataset's own
iterator. The dataset, sampler and collate function are shared with the DataLoader that made the
iterator, as in the notebook. Lightning's ``CombinedLoader`` iterators (``iter()`` of a
``CombinedLoader`` is the loader itself, walking one of these) keep the DataLoader iterators they
walk, which their own pickling leaves out.
"""

from __future__ import annotations

import copyreg
import itertools
import types
from typing import Any

from . import samplerplace

#: The attributes of a multi-process iterator a restored one takes as saved.
_COUNTERS = ("_num_yielded", "_IterableDataset_len_called", "_send_idx", "_rcvd_idx")

#: Where the base seed sits among the arguments torch gives each worker (``_utils.worker._worker_loop``).
BASE_SEED_ARGUMENT = 8


def _refuse_iterable_dataset(iterator: Any) -> None:
    if getattr(iterator, "_dataset_kind", 0) != 0:
        raise TypeError(
            f"a DataLoader iterator over an IterableDataset ({type(iterator._dataset).__name__}) cannot be saved: "
            "its place is inside the dataset's own iterator; run the cell that creates it again after resume"
        )


def reduce_single_process(iterator: Any) -> tuple[Any, ...]:
    """A single-process DataLoader iterator: its attributes, its sampler at its place."""
    _refuse_iterable_dataset(iterator)
    state = dict(vars(iterator))
    state["_sampler_iter"] = samplerplace.place_of(iterator)
    return (copyreg.__newobj__, (type(iterator),), state)


def _receive_in_flight(iterator: Any) -> None:
    """Wait for the data of every batch sent to the workers, kept as ``_next_data`` keeps a batch
    that came early: the live iterator goes on as it would have."""
    while iterator._tasks_outstanding > 0:
        index, data = iterator._get_data()
        iterator._tasks_outstanding -= 1
        if index in iterator._task_info:
            iterator._task_info[index] += (data,)


def _start_method(iterator: Any) -> str | None:
    """How the iterator's workers were started (``fork``, ``spawn``...), None for torch's default."""
    workers = getattr(iterator, "_workers", None) or [None]
    return getattr(workers[0], "_start_method", None)


def reduce_multi_process(iterator: Any) -> tuple[Any, ...]:
    """A multi-process DataLoader iterator: what its workers had in flight (received now), its
    sampler at its place, the seed its workers start from, and its counters."""
    _refuse_iterable_dataset(iterator)
    if iterator._shutdown:
        return (make_finished, (type(iterator), iterator._persistent_workers, iterator._num_yielded))
    _receive_in_flight(iterator)
    place = samplerplace.place_of(iterator)
    loader = {
        "dataset": iterator._dataset,
        "_dataset_kind": iterator._dataset_kind,
        "_IterableDataset_len_called": iterator._IterableDataset_len_called,
        "_auto_collation": iterator._auto_collation,
        "drop_last": iterator._drop_last,
        "num_workers": iterator._num_workers,
        "pin_memory": iterator._pin_memory,
        "pin_memory_device": "",
        "timeout": iterator._timeout,
        "collate_fn": iterator._collate_fn,
        "persistent_workers": iterator._persistent_workers,
        "prefetch_factor": iterator._prefetch_factor,
        "in_order": iterator._in_order,
        "worker_init_fn": iterator._worker_init_fn,
    }
    counters = {name: getattr(iterator, name) for name in _COUNTERS}
    held = {
        "task_info": dict(iterator._task_info),
        "workers_status": list(iterator._workers_status),
        "workers_num_tasks": list(iterator._workers_num_tasks),
    }
    arguments = (type(iterator), loader, iterator._index_sampler, place, iterator._base_seed, counters, held)
    return (make_multi_process, (*arguments, _start_method(iterator)))


class _SeededContext:
    """A multiprocessing context that starts torch's DataLoader workers with a given base seed."""

    def __init__(self, context: Any, base_seed: int) -> None:
        self.context = context
        self.base_seed = base_seed

    def Process(self, target: Any, args: tuple[Any, ...]) -> Any:  # noqa: N802 - the context's own name
        """A worker process, with the saved base seed in place of the one just drawn."""
        args = (*args[:BASE_SEED_ARGUMENT], self.base_seed, *args[BASE_SEED_ARGUMENT + 1 :])
        return self.context.Process(target=target, args=args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.context, name)


def make_multi_process(
    kind: type,
    loader: dict[str, Any],
    index_sampler: Any,
    place: Any,
    base_seed: int,
    counters: dict[str, Any],
    held: dict[str, Any],
    start_method: str | None = None,
) -> Any:
    """A multi-process DataLoader iterator with new workers (started with ``base_seed``), the
    batches it had received first, then the index batches ``place`` has left."""
    import torch

    context = torch.multiprocessing if start_method is None else torch.multiprocessing.get_context(start_method)
    like = types.SimpleNamespace(
        **loader,
        _index_sampler=[],  # no batch is sent before its place is set
        generator=torch.Generator(),  # the seed drawn here is replaced: the session's RNG is not drawn
        multiprocessing_context=_SeededContext(context, base_seed),
    )
    iterator = kind(like)
    iterator._base_seed = base_seed
    iterator._index_sampler = index_sampler
    iterator._sampler_iter = place
    for name, value in counters.items():
        setattr(iterator, name, value)
    iterator._task_info = held["task_info"]
    iterator._workers_status = held["workers_status"]
    iterator._workers_num_tasks = held["workers_num_tasks"]
    iterator._tasks_outstanding = 0
    last = max(iterator._task_info.items(), default=None)
    start = (last[1][0] + 1) if last is not None else iterator._send_idx
    workers = range(iterator._num_workers)
    iterator._worker_queue_idx_cycle = itertools.islice(itertools.cycle(workers), start % len(workers), None)
    return iterator


def make_finished(kind: type, persistent: bool, yielded: int) -> Any:
    """A multi-process DataLoader iterator that has ended: no workers; its next item ends it again."""
    iterator = kind.__new__(kind)
    iterator.__dict__.update(
        _shutdown=True,
        _persistent_workers=persistent,
        _num_yielded=yielded,
        _send_idx=0,
        _rcvd_idx=0,
        _task_info={},
        _sampler_iter=samplerplace.Remaining([], {}),
        _dataset_kind=0,
        _IterableDataset_len_called=None,
        _profile_name=f"enumerate(DataLoader)#{kind.__name__}.__next__",
    )
    return iterator


def reduce_combined_iterator(iterator: Any) -> tuple[Any, ...]:
    """Lightning's iterator of a ``CombinedLoader`` with the DataLoader iterators it walks: its own
    ``__getstate__`` leaves them out (torch's could not be pickled), and it could not go on."""
    return (copyreg.__newobj__, (type(iterator),), dict(vars(iterator)))


#: Reducers by the qualified name of the class they handle (and its subclasses).
BY_NAME = {
    "torch.utils.data.dataloader._SingleProcessDataLoaderIter": reduce_single_process,
    "torch.utils.data.dataloader._MultiProcessingDataLoaderIter": reduce_multi_process,
    "lightning.pytorch.utilities.combined_loader._ModeIterator": reduce_combined_iterator,
    "pytorch_lightning.utilities.combined_loader._ModeIterator": reduce_combined_iterator,
}

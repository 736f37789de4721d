"""Known library generators over a DataLoader, saved at their place and continued where they were.

A generator holds a paused Python frame, which no other process can resume; but a few libraries'
generators are known line by line. accelerate's ``DataLoaderShard.__iter__`` (what ``iter()`` of a
prepared dataloader gives) is one: paused at one of its two ``yield`` statements, it is its
dataloader, the torch iterator it walks, the batch it took ahead and its count, and
``continue_shard`` below runs the rest of that body from there. The dataloader (its
``gradient_state`` with it) and the torch iterator are saved as themselves, shared with the rest of
the namespace; the torch iterator keeps its own place (``loaderiters``). A generator that has not
started is made again by calling the same body; one that has ended, as an ended one.
"""

from __future__ import annotations

import dis
import inspect
import sys
import types
from typing import Any

#: What a generator's code is known as: (module, qualified name of the function).
_SHARD = ("accelerate.data_loader", "DataLoaderShard.__iter__")


def continue_shard(shard: Any, dataloader_iter: Any, next_batch: Any, batch_index: int, at_end: bool) -> Any:
    """The rest of accelerate's ``DataLoaderShard.__iter__`` from a ``yield`` (the last one if
    ``at_end``), with the same names and steps, so it is saved again as it was saved here."""
    from accelerate.utils import send_to_device

    if not at_end:
        batch_index += 1
        current_batch = next_batch
        while True:
            try:
                if shard.device is not None:
                    current_batch = send_to_device(current_batch, shard.device, non_blocking=shard._non_blocking)
                shard._update_state_dict()
                next_batch = next(dataloader_iter)
                if batch_index >= shard.skip_batches:
                    yield current_batch
                batch_index += 1
                current_batch = next_batch
            except StopIteration:
                shard.end_of_dataloader = True
                shard._update_state_dict()
                if batch_index >= shard.skip_batches:
                    yield current_batch
                break
    shard.iteration += 1
    shard.end()


def start_shard(shard: Any) -> Any:
    """A pass over a prepared dataloader that has not started (its body runs at the first ``next``)."""
    import accelerate.data_loader

    return accelerate.data_loader.DataLoaderShard.__iter__(shard)


def ended() -> Any:
    """A generator that has ended."""
    yield from ()


def _known_codes() -> dict[types.CodeType, str]:
    """The codes of the generators continued here, with the name their frame gives the dataloader."""
    codes = {continue_shard.__code__: "shard"}
    module = sys.modules.get(_SHARD[0])
    owner, _, name = _SHARD[1].partition(".")
    function = getattr(getattr(module, owner, None), name, None)
    if isinstance(function, types.FunctionType):
        codes[function.__code__] = "self"
    return codes


def _yield_lines(code: types.CodeType) -> list[int]:
    """The line of each ``yield`` of ``code``, in order."""
    lines: list[int] = []
    for instruction in dis.get_instructions(code):
        line = instruction.positions.lineno if instruction.positions is not None else None
        if instruction.opname == "YIELD_VALUE" and line is not None and line not in lines:
            lines.append(line)
    return lines


def reduce_generator(generator: types.GeneratorType) -> tuple[Any, ...] | None:  # type: ignore[type-arg]
    """A known generator at its place; ``None`` for any other (refused by the caller)."""
    names = _known_codes()
    owner = names.get(generator.gi_code)
    if owner is None:
        return None
    state = inspect.getgeneratorstate(generator)
    if state == inspect.GEN_CLOSED:
        return (ended, ())
    frame = generator.gi_frame
    shard = frame.f_locals[owner]
    if state == inspect.GEN_CREATED:
        if owner == "shard":
            args = [frame.f_locals[n] for n in ("dataloader_iter", "next_batch", "batch_index", "at_end")]
            return (continue_shard, (shard, *args))
        return (start_shard, (shard,))
    lines = _yield_lines(generator.gi_code)
    if len(lines) != 2 or frame.f_lineno not in lines:
        return None
    here = frame.f_locals
    at_end = frame.f_lineno == lines[1]
    ahead = None if at_end else here["next_batch"]  # the batch it yields next; at the end, none
    return (continue_shard, (shard, here["dataloader_iter"], ahead, here["batch_index"], at_end))

"""Where a DataLoader iterator's sampler is: the index batches it has left, read without moving anything.

A torch DataLoader iterator draws its index batches from ``_sampler_iter``, a generator over its
sampler. One that has not started holds nothing but the sampler: it is saved as ``iter(sampler)``
and makes the same draws when it starts, wherever it starts. One that has started holds a paused
frame (a ``RandomSampler``'s private generator, the permutation it drew): it is drained into the
batches it has left, and the live iterator goes on over those (``Remaining``) exactly as it would
have. Draining may draw from the sampler's own ``torch.Generator`` (a ``RandomSampler`` draws its
next permutation when it ends): each state it takes is recorded at the step that took it and set
again at that step, so the generator is at each moment where it would have been. Draining must
not move the session's random streams (torch, NumPy, ``random``): a sampler that draws from them
as it goes is put back as it was and refused, by name, rather than saved with another future.
"""

from __future__ import annotations

import inspect
import random
import sys
from collections.abc import Iterator
from typing import Any

#: Where an index sampler keeps a ``torch.Generator`` it may draw from as it goes.
GENERATOR_PATHS = (("generator",), ("sampler", "generator"), ("batch_sampler", "sampler", "generator"))

#: The most index batches a sampler is drained of beyond what it says it has left.
SLACK = 1


class Remaining:
    """The index batches a sampler had left when it was drained, in order, as an iterator; and
    the states its own generators took at each step (set again at that step)."""

    def __init__(self, batches: list[Any], settles: dict[int, list[tuple[Any, Any]]], rest: Any = None) -> None:
        self.batches = batches
        self.settles = settles
        self.position = 0
        self.rest = rest  # the sampler itself, where it had more than it said: not saved

    def __iter__(self) -> Remaining:
        return self

    def __next__(self) -> Any:
        step = self.position
        self.position += 1
        for generator, state in self.settles.pop(step, ()):
            generator.set_state(state)
        if step < len(self.batches):
            return self.batches[step]
        if self.rest is not None:
            return next(self.rest)
        raise StopIteration

    def __reduce__(self) -> tuple[Any, ...]:
        if self.rest is not None:
            raise TypeError(
                "its sampler yields more index batches than its length says, so where it is cannot be "
                "read; run the cell that creates it again after resume"
            )
        at = self.position
        settles = {step - at: moves for step, moves in self.settles.items() if step >= at}
        return (Remaining, (self.batches[at:], settles))


class NotStarted:
    """A sampler's iterator that has not started: saved as the sampler, made again by ``iter``."""

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler

    def __reduce__(self) -> tuple[Any, ...]:
        return (iter, (self.sampler,))


def session_streams() -> dict[str, Any]:
    """The state of the session's global random streams, to compare (read only, never drawn)."""
    streams: dict[str, Any] = {"python": random.getstate()}
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        kind, keys, pos, has_gauss, gauss = numpy.random.get_state()
        streams["numpy"] = (kind, keys.tobytes(), pos, has_gauss, gauss)
    torch = sys.modules.get("torch")
    if torch is not None:
        streams["torch"] = torch.get_rng_state().numpy().tobytes()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            streams["cuda"] = [s.numpy().tobytes() for s in torch.cuda.get_rng_state_all()]
    return streams


def _put_back(before: dict[str, Any]) -> None:
    """The session's streams as ``before`` found them (after a sampler drew from them)."""
    random.setstate(before["python"])
    now = session_streams()
    if "numpy" in before and now.get("numpy") != before["numpy"]:
        import numpy

        kind, keys, pos, has_gauss, gauss = before["numpy"]
        numpy.random.set_state((kind, numpy.frombuffer(keys, dtype=numpy.uint32), pos, has_gauss, gauss))
    if "torch" in before and now.get("torch") != before["torch"]:
        import torch

        torch.set_rng_state(torch.frombuffer(bytearray(before["torch"]), dtype=torch.uint8))
    if "cuda" in before and now.get("cuda") != before["cuda"]:
        import torch

        for index, raw in enumerate(before["cuda"]):
            torch.cuda.set_rng_state(torch.frombuffer(bytearray(raw), dtype=torch.uint8), index)


def moved_streams(before: dict[str, Any]) -> list[str]:
    """The session's streams whose state is not the one ``before`` holds."""
    now = session_streams()
    return [name for name, state in before.items() if now.get(name) != state]


def own_generators(sampler: Any) -> list[Any]:
    """The ``torch.Generator`` objects a sampler (or a batch sampler's sampler) may draw from."""
    torch = sys.modules.get("torch")
    found: dict[int, Any] = {}
    for path in GENERATOR_PATHS:
        obj = sampler
        for name in path:
            obj = getattr(obj, name, None)
        if torch is not None and isinstance(obj, torch.Generator):
            found[id(obj)] = obj
    return list(found.values())


def place_of(iterator: Any) -> Any:
    """What a DataLoader iterator saves of its sampler's place (``None``, ``NotStarted`` or
    ``Remaining``); a started sampler is drained, and ``iterator`` goes on over what it had left."""
    current = iterator._sampler_iter
    if current is None or isinstance(current, Remaining):
        return current
    if inspect.isgenerator(current) and inspect.getgeneratorstate(current) == inspect.GEN_CREATED:
        return NotStarted(iterator._index_sampler)
    taken = getattr(iterator, "_send_idx", iterator._num_yielded)  # a multi-process one takes ahead
    remaining, drew = drain(current, iterator._index_sampler, taken)
    iterator._sampler_iter = remaining
    if drew:
        raise TypeError(
            f"its sampler ({type(iterator._index_sampler).__name__}) draws from the session's random "
            f"streams ({', '.join(drew)}) as it goes, so reading where it is would change what the session "
            "draws next; run the cell that creates it again after resume"
        )
    return remaining


def drain(current: Iterator[Any], sampler: Any, taken: int) -> tuple[Remaining, list[str]]:
    """The batches ``current`` has left (at most its sampler's length beyond ``taken``, and
    ``SLACK``), with the states the sampler's own generators take at each step.

    Raises ``TypeError`` (nothing drawn) where the sampler has no length. Also returns the
    session's streams it drew from, put back as they were: then only the live iterator may go on.
    """
    try:
        expected = max(len(sampler) - taken, 0)
    except TypeError as e:
        raise TypeError(
            f"its sampler ({type(sampler).__name__}) has no length, so where it is cannot be read "
            "without drawing from it without end; run the cell that creates it again after resume"
        ) from e
    generators = own_generators(sampler)
    originals = [g.get_state() for g in generators]
    before = session_streams()
    batches: list[Any] = []
    settles: dict[int, list[tuple[Any, Any]]] = {}
    ended = False
    for step in range(expected + SLACK + 1):
        states = [g.get_state() for g in generators]
        try:
            batches.append(next(current))
        except StopIteration:
            ended = True
        moved = [(g, g.get_state()) for g, s in zip(generators, states, strict=True) if not g.get_state().equal(s)]
        if moved:
            settles[step] = moved
        if ended:
            break
    for generator, state in zip(generators, originals, strict=True):
        generator.set_state(state)  # each moves again at the step that moved it
    drew = moved_streams(before)
    if drew:
        _put_back(before)
    return Remaining(batches, settles, None if ended else current), drew

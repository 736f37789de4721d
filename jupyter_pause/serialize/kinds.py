"""Standard-library kinds plain pickle gets wrong, refuses or silently changes, saved as what they are.

Iterators over dicts and ordered dicts come back as the same iterator over the restored mapping,
at the same position (pickle's own reduction would turn them into list iterators); iterators
over sets continue over the items they had left. ``super`` objects, loggers (by name, with level,
handlers and filters) and handlers (stream handlers re-bound to this process's streams, the open
stream of a file handler reopened without truncating it) come back. Generators and coroutines
are refused with a reason. Exceptions are rebuilt from their args and attributes without calling
``__init__``. ``reducer_for`` (per type, for the pickler) and ``reduce_kind`` (per
object) are the entry points; files live in ``openfiles``, weak references in ``weakrefs``.
"""

from __future__ import annotations

import collections
import copyreg
import gc
import io
import itertools
import logging
import tarfile
import types
import zipfile
from typing import Any, Callable

from . import (
    astronomy,
    byteorder,
    containers,
    databases,
    datafiles,
    loaderiters,
    openfiles,
    passes,
    plotting,
    thirdparty,
    weakrefs,
)

Reducer = Callable[[Any], Any]

# -- iterators ---------------------------------------------------------------------------------

_EMPTY: dict[Any, Any] = {}

#: dict iterator type -> (view, reversed)
_DICT_ITERATORS: dict[type, tuple[str, bool]] = {
    type(iter(_EMPTY)): ("keys", False),
    type(iter(_EMPTY.values())): ("values", False),
    type(iter(_EMPTY.items())): ("items", False),
    type(reversed(_EMPTY)): ("keys", True),
    type(reversed(_EMPTY.values())): ("values", True),
    type(reversed(_EMPTY.items())): ("items", True),
}

_ODICT_ITERATOR = type(iter(collections.OrderedDict()))
_SET_ITERATOR = type(iter(set()))
_VIEWS = ("keys", "values", "items")


def _advance(it: Any, steps: int) -> Any:
    collections.deque(itertools.islice(it, steps), maxlen=0)
    return it


def _view(mapping: Any, view: str, base: type) -> Any:
    return getattr(base, view)(mapping)


def make_dict_iterator(mapping: dict[Any, Any], view: str, backwards: bool, consumed: int) -> Any:
    """An iterator over ``mapping``'s keys, values or items, ``consumed`` items in."""
    seen = _view(mapping, view, dict)
    return _advance(reversed(seen) if backwards else iter(seen), consumed)


def make_odict_iterator(mapping: collections.OrderedDict[Any, Any], view: str, backwards: bool, consumed: int) -> Any:
    """An iterator over an ordered dict's keys, values or items, ``consumed`` items in."""
    seen = _view(mapping, view, collections.OrderedDict)
    return _advance(reversed(seen) if backwards else iter(seen), consumed)


def make_set_iterator(items: list[Any]) -> Any:
    """An iterator over the items a set iterator had left (a set's order is not kept across processes)."""
    return iter(set(items))


def _iterated(it: Any, kind: type) -> Any:
    """The mapping an iterator walks (None once it is exhausted), read from its references."""
    return next((r for r in gc.get_referents(it) if isinstance(r, kind)), None)


def reduce_dict_iterator(it: Any) -> tuple[Any, ...]:
    """A dict iterator: the dict itself (shared with the variable that holds it) and the position."""
    view, backwards = _DICT_ITERATORS[type(it)]
    mapping = _iterated(it, dict)
    if mapping is None:
        return (make_dict_iterator, ({}, view, backwards, 0))
    return (make_dict_iterator, (mapping, view, backwards, len(mapping) - it.__length_hint__()))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))
    return a is b


def reduce_odict(od: collections.OrderedDict) -> tuple[Any, ...]:
    """An ``OrderedDict`` exactly as its own ``__reduce__`` gives it (type, no arguments, its
    attributes or None, its items), without CPython looking for its slot names each time: it
    cannot cache them on a built-in type, and a torch module holds a dozen ordered dicts."""
    return (collections.OrderedDict, (), dict(vars(od)) or None, None, iter(od.items()))


def reduce_odict_iterator(it: Any) -> tuple[Any, ...]:
    """An ordered-dict iterator: which view it walks and how far, found by comparing what it has left."""
    mapping = _iterated(it, collections.OrderedDict)
    rest = it.__reduce__()[1][0]  # a copy of what it has left; the iterator does not move
    if mapping is None:
        return (make_odict_iterator, (collections.OrderedDict(), "keys", False, 0))
    for view in _VIEWS:
        for backwards in (False, True):
            seen = list(_view(mapping, view, collections.OrderedDict))
            seen = seen[::-1] if backwards else seen
            tail = seen[len(seen) - len(rest) :]
            if len(tail) == len(rest) and all(_same(a, b) for a, b in zip(tail, rest, strict=True)):
                return (make_odict_iterator, (mapping, view, backwards, len(seen) - len(rest)))
    raise TypeError("an OrderedDict iterator whose dict changed size while iterating is not saved")


def reduce_set_iterator(it: Any) -> tuple[Any, ...]:
    """A set iterator: the items it has left."""
    return (make_set_iterator, (it.__reduce__()[1][0],))


# -- super, generators -------------------------------------------------------------------------


def reduce_super(obj: super) -> tuple[Any, ...]:
    """``super(cls, obj)`` (or an unbound ``super(cls)``) made again."""
    if obj.__self__ is None:
        return (super, (obj.__thisclass__,))
    return (super, (obj.__thisclass__, obj.__self__))


def reduce_generator(generator: Any) -> tuple[Any, ...]:
    """A generator a library is known to make (``passes``) at its place; any other is refused."""
    return passes.reduce_generator(generator) or refuse_running_code(generator)


def refuse_running_code(obj: Any) -> tuple[Any, ...]:
    """Generators and coroutines hold a paused frame: no process but this one can resume it."""
    raise TypeError(
        f"a {type(obj).__name__} cannot be saved (it holds a paused Python frame); "
        "run the cell that creates it again after resume"
    )


# -- logging -----------------------------------------------------------------------------------


def _registered(logger: logging.Logger) -> bool:
    if isinstance(logger, logging.RootLogger):
        return logger is logging.getLogger()
    return logging.Logger.manager.loggerDict.get(logger.name) is logger


def named_logger(name: str | None) -> logging.Logger:
    """The logger of that name in this process (the root logger for None)."""
    return logging.getLogger(name)


def unregistered_logger(kind: type) -> logging.Logger:
    """A logger made directly (``logging.Logger(name)``), not through ``getLogger``."""
    return kind.__new__(kind)  # type: ignore[no-any-return]


def set_logger_state(logger: logging.Logger, state: dict[str, Any]) -> logging.Logger:
    """Level, propagation, handlers and filters as saved (handlers not saved are removed)."""
    handlers, filters = state.pop("handlers"), state.pop("filters")
    logger.__dict__.update(state)
    for old in [h for h in logger.handlers if h not in handlers]:
        logger.removeHandler(old)
    for handler in handlers:
        logger.addHandler(handler)
    logger.filters = list(filters)
    logger.manager._clear_cache()
    return logger


def reduce_logger(logger: logging.Logger) -> tuple[Any, ...]:
    """A logger: by name when ``getLogger`` knows it, with its level, handlers and filters."""
    if not _registered(logger):
        return (unregistered_logger, (type(logger),), dict(vars(logger)))
    name = None if isinstance(logger, logging.RootLogger) else logger.name
    state = {
        "level": logger.level,
        "propagate": logger.propagate,
        "disabled": logger.disabled,
        "handlers": list(logger.handlers),
        "filters": list(logger.filters),
    }
    return (named_logger, (name,), state, None, None, set_logger_state)


def make_handler(kind: type) -> logging.Handler:
    """A handler skeleton with a fresh lock, known to ``logging`` (flushed at exit)."""
    handler = kind.__new__(kind)
    logging.Handler.__init__(handler)
    return handler  # type: ignore[no-any-return]


def set_handler_state(handler: logging.Handler, state: dict[str, Any]) -> logging.Handler:
    """A handler's attributes as saved; its name registered again."""
    handler.__dict__.update(state)
    if handler.name:
        handler.set_name(handler.name)
    return handler


def reduce_handler(handler: logging.Handler) -> tuple[Any, ...]:
    """A handler without its lock (a file handler's open stream is reopened, never truncated)."""
    state = {k: v for k, v in vars(handler).items() if k != "lock"}
    return (make_handler, (type(handler),), state, None, None, set_handler_state)


# -- exceptions --------------------------------------------------------------------------------


def make_exception(kind: type[BaseException], args: tuple[Any, ...]) -> BaseException:
    """An exception of ``kind`` with ``args``, made without calling its ``__init__``."""
    error = kind.__new__(kind, *args)
    error.args = args
    return error


def reduce_exception(error: BaseException) -> Any:
    """An exception as pickle saves it (its args and attributes), rebuilt without ``__init__``.

    Pickle rebuilds an exception by calling its class with ``args``, which fails for the common
    ``def __init__(self, message, step)`` that passes only the message on: the exception could
    not be restored, though all of it was saved. Kinds with a reduction of their own (``OSError``
    and others) keep it.
    """
    kind = type(error)
    if kind.__reduce__ is not BaseException.__reduce__ or kind.__reduce_ex__ is not BaseException.__reduce_ex__:
        return NotImplemented
    reduced = error.__reduce__()
    return (make_exception, (kind, error.args), reduced[2] if len(reduced) > 2 else None)


def reduce_dataloader(loader: Any) -> tuple[Any, ...]:
    """A DataLoader without the iterator a ``persistent_workers`` loader keeps between passes: it
    holds this process's worker processes and queues, and its next pass starts new ones."""
    state = dict(loader.__dict__)
    state["_iterator"] = None
    return (copyreg.__newobj__, (type(loader),), state)


#: Reducers of library classes named rather than imported (importing torch to dispatch would cost
#: every checkpoint that holds none), for the class and its subclasses.
_BY_NAME: dict[str, Reducer] = {
    "torch.utils.data.dataloader.DataLoader": reduce_dataloader,
    "numpy.ndarray": byteorder.reduce_in_byte_order,  # its subclasses; plain arrays go through ``arrays``
    **plotting.BY_NAME,
    **thirdparty.BY_NAME,
    **datafiles.BY_NAME,
    **loaderiters.BY_NAME,
    **astronomy.BY_NAME,
    **databases.BY_NAME,
}


def _by_name(kind: type) -> Reducer | None:
    for cls in kind.__mro__:
        reducer = _BY_NAME.get(f"{cls.__module__}.{cls.__qualname__}")
        if reducer is not None:
            return reducer
    return None


# -- dispatch ----------------------------------------------------------------------------------

_EXACT: dict[type, Reducer] = {
    **dict.fromkeys(_DICT_ITERATORS, reduce_dict_iterator),
    collections.OrderedDict: reduce_odict,
    _ODICT_ITERATOR: reduce_odict_iterator,
    _SET_ITERATOR: reduce_set_iterator,
    super: reduce_super,
    types.GeneratorType: reduce_generator,
    types.CoroutineType: refuse_running_code,
    types.AsyncGeneratorType: refuse_running_code,
    **weakrefs.REDUCERS,
}

_BY_BASE: tuple[tuple[type, Reducer], ...] = (
    (io.IOBase, openfiles.reduce_stream),
    (logging.Logger, reduce_logger),
    (logging.Handler, reduce_handler),
    (tarfile.TarFile, openfiles.reduce_tarfile),
    (zipfile.ZipFile, openfiles.reduce_zipfile),
    (BaseException, reduce_exception),
)

#: What ``reduce_kind`` returns for a kind it does not handle (``NotImplemented`` means "as pickle does").
UNHANDLED = object()


def reducer_for(kind: type) -> Reducer | None:
    """The reducer for objects of exactly ``kind``, or None when it is no kind handled here."""
    exact = _EXACT.get(kind)
    if exact is not None:
        return exact
    for base, reducer in _BY_BASE:
        if issubclass(kind, base):
            return reducer
    return _by_name(kind) or containers.reducer_for(kind)


def reduce_kind(obj: Any) -> Any:
    """What a checkpoint saves for ``obj`` if it is a kind handled here (``NotImplemented``: as
    pickle does), else ``UNHANDLED``."""
    reducer = reducer_for(type(obj))
    return UNHANDLED if reducer is None else reducer(obj)

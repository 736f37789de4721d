"""jupyter_pause.serialize.kinds and weakrefs: iterators, super, loggers, handlers and weak references
come back as what they were, in a new process, or are named."""

from __future__ import annotations

import collections
import io
import logging
import sys
import weakref
from pathlib import Path

import pytest

from jupyter_pause.serialize.digests import value_digest
from tests.support.dumping import notebook, resume_elsewhere, roundtrip


def test_dict_iterators_continue_over_the_restored_dict(tmp_path: Path) -> None:
    d = {"a": 1, "b": 2, "c": 3}
    keys, values, items, back = iter(d), iter(d.values()), iter(d.items()), reversed(d)
    for it in (keys, values, items, back):
        next(it)
    done = iter({})
    out = resume_elsewhere(
        {"d": d, "keys": keys, "values": values, "items": items, "back": back, "done": done},
        """
        kinds = [type(x).__name__ for x in (keys, values, items, back, done)]
        rest = [list(keys), list(values), [list(p) for p in items], list(back), list(done)]
        d["z"] = 0
        it = iter(d); next(it); d["y"] = 1
        try:
            next(it); tied = False
        except RuntimeError:
            tied = True
        out = [kinds, rest, tied]
        """,
        tmp_path,
    )
    kinds = ["dict_keyiterator", "dict_valueiterator", "dict_itemiterator", "dict_reversekeyiterator"]
    assert out[0] == [*kinds, "dict_keyiterator"]
    assert out[1] == [["b", "c"], [2, 3], [["b", 2], ["c", 3]], ["b", "a"], []]
    assert out[2] is True  # a new iterator over the restored dict notices it changing, as any would


def test_iterator_shares_its_dict_with_the_variable(tmp_path: Path) -> None:
    d = {"a": 1, "b": 2}
    it = iter(d)
    cell = "d['c'] = 9\ntry:\n    next(it)\nexcept RuntimeError as e:\n    out = str(e)"
    out = resume_elsewhere({"d": d, "it": it}, cell, tmp_path)
    assert out == "dictionary changed size during iteration"


def test_ordered_dict_and_set_iterators_continue(tmp_path: Path) -> None:
    od = collections.OrderedDict(x=1, y=2, z=3)
    views = {"keys": iter(od), "vals": iter(od.values()), "items": iter(od.items()), "back": reversed(od)}
    for it in views.values():
        next(it)
    s = {10, 20, 30}
    sit = iter(s)
    first = next(sit)
    out = resume_elsewhere(
        {"od": od, **views, "sit": sit},
        "out = [[type(v).__name__ for v in (keys, vals, items, back, sit)],"
        " [list(keys), list(vals), [list(p) for p in items], list(back), sorted(sit)]]",
        tmp_path,
    )
    assert out[0] == ["odict_iterator"] * 4 + ["set_iterator"]
    assert out[1][:4] == [["y", "z"], [2, 3], [["y", 2], ["z", 3]], ["y", "x"]]
    assert out[1][4] == sorted(s - {first})


def test_super_objects_and_generators(tmp_path: Path) -> None:
    ns = notebook(
        """
        class Base:
            def hello(self):
                return "base"
        class Child(Base):
            def hello(self):
                return "child"
        obj = Child()
        sup = super(Child, obj)
        gen = (i for i in range(3))
        """
    )
    result, _, _ = roundtrip({"gen": ns["gen"]})
    assert "a generator cannot be saved (it holds a paused Python frame)" in result.failed["gen"]
    assert "(dill:" not in result.failed["gen"]
    out = resume_elsewhere(
        {"obj": ns["obj"], "sup": ns["sup"]},
        "out = [type(sup).__name__, sup.hello(), sup.__self__ is obj]",
        tmp_path,
    )
    assert out == ["super", "base", True]


def test_weak_references_point_at_the_restored_objects(tmp_path: Path) -> None:
    ns = notebook(
        """
        import weakref
        class Node:
            def __init__(self, v):
                self.v = v
            def value(self):
                return self.v
        a, b = Node(1), Node(2)
        ref, proxy = weakref.ref(a), weakref.proxy(b)
        method = weakref.WeakMethod(a.value)
        cache = weakref.WeakValueDictionary({"a": a})
        seen = weakref.WeakSet([a, b])
        tmp = Node(3)
        dead = weakref.ref(tmp)
        del tmp
        """
    )
    names = "ref proxy method cache seen dead"
    values = {n: ns[n] for n in names.split()}
    out = resume_elsewhere(
        {**values, "a": ns["a"], "b": ns["b"]},
        """
        import weakref
        out = [ref() is a, proxy.v, any(r is proxy for r in weakref.getweakrefs(b)), method()(),
               cache["a"] is a, len(seen), dead() is None,
               [type(x).__name__ for x in (ref, proxy, method, cache, seen, dead)]]
        """,
        tmp_path,
    )
    assert out[:7] == [True, 2, True, 1, True, 2, True]
    assert out[7] == [
        "ReferenceType",
        "ProxyType",
        "WeakMethod",
        "WeakValueDictionary",
        "WeakSet",
        "ReferenceType",
    ]


def test_weak_reference_to_an_object_no_variable_holds_is_named() -> None:
    ns = notebook(
        """
        import weakref
        class Node:
            pass
        kept, only_weak = Node(), Node()
        holder = [weakref.ref(only_weak)]
        fine = weakref.ref(kept)
        """
    )
    result, loaded, failed = roundtrip({"holder": ns["holder"], "fine": ns["fine"], "kept": ns["kept"]})
    assert list(result.failed) == ["holder"]
    assert "weak reference to a Node object that no saved variable holds" in result.failed["holder"]
    assert failed == {} and loaded["fine"]() is loaded["kept"]


def test_loggers_and_handlers_come_back_with_their_state(tmp_path: Path) -> None:
    log_file = tmp_path / "run.log"
    log_file.write_text("earlier\n")
    logger = logging.getLogger("jupyter_pause.test.kinds")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    to_stdout = logging.StreamHandler(sys.stdout)
    to_stdout.setFormatter(logging.Formatter("OUT %(message)s"))
    to_file = logging.FileHandler(log_file, mode="w")
    to_file.setLevel(logging.INFO)
    logger.addHandler(to_stdout)
    logger.addHandler(to_file)
    logger.info("before")
    try:
        out = resume_elsewhere(
            {"logger": logger},
            f"""
            import logging, sys
            logger.debug("debug only on stdout")
            logger.info("after")
            for h in logger.handlers:
                h.flush()
            out = [logging.getLogger("jupyter_pause.test.kinds") is logger, logger.level, logger.propagate,
                   [type(h).__name__ for h in logger.handlers], logger.handlers[0].stream is sys.stdout,
                   open({str(log_file)!r}).read()]
            """,
            tmp_path,
        )
    finally:
        for handler in (to_stdout, to_file):
            logger.removeHandler(handler)
        to_file.close()
    assert out == [True, logging.DEBUG, False, ["StreamHandler", "FileHandler"], True, "before\nafter\n"]


def test_weak_key_dictionary_keeps_saved_keys() -> None:
    class Key:
        pass

    key = Key()
    mapping = weakref.WeakKeyDictionary({key: "v"})
    result, loaded, failed = roundtrip({"key": key, "mapping": mapping})
    assert result.failed == {} and failed == {}
    assert loaded["mapping"][loaded["key"]] == "v"


class _KernelStream(io.TextIOBase):
    """Stands in for ipykernel's OutStream, which holds a dead weak proxy among its attributes."""

    def __init__(self) -> None:
        gone = logging.Formatter()
        self.dead = weakref.proxy(gone)
        del gone


@pytest.mark.usefixtures("new_process")
def test_a_handler_on_a_kernel_stream_holding_a_dead_proxy_is_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import jupyter_pause as jp

    monkeypatch.setattr(sys, "stdout", _KernelStream())
    ns = {"handler": logging.StreamHandler(sys.stdout), "n": 1}
    result = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns)
    assert sorted(v.name for v in result.manifest.variables) == ["handler", "n"]
    assert result.manifest.skipped == []


def test_notebook_exceptions_whose_init_takes_more_than_the_message_come_back() -> None:
    ns = notebook(
        """
        class TrainingError(Exception):
            def __init__(self, message, step):
                super().__init__(message)
                self.step = step

        error = TrainingError("loss is nan", 412)
        error.add_note("seen at epoch 3")
        plain = KeyError("missing")
        """
    )
    _, loaded, failed = roundtrip({"error": ns["error"], "plain": ns["plain"], "after": {"step": 1}})
    assert failed == {}
    error = loaded["error"]
    assert type(error).__name__ == "TrainingError" and isinstance(error, Exception)
    assert (error.args, error.step, error.__notes__) == (("loss is nan",), 412, ["seen at epoch 3"])
    assert type(loaded["plain"]) is KeyError and loaded["plain"].args == ("missing",)
    assert loaded["after"] == {"step": 1}


def test_exceptions_with_a_reduction_of_their_own_keep_it() -> None:
    error = OSError(2, "No such file", "data.csv")
    _, loaded, failed = roundtrip({"error": error})
    assert failed == {}
    assert (type(loaded["error"]), loaded["error"].errno, loaded["error"].filename) == (
        FileNotFoundError,
        2,
        "data.csv",
    )


@pytest.mark.integration  # starts a worker process
def test_a_persistent_loader_between_passes_is_saved_without_its_worker_processes():
    import pickle

    import torch
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(torch.arange(8.0)), batch_size=2, num_workers=1, persistent_workers=True)
    first = [b[0].tolist() for b in loader]
    assert loader._iterator is not None  # its worker waits for the next pass
    with pytest.raises(NotImplementedError, match="cannot be pickled"):
        pickle.dumps(loader)
    result, loaded, failed = roundtrip({"loader": loader})
    assert failed == {} and result.failed == {}, result.failed
    assert loaded["loader"]._iterator is None and [b[0].tolist() for b in loaded["loader"]] == first
    assert value_digest(loaded["loader"]) == value_digest(loader)  # the restore test sees it back


def test_ordered_dicts_come_back_in_order_with_their_attributes_without_a_slot_name_search(monkeypatch) -> None:
    import copyreg

    inner = collections.OrderedDict([("z", 1), ("a", [2])])
    inner.note = "kept"
    outer = collections.OrderedDict(first=inner, empty=collections.OrderedDict())
    outer["self"] = outer
    searched = []
    real = copyreg._slotnames
    monkeypatch.setattr(copyreg, "_slotnames", lambda cls: searched.append(cls) or real(cls))
    _, loaded, failed = roundtrip({"outer": outer})
    assert failed == {}
    back = loaded["outer"]
    assert searched == []  # a torch module holds a dozen ordered dicts: each search costs
    assert list(back) == ["first", "empty", "self"] and back["self"] is back
    assert list(back["first"].items()) == [("z", 1), ("a", [2])] and back["first"].note == "kept"
    assert type(back["empty"]) is collections.OrderedDict and vars(back["empty"]) == {}
    assert value_digest(back) == value_digest(outer)

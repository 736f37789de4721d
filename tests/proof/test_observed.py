"""jupyter_pause.proof.observed: what an unsaveable object shows of its state is read without
acting on it, and tells a rebuild that reached that state from one that did not."""

from __future__ import annotations

import hashlib
import io
import itertools
import sqlite3

from tqdm import tqdm

from jupyter_pause.proof.observed import CHECKED, DIFFERS, NOT_CHECKABLE, check, observe


def test_a_hash_is_read_from_a_copy_and_left_unfinished():
    h = hashlib.sha256(b"alpha")
    seen = observe(h)
    assert seen == f"hexdigest {hashlib.sha256(b'alpha').hexdigest()}"
    h.update(b"beta")  # still open: reading it finished nothing
    assert h.hexdigest() == hashlib.sha256(b"alphabeta").hexdigest()
    assert check(seen, hashlib.sha256(b"alpha")) == (CHECKED, "")
    outcome, how = check(seen, hashlib.sha256())
    assert outcome == DIFFERS and how.startswith(f"was {seen}, now hexdigest e3b0c442")
    assert observe(hashlib.shake_128(b"x")).startswith("hexdigest ")


def test_positions_of_generators_and_iterators_without_moving_them():
    def make():
        return (i * i for i in range(10))

    gen, other = make(), make()
    for _ in range(3):
        next(gen)
    assert observe(gen) != observe(other)
    next(other), next(other), next(other)
    assert observe(gen) == observe(other) and next(gen) == 9  # reading it moved nothing
    labels, again = map(str, iter([1, 2, 3])), map(str, iter([1, 2, 3]))
    next(labels)
    assert check(observe(labels), again)[0] == DIFFERS
    next(again)
    assert check(observe(labels), again) == (CHECKED, "")
    counter = itertools.count(5)
    next(counter)
    assert observe(counter) == "count(6)"


def test_a_progress_bar_a_file_and_a_connection(tmp_path):
    with tqdm(total=100, file=io.StringIO()) as bar:
        bar.update(10)
        assert observe(bar) == "tqdm at 10 of 100"
    path = tmp_path / "log.txt"
    path.write_text("0123456789")
    with open(path) as handle:
        handle.read(4)
        assert observe(handle) == f"file {str(path)!r} mode r at 4"
    conn = sqlite3.connect(tmp_path / "db.sqlite")
    try:
        assert observe(conn) == f"sqlite main={tmp_path / 'db.sqlite'}"
        assert not conn.in_transaction
    finally:
        conn.close()
    assert observe(conn) == ""  # closed: it raises when asked, and is not checkable
    memory = sqlite3.connect(":memory:")
    assert observe(memory) == ""  # its tables are its state: a new empty one must not read as the same
    memory.close()


def test_an_object_of_another_kind_is_not_checkable():
    class Opaque:
        pass

    assert observe(Opaque()) == "" and observe(iter({1: 2}.items())) == ""
    assert check("", Opaque()) == (NOT_CHECKABLE, "")

"""The cell history: which names each statement assigns, changes and reads, and what a failed cell keeps."""

from __future__ import annotations

import pytest

from jupyter_pause.replay.history import FORMAT, History, analyse, failed_line


def _one(source: str):
    (statement,) = analyse(source, 1)
    return statement


@pytest.mark.parametrize(
    ("source", "assigns", "changes"),
    [
        ("x = f(y)", ["x"], []),
        ("a, (b, c) = t", ["a", "b", "c"], []),
        ("h.update(b'x')", [], ["h"]),
        ("w.layout.width = '50%'", [], ["w"]),
        ("d['k'] = 1", [], ["d"]),
        ("total += 1", [], ["total"]),
        ("next(gen)", [], ["gen"]),
        ("del x", ["x"], ["x"]),
        ("del rows[0]", [], ["rows"]),
        ("import numpy as np, os.path", ["np", "os"], []),
        ("from math import tau as t", ["t"], []),
        ("for i in gen:\n    acc.append(i)", ["i"], ["acc"]),
        ("with open(p) as fh:\n    pass", ["fh"], []),
        ("def f(a):\n    cache.clear()\n    return a + k", ["f"], []),  # the body runs later
        ("[h.update(x) for x in items]", [], ["h"]),  # a comprehension runs now
        ("if (n := len(q)) > 2:\n    q.pop()", ["n"], ["q"]),
        ("m.update(words[0].encode())", [], ["m"]),  # reading an element is no change of the list
        ("print(m.hexdigest(), cfg.items())", [], []),
        ("box.v += 1", [], ["box"]),
        ("q.get()", [], ["q"]),  # a queue's get takes an item out
    ],
)
def test_what_a_statement_assigns_and_changes(source, assigns, changes):
    statement = _one(source)
    assert (statement.assigns, statement.changes) == (assigns, changes)


def test_reads_leave_out_the_names_a_function_or_comprehension_binds():
    assert _one("squares = (x * k for x in nums)").reads == ["k", "nums"]
    assert _one("def f(a, *rest, key=default):\n    b = a\n    return b + g(rest, key)").reads == ["default", "g"]
    assert _one("fn = lambda v: v * scale").reads == ["scale"]
    assert _one("class Model(Base):\n    size = 3\n    twice = size * 2").reads == ["Base"]


def test_magics_are_never_replayed_and_those_that_may_bind_names_are_opaque():
    run = _one("get_ipython().run_line_magic('run', 'script.py')")
    assert (run.replayable, run.opaque) == (False, True)
    saved = _one("get_ipython().run_line_magic('checkpoint', '--tag x')")
    assert (saved.replayable, saved.opaque) == (False, False)
    assert _one("exec(code)").opaque and _one("globals()['x'] = 1").opaque and _one("from m import *").opaque
    assert not _one("x = 1").opaque


def test_each_top_level_statement_is_recorded_with_its_cell_and_source():
    statements = analyse("a = 1\nb = [a,\n     2]\nprint(b)", 7)
    assert [(s.cell, s.source) for s in statements] == [(7, "a = 1"), (7, "b = [a, 2]"), (7, "print(b)")]
    assert analyse("def broken(:", 1) == []


def _raise_in_cell(source: str) -> BaseException:
    try:
        exec(compile(source, "<cell>", "exec"), {})
    except Exception as e:
        return e
    raise AssertionError("the cell did not raise")


def test_a_cell_that_raised_keeps_the_statements_before_the_one_that_raised():
    source = "a = 1\nb = 2\nraise_it = 1 / 0\nc = 3"
    history = History()
    added = history.record_cell(source, 4, _raise_in_cell(source))
    assert [s.assigns for s in added] == [["a"], ["b"]]
    assert failed_line(_raise_in_cell("x = 1\n\ndef f():\n    return 1 / 0\n\ny = f()")) == 6


def test_the_history_travels_as_a_versioned_blob():
    history = History(recording=True)
    history.record_cell("import hashlib\nh = hashlib.sha256()\nh.update(b'a')", 1)
    back = History.from_bytes(history.to_bytes())
    assert back == history
    newer = history.to_bytes().replace(f'"format":{FORMAT}'.encode(), f'"format":{FORMAT + 1}'.encode())
    with pytest.raises(ValueError, match="newer than this jupyter-pause reads .*upgrade jupyter-pause"):
        History.from_bytes(newer)


@pytest.mark.parametrize(
    "source",
    [
        "api_token = 'tok-1'",
        "db = connect(host, password='pw-2')",
        "settings = {'api_key': 'k-3'}",
        "client.secret = 's-4'",
        "os.environ['HF_TOKEN'] = 't-5'",
    ],
)
def test_a_statement_that_may_hold_a_secret_keeps_no_source_and_is_never_replayed(source):
    statement = _one(source)
    assert statement.source == "" and statement.redacted and not statement.replayable
    assert not _one("tokenizer = load('bert')").redacted

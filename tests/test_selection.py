"""jupyter_pause.session.selection: which variables a checkpoint saves, and what it says about the rest."""

from __future__ import annotations

import os
import re
import sys
import weakref

import numpy
import numpy.linalg
import pytest

from jupyter_pause.errors import SelectionError
from jupyter_pause.session.selection import looks_secret, select

SECRET_NAMES = ["api_token", "db_password", "MY_SECRET", "aws_credentials", "openai_api_key"]


def user_namespace() -> dict:
    def helper() -> int:
        return 1

    class Model:
        pass

    return {
        "x": 1,
        "data": [1, 2, 3],
        "helper": helper,
        "Model": Model,
        "model": Model(),
        # IPython's and Python's own
        "In": ["", "x = 1"],
        "Out": {},
        "get_ipython": lambda: None,
        "exit": None,
        "quit": None,
        "__builtins__": __builtins__,
        "__name__": "__main__",
        "_": 5,
        "_i1": "x = 1",
        "__": None,
        "_private": "mine",
        # modules
        "np": numpy,
        "la": numpy.linalg,
        "os": os,
        "main": sys.modules["__main__"],
    }


def test_default_selection_keeps_user_variables_only() -> None:
    selection = select(user_namespace())
    assert list(selection.values) == ["x", "data", "helper", "Model", "model"]
    assert selection.skipped == []


def test_default_selection_records_modules_to_import_again() -> None:
    selection = select(user_namespace())
    assert selection.imports == {"np": "numpy", "la": "numpy.linalg", "os": "os"}


def test_hidden_names_are_left_out_silently() -> None:
    ns = {"x": 1, "shell_thing": object(), "y": 2}
    selection = select(ns, hidden={"shell_thing"})
    assert list(selection.values) == ["x", "y"]
    assert selection.skipped == []


def test_secret_looking_names_are_skipped_with_a_reason() -> None:
    ns = {name: "s3cr3t" for name in SECRET_NAMES} | {"lr": 0.1}
    selection = select(ns)
    assert list(selection.values) == ["lr"]
    assert [r.name for r in selection.skipped] == SECRET_NAMES
    for record in selection.skipped:
        assert record.type == "str"
        assert "secret" in record.reason and "name it" in record.reason


@pytest.mark.parametrize("name", SECRET_NAMES + ["HF_TOKEN", "passwd", "ssh_private_key"])
def test_looks_secret(name: str) -> None:
    assert looks_secret(name)


@pytest.mark.parametrize("name", ["model", "optimizer", "lr", "train_loader", "history", "keys"])
def test_ordinary_names_do_not_look_secret(name: str) -> None:
    assert not looks_secret(name)


def test_tokenizer_and_token_counts_are_saved_by_default() -> None:
    ns = {"tokenizer": object(), "max_new_tokens": 256, "num_tokens": 1024, "hf_token": "hf_x"}
    selection = select(ns)
    assert list(selection.values) == ["tokenizer", "max_new_tokens", "num_tokens"]
    assert [r.name for r in selection.skipped] == ["hf_token"]


def test_named_selection_includes_secret_names() -> None:
    ns = {name: "s3cr3t" for name in SECRET_NAMES} | {"lr": 0.1, "other": 2}
    selection = select(ns, ["api_token", "db_password", "lr", "lr"])
    assert selection.values == {"api_token": "s3cr3t", "db_password": "s3cr3t", "lr": 0.1}
    assert selection.skipped == []


def test_named_selection_of_unknown_names_raises_naming_them() -> None:
    ns = {"x": 1, "model": object()}
    with pytest.raises(SelectionError) as info:
        select(ns, ["x", "modle", "optimiser"])
    named = re.search(r"no variable named (.*) in the namespace", str(info.value))
    assert named is not None and named.group(1) == "modle, optimiser"


def test_exclude_globs_leave_variables_out() -> None:
    ns = {"tmp_a": 1, "tmp_b": 2, "big1": [0], "big22": [0], "keep": 3}
    selection = select(ns, exclude=["tmp_*", "big?"])
    assert list(selection.values) == ["big22", "keep"]
    assert selection.skipped == []
    named = select(ns, ["tmp_a", "keep"], exclude=["tmp_*"])
    assert list(named.values) == ["keep"]


def test_dead_weak_proxy_is_reported_not_raised() -> None:
    class Resource:
        pass

    target = Resource()
    ns = {"before": 1, "handle": weakref.proxy(target), "after": 2}
    del target  # the proxy is now dead: any use of it raises ReferenceError
    selection = select(ns)
    assert list(selection.values) == ["before", "after"]
    (record,) = selection.skipped
    assert record.name == "handle"
    assert "cannot be inspected" in record.reason
    assert "proxy" in record.type.lower()

"""jupyter_pause.process.selection: which variables a checkpoint saves, and what it says about the rest."""

from __future__ import annotations

import builtins
import os
import re
import sys
import weakref

import numpy
import numpy.linalg
import pytest

from jupyter_pause.errors import SelectionError
from jupyter_pause.process.selection import looks_secret, select, shadowing

SECRET_NAMES = ["api_token", "db_password", "MY_SECRET", "aws_credentials", "openai_api_key"]

#: What IPython puts in a namespace, as its ``user_ns_hidden`` holds it.
IPYTHON_OWN = {"In": ["", "x = 1"], "Out": {}, "get_ipython": lambda: None, "exit": object(), "quit": object()}


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
        **IPYTHON_OWN,
        "open": open,
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
    selection = select(user_namespace(), hidden=IPYTHON_OWN)
    assert list(selection.values) == ["x", "data", "helper", "Model", "model"]
    assert selection.skipped == []


def test_default_selection_records_modules_to_import_again() -> None:
    selection = select(user_namespace(), hidden=IPYTHON_OWN)
    assert selection.imports == {"np": "numpy", "la": "numpy.linalg", "os": "os"}


def test_hidden_names_are_left_out_silently_while_they_hold_the_shells_object() -> None:
    thing = object()
    ns = {"x": 1, "shell_thing": thing, "y": 2}
    selection = select(ns, hidden={"shell_thing": thing})
    assert list(selection.values) == ["x", "y"]
    assert selection.skipped == []


def test_a_users_value_under_ipythons_names_is_saved_and_named() -> None:
    """By identity, not by name: ``display = CalibrationDisplay...`` is the user's."""
    mine = {"display": {"curve": [0.1, 0.9]}, "In": [1, 2], "exit": 3, "get_ipython": "mine", "open": "door"}
    ns = {**user_namespace(), **mine}
    selection = select(ns, hidden=IPYTHON_OWN)
    assert {n: selection.values[n] for n in mine} == mine
    assert "Out" not in selection.values and "quit" not in selection.values  # still IPython's
    assert shadowing(["x", *mine, "_i1"], IPYTHON_OWN, "restored") == [
        f"{name}: restored (it shadows IPython's {name})" for name in mine
    ]


def test_ipythons_display_builtin_imported_into_the_namespace_is_not_saved(monkeypatch) -> None:
    from IPython.display import display

    monkeypatch.setattr(builtins, "display", display, raising=False)  # as IPython installs it in a kernel
    selection = select({"display": display, "x": 1}, hidden={})
    assert list(selection.values) == ["x"]


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


#: A notebook's own values under names IPython also uses, checked by value after the round trip.
SHADOWING = {"display": {"curve": [0.1, 0.9], "name": "CalibrationDisplay"}, "In": [1, 2, 3], "exit": "not now"}


@pytest.mark.integration
def test_ipythons_names_holding_the_users_values_round_trip(start_kernel, tmp_path):
    store = tmp_path / "store"
    a = start_kernel(tmp_path, JUPYTER_PAUSE_STORE=str(store))
    out = a.run("%load_ext jupyter_pause\nfrom IPython.display import display\nx = 1\n%checkpoint --session own").ok()
    assert "saved 1 variable(s)" in out.stdout and "shadows" not in out.stdout, out.stdout  # IPython's own
    a.run("\n".join(f"{name} = {value!r}" for name, value in SHADOWING.items())).ok()
    out = a.run("%checkpoint --session shadow").ok().stdout
    assert "saved 4 variable(s)" in out, out
    for name in SHADOWING:
        assert f"{name}: saved (it shadows IPython's {name})" in out, out
    a.kill()

    b = start_kernel(tmp_path, JUPYTER_PAUSE_STORE=str(store))
    out = b.run("%load_ext jupyter_pause\n%resume --session own").ok().stdout
    assert "restored 1 variable(s): x" in out and "shadows" not in out, out
    assert b.value("display is __import__('IPython').display.display") is True
    out = b.run("%resume --session shadow").ok().stdout
    for name in SHADOWING:
        assert f"{name}: restored (it shadows IPython's {name})" in out, out
    assert "4 of 4 variable(s) match their digests" in out, out
    assert {name: b.value(name) for name in SHADOWING} == SHADOWING
    assert b.value("x") == 1  # the kernel still runs cells, with the user's In and exit in place

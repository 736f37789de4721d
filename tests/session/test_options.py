"""One options object per operation: a magic line, the command line and the keywords of the public
functions build the same ``CheckpointOptions`` / ``ResumeOptions``; bad input is refused up front,
saying what to do, with nothing saved, restored or scheduled."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from IPython.core.error import UsageError

import jupyter_pause as jp
from jupyter_pause.cli import main
from jupyter_pause.cli.drill import drill_options
from jupyter_pause.cli.main import parser
from jupyter_pause.errors import PauseError, SelectionError
from jupyter_pause.kernel.magics import parse_checkpoint, parse_resume
from jupyter_pause.session.options import MAX_TAG, CheckpointOptions, ResumeOptions, with_overrides

pytestmark = pytest.mark.usefixtures("new_process")


def _drill(*argv: str) -> tuple[CheckpointOptions, ResumeOptions]:
    """The options ``jupyter pause drill`` parses ``argv`` into."""
    return drill_options(parser().parse_args(["drill", "nb.ipynb", *argv]))


# -- defaults ------------------------------------------------------------------------------------


def test_defaults_are_the_documented_ones():
    assert CheckpointOptions() == CheckpointOptions(
        names=None, store=None, session=None, exclude=(), strict=False, tag=None, trigger="manual"
    )
    assert ResumeOptions() == ResumeOptions(
        checkpoint="latest", store=None, session=None, only=None, map_location="auto", overwrite=False
    )
    assert parse_checkpoint("").options == CheckpointOptions()
    assert parse_resume("").options == ResumeOptions()
    assert (parse_checkpoint("").background, parse_checkpoint("").every, parse_resume("").check) == (False, None, False)


def test_options_are_frozen_and_lists_become_tuples(tmp_path):
    options = CheckpointOptions(names=(n for n in ["a", "b"]), exclude=["t*"], store=tmp_path)
    assert options.names == ("a", "b") and options.exclude == ("t*",) and options.store == str(tmp_path)
    assert options == CheckpointOptions(names=("a", "b"), exclude=("t*",), store=str(tmp_path))
    assert hash(options) == hash(CheckpointOptions(names=["a", "b"], exclude=["t*"], store=str(tmp_path)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.strict = True  # type: ignore[misc]
    assert ResumeOptions(None, only=["x"]) == ResumeOptions("latest", only=("x",))  # type: ignore[arg-type]
    assert repr(CheckpointOptions()).endswith("trigger='manual')")


# -- the same request from each edge -------------------------------------------------------------


def test_a_magic_line_and_the_command_line_parse_to_equal_options():
    pause, resume = _drill("--store", "/data/pause", "--session", "exp")
    assert resume == parse_resume("--store /data/pause --session exp").options
    assert pause.trigger == "drill"  # the drill's checkpoint says it was a drill ...
    assert dataclasses.replace(pause, trigger="manual") == parse_checkpoint("--store /data/pause --session exp").options
    assert _drill() == (CheckpointOptions(trigger="drill"), ResumeOptions())  # ... and else asks for the defaults


def test_a_magic_line_parses_to_the_options_the_keywords_build():
    line = parse_checkpoint("model opt --store /s --session exp --exclude tmp* --strict --tag baseline --every 15")
    keywords = {"names": ["model", "opt"], "store": "/s", "session": "exp", "exclude": ["tmp*"], "strict": True}
    assert line.options == with_overrides(CheckpointOptions, None, {**keywords, "tag": "baseline"}, "checkpoint")
    assert (line.background, line.every) == (False, 15.0)
    assert parse_checkpoint("--async --every off").every == 0 and parse_checkpoint("--async").background
    resume = parse_resume("20260101-120000-a1b2c3 --only model opt --map-location cpu --overwrite --check")
    assert resume.check and resume.options == ResumeOptions(
        "20260101-120000-a1b2c3", only=("model", "opt"), map_location="cpu", overwrite=True
    )
    assert parse_resume("--no-rebuild").options == ResumeOptions(rebuild=False)
    assert ResumeOptions().rebuild is True


def test_keywords_replace_fields_of_a_given_options_object():
    base = CheckpointOptions(store="/s", session="exp", tag="a")
    assert with_overrides(CheckpointOptions, base, {}, "checkpoint") is base
    assert with_overrides(CheckpointOptions, base, {"tag": "b"}, "checkpoint") == CheckpointOptions(
        store="/s", session="exp", tag="b"
    )


def test_the_public_functions_take_keywords_or_an_options_object(tmp_path):
    ns = {"x": 1, "y": [2, 3], "z": "three"}
    kept = jp.checkpoint(["x", "y"], store=str(tmp_path), session="opts", namespace=ns, tag="by keywords").manifest
    given = CheckpointOptions(names=("z",), store=str(tmp_path), session="opts")
    other = jp.checkpoint(options=given, namespace=ns, tag="by object").manifest
    assert sorted(v.name for v in kept.variables) == ["x", "y"] and kept.tag == "by keywords"
    assert [v.name for v in other.variables] == ["z"] and other.tag == "by object"

    target: dict = {}
    restored = jp.resume(kept.id, options=ResumeOptions(store=str(tmp_path), session="opts"), namespace=target)
    assert restored.manifest.id == kept.id and target == {"x": 1, "y": [2, 3]}
    only: dict = {}
    jp.resume(kept.id, store=str(tmp_path), session="opts", only=["y"], namespace=only)
    assert only == {"y": [2, 3]}


# -- bad input: a clear error, and nothing lost --------------------------------------------------


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("--session ../../etc", "invalid session name"),
        ("--tag " + "t" * (MAX_TAG + 1), f"keep it under {MAX_TAG}"),
        ("--every soon", "--every takes minutes"),
        ("--every -1", "positive number of minutes"),
        ("--bogus-option", "unrecognized arguments"),
    ],
)
def test_a_bad_checkpoint_line_is_a_usage_error(line, message):
    with pytest.raises(UsageError, match=message):
        parse_checkpoint(line)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("--session ../x", "invalid session name"),
        ("--map-location gpu", "invalid choice"),
        ("--only", "expected at least one argument"),
    ],
)
def test_a_bad_resume_line_is_a_usage_error(line, message):
    with pytest.raises(UsageError, match=message):
        parse_resume(line)


def test_the_command_line_refuses_bad_options_before_reading_the_notebook(tmp_path, capsys):
    store = tmp_path / "store"
    code = main(["drill", str(tmp_path / "missing.ipynb"), "--store", str(store), "--session", "../escape"])
    err = capsys.readouterr().err
    assert code == 2 and "invalid session name '../escape'" in err and "no such file" not in err
    assert not store.exists()


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (lambda: CheckpointOptions(names="model"), SelectionError, r"write names=\['model'\]"),
        (lambda: CheckpointOptions(names=["a", 3]), SelectionError, "3 is a int"),
        (lambda: CheckpointOptions(exclude="tmp*"), SelectionError, r"write exclude=\['tmp\*'\]"),
        (lambda: CheckpointOptions(tag="t" * 10_000_000), SelectionError, "keep it under 1000"),
        (lambda: CheckpointOptions(tag=5), ValueError, "tag is a string"),
        (lambda: CheckpointOptions(trigger="whim"), ValueError, "use one of manual, button"),
        (lambda: CheckpointOptions(strict="yes"), ValueError, "strict is True or False"),
        (lambda: CheckpointOptions(store=5), PauseError, "store is a URL or a folder"),
        (lambda: CheckpointOptions(session="a/b"), PauseError, "invalid session name 'a/b'"),
        (lambda: ResumeOptions(map_location="gpu"), SelectionError, "--map-location must be one of auto, cpu"),
        (lambda: ResumeOptions(only="model"), SelectionError, r"write only=\['model'\]"),
        (lambda: ResumeOptions(overwrite=1), ValueError, "overwrite is True or False"),
        (lambda: ResumeOptions(checkpoint=7), ValueError, "checkpoint is a string"),
    ],
)
def test_bad_values_are_refused_saying_what_to_write(build, error, message):
    with pytest.raises(error, match=message) as info:
        build()
    assert len(str(info.value)) < 400  # a 10 MB value is not echoed back whole


def test_a_bad_keyword_or_options_object_saves_and_restores_nothing(tmp_path):
    store = tmp_path / "store"
    ns = {"x": 1}
    with pytest.raises(TypeError, match="unexpected keyword argument 'tags'.*names, store, session, exclude"):
        jp.checkpoint(store=str(store), session="s", namespace=ns, tags="typo")
    with pytest.raises(TypeError, match="takes options=a CheckpointOptions, not a ResumeOptions"):
        jp.checkpoint_async(options=ResumeOptions(), namespace=ns)  # type: ignore[arg-type]
    with pytest.raises(SelectionError, match="write names"):
        jp.checkpoint("x", store=str(store), session="s", namespace=ns)
    assert not list(Path(store).rglob("*.json"))
    jp.checkpoint(store=str(store), session="s", namespace=ns)
    target = {"kept": True}
    with pytest.raises(TypeError, match="resume_and_verify\\(\\) got an unexpected keyword argument 'map'"):
        jp.resume_and_verify(store=str(store), session="s", namespace=target, map="cpu")
    with pytest.raises(SelectionError, match="map-location"):
        jp.resume(store=str(store), session="s", namespace=target, map_location="gpu")
    assert target == {"kept": True}

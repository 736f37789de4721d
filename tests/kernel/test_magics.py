"""``%resume`` in a real kernel when manifests are damaged: the damage is named, the newest intact
checkpoint is resumed, and "no checkpoint" is said only when there is none."""

from __future__ import annotations

import pytest

from jupyter_pause.store.catalog import Catalog
from jupyter_pause.store.storage import Store
from tests.support.damage import WHY, damage

pytestmark = pytest.mark.integration

SESSION = "magic-damage"


def test_resume_names_damage_falls_back_and_never_says_no_checkpoint(start_kernel, tmp_path):
    store = tmp_path / "store"
    env = {"JUPYTER_PAUSE_STORE": str(store), "JUPYTER_PAUSE_SESSION": SESSION}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = start_kernel(tmp_path / "a", **env)
    a.run("%load_ext jupyter_pause\nn = 1\n%checkpoint n\nn = 2\n%checkpoint n").ok()
    a.close()
    first, second = sorted(Catalog(Store(str(store))).checkpoints(SESSION), key=lambda m: m.created)
    damage(store, SESSION, second.id, "checksum")

    b = start_kernel(tmp_path / "b", **env)
    out = b.run("%load_ext jupyter_pause\n%resume").ok().stdout
    assert f"checkpoint {second.id} is damaged: {WHY['checksum']}" in out, out
    assert f"resuming from {first.id} instead" in out and b.value("n") == 1

    asked = b.run(f"%resume {second.id}")
    assert f"checkpoint {second.id} of session {SESSION!r} is damaged: {WHY['checksum']}" in asked.error, asked
    assert f"the newest intact checkpoint is {first.id}" in asked.error

    damage(store, SESSION, first.id, "torn")
    every = b.run("%resume")
    assert f"every checkpoint of session {SESSION!r}" in every.error and WHY["torn"] in every.error, every
    assert "no checkpoint of session" not in every.error

    none = b.run("%resume --session nothing-here")
    assert "no checkpoint of session 'nothing-here'" in none.error, none
    b.close()


@pytest.mark.parametrize("magic", ["checkpoint", "resume"])
def test_the_magics_docstrings_are_their_manual(magic):
    """``%checkpoint?`` shows what the magic does, every option of its parser, and examples that
    parse as they are written."""
    from jupyter_pause.kernel import magics

    method = getattr(magics.PauseMagics, magic)
    manual = method.__doc__
    description, _, options = manual.partition("options:")
    for action in method.parser._actions:
        if action.option_strings and action.dest != "help":
            assert action.option_strings[0] in options, action.option_strings
    assert len(description.split("Examples")[0].splitlines()) > 15  # a manual, not a line
    examples = [line.split("#")[0].strip() for line in description.split("Examples")[1].splitlines()]
    examples = [line for line in examples if line.startswith(f"%{magic}")]
    assert len(examples) >= 5
    parse = magics.parse_checkpoint if magic == "checkpoint" else magics.parse_resume
    for line in examples:
        parse(line.removeprefix(f"%{magic}").strip().replace("'", ""))

"""A team on a real JupyterHub sharing one store, a ``{user}`` prefix each: its configuration, and
what a test does in a user's server (pause and stop, resume, read what the store holds)."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from jupyter_pause.store.layout import manifest_id, manifest_key, manifest_prefix, report_prefix
from jupyter_pause.store.storage import Store
from tests.support.hub import wait_for

NOTEBOOK = "train.ipynb"
SESSION = "train"
SHARED_KEY = secrets.token_hex(32)


def hub_config(team: Path, secret: str | None, old: list[str] | None = None) -> str:
    """jupyterhub_config.py lines: every server's store a ``{user}`` folder of ``team``, each
    user's signing keys derived from ``secret`` (and ``old``, former secrets), servers that may
    stop themselves."""
    lines = [
        f"c.Spawner.environment.update({{'JUPYTER_PAUSE_STORE': {str(team / '{user}')!r}}})",
        'c.Spawner.server_token_scopes = ["users:activity!user", "access:servers!server", "delete:servers!server"]',
    ]
    if secret is not None:
        lines.append(f"c.PauseHubKeys.secret = {secret!r}")
        if old:
            lines.append(f"c.PauseHubKeys.old_secrets = {old!r}")
        lines += [
            "from jupyter_pause.hub.keys import signing_environment",
            "c.Spawner.environment.update(signing_environment(c))",
        ]
    return "\n".join(lines) + "\n"


def planted(target_store: Path, canary: Path, pose_as: str | None = None) -> str:
    """The cell mallory runs: a gift whose unpickling touches ``canary``, checkpointed into alice's
    session (``pose_as``: the Hub user her checkpoint claims to be written by)."""
    pose = f"os.environ['JUPYTERHUB_USER'] = {pose_as!r}\n" if pose_as else ""
    return (
        f"import os\n{pose}"
        "class Gift:\n"
        "    def __reduce__(self):\n"
        f"        return (os.system, ('touch {canary}',))\n"
        "gift = Gift()\n"
        "marker = 666\n"
        "get_ipython().run_line_magic('load_ext', 'jupyter_pause')\n"
        f"get_ipython().run_line_magic('checkpoint', '--store {target_store} --session {SESSION}')\n"
    )


def pause_and_stop(hub, user: str) -> None:
    """Pause All and Stop Server, as the button does; wait until the Hub shows the server stopped."""
    answer = hub.server_fetch(user, "jupyter-pause/api/release", "POST", {})
    assert answer.code == 202, answer
    wait_for(lambda: hub.server_model(user), lambda m: m is None, 120, f"{user}'s server stopped")


def _asked(hub, user: str, action: str, path: str, ends: tuple[str, ...]) -> dict:
    """POST ``action`` (pause, resume) for the notebook at ``path``; its status once in one of ``ends``."""
    answer = hub.server_fetch(user, f"jupyter-pause/api/{action}", "POST", {"path": path})
    assert answer.code == 202, answer
    return wait_for(
        lambda: hub.server_fetch(user, f"jupyter-pause/api/status?path={path}").body,
        lambda s: s["state"] in ends,
        120,
        f"{user}'s {action} of {path}",
    )


def pause_one(hub, user: str, path: str) -> dict:
    """Pause one notebook (its kernel shut down); its final status."""
    return _asked(hub, user, "pause", path, ("paused", "failed"))


def resume(hub, user: str) -> dict:
    """The server's resume of the notebook's ``latest`` (the Resume button); its final status."""
    return _asked(hub, user, "resume", NOTEBOOK, ("ready", "failed"))


def marker_of(hub, user: str) -> int:
    """``marker`` in the kernel of ``user``'s one notebook."""
    return value_of(hub, user, "marker")


def kernel_of(hub, user: str) -> str:
    """The id of the kernel of ``user``'s one notebook."""
    (session,) = hub.server_fetch(user, "api/sessions").body
    return session["kernel"]["id"]


def value_of(hub, user: str, expression: str) -> object:
    """What ``expression`` (its value JSON-serialisable) is in the kernel of ``user``'s one notebook."""
    return json.loads(hub.execute(user, kernel_of(hub, user), f"import json; print(json.dumps({expression}))"))


def checkpoint_ids(team: Path, user: str, session: str = SESSION) -> list[str]:
    return sorted(i for key in Store(str(team / user)).list(manifest_prefix(session)) if (i := manifest_id(key)))


def written_manifest(team: Path, user: str, checkpoint: str, key: str | None = None) -> dict:
    """The manifest as ``user``'s server wrote it, opened with their ``key`` (a Hub's servers encrypt)."""
    return json.loads(bytes(Store(str(team / user), keys=key).read(manifest_key(SESSION, checkpoint))))


def run_report(team: Path, user: str, checkpoint: str, key: str | None = None) -> dict:
    """The newest run report of a resume of ``checkpoint``, opened with ``user``'s ``key``."""
    store = Store(str(team / user), keys=key)
    keys = sorted(k for k in store.list(report_prefix(SESSION)) if k.split("/")[-1].startswith(checkpoint))
    return json.loads(bytes(store.read(keys[-1])))  # the newest resume's


def planted_blobs(target_store: str, sizes: dict[str, int]) -> str:
    """The cell mallory runs: same-size garbage under the plain pool name of each digest of
    ``sizes`` in the store at ``target_store``, written with the credential her server has; prints
    the keys it wrote, one a line."""
    return (
        "import fsspec\n"
        "from jupyter_pause.store.layout import pool_key\n"
        f"fs, root = fsspec.core.url_to_fs({target_store!r})\n"
        f"for digest, size in {sizes!r}.items():\n"
        "    fs.pipe_file(f'{root}/{pool_key(digest)}', (b'mallory!' * (size // 8 + 1))[:size])\n"
        "    print(pool_key(digest))\n"
    )


def jupyter_pause_list(target_store: str) -> str:
    """A cell that runs ``jupyter pause list`` on the store at ``target_store`` with the kernel's
    environment and prints what it printed, errors included."""
    command = ["jupyter_pause.cli", "list", "--store", target_store]
    return (
        "import subprocess, sys\n"
        f"done = subprocess.run([sys.executable, '-m', *{command!r}], capture_output=True, text=True)\n"
        "print(done.stdout, done.stderr)\n"
    )


def resume_from(target_store: str, session: str = SESSION) -> str:
    """The cell mallory runs: ``%resume`` of ``session`` in the store at ``target_store``; prints
    what it said or the error it was refused with, as JSON."""
    return (
        "import contextlib, io, json\n"
        "from IPython.core.error import UsageError\n"
        "said, refused = io.StringIO(), None\n"
        "get_ipython().run_line_magic('load_ext', 'jupyter_pause')\n"
        "with contextlib.redirect_stdout(said):\n"
        "    try:\n"
        f"        get_ipython().run_line_magic('resume', '--store {target_store} --session {session}')\n"
        "    except UsageError as e:\n"
        "        refused = str(e)\n"
        "print(json.dumps({'said': said.getvalue(), 'refused': refused}))\n"
    )

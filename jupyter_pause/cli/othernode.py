"""The drill's "another node": a resume rehearsed where node A's HOME, caches, temp folder and
notebook folder are hidden, as on a node that never ran the notebook.

The resuming kernel starts in a private mount namespace (``unshare``; a user namespace too where the
drill is not root) in which each of node A's folders is covered by an empty tmpfs: its path still
exists, as it would on a node of the same image, but nothing node A left there (a Hugging Face
cache, a temp file, a data file beside the notebook) can be read. What the kernel needs to run
stays visible: the Python installation and the kernel's ``sys.path``, a local store, the Jupyter
runtime folder (the connection file) and the drill's own folder, bound back over the tmpfs where
they lie inside a hidden folder.

Where no mount namespace can be made (a container without the privilege), the kernel gets empty
folders of its own for HOME, the caches and the temp folder instead, and the drill says that
absolute paths into node A's folders stay readable, so the rehearsal may miss losses.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

#: Variables naming a cache folder of a library notebooks use; each is one of node A's folders.
CACHE_VARIABLES = ("XDG_CACHE_HOME", "HF_HOME", "HF_DATASETS_CACHE", "TRANSFORMERS_CACHE", "TORCH_HOME")

#: Variables the resuming kernel gets of its own where folders cannot be hidden (``fallback_env``).
FOLDER_VARIABLES = ("HOME", "TMPDIR", *CACHE_VARIABLES)


@dataclass(frozen=True)
class OtherNode:
    """How the resuming kernel of an "another node" rehearsal is started."""

    #: Node A's folders the kernel cannot see.
    hidden: tuple[str, ...]
    #: The command the kernel's own command line is prefixed with (empty: no mount namespace).
    wrapper: tuple[str, ...] = ()
    #: Environment the kernel gets on top of the drill's.
    env: dict[str, str] = field(default_factory=dict)
    #: Why folders are not hidden, where they are not.
    caveat: str = ""

    def lines(self) -> list[str]:
        """What the drill says of the rehearsal."""
        said = [f"another node: hidden {', '.join(self.hidden)}"]
        return said + ([f"another node: {self.caveat}"] if self.caveat else [])


def _inside(path: str, folder: str) -> bool:
    return os.path.commonpath([path, folder]) == folder


def node_folders(env: dict[str, str], notebook_folder: str) -> list[str]:
    """Node A's folders: HOME, the caches, the temp folder, the notebook folder (outermost only)."""
    found = [env.get("HOME") or os.path.expanduser("~"), tempfile.gettempdir(), notebook_folder]
    found += [env[v] for v in CACHE_VARIABLES if env.get(v)]
    folders = sorted({os.path.realpath(f) for f in found if f and os.path.isdir(f)}, key=len)
    outermost: list[str] = []
    for folder in folders:
        if folder != "/" and not any(_inside(folder, kept) for kept in outermost):
            outermost.append(folder)
    return outermost


def kept_visible(store: str | None, runtime: str, own: str) -> list[str]:
    """What the resuming kernel needs to see: Python, its ``sys.path``, a local store, the runtime folder."""
    paths = [sys.prefix, sys.base_prefix, runtime, own, *[p for p in sys.path if p]]
    if store and "://" not in store:
        paths.append(store)
    return sorted({os.path.realpath(p) for p in paths if os.path.isdir(p)})


def _script(hidden: list[str], kept: list[str], stash: str) -> str:
    """The shell that hides ``hidden`` (binding back what of ``kept`` lies inside), then runs the kernel."""
    inside = [k for k in kept if any(_inside(k, h) for h in hidden)]
    steps = ["set -e"]
    for i, path in enumerate(inside):
        steps.append(f"mkdir -p {stash}/{i} && mount --bind {shlex.quote(path)} {stash}/{i}")
    for folder in hidden:
        steps.append(f"mount -t tmpfs -o mode=0755 pause-other-node {shlex.quote(folder)}")
    for i, path in enumerate(inside):
        steps.append(f"mkdir -p {shlex.quote(path)} && mount --bind {stash}/{i} {shlex.quote(path)}")
    steps.append('mkdir -p "$HOME" "${TMPDIR:-/tmp}"')  # a new node has them, empty
    steps.append('mkdir -p "$PWD" && cd "$PWD"')  # the start folder as the new node has it: empty, if hidden
    steps.append('exec "$@"')
    return "\n".join(steps)


def _namespace_command() -> list[str] | None:
    """``unshare`` with a private mount namespace this process may make; None where it cannot."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    command = [unshare, "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        command[1:1] = ["--user", "--map-root-user"]
    try:
        tried = subprocess.run([*command, "true"], capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return command if tried.returncode == 0 else None


def _fallback(hidden: list[str], own: Path) -> OtherNode:
    """Empty folders of the kernel's own where no mount namespace can hide node A's."""
    env: dict[str, str] = {}
    for variable in FOLDER_VARIABLES:
        folder = own / "node" / variable.lower()
        folder.mkdir(parents=True, exist_ok=True)
        env[variable] = str(folder)
    caveat = (
        "no mount namespace could be made here (unshare is missing or not permitted), so the kernel only got "
        "empty HOME, cache and temp folders of its own: absolute paths into node A's folders stay readable and "
        "the rehearsal may miss losses; run the drill where unshare works (as root, or with user namespaces)"
    )
    return OtherNode(hidden=tuple(hidden), env=env, caveat=caveat)


def prepare(env: dict[str, str], notebook_folder: str, store: str | None, runtime: str, own: Path) -> OtherNode:
    """How to start the resuming kernel of an "another node" rehearsal (``own``: the drill's folder,
    outside every hidden one)."""
    hidden = node_folders(env, notebook_folder)
    kept = kept_visible(store, runtime, str(own))
    command = _namespace_command()
    if command is None:
        return _fallback(hidden, own)
    stash = own / "stash"
    stash.mkdir(exist_ok=True)
    wrapper = (*command, "/bin/sh", "-c", _script(hidden, kept, shlex.quote(str(stash))), "pause-other-node")
    return OtherNode(hidden=tuple(hidden), wrapper=wrapper)


def drill_folder() -> Path:
    """A folder for the drill that no hidden folder holds: shared memory where there is some."""
    for base in ("/dev/shm", "/var/tmp"):
        if os.path.isdir(base) and os.access(base, os.W_OK):
            return Path(tempfile.mkdtemp(prefix="pause-drill-", dir=base))
    return Path(tempfile.mkdtemp(prefix="pause-drill-"))


def kernel_spec_dir(own: Path, node: OtherNode) -> Path:
    """A kernel spec folder whose ``python3`` kernel starts as ``node`` says (for ``KernelSpecManager``)."""
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec("python3")
    folder = own / "kernels" / "pause-other-node"
    folder.mkdir(parents=True, exist_ok=True)
    # Jupyter runs the native spec's "python" as this interpreter only where it comes first
    argv = [sys.executable if i == 0 and arg in ("python", "python3") else arg for i, arg in enumerate(spec.argv)]
    document = {**spec.to_dict(), "argv": [*node.wrapper, *argv], "display_name": "another node"}
    (folder / "kernel.json").write_text(json.dumps(document))
    return folder.parent

"""Configuration: store URL, session and node names, storage options (traitlets + environment)."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

from jupyter_core.paths import jupyter_data_dir
from traitlets import Bool, Dict, Float, Integer, List, TraitError, Unicode, default, validate
from traitlets.config import Configurable

from .errors import PauseError
from .store.memory import shared_memory_folder
from .store.prefetched import KEEP_FREE, for_store
from .store.signing import Keyring
from .store.storage import Store

#: Environment variables that override configuration, by trait name.
ENV_VARS = {
    "store": "JUPYTER_PAUSE_STORE",
    "session": "JUPYTER_PAUSE_SESSION",
    "node": "JUPYTER_PAUSE_NODE",
    "storage_options": "JUPYTER_PAUSE_STORAGE_OPTIONS",
    "signing_key": "JUPYTER_PAUSE_SIGNING_KEY",
    "verify_keys": "JUPYTER_PAUSE_VERIFY_KEYS",
    "sigterm_grace": "JUPYTER_PAUSE_SIGTERM_GRACE",
    "hook_time_limit": "JUPYTER_PAUSE_HOOK_TIME_LIMIT",
    "rebuild": "JUPYTER_PAUSE_REBUILD",
    "model_files": "JUPYTER_PAUSE_MODEL_FILES",
    "track_writes": "JUPYTER_PAUSE_TRACK_WRITES",
    "data_files_max": "JUPYTER_PAUSE_DATA_FILES_MAX",
    "data_files_cache": "JUPYTER_PAUSE_DATA_FILES_CACHE",
    "encrypt": "JUPYTER_PAUSE_ENCRYPT",
    "prefetch_dir": "JUPYTER_PAUSE_PREFETCH_DIR",
    "prefetch_memory_dir": "JUPYTER_PAUSE_PREFETCH_MEMORY_DIR",
    "prefetch_keep_free": "JUPYTER_PAUSE_PREFETCH_KEEP_FREE",
}

#: What ``JUPYTER_PAUSE_REBUILD`` (and other switches) may say, and what it means.
SWITCH_WORDS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


def default_store_url() -> str:
    """The local default store: a ``pause`` folder under the Jupyter data directory."""
    return str(Path(jupyter_data_dir()) / "pause")


def parse_storage_options(text: str, source: str = ENV_VARS["storage_options"]) -> dict[str, Any]:
    """Parse a JSON object of fsspec storage options, with an error that names its source."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise PauseError(
            f'{source} is not valid JSON ({e.msg} at position {e.pos}); give a JSON object such as {{"anon": false}}'
        ) from e
    if not isinstance(value, dict):
        raise PauseError(f"{source} must be a JSON object, not {type(value).__name__}")
    return value


def default_data_files_cache() -> str:
    """Where a resume stages data files: ``jupyter-pause/files`` in the user's cache folder."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "jupyter-pause", "files")


class PauseConfig(Configurable):
    """Where checkpoints go and what they are called.

    Precedence: explicit arguments, then ``JUPYTER_PAUSE_*`` environment variables, then traitlets
    configuration (``c.PauseConfig.store = ...``), then the defaults.
    """

    store = Unicode(help="fsspec URL or local folder of the checkpoint store (env JUPYTER_PAUSE_STORE).").tag(
        config=True
    )
    session = Unicode(
        "",
        help="Session name; empty derives it from the notebook path (env JUPYTER_PAUSE_SESSION).",
    ).tag(config=True)
    node = Unicode(help="Name of this node (env JUPYTER_PAUSE_NODE); default the hostname.").tag(config=True)
    storage_options = Dict(
        help="fsspec storage options for the store, as a dict (env JUPYTER_PAUSE_STORAGE_OPTIONS, a JSON object)."
    ).tag(config=True)

    signing_key = Unicode(
        "",
        help="Secret that signs every checkpoint written and must have signed every checkpoint "
        "loaded (env JUPYTER_PAUSE_SIGNING_KEY). Never written anywhere.",
    ).tag(config=True)
    verify_keys = List(
        Unicode(),
        help="Former signing keys, still accepted when loading and never used to sign: a key "
        "rotation (env JUPYTER_PAUSE_VERIFY_KEYS, separated by commas). Needs signing_key.",
    ).tag(config=True)
    encrypt = Bool(
        True,
        help="With a signing key set, encrypt everything written to the store with a key derived from it "
        "(AES-256-GCM): blobs, model and data files, manifests, notebooks, journals, status, leases, ledger. "
        "Whoever holds the store's credential without the key sees only ciphertext and sizes; a store read "
        "without the key cannot be resumed (env JUPYTER_PAUSE_ENCRYPT: 0 or off writes plaintext, still "
        "signed). Without a signing key nothing is encrypted.",
    ).tag(config=True)
    checkpoint_on_sigterm = Bool(
        True, help="Checkpoint the kernel when it gets SIGTERM (a preemption's warning), then exit."
    ).tag(config=True)

    sigterm_grace = Float(
        10.0,
        help="Seconds a kernel in a jupyter_pause.steps loop waits after SIGTERM for the loop's next "
        "safe point before it checkpoints mid-cell instead (env JUPYTER_PAUSE_SIGTERM_GRACE). Keep it "
        "under the platform's warning minus the time a checkpoint takes: GCE gives 30 s, AWS spot 120 s.",
    ).tag(config=True)

    rebuild = Bool(
        True,
        help="On resume, rebuild what the checkpoint could not save (a generator, a hash object, a database "
        "connection) by replaying the recorded statements that made it (env JUPYTER_PAUSE_REBUILD: 0 or off "
        "switches it off). %resume --no-rebuild and the server's PauseServer.rebuild switch it off too.",
    ).tag(config=True)

    model_files = Bool(
        True,
        help="Reference the tensors a kernel loaded from safetensors model files instead of copying them "
        "into every checkpoint: each file goes into the store once, uploaded in the background from the "
        "first checkpoint that sees it (env JUPYTER_PAUSE_MODEL_FILES: 0 or off switches it off).",
    ).tag(config=True)

    track_writes = Bool(
        True,
        help="Write-protect large CPU arrays when a checkpoint hashes them, so the next checkpoint skips "
        "those nothing wrote to since instead of reading them again (Linux 6.7 or later; elsewhere they "
        "are hashed). Memory pinned for a device or shared with another process is never skipped this "
        "way (env JUPYTER_PAUSE_TRACK_WRITES: 0 or off switches it off).",
    ).tag(config=True)

    data_files_max = Integer(
        10 << 30,
        help="Largest file a value reads by path (a datasets Arrow file, a read-only NumPy memmap) that a "
        "checkpoint keeps, in bytes: each goes into the store once, so the value comes back on another node; "
        "a larger one is named at the checkpoint and comes back only where its path exists "
        "(env JUPYTER_PAUSE_DATA_FILES_MAX).",
    ).tag(config=True)

    data_files_cache = Unicode(
        help="Node-local folder where a resume puts the data files it copies from the store, one folder per "
        "digest (env JUPYTER_PAUSE_DATA_FILES_CACHE); default jupyter-pause/files in the user's cache folder.",
    ).tag(config=True)

    prefetch_dir = Unicode(
        help="Node-local folder where a server puts a remote checkpoint's blobs as soon as Resume is asked "
        "for, while the resume waits for resources and its kernel starts; the kernel reads them from there "
        "(verified as from the store) and they are removed after the resume (env JUPYTER_PAUSE_PREFETCH_DIR; "
        "default jupyter-pause/prefetch in the user's cache folder; empty string: off).",
    ).tag(config=True)

    prefetch_memory_dir = Unicode(
        help="Folder in the node's shared memory where a server puts a prefetched checkpoint that fits there "
        "(twice over in the memory available, for the kernel's own copy too), rather than in prefetch_dir on "
        "disk: writing a gigabyte there costs a fraction of what the disk's page cache does "
        "(env JUPYTER_PAUSE_PREFETCH_MEMORY_DIR; default /dev/shm/jupyter-pause-<uid> where /dev/shm exists; "
        "empty string: disk only).",
    ).tag(config=True)

    prefetch_keep_free = Float(
        KEEP_FREE,
        help="Share of the prefetch folder's disk that the prefetches running on a node leave free together, "
        "from 0 to 1 (of shared memory too): a checkpoint that would leave less is read from the store as "
        "before, and its resume's status says why (env JUPYTER_PAUSE_PREFETCH_KEEP_FREE).",
    ).tag(config=True)

    hook_time_limit = Float(
        5.0,
        help="Seconds the @jupyter_pause.before_checkpoint hooks of one checkpoint may take together under "
        "SIGTERM, at periodic checkpoints and at a pause inside a steps loop; a hook still running then is "
        "stopped and named, and the checkpoint goes on (env JUPYTER_PAUSE_HOOK_TIME_LIMIT).",
    ).tag(config=True)

    @default("store")
    def _default_store(self) -> str:
        return default_store_url()

    @default("data_files_cache")
    def _default_data_files_cache(self) -> str:
        return default_data_files_cache()

    @default("prefetch_dir")
    def _default_prefetch_dir(self) -> str:
        return os.path.join(os.path.dirname(default_data_files_cache()), "prefetch")

    @default("prefetch_memory_dir")
    def _default_prefetch_memory_dir(self) -> str:
        return shared_memory_folder()

    @validate("prefetch_keep_free")
    def _valid_keep_free(self, proposal: dict[str, Any]) -> float:
        share = proposal["value"]
        if not 0.0 <= share <= 1.0:
            raise TraitError(f"prefetch_keep_free is a share of the disk from 0 to 1 (such as 0.1), not {share}")
        return share

    @default("node")
    def _default_node(self) -> str:
        return socket.gethostname()

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        for name, var in ENV_VARS.items():
            if name in kwargs or not os.environ.get(var):
                continue
            setattr(self, name, _from_env(name, var, os.environ[var]))
        if self.verify_keys and not self.signing_key:
            raise PauseError(
                f"{ENV_VARS['verify_keys']} (former signing keys) is set without {ENV_VARS['signing_key']}: "
                "set the current signing key too, or unset the former ones"
            )

    @property
    def keyring(self) -> Keyring | None:
        """The key this process signs with and the former keys it accepts; None without a signing key."""
        if not self.signing_key:
            return None
        return Keyring(self.signing_key, tuple(k for k in self.verify_keys if k and k != self.signing_key))

    def open_store(self, url: str | None = None, storage_options: dict[str, Any] | None = None) -> Store:
        """The store at ``url`` (default this configuration's), opened with its storage options and
        this process's keys: pool names keyed, and everything encrypted where ``encrypt`` is on."""
        options = dict(self.storage_options) if storage_options is None else storage_options
        store = Store(url or self.store, options, keys=self.keyring, encrypt=self.encrypt)
        if not store.local and self.prefetch_dir:  # a remote store's blobs may be on this node already
            store.prefetched = for_store(
                self.prefetch_dir, store.url, self.prefetch_keep_free, self.prefetch_memory_dir
            )
        return store


def _from_env(name: str, var: str, raw: str) -> Any:
    """A setting's value from its environment variable's text."""
    if name == "storage_options":
        return parse_storage_options(raw)
    if name == "verify_keys":
        return [key.strip() for key in raw.split(",") if key.strip()]
    if name in ("rebuild", "model_files", "track_writes", "encrypt"):
        if raw.strip().lower() not in SWITCH_WORDS:
            raise PauseError(f"{var} is on or off (1, true, yes, on / 0, false, no, off), not {raw!r}")
        return SWITCH_WORDS[raw.strip().lower()]
    if name == "data_files_max":
        try:
            return int(raw)
        except ValueError as e:
            raise PauseError(f"{var} must be a number of bytes (such as 10000000000), not {raw!r}") from e
    if name == "prefetch_keep_free":
        try:
            share = float(raw)
        except ValueError:
            share = -1.0
        if not 0.0 <= share <= 1.0:
            raise PauseError(f"{var} must be a share of the disk from 0 to 1 (such as 0.1), not {raw!r}")
        return share
    if name in ("sigterm_grace", "hook_time_limit"):
        try:
            return float(raw)
        except ValueError as e:
            raise PauseError(f"{var} must be a number of seconds (such as 10 or 60), not {raw!r}") from e
    return raw

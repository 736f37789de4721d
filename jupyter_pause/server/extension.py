"""Loading the server extension: settings, the pause manager, routes, watchers and the SIGTERM handler."""

from __future__ import annotations

import json
import os
from typing import Any

from .. import ledger
from ..config import ENV_VARS, PauseConfig
from ..ledger import SERVER_RECORDS
from ..protocol.nodestate import SERVER_PID
from . import kernelports, prefetch
from .culler import CullerPauses, plan
from .handlers import routes
from .orchestrator import PauseManager
from .settings import PauseServer
from .shutdown import install as handle_sigterm
from .warning import watch_requests
from .watchers import start_watchers


def _export_to_kernels(serverapp: Any, config: PauseConfig) -> None:
    """Kernels this server starts get its store, node and keys, so ``%checkpoint`` there agrees with it.

    The server's own environment is left alone; only the environment it hands to kernels grows.
    """
    exported = {
        ENV_VARS["store"]: config.store,
        ENV_VARS["node"]: config.node,
        ENV_VARS["sigterm_grace"]: repr(config.sigterm_grace),
        SERVER_RECORDS: "1",  # this server writes its kernels' starts and stops to the ledger
    }
    if config.storage_options:
        exported[ENV_VARS["storage_options"]] = json.dumps(config.storage_options)
    if config.signing_key:
        exported[ENV_VARS["signing_key"]] = config.signing_key  # process memory only, never a file
    if config.verify_keys:
        exported[ENV_VARS["verify_keys"]] = ",".join(config.verify_keys)
    if config.signing_key:  # kernels write what this server reads: encrypted as it encrypts
        exported[ENV_VARS["encrypt"]] = "1" if config.encrypt else "0"
    sessions = serverapp.session_manager
    original = sessions.get_kernel_env

    def get_kernel_env(path: Any, name: Any = None) -> dict[str, str]:
        env = original(path, name)
        for key, value in exported.items():
            env.setdefault(key, value)
        if config.prefetch_dir:  # this server's own: where it puts a resume's blobs ahead of its kernel
            env[ENV_VARS["prefetch_dir"]] = config.prefetch_dir
        if config.prefetch_memory_dir:  # and where it puts those that fit in shared memory
            env[ENV_VARS["prefetch_memory_dir"]] = config.prefetch_memory_dir
        env[SERVER_PID] = str(os.getpid())  # this server's, never one it inherited: where its node record is
        return env

    sessions.get_kernel_env = get_kernel_env


def load(serverapp: Any) -> None:
    """Called by jupyter-server when the extension is enabled."""
    settings = PauseServer(parent=serverapp)
    config = PauseConfig(parent=serverapp)
    prefetch.claim(config)  # a prefetch folder of this server's own; those of stopped servers removed
    manager = PauseManager(serverapp, settings, config)
    ledger.sign_with(config.keyring)
    if config.keyring is None and os.environ.get("JUPYTERHUB_USER"):
        serverapp.log.warning(
            "jupyter-pause: no signing key on a JupyterHub: a checkpoint in this server's store is loaded "
            "whoever wrote it, and on a shared store every user with its credentials can write one; give "
            "each user a key of their own (jupyter_pause.hub.keys.signing_environment in jupyterhub_config.py)"
        )
    serverapp.web_app.settings["jupyter_pause"] = manager
    serverapp.web_app.add_handlers(".*$", routes(serverapp.web_app.settings["base_url"]))
    _export_to_kernels(serverapp, config)
    manager.recorder.install(serverapp)
    kernelports.install(serverapp.kernel_manager, settings.kernel_start_timeout)  # one that lost a port
    manager.culler = CullerPauses(manager)
    manager.culler.install()  # after the recorder's: the culler's shutdown is asked of it first
    watch_requests(serverapp.web_app, manager.warnings, serverapp.web_app.settings["base_url"])
    start_watchers(manager)
    handle_sigterm(manager, serverapp)
    serverapp.log.info("jupyter-pause: store %s, node %s", manager.store.display_url, config.node)
    serverapp.log.log(*plan(settings, serverapp.kernel_manager))

"""The pause-instead-of-cull JupyterHub service (``jupyter-pause-hub``), and the per-user signing
keys for ``jupyterhub_config.py`` (``signing_key_for``, ``signing_environment``: see ``keys``).
It runs beside the Hub, never inside a user's server; neither the server extension nor a kernel
imports it."""

from .keys import MissingSecret, signing_environment, signing_key_for, verify_keys_for

__all__ = ["MissingSecret", "signing_environment", "signing_key_for", "verify_keys_for"]

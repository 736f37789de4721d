"""Per-user signing keys, derived by the Hub: no user's server loads a checkpoint another user wrote.

On a Hub whose users share one store (one team bucket, one set of credentials), a signing key
shared by everybody proves nothing between users. Here the Hub holds one secret and gives each
user's server ``HMAC(secret, user name)`` as its ``JUPYTER_PAUSE_SIGNING_KEY``: a server signs
what it writes with its user's key and refuses, before any byte is unpickled, a checkpoint signed
with any other key or unsigned. In ``jupyterhub_config.py``::

    from jupyter_pause.hub.keys import signing_environment
    c.Spawner.environment.update(signing_environment(c))

``signing_environment`` reads the secret at once (so a missing one stops the Hub at start, saying
what to set) and returns the two environment callables, ``signing_key_for`` and
``verify_keys_for``, which JupyterHub calls with each spawner.

The secret: ``JUPYTER_PAUSE_HUB_SECRET`` in the Hub's environment, else
``c.PauseHubKeys.secret``. Rotation: put the new secret there and the old one in
``JUPYTER_PAUSE_HUB_OLD_SECRETS`` (or ``c.PauseHubKeys.old_secrets``; several separated by commas):
servers then sign with the new key and still accept checkpoints signed with the old one
(``JUPYTER_PAUSE_VERIFY_KEYS``). Drop the old secret once those checkpoints have aged out.

The Hub's secret never reaches a user's server (JupyterHub passes a spawner only the variables
of ``c.Spawner.env_keep`` and ``c.Spawner.environment``): never add it to either.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ..config import ENV_VARS
from ..errors import PauseError
from ..store.signing import HUB_OLD_SECRETS_ENV as OLD_SECRETS_ENV
from ..store.signing import HUB_SECRET_ENV as SECRET_ENV
from ..store.signing import user_key, user_keyring

__all__ = ["MissingSecret", "secrets", "signing_environment", "signing_key_for", "user_key", "verify_keys_for"]
#: The section of jupyterhub_config.py read when the environment has no secret.
SECTION = "PauseHubKeys"
#: A secret shorter than this is refused: a guessable secret gives away every user's key.
MIN_SECRET = 32


class MissingSecret(PauseError):
    """Per-user signing keys were asked for, and the Hub has no secret to derive them from."""


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _section(config: Any) -> Any:
    """``c.PauseHubKeys`` of a traitlets config (an empty mapping without one)."""
    if config is None:
        return {}
    try:
        return config[SECTION] if SECTION in config else {}
    except TypeError:
        return {}


def secrets(config: Any = None) -> tuple[str, list[str]]:
    """The Hub's secret and its former ones, from the environment, else from ``config``.

    Raises
    ------
    MissingSecret
        Neither names a secret, or it is shorter than ``MIN_SECRET`` characters.
    """
    section = _section(config)
    secret = os.environ.get(SECRET_ENV) or section.get("secret") or ""
    if not secret:
        raise MissingSecret(
            f"per-user signing keys need a Hub secret, and there is none: set {SECRET_ENV} in the Hub's "
            f"environment (for example from a Kubernetes Secret; make one with `openssl rand -hex 32`), "
            f"or c.{SECTION}.secret in jupyterhub_config.py"
        )
    if len(secret) < MIN_SECRET:
        raise MissingSecret(
            f"the Hub secret ({SECRET_ENV} or c.{SECTION}.secret) has {len(secret)} characters; give it at "
            f"least {MIN_SECRET} (`openssl rand -hex 32` makes one)"
        )
    old = os.environ.get(OLD_SECRETS_ENV)
    olds = _split(old) if old is not None else list(section.get("old_secrets", []) or [])
    return secret, [o for o in olds if o != secret]


def _user(spawner: Any) -> str:
    return spawner.user.name


def signing_key_for(spawner: Any) -> str:
    """``JUPYTER_PAUSE_SIGNING_KEY`` for ``spawner``'s server: its user's key under the Hub's secret.

    Meant for ``c.Spawner.environment``; raises ``MissingSecret`` (failing the spawn, saying what
    to set) when the Hub has no secret, never a key anyone could guess.
    """
    secret, _ = secrets(getattr(spawner, "config", None))
    return user_key(secret, _user(spawner))


def verify_keys_for(spawner: Any) -> str:
    """``JUPYTER_PAUSE_VERIFY_KEYS`` for ``spawner``'s server: its user's keys under the former
    secrets (accepted when loading, never used to sign), separated by commas; "" without any."""
    secret, olds = secrets(getattr(spawner, "config", None))
    return ",".join(user_keyring(secret, olds, _user(spawner)).verifying)


def signing_environment(config: Any = None) -> dict[str, Callable[[Any], str]]:
    """The entries of ``c.Spawner.environment`` that give every server its user's keys.

    Checks the secret now: called from ``jupyterhub_config.py``, a missing or short secret stops
    the Hub at start with ``MissingSecret``, instead of failing each spawn later.
    """
    secrets(config)
    return {ENV_VARS["signing_key"]: signing_key_for, ENV_VARS["verify_keys"]: verify_keys_for}

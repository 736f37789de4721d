"""What a checkpoint or resume acts on: configuration, store, session name, namespace."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from ..config import PauseConfig
from ..notebook import default_session, notebook_path
from ..store.layout import check_session
from ..store.storage import Store


@dataclass
class Context:
    """The resolved target of one operation."""

    config: PauseConfig
    store: Store
    session: str
    namespace: dict[str, Any]
    hidden: dict[str, Any] = field(default_factory=dict)  # IPython's own objects, by name
    notebook: str | None = None


def _shell() -> Any:
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


def user_namespace() -> tuple[dict[str, Any], dict[str, Any]]:
    """The interactive namespace (IPython's ``user_ns``, else ``__main__``) and the objects IPython
    itself put there, by name (``user_ns_hidden``)."""
    shell = _shell()
    if shell is not None:
        return shell.user_ns, dict(shell.user_ns_hidden)
    return vars(sys.modules["__main__"]), {}


def make_context(
    *,
    store: str | None = None,
    session: str | None = None,
    config: PauseConfig | None = None,
    namespace: dict[str, Any] | None = None,
    storage_options: dict[str, Any] | None = None,
) -> Context:
    """Resolve arguments against configuration: arguments win, then env, then config."""
    config = config if config is not None else PauseConfig()
    hidden: dict[str, Any] = {}
    if namespace is None:
        namespace, hidden = user_namespace()
    options = storage_options if storage_options is not None else dict(config.storage_options)
    target = config.open_store(store, options)
    name = check_session(session or config.session or default_session())
    return Context(config, target, name, namespace, hidden, notebook_path())

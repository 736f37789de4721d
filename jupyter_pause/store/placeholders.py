"""``{user}`` and ``{server}`` in store URLs: one prefix per user (and per named server) of a shared store.

``JUPYTER_PAUSE_STORE=s3://team-bucket/pause/{user}`` gives every user of a JupyterHub a folder
of their own in one team bucket. ``{user}`` is ``JUPYTERHUB_USER`` inside a Hub's single-user
server (and its kernels), else the OS user; ``{server}`` is ``JUPYTERHUB_SERVER_NAME``, or
``default`` for a user's default server and outside a Hub. ``{{`` and ``}}`` stand for literal
braces. Any other ``{...}`` is refused with the list of what is known, before anything is opened.

A prefix is a convention, not a lock: whoever holds the store's credentials can still write into
another user's prefix. Signing keys of their own (``hub.signing_key_for``) keep such a write from
ever being loaded; per-user credentials scoped to the prefix keep it from being written at all.
"""

from __future__ import annotations

import getpass
import os
import re
import string

from ..errors import StoreError

#: What each placeholder stands for, as the error for an unknown one lists them.
KNOWN = {
    "user": "the JupyterHub user (JUPYTERHUB_USER), else the OS user",
    "server": "the named server (JUPYTERHUB_SERVER_NAME), else 'default'",
}

#: ``{server}`` for a user's default (unnamed) server and outside a Hub.
DEFAULT_SERVER = "default"


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError) as e:
        raise StoreError(
            "the store URL has {user}, and this process has no user name (no JUPYTERHUB_USER, and the OS "
            "user is unknown): set JUPYTERHUB_USER, or write the user into JUPYTER_PAUSE_STORE"
        ) from e


def values() -> dict[str, str]:
    """What ``{user}`` and ``{server}`` stand for in this process."""
    return {
        "user": os.environ.get("JUPYTERHUB_USER") or _os_user(),
        "server": os.environ.get("JUPYTERHUB_SERVER_NAME") or DEFAULT_SERVER,
    }


def _fields(url: str) -> list[str]:
    """The placeholders of ``url``, each written plainly (no ``!r`` conversion, no ``:spec``)."""
    try:
        parsed = [(name, spec, conversion) for _, name, spec, conversion in string.Formatter().parse(url)]
    except ValueError as e:  # a lone "{" or "}"
        raise StoreError(
            f"store URL {url!r} has an unmatched brace ({e}); write {{{{ or }}}} for a literal one, "
            f"or use {', '.join('{' + k + '}' for k in KNOWN)}"
        ) from e
    for name, spec, conversion in parsed:
        if name is not None and (spec or conversion):
            raise StoreError(f"store URL {url!r}: write placeholders plainly, as {{user}} or {{server}}")
    return [name for name, _, _ in parsed if name is not None]


def has_placeholders(url: str) -> bool:
    """Whether ``url`` names ``{user}`` or ``{server}`` (or writes a brace as ``{{``/``}}``)."""
    return "{" in url or "}" in url


def expand(url: str, known: dict[str, str] | None = None) -> str:
    """``url`` with ``{user}`` and ``{server}`` replaced (by ``known``, default this process's ``values()``).

    Raises
    ------
    StoreError
        An unknown placeholder (``{}`` and ``{0}`` too), a format spec or conversion (``{user!r}``,
        ``{user:>8}``), an unmatched brace, or a value that is no single path segment.
    """
    if not has_placeholders(url):
        return url
    names = _fields(url)
    unknown = [n for n in names if n not in KNOWN]
    if unknown:
        listed = "; ".join(f"{{{k}}}: {why}" for k, why in KNOWN.items())
        raise StoreError(
            f"store URL {url!r} has the placeholder {{{unknown[0]}}}, which jupyter-pause does not know; "
            f"it knows {listed} (write {{{{ and }}}} for literal braces)"
        )
    if not names:
        return url.replace("{{", "{").replace("}}", "}")
    given = known if known is not None else values()
    for name in set(names):
        value = given.get(name, "")
        if not value or "/" in value or value in (".", ".."):
            raise StoreError(
                f"{{{name}}} in store URL {url!r} would be {value!r}, which is not one folder name: "
                f"set {'JUPYTERHUB_USER' if name == 'user' else 'JUPYTERHUB_SERVER_NAME'} to a plain name"
            )
    return url.format_map({name: given[name] for name in names})


def user_of(url: str, template: str) -> str | None:
    """The user whose prefix ``url`` is under ``template`` (a store URL with ``{user}``, as
    configured): what ``{user}`` stands for where ``url`` is ``template`` expanded (``url`` the
    template itself: this process's user). None when ``template`` names no user, or ``url`` is
    none of its expansions (another store: the Hub service's, a shared root)."""
    url, template = url.rstrip("/"), template.rstrip("/")
    try:
        if "user" not in _fields(template):
            return None
    except StoreError:
        return None
    if url == template:
        return values()["user"]
    pattern, named = "", set()
    for literal, name, _, _ in string.Formatter().parse(template):
        pattern += re.escape(literal)
        if name is None:
            continue
        if name not in KNOWN:
            return None
        pattern += f"(?P={name})" if name in named else f"(?P<{name}>[^/]+)"
        named.add(name)
    found = re.fullmatch(pattern, url)
    return None if found is None else found.group("user")

"""What of a store's URL and options must never be printed, and the options fsspec is given."""

from __future__ import annotations

import os
import re
from typing import Any

#: Names of storage options whose values are secrets (an Azure connection string holds the account key).
_SECRET_OPTION = re.compile(r"key|secret|token|password|credential|connection_string", re.I)
_CREDENTIALS_IN_URL = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@")


def redact(url: str) -> str:
    """A URL fit for printing: user and password parts replaced by ``***``."""
    return _CREDENTIALS_IN_URL.sub(r"\g<scheme>***@", url)


def secrets(url: str, options: dict[str, Any]) -> list[str]:
    """Strings that must never be printed: URL credentials and secret-looking option values."""
    found = []
    match = re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*://(?P<userinfo>[^/@\s]+)@", url)
    if match:
        userinfo = match.group("userinfo")
        found += [userinfo, *userinfo.split(":", 1)]
    stack: list[Any] = [options]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for name, value in item.items():
                if isinstance(value, (dict, list)):
                    stack.append(value)
                elif isinstance(value, str) and _SECRET_OPTION.search(str(name)):
                    found.append(value)
        elif isinstance(item, list):
            stack.extend(item)
    return sorted({s for s in found if len(s) >= 3}, key=len, reverse=True)


def storage_options(url: str, options: dict[str, Any]) -> dict[str, Any]:
    """fsspec options, plus the S3 endpoint from ``AWS_ENDPOINT_URL`` when none is given."""
    options = dict(options)
    protocol = url.split("://", 1)[0] if "://" in url else "file"
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if protocol in ("s3", "s3a") and endpoint:
        client_kwargs = options.get("client_kwargs", {})
        if "endpoint_url" not in options and "endpoint_url" not in client_kwargs:
            options["endpoint_url"] = endpoint
    return options


#: Environment variables (by prefix) and files an object store client takes credentials from.
_CREDENTIAL_PREFIXES = ("AWS_", "GOOGLE_", "GCE_", "CLOUDSDK_", "AZURE_", "BOTO_")
_CREDENTIAL_FILES = (
    "~/.aws/credentials",
    "~/.aws/config",
    "~/.config/gcloud/application_default_credentials.json",
    "~/.azure/config",
)


def environment() -> tuple[Any, ...]:
    """What a store client's credentials may come from, as it is now: the variables of
    ``_CREDENTIAL_PREFIXES`` and the size and time of each credentials file (the usual ones, and
    those the variables name). A client made when this was the same still holds the same ones."""
    names = sorted((k, v) for k, v in os.environ.items() if k.startswith(_CREDENTIAL_PREFIXES))
    paths = [*_CREDENTIAL_FILES, *(v for k, v in names if k.endswith(("_FILE", "_CREDENTIALS")))]
    files = []
    for path in paths:
        try:
            stat = os.stat(os.path.expanduser(path))
            files.append((path, stat.st_size, stat.st_mtime_ns))
        except (OSError, ValueError):
            files.append((path, None, None))
    return (tuple(names), tuple(files))

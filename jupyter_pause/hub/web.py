"""The service's JSON page at its prefix (the Hub proxies /services/<name>/ to it), and its
Prometheus metrics at ``<prefix>metrics``, behind
JupyterHub's service auth: a token with access to the service in the Authorization header, or a
browser's Hub login (OAuth)."""

from __future__ import annotations

import json
import secrets
from typing import Any
from urllib.parse import urlparse

from jupyterhub.services.auth import HubOAuthCallbackHandler, HubOAuthenticated
from prometheus_client import CONTENT_TYPE_LATEST
from tornado import web
from tornado.httpserver import HTTPServer

from .metrics import ServiceMetrics
from .report import Report


class MetricsHandler(HubOAuthenticated, web.RequestHandler):
    """``GET <prefix>metrics``: the service's Prometheus metrics, with the page's auth."""

    def initialize(self, metrics: ServiceMetrics) -> None:
        self.metrics = metrics

    @web.authenticated
    def get(self) -> None:
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.finish(self.metrics.exposition())


class StateHandler(HubOAuthenticated, web.RequestHandler):
    """``GET <prefix>``: the report as JSON, to users and tokens with access to this service."""

    def initialize(self, report: Report) -> None:
        self.report = report

    @web.authenticated
    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(self.report.as_json(), indent=1))


def serve(report: Report, service_url: str, prefix: str, metrics: ServiceMetrics | None = None) -> HTTPServer:
    """Listen at ``service_url`` (JUPYTERHUB_SERVICE_URL) and serve the report at ``prefix``, and
    the metrics at ``prefix`` + ``metrics``."""
    prefix = "/" + prefix.strip("/") + "/" if prefix.strip("/") else "/"
    handlers: list[Any] = [
        (prefix, StateHandler, {"report": report}),
        *([(prefix + "metrics", MetricsHandler, {"metrics": metrics})] if metrics is not None else []),
        (prefix + "oauth_callback", HubOAuthCallbackHandler),
    ]
    app = web.Application(handlers, cookie_secret=secrets.token_bytes(32))
    where = urlparse(service_url)
    server = HTTPServer(app)
    server.listen(where.port or 80, where.hostname or "127.0.0.1")
    return server

"""Collaborators in a notebook's room: Y websocket clients of jupyter-collaboration, as JupyterLab's
are, on a test server (pytest-jupyter's), and what the server's shared document holds."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager
from jupyter_ydoc import YNotebook
from pycrdt import Decoder, Encoder, Provider
from tornado.httpclient import HTTPRequest
from tornado.websocket import WebSocketClientConnection, websocket_connect

from tests.support.metadata import until

#: The first byte of a message jupyter-collaboration's rooms send: a Y sync message, or its own (RAW).
SYNC, RAW = 0, 2
#: Seconds a collaborator waits for the server (its first sync, a save's answer, a change to show).
WAIT = 30.0
#: The folder whose files ``ReadOnlyFolder`` says are not writable.
READ_ONLY = "read-only"


def collaboration_config(root: Any, data: Any) -> dict[str, Any]:
    """A test server's jupyter-collaboration settings: its extensions on, its databases under
    ``data``, and the file written only when someone saves (no autosave a second after an edit, no
    look at the file each second): an edit stays in the shared document until Pause or a save,
    as one made a moment before Pause is."""
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_server_ydoc": True, "jupyter_server_fileid": True}},
        "YDocExtension": {"document_save_delay": None, "file_poll_interval": 0},
        "SQLiteYStore": {"db_path": str(data / "ystore.db")},
        "BaseFileIdManager": {"root_dir": str(root), "db_path": str(data / "file_id.db")},
    }


class ReadOnlyFolder(AsyncLargeFileManager):
    """jupyter-server's own files, where those in the folder ``READ_ONLY`` are not writable, as on a
    read-only mount (tests run as root, which writes a file whatever its mode says)."""

    async def get(
        self,
        path: str,
        content: bool = True,
        type: str | None = None,
        format: str | None = None,
        require_hash: bool = False,
    ) -> dict[str, Any]:
        model = await super().get(path, content=content, type=type, format=format, require_hash=require_hash)
        if path.strip("/").startswith(f"{READ_ONLY}/"):
            model["writable"] = False
        return model


class Channel:
    """A room's websocket as pycrdt's ``Provider`` reads it (Y sync messages); the room's own
    messages (a save's answer) are kept aside for ``Collaborator.save``."""

    def __init__(self, connection: WebSocketClientConnection, path: str) -> None:
        self.connection = connection
        self._path = path
        self.answers: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    @property
    def path(self) -> str:
        return self._path

    def __aiter__(self) -> Channel:
        return self

    async def __anext__(self) -> bytes:
        return await self.recv()

    async def send(self, message: bytes) -> None:
        await self.connection.write_message(message, binary=True)

    async def recv(self) -> bytes:
        while True:
            message = await self.connection.read_message()
            if message is None:
                raise StopAsyncIteration
            if isinstance(message, bytes) and message[:1] == bytes([RAW]):
                decoder = Decoder(message)
                decoder.read_var_uint()
                self.answers.put_nowait(json.loads(decoder.read_var_string()))
                continue
            if isinstance(message, bytes):
                return message


class Collaborator:
    """One client's view of a notebook: its copy of the shared document, kept in sync."""

    def __init__(self, document: YNotebook, channel: Channel) -> None:
        self.document = document
        self.channel = channel
        self._changed = asyncio.Event()
        self._saves = 0
        document.observe(lambda *_: self._changed.set())

    def sources(self) -> list[str]:
        """The cells' sources as this view shows them."""
        return [cell["source"] for cell in self.document.get()["cells"]]

    def type(self, index: int, source: str) -> None:
        """Replace cell ``index``'s source, as typing does (no save)."""
        text = self.document.ycells[index]["source"]
        with self.document.ydoc.transaction():
            del text[:]
            text.insert(0, source)

    async def save(self) -> None:
        """Ask the room to save the document to the file, as JupyterLab's Save does; wait for its answer."""
        self._saves += 1
        encoder = Encoder()
        encoder.write_var_uint(RAW)
        encoder.write_var_string("save")
        encoder.write_var_uint(self._saves)
        await self.channel.send(encoder.to_bytes())
        answer = await asyncio.wait_for(self.channel.answers.get(), WAIT)
        assert answer == {"type": "save", "responseTo": self._saves, "status": "success"}, answer

    async def shows(self, wanted: Callable[[list[str]], bool], what: str) -> list[str]:
        """Wait until this view's cells satisfy ``wanted`` (each change to the document is looked at)."""

        async def changed() -> None:
            while not wanted(self.sources()):
                self._changed.clear()
                await self._changed.wait()

        try:
            await asyncio.wait_for(changed(), WAIT)
        except TimeoutError:
            raise AssertionError(f"the view never showed {what}; it shows {self.sources()}") from None
        return self.sources()


@asynccontextmanager
async def collaborator(
    fetch: Any, port: int, base_url: str, headers: dict[str, str], path: str
) -> AsyncIterator[Collaborator]:
    """A client with the notebook at ``path`` open in its room, synced with the server's document."""
    response = await fetch(
        "api", "collaboration", "session", path, method="PUT", body=json.dumps({"format": "json", "type": "notebook"})
    )
    session = json.loads(response.body)
    room = f"json:notebook:{session['fileId']}"
    url = f"ws://127.0.0.1:{port}{base_url}api/collaboration/room/{room}?sessionId={session['sessionId']}"
    connection = await websocket_connect(HTTPRequest(url, headers=headers))
    channel = Channel(connection, room)
    document = YNotebook()
    try:
        async with Provider(document.ydoc, channel) as provider:
            await asyncio.wait_for(provider.synced.wait(), WAIT)
            yield Collaborator(document, channel)
    finally:
        connection.close()


async def shared_sources(serverapp: Any, path: str) -> list[str]:
    """The cells' sources in the server's shared document of ``path`` (a copy); [] with no room."""
    (extension,) = serverapp.extension_manager.extension_apps["jupyter_server_ydoc"]
    document = await extension.get_document(path=path, content_type="notebook", file_format="json", copy=True)
    return [cell["source"] for cell in document.get()["cells"]] if document is not None else []


async def reaches_server(serverapp: Any, path: str, source: str) -> None:
    """Wait until the server's shared document of ``path`` holds a cell ``source``."""
    await until(
        lambda: _holds(serverapp, path, source), WAIT, f"the server's shared document of {path} never held {source!r}"
    )


async def _holds(serverapp: Any, path: str, source: str) -> bool:
    return source in await shared_sources(serverapp, path)

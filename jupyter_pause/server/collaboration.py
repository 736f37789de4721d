"""The notebook as collaborators share it: jupyter-collaboration's shared document, where it runs.

With jupyter-collaboration installed (its server extension ``jupyter_server_ydoc``), JupyterLab edits
an open notebook in a shared document, a Y document in one of the server's rooms; the file follows
it a moment later, by the room's autosave (``YDocExtension.document_save_delay``). The kernel
checkpoints the notebook's file, so:

- before a checkpoint, ``save`` writes the document to the file, through the room's own file
  loader, which takes it as the room's save (not as a change made on disk from outside): the
  checkpoint, the file and every collaborator agree, down to the last edit before the click;
- a notebook written from a checkpoint (a pull, as a resume on another node does) is written to the
  file, and the room reads it back at once (as its look at the file would a moment later), so
  every open view shows it.

Without the extension, or with no client on the notebook (no room), the file is the notebook and
nothing here acts.
"""

from __future__ import annotations

import logging
from typing import Any

from .http import maybe_await

log = logging.getLogger(__name__)

#: jupyter-collaboration's server extension (the package ``jupyter-collaboration`` installs it).
EXTENSION = "jupyter_server_ydoc"
#: A notebook's model as its room saves it: the room's file format and type.
NOTEBOOK = {"format": "json", "type": "notebook"}


def unsaved_note(path: str, reason: str) -> str:
    """``; ...`` for a status line: the shared document of ``path`` could not be saved, and what the
    checkpoint holds instead."""
    return (
        f"; the notebook's shared document could not be saved ({reason}): the checkpoint holds {path} as last "
        "saved, and the collaborators' edits since then are only in their open views"
    )


class SharedDocuments:
    """The notebooks' shared documents of this server's jupyter-collaboration (none without it)."""

    def __init__(self, serverapp: Any) -> None:
        self.serverapp = serverapp

    def extension(self) -> Any | None:
        """jupyter-collaboration's server extension (its ``YDocExtension``), when this server runs it."""
        manager = getattr(self.serverapp, "extension_manager", None)
        apps = manager.extension_apps.get(EXTENSION, ()) if manager is not None else ()
        return next((app for app in apps if hasattr(app, "get_document")), None)

    async def opened(self, path: str) -> tuple[Any, Any] | None:
        """The live shared document of the notebook at ``path`` and its room's file loader; None
        when no client has it open (no room), or without jupyter-collaboration."""
        extension = self.extension()
        if extension is None:
            return None
        document = await extension.get_document(path=path, content_type="notebook", file_format="json", copy=False)
        file_id = self.serverapp.web_app.settings["file_id_manager"].get_id(path)
        if document is None or file_id is None or file_id not in extension.file_loaders:
            return None
        return document, extension.file_loaders[file_id]

    async def save(self, path: str) -> str:
        """Write the notebook's shared document to its file as collaborators hold it now; "" when
        the file holds it (or there is no shared document), else a note for the status saying why
        not (``unsaved_note``; in the log too).

        The file is looked at first, as the room's own poll does: a file changed on disk since the
        room read it is read into the document (jupyter-collaboration's rule: the file wins) before
        the document is saved."""
        try:
            opened = await self.opened(path)
            if opened is None:
                return ""
            document, loader = opened
            await loader.maybe_notify()
            saved = await loader.maybe_save_content({**NOTEBOOK, "content": await document.aget()})
        except Exception as e:  # a checkpoint goes on with the file as last saved; the status says so
            note = unsaved_note(path, _reason(e))
        else:
            if saved is not None:
                return ""
            note = unsaved_note(path, "the file is read-only")
        log.warning("jupyter-pause: %s: %s", path, note.removeprefix("; "))
        return note

    async def write(self, path: str, content: dict[str, Any]) -> None:
        """Write a notebook (``content``, the nbformat JSON) to ``path``; where collaborators have
        it open, its room reads it at once, so every open view shows it."""
        contents = self.serverapp.contents_manager
        await maybe_await(contents.save({**NOTEBOOK, "content": content}, path))
        try:
            opened = await self.opened(path)
            if opened is not None:
                await opened[1].maybe_notify()  # the room sees the file changed and reads it into the document
        except Exception as e:  # the file is written; the room reads it at its next look
            log.warning(
                "jupyter-pause: %s was written, but its shared document could not read it now (%s): open "
                "views show it once jupyter-collaboration next looks at the file",
                path,
                _reason(e),
            )


def _reason(error: Exception) -> str:
    """Why a shared document could not be saved or read, in words."""
    if type(error).__name__ == "OutOfBandChanges":  # jupyter_server_ydoc.utils: raised while saving
        return "the file changed on disk as it was being saved"
    return f"{type(error).__name__}: {error}"

"""``%checkpoint`` and ``%resume``: thin IPython magics over ``checkpoint()`` and ``resume()``."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from .. import units
from ..config import PauseConfig
from ..errors import PauseError
from ..loops.safepoints import install_sigterm_checkpoint
from ..session import ledger
from ..session.checkpoint import checkpoint, checkpoint_async
from ..session.cycle import resume_and_verify, verify
from ..session.restore import MAP_LOCATIONS
from .autocheckpoint import PeriodicRegistry
from .widget import status, widgets_available


@magics_class
class PauseMagics(Magics):
    """Checkpoint and resume the kernel's state."""

    def __init__(self, shell: object) -> None:
        super().__init__(shell)
        self.config_object = PauseConfig(parent=shell)
        self.periodic = PeriodicRegistry()
        self.widget: object | None = None
        ledger.kernel_loaded(self.config_object, shell)
        if self.config_object.checkpoint_on_sigterm:
            install_sigterm_checkpoint(
                lambda: checkpoint(trigger="sigterm", config=self.config_object),
                grace=self.config_object.sigterm_grace,
            )

    @magic_arguments()
    @argument("names", nargs="*", help="variables to save (default: the whole user namespace)")
    @argument("--store", help="fsspec URL or folder of the store (default: configured store)")
    @argument("--session", help="session name (default: derived from the notebook path)")
    @argument("--exclude", nargs="+", default=[], metavar="PATTERN", help="names to leave out (globs)")
    @argument("--strict", action="store_true", help="fail, saving nothing, if a variable cannot be saved")
    @argument("--tag", help="free text stored with the checkpoint")
    @argument(
        "--every",
        metavar="MINUTES",
        help="also checkpoint every MINUTES (between cells and at safe points of steps loops; "
        "with --async in the background); 'off' stops",
    )
    @argument(
        "--async",
        dest="background",
        action="store_true",
        help="return once the state is copied to host memory; write it in the background",
    )
    @line_magic
    def checkpoint(self, line: str) -> None:
        """Save the notebook, variables, torch state and RNG state to the store."""
        args = parse_argstring(self.checkpoint, line)

        def take(trigger: str = "manual") -> str:
            return checkpoint(**self._options(args), trigger=trigger).summary()

        if args.every is not None:
            self._every(args.every, self._in_background(args) if args.background else lambda: take("periodic"))
        self._show_status()
        try:
            if args.background:
                self._start_background(args)
                return
            print(take())
        except PauseError as e:
            raise UsageError(str(e)) from e

    def _options(self, args: Any) -> dict[str, Any]:
        """What every checkpoint the magic takes is asked for: its parsed options."""
        return {
            "names": args.names or None,
            "store": args.store,
            "session": args.session,
            "exclude": args.exclude,
            "strict": args.strict,
            "tag": args.tag,
            "config": self.config_object,
        }

    def _in_background(self, args: Any) -> Callable[[], str]:
        """Periodic checkpoints for ``--every --async``: each copies the state and returns, the loop
        or the next cell goes on while it is written; the next one first waits for it to commit,
        and reports it if it failed."""
        last: Any = None

        def take() -> str:
            nonlocal last
            if last is not None and last.done and last.error is not None:
                failed, last = last.error, None
                raise PauseError(f"the previous background checkpoint failed: {failed}")
            last = checkpoint_async(**self._options(args), trigger="periodic")
            return f"checkpoint state copied in {units.duration(last.blocked)}; writing it in the background"

        return take

    def _start_background(self, args: Any) -> None:
        """``--async``: start the write and report its outcome after the cell that sees it end."""
        job = checkpoint_async(**self._options(args))
        print(
            f"state copied in {units.duration(job.blocked)}; writing the checkpoint in the background "
            "(its summary follows after the cell during which it commits)"
        )

        def report(result: object = None) -> None:
            if not job.done:
                return
            self.shell.events.unregister("post_run_cell", report)
            if job.error is not None:
                print(
                    f"jupyter-pause: background checkpoint FAILED: {job.error}; "
                    "the previous checkpoint stays the newest",
                    file=sys.stderr,
                )
            else:
                print(job.wait().summary())

        self.shell.events.register("post_run_cell", report)

    def _show_status(self) -> None:
        """Where the front end shows widgets, a live status widget follows the step.

        One widget per kernel, shown again by each magic, so views multiply and observers do not.
        """
        if not widgets_available():
            return
        if self.widget is None:
            self.widget = status(widget=True)
        display(self.widget)

    def _every(self, text: str, take: object) -> None:
        if text.strip().lower() in ("off", "0", "stop", "no"):
            stopped = self.periodic.stop(self.shell)
            print("periodic checkpoints stopped" if stopped else "no periodic checkpoints were running")
            return
        try:
            minutes = float(text)
        except ValueError as e:
            raise UsageError(f"--every takes minutes (e.g. 15 or 0.5) or 'off', not {text!r}") from e
        if not minutes > 0:
            raise UsageError("--every takes a positive number of minutes, or 'off'")
        self.periodic.start(self.shell, minutes, take)  # type: ignore[arg-type]
        print(
            f"checkpointing every {minutes:g} min between cells and at the safe points of jupyter_pause.steps "
            "loops (%checkpoint --every off stops it)"
        )

    @magic_arguments()
    @argument("checkpoint", nargs="?", default="latest", help="checkpoint id or prefix (default: latest)")
    @argument("--store", help="fsspec URL or folder of the store (default: configured store)")
    @argument("--session", help="session name (default: derived from the notebook path)")
    @argument("--only", nargs="+", metavar="NAME", help="restore just these variables")
    @argument("--map-location", default="auto", choices=MAP_LOCATIONS, help="where tensors go back to")
    @argument("--check", action="store_true", help="only run the restore test and print its verdict")
    @argument(
        "--overwrite",
        action="store_true",
        help="replace the notebook's local modules (.py files) that differ from the checkpoint's",
    )
    @line_magic
    def resume(self, line: str) -> None:
        """Bring back a checkpoint's state into this kernel, then prove it (the restore test)."""
        args = parse_argstring(self.resume, line)
        checkpoint = None if args.check and args.checkpoint == "latest" else args.checkpoint
        try:
            if args.check:
                print(verify(checkpoint, store=args.store, session=args.session, config=self.config_object))
                return
            self._show_status()
            cycle = resume_and_verify(
                args.checkpoint,
                store=args.store,
                session=args.session,
                only=args.only,
                map_location=args.map_location,
                config=self.config_object,
                overwrite=args.overwrite,
            )
        except PauseError as e:
            raise UsageError(str(e)) from e
        print(cycle.result.summary())
        print(cycle.verdict.summary())

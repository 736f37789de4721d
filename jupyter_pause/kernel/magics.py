"""``%checkpoint`` and ``%resume``: thin IPython magics over ``checkpoint()`` and ``resume()``.

Each magic parses its line once (``parse_checkpoint``, ``parse_resume``) into the operation's
options object (``session.options``) plus what only the magic does (``--async``, ``--every``,
``--check``), and hands the options down as they are. A bad line raises ``UsageError`` before
anything is taken, scheduled or restored."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from .. import units
from ..config import PauseConfig
from ..errors import PauseError
from ..loops.safepoints import install_sigterm_checkpoint
from ..proof import modelcheck
from ..session import kernel_events
from ..session.checkpoint import checkpoint, checkpoint_async
from ..session.cycle import resume_and_verify, verify
from ..session.options import MAP_LOCATIONS, CheckpointOptions, ResumeOptions
from . import recorder
from .autocheckpoint import PeriodicRegistry
from .widget import status, widgets_available

#: Values of ``--every`` that stop the periodic checkpoints.
EVERY_OFF = ("off", "0", "stop", "no")


@dataclass(frozen=True)
class CheckpointLine:
    """``%checkpoint``'s line, parsed: what each checkpoint saves, and how and when the magic takes it."""

    options: CheckpointOptions
    background: bool = False  # --async
    every: float | None = None  # --every: minutes, 0 to stop, None when not given


@dataclass(frozen=True)
class ResumeLine:
    """``%resume``'s line, parsed: what to restore, or (``check``) only the restore test to run."""

    options: ResumeOptions
    check: bool = False


@magics_class
class PauseMagics(Magics):
    """Checkpoint and resume the kernel's state."""

    def __init__(self, shell: object) -> None:
        super().__init__(shell)
        self.config_object = PauseConfig(parent=shell)
        self.periodic = PeriodicRegistry()
        self.widget: object | None = None
        kernel_events.kernel_loaded(self.config_object, shell)
        recorder.install(shell)  # the cell history, for rebuilding what cannot be saved
        # the input signature of each model's real calls, for the restore test's model check
        shell.events.register("post_run_cell", lambda result=None: modelcheck.watch_all(shell.user_ns))
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
        """Save the notebook, variables, torch state and RNG state to the store.

        A checkpoint holds the notebook file as on disk, the user's variables (torch models,
        optimizers, schedulers and grad scalers with their tensors on any device; NumPy arrays;
        notebook-defined functions and classes by value), the random state of ``random``, NumPy,
        torch and each CUDA device, the working directory, ``sys.path`` and the notebook's local
        modules. It is incremental: only what changed since the last one is written. What cannot
        be saved (an open file, a lock) is named with its reason, and rebuilt at resume by
        replaying the statements that made it where that repeats no outside effect.

        The store is ``--store``, else ``JUPYTER_PAUSE_STORE``, else ``PauseConfig.store``, else
        a ``pause`` folder in the Jupyter data directory: a folder or any fsspec URL (``s3://bucket/pause``,
        ``gs://...``, ``az://...``). The session is ``--session``, else the notebook's path.

        It prints the checkpoint's id, what was saved and skipped, what the restore test will not
        be able to prove, and what will not come back on another node, or not provably (a module
        variables need that is not kept, an object whose rebuild nothing can check, an open file
        outside the notebook's folder); the status widget follows it. ``%resume`` brings it back.

        Examples
        --------
        ::

            %checkpoint                          # everything, to the configured store
            %checkpoint model opt --tag warmup   # just these variables, with a note
            %checkpoint --exclude 'tmp_*' df_raw # everything but these
            %checkpoint --every 15 --async       # every 15 minutes, written in the background
            %checkpoint --every off              # stop the periodic checkpoints
            %checkpoint --store s3://team-bucket/pause
        """
        request = parse_checkpoint(line)
        options = request.options

        def take(trigger: str = "manual") -> str:
            return checkpoint(options=options, config=self.config_object, trigger=trigger).summary()

        if request.every is not None:
            self._every(request.every, self._in_background(options) if request.background else lambda: take("periodic"))
        self._show_status()
        try:
            if request.background:
                self._start_background(options)
                return
            print(take())
        except PauseError as e:
            raise UsageError(str(e)) from e

    def _in_background(self, options: CheckpointOptions) -> Callable[[], str]:
        """Periodic checkpoints for ``--every --async``: each copies the state and returns, the loop
        or the next cell goes on while it is written; the next one first waits for it to commit,
        and reports it if it failed."""
        last: Any = None

        def take() -> str:
            nonlocal last
            if last is not None and last.done and last.error is not None:
                failed, last = last.error, None
                raise PauseError(f"the previous background checkpoint failed: {failed}")
            last = checkpoint_async(options=options, config=self.config_object, trigger="periodic")
            return f"checkpoint state copied in {units.duration(last.blocked)}; writing it in the background"

        return take

    def _start_background(self, options: CheckpointOptions) -> None:
        """``--async``: start the write and report its outcome after the cell that sees it end."""
        job = checkpoint_async(options=options, config=self.config_object)
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

    def _every(self, minutes: float, take: object) -> None:
        """Start periodic checkpoints every ``minutes`` (``0``: stop them)."""
        if minutes == 0:
            stopped = self.periodic.stop(self.shell)
            print("periodic checkpoints stopped" if stopped else "no periodic checkpoints were running")
            return
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
        "--no-rebuild",
        dest="no_rebuild",
        action="store_true",
        help="do not rebuild what the checkpoint could not save by replaying the statements that made it",
    )
    @argument(
        "--overwrite",
        action="store_true",
        help="replace the notebook's local modules (.py files) that differ from the checkpoint's",
    )
    @argument(
        "--allow-partial",
        action="store_true",
        help="bring back what verifies of a damaged checkpoint (asked for by id, or every one damaged)",
    )
    @line_magic
    def resume(self, line: str) -> None:
        """Bring back a checkpoint's state into this kernel, then prove it (the restore test).

        Without an id it resumes the newest checkpoint of the session whose manifest and blobs
        verify (and, with a signing key, that the user's key signed); with an id or a unique
        prefix, that one. It restores the variables, re-imports the session's modules, puts the
        RNG state back, rebuilds by replay what could not be saved, arms the positions of
        ``jupyter_pause.steps`` loops (run their cell again to continue), then runs the restore
        test and prints its verdict:

        - ``restored``: this kernel holds the checkpoint's state: the probe value that lived only
          in the paused kernel is back, every variable matches its digest, every model gives the
          recorded output (bit-identical, or within its precision's tolerance on another node);
        - ``partial``: some state is missing or differs, each named with why;
        - ``fresh``: this kernel holds none of it (cells re-run give no proof);
        - ``live``: this is the kernel that took the checkpoint: nothing was released.

        A damaged checkpoint is passed over for the newest intact one, and said so;
        ``--allow-partial`` restores what verifies of a damaged one.

        Examples
        --------
        ::

            %resume                          # the newest checkpoint that verifies
            %resume 20261129-101500          # that checkpoint (an id prefix)
            %resume --only model opt         # just these variables
            %resume --map-location cpu       # tensors to the CPU (no GPU on this node)
            %resume --check                  # only the restore test of this kernel
        """
        request = parse_resume(line)
        options = request.options
        try:
            if request.check:
                asked = None if options.checkpoint == "latest" else options.checkpoint
                print(verify(asked, store=options.store, session=options.session, config=self.config_object))
                return
            self._show_status()
            cycle = resume_and_verify(options=options, config=self.config_object)
        except PauseError as e:
            raise UsageError(str(e)) from e
        print(cycle.result.summary())
        print(cycle.verdict.summary())


def parse_checkpoint(line: str) -> CheckpointLine:
    """``%checkpoint``'s argument line, parsed once; ``UsageError`` saying what is wrong otherwise.

    Parameters
    ----------
    line
        What follows ``%checkpoint``, e.g. ``"model opt --tag baseline --every 15"``.

    Returns
    -------
    CheckpointLine
        The ``CheckpointOptions`` every checkpoint of this line is taken with, ``--async`` and ``--every``.
    """
    args = parse_argstring(PauseMagics.checkpoint, line)
    every = None if args.every is None else _minutes(args.every)
    try:
        options = CheckpointOptions(
            names=args.names or None,
            store=args.store,
            session=args.session,
            exclude=args.exclude,
            strict=args.strict,
            tag=args.tag,
        )
    except PauseError as e:
        raise UsageError(str(e)) from e
    return CheckpointLine(options, background=args.background, every=every)


def parse_resume(line: str) -> ResumeLine:
    """``%resume``'s argument line, parsed once; ``UsageError`` saying what is wrong otherwise.

    Parameters
    ----------
    line
        What follows ``%resume``, e.g. ``"--only model opt --map-location cpu"``.

    Returns
    -------
    ResumeLine
        The ``ResumeOptions`` of the resume, and whether only the restore test is asked for (``--check``).
    """
    args = parse_argstring(PauseMagics.resume, line)
    try:
        options = ResumeOptions(
            args.checkpoint,
            store=args.store,
            session=args.session,
            only=args.only,
            map_location=args.map_location,
            overwrite=args.overwrite,
            allow_partial=args.allow_partial,
            rebuild=not args.no_rebuild,
        )
    except PauseError as e:
        raise UsageError(str(e)) from e
    return ResumeLine(options, check=args.check)


def _minutes(text: str) -> float:
    """``--every``'s minutes; ``0`` for one of ``EVERY_OFF``."""
    if text.strip().lower() in EVERY_OFF:
        return 0.0
    try:
        minutes = float(text)
    except ValueError as e:
        raise UsageError(f"--every takes minutes (e.g. 15 or 0.5) or 'off', not {text!r}") from e
    if not minutes > 0:
        raise UsageError("--every takes a positive number of minutes, or 'off'")
    return minutes

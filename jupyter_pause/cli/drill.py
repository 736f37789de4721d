"""The drill: pause and resume a real notebook end to end, and prove the resume.

Start a kernel, run every cell, plant a probe value that exists only in that kernel's memory,
checkpoint, stop the kernel (SIGKILL with ``kill``), start a new kernel in another working
directory, resume, run the restore test and a check cell, and write the run report.

``jupyter pause drill``'s arguments are parsed once into the options of its two operations
(``drill_options``), which ``run_drill`` hands to the kernels as the protocol's requests.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from queue import Empty
from typing import Any, Iterator

from .. import units
from ..errors import PauseError
from ..notebook import session_from_path
from ..protocol import PauseReply, PauseRequest, ResumeReply, ResumeRequest, call_source, parse_reply
from ..session.options import CheckpointOptions, ResumeOptions
from ..vocabulary import Trigger
from . import othernode


class DrillError(PauseError):
    """The drill could not run to its end (a cell failed, a kernel died, bad input)."""


@dataclass
class DrillResult:
    """What the drill found: the verdict, the checks, the report."""

    verdict: str
    checkpoint: str
    probe_back: bool
    check_cell: str
    report: dict[str, Any]
    lines: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.verdict == "restored" and self.probe_back and self.check_cell in ("passed", "none")


def load_notebook(path: Path) -> list[str]:
    """The code cells of a notebook file, or a clear error if it is none."""
    import nbformat

    if not path.exists():
        raise DrillError(f"{path}: no such file; give the path of a .ipynb notebook")
    if path.is_dir():
        raise DrillError(f"{path} is a folder; give the path of a .ipynb notebook")
    try:
        nb = nbformat.read(str(path), as_version=4)
    except Exception as e:  # nbformat raises several types for bytes that are not a notebook
        raise DrillError(f"{path} is not a notebook ({type(e).__name__}: {e})") from e
    return ["".join(c.source) for c in nb.cells if c.cell_type == "code" and "".join(c.source).strip()]


class _Kernel:
    """A kernel for the drill, with a blocking way to run code."""

    def __init__(self, cwd: Path, env: dict[str, str], timeout: float, specs: Path | None = None) -> None:
        from jupyter_client.kernelspec import KernelSpecManager
        from jupyter_client.manager import KernelManager

        self.timeout = timeout
        if specs is None:
            self.manager = KernelManager(kernel_name="python3")
        else:  # another node's kernel (``othernode.kernel_spec_dir``)
            found = KernelSpecManager(kernel_dirs=[str(specs)], ensure_native_kernel=False)
            self.manager = KernelManager(kernel_name="pause-other-node", kernel_spec_manager=found)
            self.manager.connection_file = str(specs / "connection.json")  # where that kernel can read it
        # The kernel's own start-up chatter would bury the drill's report; its failures still
        # reach the drill as error messages.
        self.manager.start_kernel(cwd=str(cwd), env=env, stderr=subprocess.DEVNULL)
        self.client = self.manager.client()
        self.client.start_channels(hb=False)  # its manager says whether it lives
        self.client.wait_for_ready(timeout=timeout)

    def run(self, code: str, what: str) -> str:
        """Run ``code``; its printed output, or a DrillError naming ``what`` failed."""
        msg_id = self.client.execute(code, store_history=False)
        out, error = [], None
        while True:
            try:
                msg = self.client.get_iopub_msg(timeout=self.timeout)
            except Empty as e:
                raise DrillError(f"{what} did not finish within {self.timeout:.0f} s") from e
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out.append(content["text"])
            elif kind == "error":
                error = f"{content['ename']}: {content['evalue']}"
            elif kind == "status" and content["execution_state"] == "idle":
                break
        if error is None:
            reply = self.client.get_shell_msg(timeout=self.timeout)
            if reply["content"].get("status") == "error":
                error = f"{reply['content'].get('ename')}: {reply['content'].get('evalue')}"
        if error:
            raise DrillError(f"{what} failed: {error}")
        return "".join(out)

    def stop(self, kill: bool) -> None:
        if kill:
            process = self.manager.provisioner.process  # type: ignore[union-attr]
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=self.timeout)
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=kill)


def _check_cell(cells: list[str]) -> str | None:
    """The cell re-run after the resume to show the state is usable: the last plain-code cell."""
    for cell in reversed(cells):
        if not any(line.lstrip().startswith(("%", "!")) for line in cell.splitlines()):
            return cell
    return None


@contextlib.contextmanager
def _second_place(
    notebook_folder: Path, store: str | None, another_node: bool, echo: Any
) -> Iterator[tuple[Path, Path | None, dict[str, str]]]:
    """Where the resuming kernel starts, its kernel spec folder (None: the usual ``python3``) and
    the environment it gets beside the drill's: a temp folder, or another node (``othernode``)."""
    if not another_node:
        with tempfile.TemporaryDirectory(prefix="pause-drill-") as elsewhere:
            yield Path(elsewhere), None, {}
        return
    from jupyter_core.paths import jupyter_runtime_dir

    own = othernode.drill_folder()
    try:
        node = othernode.prepare(dict(os.environ), str(notebook_folder), store, jupyter_runtime_dir(), own)
        for line in node.lines():
            echo("  " + line)
        where = notebook_folder if node.wrapper else own / "node" / "work"
        if not node.wrapper:  # a folder of the kernel's own; with a namespace, the hidden one's path
            where.mkdir(parents=True, exist_ok=True)
        yield where, othernode.kernel_spec_dir(own, node), node.env
    finally:
        shutil.rmtree(own, ignore_errors=True)


def drill_options(args: argparse.Namespace) -> tuple[CheckpointOptions, ResumeOptions]:
    """The options of the drill's checkpoint and resume, from ``jupyter pause drill``'s parsed arguments."""
    return (
        CheckpointOptions(store=args.store, session=args.session, trigger=Trigger.DRILL),
        ResumeOptions(store=args.store, session=args.session),
    )


def _kernel_env(store: str | None, session: str | None) -> dict[str, str]:
    """The environment of a drill kernel: this one's, pointed at ``store`` and ``session``."""
    env = {**os.environ, "JUPYTER_PAUSE_STORE": store or "", "JUPYTER_PAUSE_SESSION": session or ""}
    env.pop("JPY_SESSION_NAME", None)
    return env


def run_drill(
    notebook: str | Path,
    pause: CheckpointOptions,
    resume: ResumeOptions,
    *,
    kill: bool = False,
    another_node: bool = False,
    report_file: str | Path | None = None,
    timeout: float = 600,
    echo: Any = print,
) -> DrillResult:
    """Run the pause/resume drill on ``notebook``; see the module docstring for the steps.

    Of ``pause``, the store, session and trigger reach the first kernel; of ``resume``, the
    store, session and map location reach the second, which resumes the checkpoint the first
    took. An unset store is the configured one; an unset session is ``drill-<notebook>``. With
    ``another_node``, the second kernel cannot see node A's folders (``othernode``).
    """
    from ..config import PauseConfig

    path = Path(notebook).resolve()
    cells = load_notebook(path)
    pause = replace(
        pause,
        store=pause.store or PauseConfig().store,
        session=pause.session or f"drill-{session_from_path(path.name)}"[:128],
    )
    resume = replace(resume, store=resume.store or pause.store, session=resume.session or pause.session)
    moments: dict[str, float] = {}
    token = secrets.token_hex(16)

    echo(f"drill: {path.name} -> session {pause.session!r}")
    first = _Kernel(path.parent, {**_kernel_env(pause.store, pause.session), "JPY_SESSION_NAME": str(path)}, timeout)
    try:
        for index, cell in enumerate(cells, 1):
            first.run(cell, f"cell {index} ({cell.strip().splitlines()[0][:60]!r})")
        echo(f"  ran {len(cells)} cell(s)")
        first.run(f"pause_drill_probe = {token!r}", "planting the probe")
        moments["checkpoint_requested"] = time.time()
        request = PauseRequest(pause.session or "", pause.trigger)
        paused = parse_reply(first.run(call_source(request), "the checkpoint"), PauseReply)
        checkpoint = paused.checkpoint
        echo("  " + "\n  ".join(paused.summary.splitlines()))
    finally:
        first.stop(kill)
    moments["kernel_stopped"] = time.time()
    echo(f"  stopped the kernel ({'SIGKILL' if kill else 'shutdown'})")

    moments["resume_requested"] = time.time()
    moments["resources_available"] = moments["resume_requested"]
    with _second_place(path.parent, resume.store, another_node, echo) as (where, specs, env):
        second = _Kernel(where, {**_kernel_env(resume.store, resume.session), **env}, timeout, specs)
        moments["kernel_ready"] = time.time()
        try:
            asked = ResumeRequest(checkpoint, resume.session or "", resume.map_location, moments=moments)
            resumed = parse_reply(second.run(call_source(asked), "the resume"), ResumeReply)
            report = resumed.report
            echo("  " + "\n  ".join(resumed.summary.splitlines()))
            held = second.run(f"print(globals().get('pause_drill_probe') == {token!r})", "the probe check")
            probe_back = held.strip().endswith("True")
            cell = _check_cell(cells)
            check = "none"
            if cell is not None:
                try:
                    second.run(cell, "the check cell")
                    check = "passed"
                except DrillError as e:
                    check = f"failed: {e}"
        finally:
            second.stop(kill=False)

    result = DrillResult(report["verdict"], checkpoint, probe_back, check, report)
    result.report["drill"] = dict(
        probe_back=probe_back, check_cell=check, kill=kill, another_node=another_node, notebook=str(path)
    )
    if report_file is not None:
        Path(report_file).write_text(json.dumps(result.report, indent=1))
    _echo_outcome(result, echo)
    return result


def _echo_outcome(result: DrillResult, echo: Any) -> None:
    """The drill's last lines: the verdict, the probe, the check cell, the durations."""
    probe = "back" if result.probe_back else "MISSING"
    echo(f"verdict: {result.verdict}   probe: {probe}   check cell: {result.check_cell}")
    for name, seconds in result.report["durations"].items():
        if seconds is not None:
            echo(f"  {name.replace('_', ' '):24} {units.duration(seconds)}")

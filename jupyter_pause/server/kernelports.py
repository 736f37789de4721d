"""A new kernel that lost one of its ports to another process before it could bind it.

Jupyter picks a kernel's five ports, writes them into its connection file and starts the kernel,
which binds them. In between another local process can take one (every process on a node draws
from the same ephemeral range; two kernels of one server started a moment apart can draw the same
port). A kernel that fails to bind its shell, stdin or control port exits, and Jupyter's
restarter starts it again on new ports. One that fails to bind its IOPub port does not exit
(ipykernel 7: its process waits on a thread it had started), so it is never restarted and never
answers: a resume waiting for it would wait until its timeout, then fail.

``taken`` tells that case from a kernel still starting: one of its ports is held by a process
that is neither the kernel's nor one it started (a kernelspec may launch the kernel through a
wrapper: ``conda run``, a shell script). ``kernelrun.connect`` then starts the kernel again on
new ports, as the restarter does for a kernel that exited. Only for a kernel on this machine:
a remote provisioner's ports are another host's.

Either restart asks for new ports, and where jupyter-client caches a kernel's ports
(``cache_ports``, its default over TCP) it kept the old ones: it forgets only ports it drew as it
wrote the connection file, and cached ones are drawn before. The kernel then started on the very
port another process held, again, until the restarter gave it up (five tries) or the resume its
wait. ``install`` has every kernel of the server forget them (``forget``) on such a restart.
"""

from __future__ import annotations

import functools
from typing import Any

import psutil
from jupyter_client.localinterfaces import is_local_ip

#: The connection's ports, by their name in a connection file.
PORTS = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
#: Socket states that hold a port against a bind: listening, or bound and not yet listening.
HOLDING = (psutil.CONN_LISTEN, psutil.CONN_NONE, psutil.CONN_CLOSE)


def taken(kernel: Any) -> int | None:
    """The port of ``kernel`` (a jupyter-client kernel manager, its process local) that another
    process holds, or None: it holds all of its ports it bound so far, or which process holds
    a port cannot be told (no process, no local TCP transport, a system that does not say)."""
    pid = getattr(getattr(kernel, "provisioner", None), "pid", None)
    if pid is None or getattr(kernel, "transport", "tcp") != "tcp" or not is_local_ip(getattr(kernel, "ip", "")):
        return None
    ports = {getattr(kernel, name, 0) for name in PORTS} - {0, None}
    try:
        process = psutil.Process(pid)
        own = {pid, *(child.pid for child in process.children(recursive=True))}
        held = [
            c for c in psutil.net_connections(kind="tcp") if c.laddr and c.laddr.port in ports and c.status in HOLDING
        ]
    except (psutil.Error, OSError):
        return None
    return next((c.laddr.port for c in held if c.pid not in own), None)


def install(kernels: Any) -> None:
    """Have every kernel ``kernels`` (jupyter-server's kernel manager) starts draw new ports when
    it is started again on new ports, also where its ports are cached."""
    start = kernels.start_kernel

    async def start_kernel(*args: Any, **kwargs: Any) -> str:
        kernel_id = await start(*args, **kwargs)
        kernel = kernels.get_kernel(kernel_id)
        if getattr(kernel, "cache_ports", False) and getattr(kernel, "transport", "") == "tcp":
            kernel.cleanup_random_ports = functools.partial(forget, kernel)  # what a restart calls
        return kernel_id

    kernels.start_kernel = start_kernel


def forget(kernel: Any) -> None:
    """Make the next start of ``kernel`` (a jupyter-client kernel manager) draw new ports and
    write a new connection file."""
    for name in PORTS:
        setattr(kernel, name, 0)
    kernel.cleanup_connection_file()

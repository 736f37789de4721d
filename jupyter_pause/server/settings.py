"""Server-side settings of jupyter-pause (``c.PauseServer.*`` in a Jupyter server config)."""

from __future__ import annotations

from traitlets import Bool, Enum, Float, Int, Unicode
from traitlets.config import Configurable

from ..vocabulary import Cloud


class PauseServer(Configurable):
    """How the server extension pauses, waits, resumes and watches."""

    busy_timeout = Float(
        300.0,
        help="Seconds a pause waits for a running cell to finish, or its steps loop to reach a safe point, "
        "before it fails (the kernel keeps running).",
    ).tag(config=True)
    checkpoint_timeout = Float(1800.0, help="Seconds a checkpoint inside the kernel may take.").tag(config=True)
    kernel_start_timeout = Float(
        120.0,
        help="Seconds a kernel a resume starts may take to answer its first request. One that has not answered by "
        "then is shut down and the resume fails, its checkpoint untouched (Resume again starts a new kernel). "
        "Also how long the server looks at any new kernel's ports for one another process took.",
    ).tag(config=True)
    resource_wait_timeout = Float(
        600.0, help="Seconds a resume waits for the resources its checkpoint needs before it fails."
    ).tag(config=True)
    resource_poll_interval = Float(5.0, help="Seconds between resource checks while waiting.").tag(config=True)
    cuda_devices = Int(
        None, allow_none=True, help="CUDA devices this node offers (default: as many as torch sees)."
    ).tag(config=True)
    allow_cpu_fallback = Bool(
        False, help="Resume checkpoints taken on a GPU into host memory when this node has no GPU, instead of waiting."
    ).tag(config=True)
    lease_seconds = Float(
        900.0, help="How long a resume holds its session's lease; a crashed holder blocks no longer than this."
    ).tag(config=True)
    lease_settle = Float(
        1.0, help="Seconds between writing a lease and reading it back (longer than the store's write skew)."
    ).tag(config=True)
    kernel_name = Unicode(
        "python3",
        help="The kernelspec a resume starts for a session that recorded none (no server paused it, and its "
        "notebook's metadata names none). Every other session resumes in the kernelspec it ran on, or in the one "
        "the resume picks.",
    ).tag(config=True)
    idle_pause_after = Float(
        0.0, help="Pause kernels idle for this many seconds (0: never). Unlike cull_idle_timeout, state is kept."
    ).tag(config=True)
    idle_check_interval = Float(60.0, help="Seconds between idle checks.").tag(config=True)
    pause_culled_kernels = Bool(
        True,
        help="When jupyter-server's kernel culler (c.MappingKernelManager.cull_idle_timeout, with its "
        "cull_interval, cull_connected and cull_busy) takes a notebook's kernel, pause it instead: checkpoint, "
        "then shut down, so Resume brings it back. A kernel whose checkpoint fails keeps running, and its status "
        "and the server's log say why. False: the culler shuts kernels down as it always did, and their state is lost.",
    ).tag(config=True)
    culler_warn_before = Float(
        300.0,
        help="Seconds of warning before a pause the kernel culler asks for: the culler's first check that finds a "
        "notebook's kernel idle shows a countdown in JupyterLab (Keep working starts the kernel's idle time "
        "again) and pauses nothing; its first check once the time is up pauses the kernel. 0: no warning.",
    ).tag(config=True)
    preemption_notices = Enum(
        ["", "auto", *Cloud],
        "",
        help="Watch a cloud's preemption notices and pause every session on one: aws (the spot "
        "interruption notice through IMDSv2; a rebalance recommendation checkpoints every session), gce, "
        "azure (Scheduled Events), or auto (watch whichever of the three metadata services answers). "
        "Empty (the default): only the clouds whose URL setting below is set.",
    ).tag(config=True)
    aws_spot_url = Unicode(
        "",
        help="AWS spot interruption notice URL (the token and rebalance addresses are on the same host); "
        "empty: http://169.254.169.254/latest/meta-data/spot/instance-action when preemption_notices "
        "asks for aws, else off.",
    ).tag(config=True)
    gce_preempted_url = Unicode(
        "",
        help="GCE preemption URL; empty: http://metadata.google.internal/computeMetadata/v1/instance/preempted "
        "when preemption_notices asks for gce, else off.",
    ).tag(config=True)
    azure_scheduled_events_url = Unicode(
        "",
        help="Azure Scheduled Events URL; empty: "
        "http://169.254.169.254/metadata/scheduledevents?api-version=2020-07-01 when preemption_notices "
        "asks for azure, else off.",
    ).tag(config=True)
    preemption_poll_interval = Float(5.0, help="Seconds between preemption notice polls.").tag(config=True)
    preemption_timeout = Float(
        2.0, help="Seconds a metadata service has to answer one request (auto's probes included)."
    ).tag(config=True)
    preemption_grace = Float(
        60.0,
        help="Seconds a pause on a preemption notice waits for a running cell's next safe point (or its end) "
        "before it gives up on that kernel, whose own SIGTERM checkpoint stays the fallback. Keep it under the "
        "notice's lead time: AWS spot gives 120 s, GCE and Azure 30 s.",
    ).tag(config=True)
    rebuild = Bool(
        True,
        help="On resume, rebuild in the kernel what the checkpoint could not save (a generator, a hash object, "
        "a database connection) by replaying the recorded statements that made it; False leaves it out, as "
        "%resume --no-rebuild and JUPYTER_PAUSE_REBUILD=0 do.",
    ).tag(config=True)
    resume_on_open = Bool(
        False,
        help="Resume a paused session as soon as its notebook is opened in JupyterLab (after a release, "
        "on whichever node the Hub starts the next server), instead of offering Resume.",
    ).tag(config=True)
    shutdown_budget = Float(
        25.0,
        help="Seconds the server spends pausing every session when it gets SIGTERM (pod eviction, spot "
        "reclaim, kubectl delete) before it exits anyway. Keep it under the pod's terminationGracePeriodSeconds "
        "(30 s by default on Kubernetes) with a margin for the kernel shutdowns; 0 exits at once, pausing nothing.",
    ).tag(config=True)

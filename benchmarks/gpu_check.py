"""GPU check: checkpoint and resume a CUDA model + AdamW; prove it back, report copy speeds.

Run by ``benchmarks/gpu_check.sh`` on a machine with an NVIDIA GPU (never in CI). It measures,
side by side in one process:

- device -> host: the bytes per second of the checkpoint's own copy of the GPU state to host
  memory (``ArrayCollector.gather``), next to a plain copy of the same bytes into pinned memory;
- host -> device: the resume's read, verification and copy of the state to the GPU (blobs read
  into pinned memory, copies queued without waiting: ``serialize.pinned``), as bytes per second
  of the whole, next to a plain copy from pinned memory, with the bytes it pinned and queued;
- checkpoint and resume times, and how long ``--async`` blocks the kernel;
- a frozen-backbone fine-tune (``--frozen-gb`` frozen + 1% trainable, AdamW on the trainable
  part): a periodic checkpoint after one training step against the first, with the bytes it
  copied and those it kept on the device by their fingerprint (``serialize.devicehash``).

Every tensor is then compared bit for bit, the restore test must say ``restored``, and a resume
with ``map_location="cpu"`` must bring the same values to host memory. Exit status 1 on any
mismatch. ``--device cpu`` runs the same steps on the CPU (a smoke test of this script; there
CPU tensors take the device path too, so the fingerprints are exercised).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

import jupyter_pause as jp
from jupyter_pause.serialize import arrays, devicehash, pinned
from jupyter_pause.session import lineage, restore


def build(size_bytes: int, device: str, layers: int = 24) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """Bias-free Linear layers + AdamW after one step: parameters + two moments = ``size_bytes``."""
    d = int(math.sqrt(size_bytes / 3 / layers / 4))
    gen = torch.Generator(device=device).manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(d, d, bias=False) for _ in range(layers)]).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=gen, device=device)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return model, opt


def tensors(model: torch.nn.Module, opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    found = [p.detach() for p in model.parameters()]
    for state in opt.state.values():
        found += [v for v in state.values() if isinstance(v, torch.Tensor) and v.numel() > 1]
    return found


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


class Timer:
    """Wraps a function to add up the seconds spent in it (and the device work it queued)."""

    def __init__(self, owner: Any, name: str, device: str) -> None:
        self.owner, self.name, self.device, self.seconds = owner, name, device, 0.0
        self.real = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return self.real(*args, **kwargs)
            finally:
                sync(self.device)
                self.seconds += time.perf_counter() - start

        setattr(owner, name, timed)

    def restore(self) -> None:
        setattr(self.owner, self.name, self.real)


def plain_copies(found: list[torch.Tensor], device: str) -> tuple[float, float]:
    """Seconds for a plain device->pinned-host copy of ``found``, and back again."""
    total = sum(t.numel() * t.element_size() for t in found)
    pinned = device.startswith("cuda")
    host = torch.empty(total, dtype=torch.uint8, pin_memory=pinned)
    back = torch.empty(total, dtype=torch.uint8, device=device)
    sync(device)
    start = time.perf_counter()
    offset = 0
    for t in found:
        n = t.numel() * t.element_size()
        host[offset : offset + n].copy_(t.reshape(-1).view(torch.uint8), non_blocking=pinned)
        offset += n
    sync(device)
    d2h = time.perf_counter() - start
    start = time.perf_counter()
    back.copy_(host, non_blocking=pinned)
    sync(device)
    return d2h, time.perf_counter() - start


def gbps(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e9 if seconds > 0 else float("nan")


def frozen_backbone(store: Path, frozen_bytes: int, device: str) -> dict[str, Any]:
    """First checkpoint of a frozen backbone + trainable head (1%), then a periodic one after a
    training step: seconds, bytes copied and kept on the device; the resumed state bit for bit."""
    layers = 8
    d = int(math.sqrt(frozen_bytes / layers / 4))
    torch.manual_seed(0)
    backbone = torch.nn.Sequential(*[torch.nn.Linear(d, d, bias=False) for _ in range(layers)]).to(device)
    backbone.requires_grad_(False)
    head = torch.nn.Linear(d, max(1, round(frozen_bytes / 100 / 4 / d)), bias=False).to(device)
    ns: dict[str, Any] = {"backbone": backbone, "head": head, "opt": torch.optim.AdamW(head.parameters(), lr=1e-3)}

    def step() -> None:
        with torch.no_grad():
            features = backbone(torch.randn(8, d, device=device))
        head(features).pow(2).mean().backward()
        ns["opt"].step()
        ns["opt"].zero_grad(set_to_none=True)

    out: dict[str, Any] = {
        "frozen_bytes": sum(p.nbytes for p in backbone.parameters()),
        "trainable_bytes": sum(p.nbytes for p in head.parameters()),
    }
    step()
    lineage.forget()
    sync(device)
    start = time.perf_counter()
    first = jp.checkpoint(store=str(store), session="gpu-check-frozen", namespace=ns).manifest
    out["first_s"] = time.perf_counter() - start
    step()
    fingerprinting = Timer(devicehash, "fingerprints", device)
    try:
        sync(device)
        start = time.perf_counter()
        second = jp.checkpoint(store=str(store), session="gpu-check-frozen", namespace=ns, trigger="periodic")
        out["periodic_s"] = time.perf_counter() - start
    finally:
        fingerprinting.restore()
    out["fingerprint_s"] = fingerprinting.seconds
    out["ratio"] = out["periodic_s"] / out["first_s"]
    out["first_copied"] = first.stats["bytes_copied"]
    out["copied"] = second.manifest.stats["bytes_copied"]
    out["kept_on_device"] = second.manifest.stats["bytes_kept_on_device"]
    # Every frozen storage kept, and at most the trainable part with AdamW's moments copied.
    at_most = 3 * out["trainable_bytes"] + (1 << 20)
    out["only_trainable_copied"] = out["kept_on_device"] == out["frozen_bytes"] and out["copied"] <= at_most
    lineage.forget()
    target: dict[str, Any] = {}
    jp.resume(second.manifest.id, store=str(store), session="gpu-check-frozen", namespace=target)
    out["bit_identical"] = all(
        torch.equal(a, b) and a.device == b.device
        for name in ("backbone", "head")
        for a, b in zip(ns[name].parameters(), target[name].parameters(), strict=True)
    )
    return out


def check(args: argparse.Namespace) -> dict[str, Any]:
    device = args.device
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("no CUDA device is visible to torch here: run this on a GPU machine")
    store = Path(args.store or tempfile.mkdtemp(prefix="jupyter-pause-gpu-"))
    model, opt = build(int(args.size_gb * (1 << 30)), device)
    found = tensors(model, opt)
    nbytes = sum(t.numel() * t.element_size() for t in found)
    ns: dict[str, Any] = {"model": model, "opt": opt, "step": 1}
    out: dict[str, Any] = {"device": device, "bytes": nbytes, "store": str(store)}
    if device.startswith("cuda"):
        out["gpu"] = torch.cuda.get_device_name(0)
    out["torch"] = torch.__version__

    plain_d2h, plain_h2d = plain_copies(found, device)
    lineage.forget()
    jp.checkpoint(store=str(store), session="warmup", namespace=ns)  # first pinned buffer, imports

    gather = Timer(arrays.ArrayCollector, "gather", device)
    try:
        lineage.forget()
        start = time.perf_counter()
        result = jp.checkpoint(store=str(store), session="gpu-check", namespace=ns)
        out["checkpoint_s"] = time.perf_counter() - start
    finally:
        gather.restore()
    out["checkpoint_d2h_s"] = gather.seconds

    ns["step"] = 2
    lineage.forget()
    job = jp.checkpoint_async(store=str(store), session="gpu-check-async", namespace=ns)
    out["async_blocked_s"] = job.blocked
    job.wait(600)

    # The resume runs where a real one would: in a new process, which the restore test can
    # tell from this one. It compares what it restored with a torch.save of the same tensors.
    reference = store / "reference.pt"
    torch.save([t.cpu() for t in found], reference)
    child = subprocess.run(
        [sys.executable, __file__, "--resume-in-child", str(store), result.manifest.id, device],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if child.returncode != 0:
        raise SystemExit(f"the resuming process failed:\n{child.stdout}\n{child.stderr}")
    out.update(json.loads(child.stdout.strip().splitlines()[-1]))
    # Last: its training steps change the model the reference above was taken of.
    out["in_loop_blocked_s"], out["in_loop_committed"] = in_loop(model, opt, ns, store, device)
    out["d2h_gbps"] = {
        "checkpoint": gbps(nbytes, out["checkpoint_d2h_s"]),
        "plain pinned copy": gbps(nbytes, plain_d2h),
    }
    out["h2d_gbps"] = {"resume": gbps(nbytes, out["resume_fetch_s"]), "plain pinned copy": gbps(nbytes, plain_h2d)}
    del model, opt, found, ns
    if device == "cpu":
        devicehash.ON_CPU = True  # the smoke test goes through the fingerprints too
    out["frozen"] = frozen_backbone(store / "frozen", int(args.frozen_gb * (1 << 30)), device)
    out["precision"] = precision_cases(store / "precision", device)
    if not args.store and not args.keep:
        shutil.rmtree(store, ignore_errors=True)
    return out


def in_loop(
    model: torch.nn.Module, opt: torch.optim.Optimizer, ns: dict[str, Any], store: Path, device: str
) -> tuple[float, bool]:
    """Train a few steps in ``steps(..., every=2)``: the median seconds a periodic checkpoint
    held the loop at its safe point, and whether the last one committed with its position."""
    from jupyter_pause.loops import steps as loops
    from jupyter_pause.session import background, checkpoint
    from jupyter_pause.store.catalog import Catalog
    from jupyter_pause.store.storage import Store

    real = checkpoint.checkpoint_async
    checkpoint.checkpoint_async = lambda **kw: real(store=str(store), session="gpu-check-loop", namespace=ns, **kw)
    blocked = Timer(loops, "_periodic", device)
    x = torch.randn(8, model[0].in_features, device=device)
    seconds, seen = [], 0.0
    try:
        lineage.forget()
        for _ in jp.steps(range(7), every=2, name="gpu-check-loop"):  # checkpoints after items 2, 4, 6
            if blocked.seconds > seen:
                seconds.append(blocked.seconds - seen)
                seen = blocked.seconds
            loss = model(x).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            sync(device)
        background.wait_for_background()
    finally:
        blocked.restore()
        checkpoint.checkpoint_async = real
    newest = Catalog(Store(str(store))).checkpoints("gpu-check-loop")[0]
    committed = newest.trigger == "periodic" and [r["done"] for r in newest.loops] == [6]
    return sorted(seconds)[len(seconds) // 2], committed


def resume_in_child(store: str, checkpoint: str, device: str) -> dict[str, Any]:
    """The new process's half: resume, verify, compare with the reference; figures as JSON."""
    out: dict[str, Any] = {}
    fetch_timer = Timer(restore, "_fetch", device)
    build_timer = Timer(arrays.ArrayLoader, "_build", device)
    try:
        target: dict[str, Any] = {}
        start = time.perf_counter()
        cycle = jp.resume_and_verify(checkpoint, store=store, session="gpu-check", namespace=target, write_report=False)
        sync(device)
        out["resume_s"] = time.perf_counter() - start
    finally:
        build_timer.restore()
        fetch_timer.restore()
    out["resume_fetch_s"] = fetch_timer.seconds
    out["resume_build_s"] = build_timer.seconds
    out["pinned_bytes"], out["queued_bytes"] = pinned.TOTALS["pinned"], pinned.TOTALS["queued"]  # a new process
    out["verdict"] = cycle.verdict.kind
    out["verdict_details"] = cycle.verdict.details
    expected = torch.load(Path(store) / "reference.pt")
    restored = tensors(target["model"], target["opt"])
    out["bit_identical"] = len(restored) == len(expected) and all(
        str(b.device) == str(torch.device(device)) and torch.equal(a, b.cpu())
        for a, b in zip(expected, restored, strict=True)
    )
    group, params = target["opt"].param_groups[0]["params"], list(target["model"].parameters())
    out["optimizer_shares_parameters"] = len(group) == len(params) and all(
        p is q for p, q in zip(group, params, strict=True)
    )
    on_cpu: dict[str, Any] = {}
    jp.resume(checkpoint, store=store, session="gpu-check", namespace=on_cpu, map_location="cpu")
    back = tensors(on_cpu["model"], on_cpu["opt"])
    out["map_location_cpu"] = len(back) == len(expected) and all(
        b.device.type == "cpu" and torch.equal(a, b) for a, b in zip(expected, back, strict=True)
    )
    return out


#: The restore test across matmul precisions: (case, model dtype, TF32 at the checkpoint, TF32 at the resume).
PRECISION_CASES = (
    ("fp32, TF32 off -> on", "float32", False, True),
    ("fp32, TF32 on -> off", "float32", True, False),
    ("bf16 weights", "bfloat16", False, False),
)


def _tf32(on: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def precision_cases(store: Path, device: str) -> list[dict[str, Any]]:
    """Checkpoint a model under one matmul precision, resume it in a new process under another:
    each must be ``restored``, its outputs bit-identical or within the precision's tolerance."""
    found = []
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    for i, (case, dtype, then, now) in enumerate(PRECISION_CASES):
        session = f"precision-{i}"
        _tf32(then)
        try:
            torch.manual_seed(i)
            width = 512
            model = torch.nn.Sequential(
                torch.nn.Linear(width, width), torch.nn.GELU(), torch.nn.Linear(width, width), torch.nn.LayerNorm(width)
            ).to(device=device, dtype=getattr(torch, dtype))
            lineage.forget()
            jp.checkpoint(store=str(store), session=session, namespace={"model": model})
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
        child = subprocess.run(
            [sys.executable, __file__, "--verify-in-child", str(store), session, str(int(now))],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if child.returncode != 0:
            raise SystemExit(f"the resuming process failed:\n{child.stdout}\n{child.stderr}")
        found.append({"case": case, **json.loads(child.stdout.strip().splitlines()[-1])})
    return found


def verify_in_child(store: str, session: str, tf32: str) -> dict[str, Any]:
    """The new process's half of a precision case: resume under the other precision, verify."""
    _tf32(tf32 == "1")
    cycle = jp.resume_and_verify(store=store, session=session, namespace={}, write_report=False)
    said = [d for d in cycle.verdict.details if d.startswith("resumed ")]
    return {"verdict": cycle.verdict.kind, "said": said[0] if said else "; ".join(cycle.verdict.details)}


def table(out: dict[str, Any]) -> str:
    """Every figure in one table: what was measured, beside what it is compared with."""
    gib = out["bytes"] / (1 << 30)
    f = out["frozen"]
    on_gpu = out["device"] != "cpu"
    yes = {True: "yes", False: "NO"}

    def ratio(a: float, b: float) -> str:
        return f"{a / b:.3f}" if b > 0 else "-"

    def beside(label: str, ours: float, base: float, unit: str, what: str, note: str = "") -> tuple[str, ...]:
        """A row of ``ours`` measured beside ``base`` (``what``), in ``unit``."""
        digits = 1 if unit == "GB/s" else 2
        return (label, f"{ours:.{digits}f} {unit}", f"{what} {base:.{digits}f} {unit}", ratio(ours, base), note)

    sync = out["checkpoint_s"]
    rows = [
        ("checkpoint", f"{sync:.2f} s", "", "", ""),
        beside("--async checkpoint: kernel blocked", out["async_blocked_s"], sync, "s", "sync checkpoint"),
        beside(
            "in-loop periodic checkpoint: loop blocked (median of 3)",
            out["in_loop_blocked_s"],
            sync,
            "s",
            "sync checkpoint",
            f"committed: {yes[out['in_loop_committed']]}",
        ),
    ]
    if on_gpu:
        d2h, h2d, plain = out["d2h_gbps"], out["h2d_gbps"], "plain pinned copy"
        rows += [
            beside(
                "device -> host, checkpoint's pinned copy", d2h["checkpoint"], d2h[plain], "GB/s", "torch.cuda " + plain
            ),
            beside(
                "host -> device, resume (read, verify, copy)",
                h2d["resume"],
                h2d[plain],
                "GB/s",
                "torch.cuda " + plain,
                f"read into pinned memory {out['pinned_bytes'] / 1e6:.0f} MB, "
                f"copied without waiting {out['queued_bytes'] / 1e6:.0f} MB",
            ),
        ]
    rows += [
        (
            "resume + verify, in a new process",
            f"{out['resume_s']:.2f} s",
            f"verdict {out['verdict']}",
            "",
            f"bit-identical {yes[out['bit_identical']]}, optimizer shares parameters "
            f"{yes[out['optimizer_shares_parameters']]}, map_location=cpu {yes[out['map_location_cpu']]}",
        ),
        (
            f"frozen backbone {f['frozen_bytes'] / (1 << 30):.2f} GiB + {f['trainable_bytes'] / 1e6:.1f} MB: "
            "periodic checkpoint after a step",
            f"{f['periodic_s']:.2f} s",
            f"first checkpoint {f['first_s']:.2f} s",
            f"{f['ratio']:.3f}",
            "target <= 0.05",
        ),
        (
            "frozen backbone: bytes copied to host / kept on the device",
            f"{f['copied'] / 1e6:.1f} MB",
            f"{f['kept_on_device'] / 1e6:.0f} MB kept",
            "",
            f"only the trainable part copied: {yes[f['only_trainable_copied']]}, resumed bit-identical "
            f"{yes[f['bit_identical']]}",
        ),
        ("frozen backbone: fingerprinting", f"{f['fingerprint_s']:.3f} s", "", "", ""),
    ]
    rows += [
        (f"restore test, {p['case']}", "", f"verdict {p['verdict']}", "", p["said"]) for p in out.get("precision", [])
    ]
    head = ("measure", "jupyter-pause", "beside it", "ratio", "note")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = [
        f"{gib:.2f} GiB of model + AdamW state on {out['device']} ({out.get('gpu', 'no GPU')}), torch {out['torch']}",
        " | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip(),
        "-+-".join("-" * w for w in widths),
    ]
    lines += [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu for a smoke test")
    parser.add_argument("--size-gb", type=float, default=1.5, help="model + AdamW state in GiB (default 1.5)")
    parser.add_argument("--frozen-gb", type=float, default=1.0, help="frozen backbone in GiB (default 1)")
    parser.add_argument("--store", help="store folder (default: a temporary folder, deleted afterwards)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary store")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--resume-in-child", nargs=3, metavar=("STORE", "CHECKPOINT", "DEVICE"), help=argparse.SUPPRESS)
    parser.add_argument("--verify-in-child", nargs=3, metavar=("STORE", "SESSION", "TF32"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.resume_in_child:
        print(json.dumps(resume_in_child(*args.resume_in_child)))
        return 0
    if args.verify_in_child:
        print(json.dumps(verify_in_child(*args.verify_in_child)))
        return 0
    out = check(args)
    print(table(out))
    f = out["frozen"]
    ok = (
        out["in_loop_committed"]
        and out["verdict"] == "restored"
        and out["bit_identical"]
        and out["optimizer_shares_parameters"]
        and out["map_location_cpu"]
        and f["only_trainable_copied"]
        and f["bit_identical"]
        and all(p["verdict"] == "restored" for p in out["precision"])
    )
    if out["verdict"] != "restored":
        print("restore test: " + "; ".join(out.get("verdict_details", [])))
    print("PASS" if ok else "FAIL")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""``accelerate launch --cpu --num_processes N``: the data-parallel CPU relaunch of the training scripts.

Why it exists: accelerate 1.x runs ``--cpu`` jobs with its simple launcher, a single process whatever
``--num_processes`` says (it only exports ``MASTER_ADDR`` / ``MASTER_PORT``). To get the N processes the user asked
for, the script reads N back from the launcher's command line (``/proc/<parent pid>/cmdline``, Linux only) and
reruns itself under ``torch.distributed.run`` with the gloo backend. Everywhere else (GPUs, a single process,
``torchrun``) nothing is relaunched.
"""

from __future__ import annotations

import os


def _requested_cpu_processes() -> int:
    """Processes asked of ``accelerate launch --cpu --num_processes N`` by the parent process (Linux), else 1.

    accelerate 1.x runs ``--cpu`` jobs with its simple launcher, a single process whatever ``--num_processes``
    says (it only exports MASTER_ADDR/MASTER_PORT); the number is read back from the launcher's command line.
    """
    from transformers.utils import strtobool

    if "WORLD_SIZE" in os.environ or "MASTER_ADDR" not in os.environ:
        return 1
    if not strtobool(os.environ.get("ACCELERATE_USE_CPU", "False")):
        return 1
    try:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as handle:
            parent = [part.decode() for part in handle.read().split(b"\0") if part]
    except OSError:
        return 1
    for i, token in enumerate(parent):
        if token == "--num_processes" and i + 1 < len(parent) and parent[i + 1].isdigit():
            return int(parent[i + 1])
        if token.startswith("--num_processes=") and token.split("=", 1)[1].isdigit():
            return int(token.split("=", 1)[1])
    return 1


def relaunch_data_parallel_cpu(argv: list) -> int | None:
    """Under ``accelerate launch --cpu --num_processes N`` (N > 1), rerun the script as N ``torch.distributed``
    processes (gloo, CPU) and return their exit code; ``None`` when nothing needs relaunching."""
    import subprocess
    import sys

    processes = _requested_cpu_processes()
    if processes <= 1:
        return None
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes),
               "--master_addr", os.environ["MASTER_ADDR"], "--master_port", os.environ.get("MASTER_PORT", "29500"),
               os.path.abspath(sys.argv[0]), *argv]
    env = {**os.environ, "ACCELERATE_USE_CPU": "True"}
    env.pop("MASTER_ADDR")
    env.pop("MASTER_PORT", None)
    return subprocess.call(command, env=env)


def leave_process_group() -> None:
    """End a data-parallel run's process group cleanly: wait for every process, then destroy the group while the
    interpreter is still whole; a no-op without one.

    Why: a process that exits with its gloo group alive leaves the group's worker threads holding tensors that are
    freed during interpreter finalisation, which can abort it (SIGABRT) after a run that succeeded; the barrier also
    keeps the other ranks from leaving while rank 0 still writes the run's outputs.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()

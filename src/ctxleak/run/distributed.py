"""Data-parallel runs on an existing launcher: ``torchrun`` or ``accelerate launch``
start N processes; each scores its shard of examples and appends its own samples file; rank 0
merges them and writes the results. Example seeds come from (run seed, example index), so the
merged numbers equal a single-process run whatever N is.
"""

from __future__ import annotations

import atexit
import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class World:
    """This process's place in a launch: global rank, number of processes, local rank."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def owns(self, index: int) -> bool:
        """Example ``index`` belongs to this process (round-robin sharding)."""
        return index % self.size == self.rank


def current_world() -> World:
    """Read the launcher's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``)."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", str(rank)))
    return World(rank=rank, size=size, local_rank=local)


def barrier_timeout() -> timedelta:
    """How long a process waits at a barrier for the others (``CTXLEAK_DIST_TIMEOUT_S``,
    default 7 days). Shards are never perfectly balanced: on a long job the first process to
    finish may wait hours for the last, far beyond torch's 30-minute default."""
    return timedelta(seconds=float(os.environ.get("CTXLEAK_DIST_TIMEOUT_S", 7 * 24 * 3600)))


def init_distributed(device: str = "cpu") -> World:
    """Join the process group when launched with several processes.

    The processes only ever wait for each other (no tensors are exchanged: each writes its own
    shard), so the group uses gloo on CPUs and GPUs alike: no NCCL device binding, and it works
    across nodes over TCP. ``device`` is accepted for symmetry and pins ``cuda:LOCAL_RANK``.
    """
    world = current_world()
    if world.distributed:
        if device.startswith("cuda") and torch.cuda.is_available():
            torch.cuda.set_device(torch.device(device))
        if not dist.is_initialized():
            dist.init_process_group(backend="gloo", timeout=barrier_timeout())
            atexit.register(_leave)
    return world


def _leave() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def barrier() -> None:
    """Wait for every process (no-op in a single process)."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def local_device(device: str, world: World) -> str:
    """``cuda`` becomes ``cuda:LOCAL_RANK`` so that each process gets its own GPU."""
    if world.distributed and device in ("auto", "cuda"):
        if torch.cuda.is_available():
            return f"cuda:{world.local_rank % torch.cuda.device_count()}"
        return "cpu" if device == "auto" else device
    return device

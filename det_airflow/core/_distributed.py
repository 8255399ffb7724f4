"""Ranks and collectives of picklable objects across the processes of one trial.

One process: every collective is trivial. Several (torchrun and the launchers): the collectives are
torch.distributed's object collectives over gloo process groups, the whole world's and each node's.
torch is imported only then, so the Core API imports without it.
"""

from __future__ import annotations

import os
from typing import Any

from det_airflow.errors import DetError


class DistributedContext:
    """Where this process stands among the trial's workers, and collectives among them.

    ``rank``/``size`` count every worker; ``local_*`` the workers of this node (container);
    ``cross_*`` the nodes. The chief is rank 0; each node's local chief is its local rank 0.
    Collectives must be called by every worker concerned (all of them, or all of this node's for
    the ``_local`` variants), in the same order.
    """

    def __init__(
        self,
        *,
        rank: int = 0,
        size: int = 1,
        local_rank: int | None = None,
        local_size: int | None = None,
        cross_rank: int | None = None,
        cross_size: int | None = None,
        chief_ip: str | None = None,
    ) -> None:
        self.rank = int(rank)
        self.size = int(size)
        self.local_rank = self.rank if local_rank is None else int(local_rank)
        self.local_size = self.size if local_size is None else int(local_size)
        self.cross_rank = 0 if cross_rank is None else int(cross_rank)
        self.cross_size = (
            max(self.size // max(self.local_size, 1), 1) if cross_size is None else int(cross_size)
        )
        self.chief_ip = chief_ip
        if not (0 <= self.rank < self.size and 0 <= self.local_rank < self.local_size):
            raise DetError(
                f"invalid distributed layout: rank {self.rank} of {self.size}, "
                f"local rank {self.local_rank} of {self.local_size}"
            )
        self._world_group: Any = None
        self._local_group: Any = None
        self._local_chief_rank = self.rank - self.local_rank
        self._owns_process_group = False
        if self.size > 1:
            self._setup_groups()

    @classmethod
    def from_torch_distributed(cls, chief_ip: str | None = None) -> DistributedContext:
        """From the variables torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK).

        Call it in every worker. If torch.distributed is not initialized yet it is, with gloo;
        initialize it yourself first to use another backend (e.g. nccl).
        """
        env = os.environ
        try:
            rank = int(env["RANK"])
            size = int(env["WORLD_SIZE"])
            local_rank = int(env["LOCAL_RANK"])
            local_size = int(env.get("LOCAL_WORLD_SIZE") or size)
        except (KeyError, ValueError) as exc:
            raise DetError(
                f"from_torch_distributed: {exc} is missing or invalid; run under torchrun "
                "(or the torch_distributed launcher), which sets RANK, WORLD_SIZE and LOCAL_RANK"
            ) from None
        cross_rank = int(env.get("GROUP_RANK") or env.get("NODE_RANK") or rank // max(local_size, 1))
        return cls(
            rank=rank,
            size=size,
            local_rank=local_rank,
            local_size=local_size,
            cross_rank=cross_rank,
            cross_size=max(size // max(local_size, 1), 1),
            chief_ip=chief_ip or env.get("DET_CHIEF_IP") or env.get("MASTER_ADDR"),
        )

    # Determined's accessor methods, for code written against them.
    def get_rank(self) -> int:
        return self.rank

    def get_size(self) -> int:
        return self.size

    def get_local_rank(self) -> int:
        return self.local_rank

    def get_local_size(self) -> int:
        return self.local_size

    def get_cross_rank(self) -> int:
        return self.cross_rank

    def get_cross_size(self) -> int:
        return self.cross_size

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    @property
    def is_local_chief(self) -> bool:
        return self.local_rank == 0

    # --- collectives ---------------------------------------------------------------------------

    def gather(self, stuff: Any) -> list[Any] | None:
        """Every worker's ``stuff``, in rank order, on the chief; None elsewhere."""
        if self.size == 1:
            return [stuff]
        return self._gather(stuff, self._world_group, 0, self.size, self.is_chief)

    def gather_local(self, stuff: Any) -> list[Any] | None:
        """This node's workers' ``stuff``, in local rank order, on the local chief; None elsewhere."""
        if self.local_size == 1:
            return [stuff]
        return self._gather(
            stuff, self._local_group, self._local_chief_rank, self.local_size, self.is_local_chief
        )

    def allgather(self, stuff: Any) -> list[Any]:
        """Every worker's ``stuff``, in rank order, on every worker."""
        if self.size == 1:
            return [stuff]
        return self._allgather(stuff, self._world_group, self.size)

    def allgather_local(self, stuff: Any) -> list[Any]:
        if self.local_size == 1:
            return [stuff]
        return self._allgather(stuff, self._local_group, self.local_size)

    def broadcast(self, stuff: Any = None) -> Any:
        """The chief's ``stuff``, on every worker (what others pass is ignored)."""
        if self.size == 1:
            return stuff
        return self._broadcast(stuff, self._world_group, 0)

    def broadcast_local(self, stuff: Any = None) -> Any:
        """The local chief's ``stuff``, on every worker of this node."""
        if self.local_size == 1:
            return stuff
        return self._broadcast(stuff, self._local_group, self._local_chief_rank)

    def close(self) -> None:
        """Tear down what this context set up (never a process group the user initialized)."""
        if self._owns_process_group:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
            self._owns_process_group = False

    # --- torch.distributed -----------------------------------------------------------------------

    def _setup_groups(self) -> None:
        try:
            import torch.distributed as dist
        except ImportError:
            raise DetError("distributed training (more than one worker) needs torch installed") from None
        if not dist.is_initialized():
            if not (os.environ.get("MASTER_ADDR") and os.environ.get("MASTER_PORT")):
                raise DetError(
                    "torch.distributed is not initialized and MASTER_ADDR/MASTER_PORT are not set; "
                    "run under torchrun or call torch.distributed.init_process_group() first"
                )
            dist.init_process_group("gloo", rank=self.rank, world_size=self.size)
            self._owns_process_group = True
        if dist.get_world_size() != self.size or dist.get_rank() != self.rank:
            raise DetError(
                f"torch.distributed has rank {dist.get_rank()} of {dist.get_world_size()}, "
                f"but this context says rank {self.rank} of {self.size}"
            )
        # Object collectives run over gloo (CPU) even when training uses nccl.
        self._world_group = None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
        # Learn who shares this node from the ranks themselves rather than assuming a layout.
        nodes: dict[int, list[int]] = {}
        for cross_rank, rank in self._allgather((self.cross_rank, self.rank), self._world_group, self.size):
            nodes.setdefault(cross_rank, []).append(rank)
        members = sorted(nodes[self.cross_rank])
        if len(members) != self.local_size:
            raise DetError(f"node {self.cross_rank} has {len(members)} workers, expected {self.local_size}")
        self._local_chief_rank = members[0]
        if len(nodes) == 1:
            self._local_group = self._world_group
        else:
            # new_group is itself a collective: every worker creates every node's group, in order.
            for node in sorted(nodes):
                group = dist.new_group(ranks=sorted(nodes[node]), backend="gloo")
                if node == self.cross_rank:
                    self._local_group = group

    @staticmethod
    def _gather(stuff: Any, group: Any, dst: int, n: int, receives: bool) -> list[Any] | None:
        import torch.distributed as dist

        out: list[Any] | None = [None] * n if receives else None
        dist.gather_object(stuff, out, dst=dst, group=group)
        return out

    @staticmethod
    def _allgather(stuff: Any, group: Any, n: int) -> list[Any]:
        import torch.distributed as dist

        out: list[Any] = [None] * n
        dist.all_gather_object(out, stuff, group=group)
        return out

    @staticmethod
    def _broadcast(stuff: Any, group: Any, src: int) -> Any:
        import torch.distributed as dist

        box = [stuff]
        dist.broadcast_object_list(box, src=src, group=group)
        return box[0]

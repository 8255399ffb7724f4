"""Ranks and collectives of picklable objects across the processes of one trial.

One process: every collective is trivial. Several under torchrun and the launchers
(``from_torch_distributed``, or torch.distributed already initialized): torch.distributed's object
collectives over gloo process groups, the whole world's and each node's; torch is imported only
then, so the Core API imports without it. Several processes started some other way, given
``chief_ip``: plain TCP to the chief (``_tcp``), as Determined's own collectives do, on
``pub_port + port_offset``; each node's workers meet at their local chief on a port it picks.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from det_airflow import trial_env
from det_airflow.core import _tcp
from det_airflow.errors import DetError

# Determined's port for its collectives between training processes, and its second (unused here:
# one connection carries both directions).
DEFAULT_PUB_PORT = 12360
DEFAULT_PULL_PORT = 12376


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
        pub_port: int = DEFAULT_PUB_PORT,
        pull_port: int = DEFAULT_PULL_PORT,
        port_offset: int = 0,
        force_tcp: bool = False,
        _transport: str | None = None,
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
        # Set by close(): False when it ran during an error and left the process group alone.
        self.ended_cleanly = False
        self._closed = False
        self._world_star: _tcp.Star | None = None
        self._local_star: _tcp.Star | None = None
        self._port = int(pub_port) + int(port_offset)
        if self.size > 1:
            transport = _transport or ("tcp" if force_tcp or self._prefers_tcp() else "torch")
            if transport == "tcp":
                self._setup_tcp()
            else:
                self._setup_groups()

    def _prefers_tcp(self) -> bool:
        """TCP when a chief address is given and torch.distributed is not already set up."""
        if self.chief_ip is None:
            return False
        try:
            import torch.distributed as dist
        except ImportError:
            return True
        return not (dist.is_available() and dist.is_initialized())

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
            chief_ip=chief_ip or env.get(trial_env.CHIEF_IP) or env.get("MASTER_ADDR"),
            _transport="torch",
        )

    @classmethod
    def from_deepspeed(cls, chief_ip: str | None = None) -> DistributedContext:
        """From the variables the ``deepspeed`` launcher sets (RANK, WORLD_SIZE, LOCAL_RANK, and
        LOCAL_SIZE, CROSS_RANK, CROSS_SIZE where it sets them). Collectives go through
        torch.distributed when DeepSpeed has set it up, else TCP to ``chief_ip`` (``DET_CHIEF_IP``,
        else MASTER_ADDR)."""
        env = os.environ
        rank, size, local_rank = _env_ints(
            "from_deepspeed", "the deepspeed launcher", "RANK", "WORLD_SIZE", "LOCAL_RANK"
        )
        local_size = int(env.get("LOCAL_SIZE") or env.get("LOCAL_WORLD_SIZE") or size)
        return cls(
            rank=rank,
            size=size,
            local_rank=local_rank,
            local_size=local_size,
            cross_rank=int(env.get("CROSS_RANK") or rank // max(local_size, 1)),
            cross_size=int(env.get("CROSS_SIZE") or max(size // max(local_size, 1), 1)),
            chief_ip=chief_ip or env.get(trial_env.CHIEF_IP) or env.get("MASTER_ADDR") or "127.0.0.1",
        )

    @classmethod
    def from_horovod(cls, hvd: Any, chief_ip: str | None = None) -> DistributedContext:
        """From an initialized ``horovod`` module (``hvd.rank()``, ``hvd.local_size()``, ...);
        collectives over TCP to ``chief_ip`` (default ``DET_CHIEF_IP``, else this host)."""
        return cls(
            rank=hvd.rank(),
            size=hvd.size(),
            local_rank=hvd.local_rank(),
            local_size=hvd.local_size(),
            cross_rank=hvd.cross_rank(),
            cross_size=hvd.cross_size(),
            chief_ip=chief_ip or os.environ.get(trial_env.CHIEF_IP) or "127.0.0.1",
            _transport="tcp",
        )

    @classmethod
    def from_tf_config(
        cls, chief_ip: str | None = None, *, pub_port: int = DEFAULT_PUB_PORT
    ) -> tuple[DistributedContext, Any]:
        """``(context, strategy)`` from ``TF_CONFIG``, as Determined's. Several workers (one per
        host, the rank its ``task.index`` in ``cluster.worker``) get a context whose collectives go
        over TCP to ``chief_ip`` (default ``DET_CHIEF_IP``, else the first worker's host) on
        ``pub_port``, and a ``tf.distribute.MultiWorkerMirroredStrategy``. One worker, or no
        ``TF_CONFIG``, gets a one-process context and a ``MirroredStrategy`` over this host's GPUs
        when it has several, else TensorFlow's default strategy. Only ``worker`` tasks are
        supported (the tensorflow launcher sets no other).

        Example::

            distributed, strategy = det.core.DistributedContext.from_tf_config()
            with det.core.init(distributed=distributed) as core_context, strategy.scope():
                model = build_model()
        """
        # TF_CONFIG is checked before TensorFlow is imported: a mistake in it is told at once.
        raw = os.environ.get("TF_CONFIG")
        workers, index = _tf_workers(raw) if raw else ([], 0)
        try:
            import tensorflow as tf
        except ImportError:
            raise DetError("from_tf_config: TensorFlow is not installed (pip install tensorflow)") from None
        if len(workers) > 1:
            first_host = workers[0].rsplit(":", 1)[0].strip("[]")
            context = cls(
                rank=index,
                size=len(workers),
                local_rank=0,
                local_size=1,
                cross_rank=index,
                cross_size=len(workers),
                chief_ip=chief_ip or os.environ.get(trial_env.CHIEF_IP) or first_host,
                pub_port=pub_port,
                _transport="tcp",
            )
            # Made after the context: every worker has reached the chief before TensorFlow's
            # own collectives start.
            return context, tf.distribute.MultiWorkerMirroredStrategy()
        gpus = tf.config.list_physical_devices("GPU")
        strategy = tf.distribute.MirroredStrategy() if len(gpus) > 1 else tf.distribute.get_strategy()
        return cls(), strategy

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

    def get_num_agents(self) -> int:
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
        if self._world_star is not None:
            return self._world_star.gather(stuff)
        return self._gather(stuff, self._world_group, 0, self.size, self.is_chief)

    def gather_local(self, stuff: Any) -> list[Any] | None:
        """This node's workers' ``stuff``, in local rank order, on the local chief; None elsewhere."""
        if self.local_size == 1:
            return [stuff]
        if self._local_star is not None:
            return self._local_star.gather(stuff)
        return self._gather(
            stuff, self._local_group, self._local_chief_rank, self.local_size, self.is_local_chief
        )

    def allgather(self, stuff: Any) -> list[Any]:
        """Every worker's ``stuff``, in rank order, on every worker."""
        if self.size == 1:
            return [stuff]
        if self._world_star is not None:
            return self._world_star.allgather(stuff)
        return self._allgather(stuff, self._world_group, self.size)

    def allgather_local(self, stuff: Any) -> list[Any]:
        if self.local_size == 1:
            return [stuff]
        if self._local_star is not None:
            return self._local_star.allgather(stuff)
        return self._allgather(stuff, self._local_group, self.local_size)

    def broadcast(self, stuff: Any = None) -> Any:
        """The chief's ``stuff``, on every worker (what others pass is ignored)."""
        if self.size == 1:
            return stuff
        if self._world_star is not None:
            return self._world_star.broadcast(stuff)
        return self._broadcast(stuff, self._world_group, 0)

    def broadcast_local(self, stuff: Any = None) -> Any:
        """The local chief's ``stuff``, on every worker of this node."""
        if self.local_size == 1:
            return stuff
        if self._local_star is not None:
            return self._local_star.broadcast(stuff)
        return self._broadcast(stuff, self._local_group, self._local_chief_rank)

    def close(self, *, failed: bool | None = None) -> None:
        """Tear down what this context set up (never a process group the user initialized).

        ``failed``: whether this worker ends on an error; None: whether an exception is being
        handled where close() is called (an excepthook or atexit handler must say it).

        On a clean exit every worker first meets the others at one final barrier, which on gloo
        also waits for this worker's pending collectives: no worker destroys the process group or
        closes its connections while another still talks to it, and all destroy it together.
        Called while an exception propagates (a failing worker, ``Context.__exit__``), it neither
        waits for the others, who are stuck elsewhere, nor destroys the process group, which would
        wait for this worker's unmatched collectives: the process exits with its error and the
        launcher stops the rest.
        """
        if self._closed:
            return
        self._closed = True
        clean = sys.exc_info()[1] is None if failed is None else not failed
        try:
            if clean and self.size > 1:
                self._final_barrier()
        finally:
            for star in {id(s): s for s in (self._local_star, self._world_star) if s is not None}.values():
                star.close()
            self._world_star = self._local_star = None
        self.ended_cleanly = clean
        if self._owns_process_group and clean:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
        self._owns_process_group = False

    def _final_barrier(self) -> None:
        if self._world_star is not None:
            self._world_star.allgather(None)
            return
        import torch.distributed as dist

        if dist.is_initialized():
            dist.barrier(group=self._world_group)

    # --- TCP ---------------------------------------------------------------------------------------

    def _setup_tcp(self) -> None:
        if self.chief_ip is None:
            raise DetError(
                "distributed: chief_ip is required for several workers without torch.distributed "
                "(the address where rank 0 listens)"
            )
        self._world_star = _tcp.Star(self.rank, self.size, self.chief_ip, self._port)
        if self.local_size == 1:
            return
        if self.local_size == self.size:
            self._local_star = self._world_star
            self._local_chief_rank = 0
            return
        # Each node's local chief listens on a port of its own choosing; every worker learns them
        # from one allgather over the world.
        server = _tcp.listen("127.0.0.1", 0) if self.is_local_chief else None
        mine = (self.cross_rank, self.rank, server.getsockname()[1]) if server is not None else None
        chiefs = [c for c in self._world_star.allgather(mine) if c is not None and c[0] == self.cross_rank]
        if len(chiefs) != 1:
            raise DetError(f"distributed: node {self.cross_rank} has {len(chiefs)} local chiefs, expected 1")
        _, self._local_chief_rank, port = chiefs[0]
        self._local_star = _tcp.Star(self.local_rank, self.local_size, "127.0.0.1", port, server=server)

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


def _env_ints(caller: str, launcher: str, *names: str) -> list[int]:
    try:
        return [int(os.environ[name]) for name in names]
    except (KeyError, ValueError) as exc:
        raise DetError(
            f"{caller}: {exc} is missing or invalid; run under {launcher}, which sets {', '.join(names)}"
        ) from None


def _tf_workers(raw: str) -> tuple[list[str], int]:
    """``(cluster.worker, task.index)`` of a ``TF_CONFIG``; a clear error for anything else."""
    try:
        tf_config = json.loads(raw)
        cluster, task = tf_config["cluster"], tf_config["task"]
        task_type = task.get("type")
        workers = [str(w) for w in cluster.get("worker") or []]
        index = int(task.get("index") or 0)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise DetError(
            f"from_tf_config: TF_CONFIG is not a valid TensorFlow cluster spec ({exc!r}); expected "
            '{"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", "index": N}}'
        ) from None
    if task_type != "worker":
        raise DetError(
            "from_tf_config: only worker tasks are supported (MultiWorkerMirroredStrategy, "
            f"MirroredStrategy or the default strategy), but TF_CONFIG's task.type is {task_type!r}"
        )
    if workers and not 0 <= index < len(workers):
        raise DetError(
            f"from_tf_config: TF_CONFIG's task.index is {index}, but cluster.worker has {len(workers)} workers"
        )
    return workers, index

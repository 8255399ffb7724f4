"""``det.pytorch.DataLoader``: torch's DataLoader arguments, turned into a loader per worker that can
start at any data position, so a resumed trial sees exactly the batches it would have seen."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import Dataset, IterableDataset, Sampler

from det_airflow.errors import DetError

#: What a batch may be, as Determined types it (training code uses it in annotations).
TorchData = dict[str, torch.Tensor] | Sequence[torch.Tensor] | torch.Tensor

# Keeps the seed of an epoch's shuffle within torch.Generator.manual_seed's range.
_SEED_SPACE = 2**63


class DataLoader:
    """Takes torch.utils.data.DataLoader's arguments (``batch_size`` is the per-slot batch size).

    The Trainer turns it into a torch DataLoader for each worker with :meth:`get_data_loader`: every
    worker gets its share of the batches, and training can start at any batch. The order of an epoch
    is a function of the seed and the epoch number alone (``shuffle=True`` draws from a generator
    seeded with them, never from the global RNG), which is what makes a resumed trial exact. A
    ``sampler`` or ``batch_sampler`` of your own is used as is; it resumes exactly when its order
    depends only on the epoch (``set_epoch(epoch)`` is called when it has one).

    Example::

        def build_training_data_loader(self):
            return det.pytorch.DataLoader(
                dataset, batch_size=self.context.get_per_slot_batch_size(), shuffle=True
            )
    """

    def __init__(
        self,
        dataset: Dataset[Any],
        batch_size: int | None = 1,
        shuffle: bool = False,
        sampler: Sampler[Any] | None = None,
        batch_sampler: Sampler[Sequence[int]] | None = None,
        num_workers: int = 0,
        collate_fn: Any = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Any = None,
        multiprocessing_context: Any = None,
        generator: torch.Generator | None = None,
        **kwargs: Any,
    ) -> None:
        if isinstance(dataset, IterableDataset):
            raise DetError(
                "det.pytorch.DataLoader needs a map-style dataset (with __getitem__ and __len__); "
                "an IterableDataset cannot be sharded or resumed at a data position"
            )
        if batch_sampler is not None and (batch_size != 1 or shuffle or sampler is not None or drop_last):
            raise DetError(
                "DataLoader: batch_sampler is mutually exclusive with batch_size, shuffle, sampler and drop_last"
            )
        if sampler is not None and shuffle:
            raise DetError("DataLoader: sampler is mutually exclusive with shuffle")
        if batch_sampler is None and (batch_size is None or batch_size < 1):
            raise DetError(f"DataLoader: batch_size must be an integer >= 1, got {batch_size!r}")
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.drop_last = drop_last
        self.generator = generator
        self._torch_kwargs: dict[str, Any] = {
            "num_workers": num_workers,
            "collate_fn": collate_fn,
            "pin_memory": pin_memory,
            "timeout": timeout,
            "worker_init_fn": worker_init_fn,
            "multiprocessing_context": multiprocessing_context,
            **kwargs,
        }

    def epoch_length(self, num_replicas: int = 1) -> int:
        """Batches each of ``num_replicas`` workers trains in one epoch (the training loader's length)."""
        return -(-self._batches_per_epoch() // max(num_replicas, 1))

    def get_data_loader(
        self, repeat: bool = False, skip: int = 0, num_replicas: int = 1, rank: int = 0, *, seed: int = 0
    ) -> torch.utils.data.DataLoader[Any]:
        """A torch DataLoader of this worker's batches, starting after ``skip`` of them.

        ``repeat=True`` (training) goes on epoch after epoch, and every worker gets the same number
        of batches per epoch (the last ones wrap around to the epoch's start); ``repeat=False``
        (validation) is one pass in which each batch goes to exactly one worker. ``seed`` fixes the
        shuffle (a ``generator`` given to the constructor fixes it instead, by its initial seed).
        """
        if not 0 <= rank < num_replicas:
            raise DetError(f"get_data_loader: rank {rank} is not in 0..{num_replicas - 1}")
        order_seed = self.generator.initial_seed() if self.generator is not None else seed
        batches = _ShardedBatches(
            self, seed=order_seed, num_replicas=num_replicas, rank=rank, repeat=repeat, skip=skip
        )
        # A generator of its own, so that starting an iterator never draws from the global RNG.
        loader_generator = torch.Generator()
        loader_generator.manual_seed(order_seed % _SEED_SPACE)
        return torch.utils.data.DataLoader(
            self.dataset, batch_sampler=batches, generator=loader_generator, **self._torch_kwargs
        )

    def epoch_batches(self, epoch: int, seed: int) -> list[list[int]]:
        """The per-slot batches of one epoch, as lists of dataset indices, before sharding."""
        if self.batch_sampler is not None:
            _set_epoch(self.batch_sampler, epoch)
            return [list(batch) for batch in self.batch_sampler]
        if self.sampler is not None:
            _set_epoch(self.sampler, epoch)
            indices: list[int] = list(self.sampler)
        elif self.shuffle:
            generator = torch.Generator()
            generator.manual_seed((seed * 1_000_003 + epoch) % _SEED_SPACE)
            indices = torch.randperm(len(self.dataset), generator=generator).tolist()  # type: ignore[arg-type]
        else:
            indices = list(range(len(self.dataset)))  # type: ignore[arg-type]
        size = int(self.batch_size or 1)
        batches = [indices[i : i + size] for i in range(0, len(indices), size)]
        if self.drop_last and batches and len(batches[-1]) < size:
            batches.pop()
        return batches

    def _batches_per_epoch(self) -> int:
        if self.batch_sampler is not None:
            return len(self.batch_sampler)  # type: ignore[arg-type]
        records = len(self.sampler) if self.sampler is not None else len(self.dataset)  # type: ignore[arg-type]
        size = int(self.batch_size or 1)
        return records // size if self.drop_last else -(-records // size)


class _ShardedBatches(Sampler[list[int]]):
    """One worker's batches of a :class:`DataLoader`, from a data position on."""

    def __init__(
        self, loader: DataLoader, *, seed: int, num_replicas: int, rank: int, repeat: bool, skip: int
    ) -> None:
        self._loader = loader
        self._seed = seed
        self._replicas = num_replicas
        self._rank = rank
        self._repeat = repeat
        self._skip = skip
        total = loader._batches_per_epoch()
        # Training pads every worker's share to the same length; validation splits the batches exactly.
        self._length = loader.epoch_length(num_replicas) if repeat else len(range(rank, total, num_replicas))
        if repeat and self._length == 0:
            raise DetError(
                "the training data has no complete batch (a dataset smaller than the batch size, "
                "with drop_last=True?)"
            )

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[list[int]]:
        if self._repeat:
            epoch, index = divmod(self._skip, self._length)
        else:
            epoch, index = 0, self._skip
        while True:
            batches = self._loader.epoch_batches(epoch, self._seed)
            yield from itertools.islice(self._mine(batches), index, None)
            if not self._repeat:
                return
            epoch, index = epoch + 1, 0

    def _mine(self, batches: list[list[int]]) -> list[list[int]]:
        if self._replicas == 1:
            return batches
        if not self._repeat:
            return batches[self._rank :: self._replicas]
        # Equal shares: global step k is batches k*R .. k*R+R-1, wrapping around at the end.
        return [batches[(step * self._replicas + self._rank) % len(batches)] for step in range(self._length)]


def _set_epoch(sampler: Any, epoch: int) -> None:
    set_epoch = getattr(sampler, "set_epoch", None)
    if callable(set_epoch):
        set_epoch(epoch)

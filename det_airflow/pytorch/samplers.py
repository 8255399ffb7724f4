"""Batch samplers that Determined training code builds its own data loaders with
(``determined.pytorch.samplers``): sharding batches across workers, repeating, skipping."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from torch.utils.data import BatchSampler, Sampler


class DistributedBatchSampler(BatchSampler):
    """Worker ``rank`` of ``num_workers`` gets every ``num_workers``-th batch of ``batch_sampler``,
    starting at its rank: the workers together see each batch once."""

    def __init__(
        self, batch_sampler: Sampler[list[int]] | Iterable[list[int]], num_workers: int, rank: int
    ) -> None:
        if not 0 <= rank < num_workers:
            raise ValueError(f"DistributedBatchSampler: rank {rank} is not in [0, {num_workers})")
        self.batch_sampler = batch_sampler
        self.num_workers = num_workers
        self.rank = rank

    def __len__(self) -> int:
        total = len(self.batch_sampler)  # type: ignore[arg-type]
        return total // self.num_workers + int(total % self.num_workers > self.rank)

    def __iter__(self) -> Iterator[list[int]]:
        for i, batch in enumerate(self.batch_sampler):
            if i % self.num_workers == self.rank:
                yield batch


class RepeatBatchSampler(BatchSampler):
    """``batch_sampler`` over and over, without end (its length is one pass's)."""

    def __init__(self, batch_sampler: Sampler[list[int]] | Iterable[list[int]]) -> None:
        self.batch_sampler = batch_sampler

    def __len__(self) -> int:
        return len(self.batch_sampler)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[list[int]]:
        while True:
            yield from self.batch_sampler


class SkipBatchSampler(BatchSampler):
    """``batch_sampler`` without its first ``skip`` batches (to resume mid-epoch)."""

    def __init__(self, batch_sampler: Sampler[list[int]] | Iterable[list[int]], skip: int) -> None:
        self.batch_sampler = batch_sampler
        self.skip = skip

    def __len__(self) -> int:
        return max(len(self.batch_sampler) - self.skip, 0)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[list[int]]:
        for i, batch in enumerate(self.batch_sampler):
            if i >= self.skip:
                yield batch

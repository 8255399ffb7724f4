"""det.pytorch.DataLoader: sharded per worker, resumable at any batch, an order fixed by seed and epoch."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch.utils.data import IterableDataset, SequentialSampler, TensorDataset

from det_airflow.errors import DetError
from det_airflow.pytorch import DataLoader


def indices(n: int) -> TensorDataset:
    return TensorDataset(torch.arange(n))


def batches(loader: torch.utils.data.DataLoader, count: int) -> list[list[int]]:
    return [batch[0].tolist() for batch in itertools.islice(loader, count)]


def test_an_epoch_is_every_record_once_in_a_seeded_shuffle() -> None:
    data = DataLoader(indices(10), batch_size=3, shuffle=True)
    assert data.epoch_length() == 4
    first = batches(data.get_data_loader(repeat=True, seed=7), 8)
    assert sorted(sum(first[:4], [])) == list(range(10))
    assert sum(first[:4], []) != sum(first[4:], [])  # a new order each epoch
    torch.manual_seed(0)  # the global RNG plays no part
    assert batches(data.get_data_loader(repeat=True, seed=7), 8) == first
    assert batches(data.get_data_loader(repeat=True, seed=8), 8) != first


def test_skip_starts_at_that_batch_of_the_same_sequence() -> None:
    data = DataLoader(indices(10), batch_size=3, shuffle=True, drop_last=True)
    whole = batches(data.get_data_loader(repeat=True, seed=1), 12)
    assert batches(data.get_data_loader(repeat=True, skip=5, seed=1), 7) == whole[5:]


def test_workers_share_each_step_and_have_equal_lengths() -> None:
    data = DataLoader(indices(10), batch_size=2)  # 5 batches per epoch
    assert data.epoch_length(num_replicas=2) == 3
    rank0 = batches(data.get_data_loader(repeat=True, num_replicas=2, rank=0), 3)
    rank1 = batches(data.get_data_loader(repeat=True, num_replicas=2, rank=1), 3)
    assert rank0 == [[0, 1], [4, 5], [8, 9]]
    assert rank1 == [[2, 3], [6, 7], [0, 1]]  # the last step wraps around to the epoch's start


def test_validation_is_split_exactly_between_workers() -> None:
    data = DataLoader(indices(10), batch_size=2)
    rank0 = data.get_data_loader(num_replicas=2, rank=0)
    rank1 = data.get_data_loader(num_replicas=2, rank=1)
    assert (len(rank0), len(rank1)) == (3, 2)
    assert batches(rank0, 10) + batches(rank1, 10) == [[0, 1], [4, 5], [8, 9], [2, 3], [6, 7]]


def test_a_sampler_of_ones_own_and_the_generators_seed() -> None:
    data = DataLoader(indices(5), batch_size=2, sampler=SequentialSampler(range(5)))
    assert batches(data.get_data_loader(), 5) == [[0, 1], [2, 3], [4]]
    seeded = DataLoader(indices(10), batch_size=5, shuffle=True, generator=torch.Generator().manual_seed(3))
    assert batches(seeded.get_data_loader(seed=99), 2) == batches(
        DataLoader(indices(10), batch_size=5, shuffle=True).get_data_loader(seed=3), 2
    )


def test_torch_arguments_are_passed_on() -> None:
    data = DataLoader(indices(4), batch_size=2, collate_fn=lambda items: len(items))
    assert list(data.get_data_loader()) == [2, 2]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sampler": SequentialSampler(range(4)), "shuffle": True}, "mutually exclusive with shuffle"),
        ({"batch_sampler": [[0]], "batch_size": 2}, "batch_sampler is mutually exclusive"),
        ({"batch_size": 0}, "batch_size must be"),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(DetError, match=message):
        DataLoader(indices(4), **kwargs)


def test_an_iterable_dataset_is_refused() -> None:
    class Stream(IterableDataset):
        def __iter__(self):  # type: ignore[no-untyped-def]
            yield from range(3)

    with pytest.raises(DetError, match="map-style dataset"):
        DataLoader(Stream())

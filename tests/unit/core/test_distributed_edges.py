"""DistributedContext at its edges, in one process: the layouts it accepts and refuses, what it reads
from torchrun's variables, and the messages a misconfigured launch gets.

The collectives across several processes are checked by the torchrun tests in test_distributed.py.
"""

from __future__ import annotations

import sys

import pytest

from det_airflow.core import DistributedContext
from det_airflow.errors import DetError

TORCHRUN = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK")
LAUNCH_HINT = (
    "run under torchrun (or the torch_distributed launcher), which sets RANK, WORLD_SIZE and LOCAL_RANK"
)


@pytest.fixture
def torchrun_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in (*TORCHRUN, "DET_CHIEF_IP", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ({"rank": 1, "size": 1}, "rank 1 of 1, local rank 1 of 1"),
        ({"rank": -1, "size": 1}, "rank -1 of 1, local rank -1 of 1"),
        ({"rank": 0, "size": 1, "local_rank": 1}, "rank 0 of 1, local rank 1 of 1"),
        ({"rank": 0, "size": 1, "local_rank": 0, "local_size": 0}, "rank 0 of 1, local rank 0 of 0"),
        ({"rank": 0, "size": 1, "local_rank": -1, "local_size": 1}, "rank 0 of 1, local rank -1 of 1"),
        ({"rank": 0, "size": 0}, "rank 0 of 0, local rank 0 of 0"),
        ({"rank": 2, "size": 2, "local_rank": 0, "local_size": 2}, "rank 2 of 2, local rank 0 of 2"),
    ],
)
def test_a_rank_outside_its_size_is_refused_naming_the_layout(layout: dict, message: str) -> None:
    with pytest.raises(DetError) as refused:
        DistributedContext(**layout)
    assert str(refused.value) == f"invalid distributed layout: {message}"


def test_the_last_rank_and_local_rank_of_one_worker_are_accepted() -> None:
    ctx = DistributedContext(rank=0, size=1, local_rank=0, local_size=1)
    assert (ctx.rank, ctx.local_rank, ctx.is_chief, ctx.is_local_chief) == (0, 0, True, True)


def test_given_cross_rank_and_size_are_kept_and_accessors_answer_them() -> None:
    ctx = DistributedContext(cross_rank=2, cross_size=3, chief_ip="10.0.0.7")
    assert (ctx.get_cross_rank(), ctx.get_cross_size(), ctx.chief_ip) == (2, 3, "10.0.0.7")
    assert (ctx.get_rank(), ctx.get_size(), ctx.get_local_rank(), ctx.get_local_size()) == (0, 1, 0, 1)


def test_numbers_given_as_strings_are_read_as_ints() -> None:
    ctx = DistributedContext(
        rank="0", size="1", local_rank="0", local_size="1", cross_rank="4", cross_size="5"
    )  # type: ignore[arg-type]
    assert (ctx.rank, ctx.size, ctx.local_rank, ctx.local_size, ctx.cross_rank, ctx.cross_size) == (
        0,
        1,
        0,
        1,
        4,
        5,
    )


@pytest.mark.parametrize("missing", ["RANK", "WORLD_SIZE", "LOCAL_RANK"])
def test_each_missing_torchrun_variable_is_named(torchrun_env: pytest.MonkeyPatch, missing: str) -> None:
    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}.items():
        if name != missing:
            torchrun_env.setenv(name, value)
    with pytest.raises(DetError) as refused:
        DistributedContext.from_torch_distributed()
    assert str(refused.value) == f"from_torch_distributed: '{missing}' is missing or invalid; {LAUNCH_HINT}"


def test_a_torchrun_variable_that_is_not_a_number_is_named(torchrun_env: pytest.MonkeyPatch) -> None:
    torchrun_env.setenv("RANK", "0")
    torchrun_env.setenv("WORLD_SIZE", "one")
    torchrun_env.setenv("LOCAL_RANK", "0")
    with pytest.raises(DetError) as refused:
        DistributedContext.from_torch_distributed()
    assert str(refused.value) == (
        f"from_torch_distributed: invalid literal for int() with base 10: 'one' is missing or invalid; "
        f"{LAUNCH_HINT}"
    )
    assert refused.value.__cause__ is None and refused.value.__suppress_context__


def one_worker(env: pytest.MonkeyPatch, **extra: str) -> None:
    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", **extra}.items():
        env.setenv(name, value)


def test_one_worker_without_the_optional_variables(torchrun_env: pytest.MonkeyPatch) -> None:
    one_worker(torchrun_env)
    ctx = DistributedContext.from_torch_distributed()
    assert (ctx.rank, ctx.size, ctx.local_rank, ctx.local_size, ctx.cross_rank, ctx.cross_size) == (
        0,
        1,
        0,
        1,
        0,
        1,
    )
    assert ctx.chief_ip is None


@pytest.mark.parametrize(
    ("extra", "cross_rank"),
    [
        ({"GROUP_RANK": "3"}, 3),
        ({"NODE_RANK": "2"}, 2),
        ({"GROUP_RANK": "3", "NODE_RANK": "2"}, 3),  # torchrun's own name wins
        ({"GROUP_RANK": "", "NODE_RANK": "2"}, 2),
    ],
)
def test_the_node_comes_from_group_rank_then_node_rank(
    torchrun_env: pytest.MonkeyPatch, extra: dict, cross_rank: int
) -> None:
    one_worker(torchrun_env, **extra)
    assert DistributedContext.from_torch_distributed().cross_rank == cross_rank


def test_an_empty_local_world_size_means_one_node(torchrun_env: pytest.MonkeyPatch) -> None:
    one_worker(torchrun_env, LOCAL_WORLD_SIZE="")
    ctx = DistributedContext.from_torch_distributed()
    assert (ctx.local_size, ctx.cross_size) == (1, 1)


@pytest.mark.parametrize(
    ("argument", "extra", "chief_ip"),
    [
        ("10.0.0.1", {"DET_CHIEF_IP": "10.0.0.2", "MASTER_ADDR": "10.0.0.3"}, "10.0.0.1"),
        (None, {"DET_CHIEF_IP": "10.0.0.2", "MASTER_ADDR": "10.0.0.3"}, "10.0.0.2"),
        (None, {"MASTER_ADDR": "10.0.0.3"}, "10.0.0.3"),
    ],
)
def test_the_chief_ip_is_the_argument_then_det_chief_ip_then_master_addr(
    torchrun_env: pytest.MonkeyPatch, argument: str | None, extra: dict, chief_ip: str
) -> None:
    one_worker(torchrun_env, **extra)
    assert DistributedContext.from_torch_distributed(argument).chief_ip == chief_ip


def test_one_worker_never_touches_torch_distributed(torchrun_env: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    import torch.distributed as dist

    ctx = DistributedContext(rank=0, size=1)
    ctx.close()
    assert not dist.is_initialized()
    assert ctx.broadcast() is None and ctx.broadcast_local() is None


def test_a_process_group_of_another_size_is_refused_naming_both(torchrun_env: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        with pytest.raises(DetError) as refused:
            DistributedContext(rank=0, size=2)
        assert str(refused.value) == ("torch.distributed has rank 0 of 1, but this context says rank 0 of 2")
        assert dist.is_initialized(), "a process group the user initialized is left alone"
    finally:
        dist.destroy_process_group()


def test_several_workers_without_torch_are_told_to_install_it(
    torchrun_env: pytest.MonkeyPatch,
) -> None:
    torchrun_env.setitem(sys.modules, "torch.distributed", None)  # as if torch were not installed
    with pytest.raises(DetError) as refused:
        DistributedContext(rank=0, size=2)
    assert str(refused.value) == "distributed training (more than one worker) needs torch installed"


@pytest.mark.parametrize("only", ["MASTER_ADDR", "MASTER_PORT"])
def test_a_rendezvous_needs_both_master_addr_and_master_port(
    torchrun_env: pytest.MonkeyPatch, only: str
) -> None:
    pytest.importorskip("torch")
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    torchrun_env.setenv(only, "127.0.0.1" if only == "MASTER_ADDR" else "29500")
    with pytest.raises(DetError) as refused:
        DistributedContext(rank=0, size=2)
    assert str(refused.value) == (
        "torch.distributed is not initialized and MASTER_ADDR/MASTER_PORT are not set; "
        "run under torchrun or call torch.distributed.init_process_group() first"
    )
    assert not dist.is_initialized()


def test_closing_one_workers_context_leaves_the_users_process_group(torchrun_env: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        DistributedContext().close()
        assert dist.is_initialized(), "close() tore down a process group it did not set up"
    finally:
        dist.destroy_process_group()

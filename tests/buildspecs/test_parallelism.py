"""How a cell's cores are split between MAX_JOBS and nvcc threads once the runner knows the source's .cu files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from wfbuild.compiling.parallelism import cell_slots, cuda_units


@pytest.mark.parametrize(
    "cores,cells,archs,units,expected",
    [
        (2, 1, 2, 1, (1, 2, 2)),  # one .cu beside a .cpp on 2 cores: both compile, the .cu with 2 threads
        (16, 1, 7, 1, (1, 16, 7)),  # one .cu, 7 architectures: every architecture at once
        (16, 1, 7, 4, (1, 16, 4)),  # four .cu files side by side: 4 threads each
        (16, 1, 7, 16, (1, 16, 1)),  # as many .cu files as cores: threads would only oversubscribe
        (16, 4, 7, 1, (4, 4, 4)),  # four cells of 4 cores each
        (2, 1, 1, 1, (1, 2, 1)),  # one architecture: nothing to thread
    ],
)
def test_max_jobs_keeps_the_cores_and_threads_take_what_the_cuda_units_leave(
    cores: int, cells: int, archs: int, units: int, expected: tuple[int, int, int]
) -> None:
    slots = cell_slots(cores, 200.0, 4.0, 1.0, cells, 64, archs, cuda_units=units)
    assert (slots.cells, slots.jobs, slots.threads) == expected
    busy = slots.cells * (min(slots.jobs, units) * slots.threads)
    assert busy <= cores or slots.threads == 1  # the CUDA units' threads never ask for more than the cores


def test_threads_give_way_when_memory_does_not_hold() -> None:
    # 16 cores, 70 GiB spare: 16 jobs of 4 GiB leave 6 GiB, room for 6 more threads across 2 .cu files
    slots = cell_slots(16, 70.0, 4.0, 1.0, 1, 64, 8, cuda_units=2)
    assert slots.jobs == 16 and slots.threads == 4  # 2 x (4 - 1) = 6 GiB of threads
    assert cell_slots(16, 64.0, 4.0, 1.0, 1, 64, 8, cuda_units=2).threads == 1


def test_cuda_units_counts_the_trees_cu_files_without_following_links(tmp_path: Path) -> None:
    (tmp_path / "csrc" / "cuda").mkdir(parents=True)
    for name in ("csrc/cuda/a.cu", "csrc/cuda/b.cu", "csrc/a.cpp", "csrc/cuda/a.cuh"):
        (tmp_path / name).write_text("")
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "c.cu").write_text("")
    os.symlink(outside, tmp_path / "linked")  # a build's tree may link anywhere: not followed
    assert cuda_units(tmp_path) == 2


@pytest.mark.parametrize(
    "cores,spare,archs,units,expected",
    [
        (2, 200.0, 2, 3, (2, 1, 2)),  # torch-scatter's three .cu files on 2 cores: alone, one gets both
        (16, 200.0, 6, 16, (16, 1, 6)),  # alone: up to the architectures
        (16, 200.0, 12, 4, (16, 4, 8)),  # alone: up to MAX_NVCC_THREADS
        (16, 66.0, 8, 4, (16, 1, 3)),  # 16 jobs of 4 GiB leave 2 GiB: 2 more threads for one alone
        (2, 200.0, 1, 3, (2, 1, 1)),  # one architecture: nothing to thread
    ],
)
def test_alone_is_what_one_cu_file_gets_with_no_other_nvcc_beside_it(
    cores: int, spare: float, archs: int, units: int, expected: tuple[int, int, int]
) -> None:
    slots = cell_slots(cores, spare, 4.0, 1.0, 1, 64, archs, cuda_units=units)
    assert (slots.jobs, slots.threads, slots.alone) == expected


def test_a_pinned_thread_count_pins_alone_too() -> None:
    assert cell_slots(2, 200.0, 4.0, 1.0, 1, 64, 2, threads_override=1, cuda_units=3).alone == 1
    assert cell_slots(2, 200.0, 4.0, 1.0, 1, 64, 2, threads_override=1).alone == 1


@pytest.mark.parametrize(
    "cores,spare,cells,archs,units,pool,expected",
    [
        # causal-conv1d's three .cu files on 2 cores: each nvcc asks for both cores; the pool holds the
        # compilers at once to 2 and the last file left takes both (without the pool: 1 thread each)
        (2, 200.0, 1, 9, 3, "job", (2, 2, 1)),
        (2, 200.0, 1, 9, 3, "stage", (2, 2, 1)),  # one cell at a time: its own server's pool is the cores'
        (16, 200.0, 4, 7, 16, "job", (4, 4, 1)),  # one server for all the cells: up to the cell's cores
        (16, 200.0, 4, 7, 16, "stage", (4, 1, 1)),  # a server per cell: 4 pools of 16 would oversubscribe
        (2, 200.0, 1, 9, 3, "", (2, 1, 1)),  # no compiler cache: no pool
        (16, 40.0, 1, 7, 16, "job", (10, 1, 1)),  # 16 compile jobs do not fit the memory: no pool either
    ],
)
def test_the_compiler_caches_pool_lets_every_nvcc_ask_for_the_cells_cores(
    cores: int, spare: float, cells: int, archs: int, units: int, pool: str, expected: tuple[int, int, int]
) -> None:
    slots = cell_slots(cores, spare, 4.0, 1.0, cells, 64, archs, cuda_units=units, pool=pool)
    assert (slots.jobs, slots.threads, slots.unpooled or slots.threads) == expected
    assert slots.alone >= slots.threads


def test_a_pinned_thread_count_is_kept_under_the_pool() -> None:
    slots = cell_slots(2, 200.0, 4.0, 1.0, 1, 64, 9, threads_override=1, cuda_units=3, pool="job")
    assert (slots.threads, slots.alone, slots.unpooled) == (1, 1, 0)


def test_the_pool_is_said_even_where_it_changes_no_count() -> None:
    """One .cu file on 2 cores gets 2 threads either way; the pool still applies (wfbuild.compiling.parallel_compile's
    side-by-side chains then give each CUDA unit the threads of one alone), so ``unpooled`` says so."""
    slots = cell_slots(2, 200.0, 4.0, 1.0, 1, 64, 2, cuda_units=1, pool="job")
    assert (slots.threads, slots.unpooled) == (2, 2)
    assert cell_slots(2, 200.0, 4.0, 1.0, 1, 64, 2, cuda_units=1).unpooled == 0

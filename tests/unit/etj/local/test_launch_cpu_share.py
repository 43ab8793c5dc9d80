"""etj run's split of the machine: a process's share of its cores."""

from __future__ import annotations

import pytest

from etj.local.launch import cpu_share


@pytest.mark.parametrize(
    ("cores", "processes", "share"),
    [(2, 5, 0.4), (8, 3, 2.667), (2, 1, 2.0), (4, 0, 4.0), (64, 5, 12.8)],
)
def test_each_process_gets_its_part_of_the_cores_and_never_more_than_all(
    cores: int, processes: int, share: float
) -> None:
    assert cpu_share(cores, processes) == share

"""The real Slurm (see slurm_cluster.py), one per test worker, skipped with the reason when it cannot run here.

``slurm`` points SLURM_CONF at it for one test only, so no other test sees a Slurm on this machine.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .slurm_cluster import NODES, SlurmCluster, missing, slurm_cluster


@pytest.fixture(scope="session")
def slurm_session() -> Iterator[SlurmCluster]:
    why = missing()
    if why:
        pytest.skip(why)
    with slurm_cluster() as cluster:
        yield cluster


@pytest.fixture
def slurm(slurm_session: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmCluster]:
    monkeypatch.setenv("SLURM_CONF", str(slurm_session.conf))
    yield slurm_session
    slurm_session.cancel_all()
    for name in ("ip-10-0-1-11", "ip-10-0-1-12", "ip-10-0-1-13"):
        if "drain" in slurm_session.state(name):
            slurm_session.resume(name)
    # RESUME marks a node not responding ('*') until slurmctld's next ping answers (slurmctld's node_mgr)
    slurm_session.wait(lambda: not any(slurm_session.state(n).endswith("*") for n in NODES), "resumed nodes answering")

"""Under Slurm the Trainer takes Lightning's Slurm environment without its own USR1 requeue (submitit requeues)."""

from __future__ import annotations

import signal

import lightning as L
from lightning.pytorch.plugins.environments import SLURMEnvironment

from rpbench.training.cluster import cluster_plugins

SLURM_JOB = {"SLURM_NTASKS": "1", "SLURM_JOB_NAME": "rpbench_sweep", "SLURM_JOB_ID": "7", "SLURM_PROCID": "0",
             "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NODELIST": "node1"}  # fmt: skip


def test_no_plugin_outside_slurm(monkeypatch):
    for key in SLURM_JOB:
        monkeypatch.delenv(key, raising=False)
    assert cluster_plugins() == []


def test_slurm_job_gets_the_environment_without_lightnings_requeue(monkeypatch):
    for key, value in SLURM_JOB.items():
        monkeypatch.setenv(key, value)
    (environment,) = cluster_plugins()
    assert isinstance(environment, SLURMEnvironment) and environment.auto_requeue is False
    trainer = L.Trainer(accelerator="cpu", devices=1, plugins=cluster_plugins(), logger=False, max_steps=1)
    before = signal.getsignal(signal.SIGUSR1)
    trainer._signal_connector.register_signal_handlers()  # what fit() does first
    try:
        assert signal.getsignal(signal.SIGUSR1) == before  # no USR1 requeue handler: submitit's USR2 decides
    finally:
        trainer._signal_connector.teardown()

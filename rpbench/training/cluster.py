"""Lightning plugins for the cluster the run is on."""

from __future__ import annotations

from lightning.pytorch.plugins.environments import SLURMEnvironment


def cluster_plugins() -> list:
    """Under Slurm: Lightning's environment without its USR1 auto-requeue, since submitit (USR2) requeues
    the job, which then resumes from checkpoints/last.ckpt."""
    return [SLURMEnvironment(auto_requeue=False)] if SLURMEnvironment.detect() else []

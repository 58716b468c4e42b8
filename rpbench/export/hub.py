"""Upload a run's exported model to the Hugging Face Hub (``export.push_to_hub``, off by default).

The token is read from the environment variable ``export.hub.token_env`` names; it is never written.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rpbench.training.settings import ExportSettings, HubSettings


def export_problems(export: ExportSettings, save_model: bool) -> list[str]:
    """What stops ``export.push_to_hub`` at the end of the run, found at its start."""
    if not export.push_to_hub:
        return []
    hub, problems = export.hub, []
    if not save_model:
        problems.append("export.push_to_hub=true needs save_model=true (there is no model/ to upload)")
    if not hub.repo_id or "/" not in hub.repo_id:
        problems.append(f"export.hub.repo_id={hub.repo_id!r}: expected <user or organisation>/<name>")
    if not os.environ.get(hub.token_env):
        problems.append(
            f"export.push_to_hub=true: the environment variable {hub.token_env} (export.hub.token_env) "
            "holds no Hugging Face token"
        )
    return problems


def upload_arguments(model_dir: Path, hub: HubSettings, run_name: str) -> dict[str, Any]:
    """Keyword arguments of ``HfApi.upload_folder`` for the run's model folder."""
    return {
        "folder_path": str(model_dir),
        "repo_id": hub.repo_id,
        "repo_type": "model",
        "commit_message": f"rpbench run {run_name}",
    }


def push_to_hub(model_dir: Path, hub: HubSettings, run_name: str) -> str:
    """Create the (private unless configured otherwise) repository if needed, upload ``model_dir``;
    returns the commit URL."""
    from huggingface_hub import HfApi

    api = HfApi(endpoint=hub.endpoint, token=os.environ[hub.token_env])
    api.create_repo(hub.repo_id, private=hub.private, exist_ok=True, repo_type="model")
    return str(api.upload_folder(**upload_arguments(model_dir, hub, run_name)).commit_url)

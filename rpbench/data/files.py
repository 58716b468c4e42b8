"""Where a data config's files live (a local path, a file inside rpbench (``pkg://``), or a hub dataset),
and the one rule for files a record names: they stay inside their root."""

from __future__ import annotations

from importlib import resources
from pathlib import Path, PurePath

from rpbench.core.errors import DataFormatError

PKG_PREFIX = "pkg://"
HUB_PREFIX = "hf://"  # a hub dataset loaded with `datasets` (data=custom: rpbench/data/custom.py)


def resolve_data_file(name: str, configured: str, hf_dataset: str | None, data_name: str) -> Path:
    """The local path of file ``name`` of ``configured`` (``data.files.<split>``): a file, or a folder for
    formats that read one, downloaded from the hub dataset ``hf_dataset`` when not found here."""
    if not name:
        raise ValueError(f"data={data_name} has no file for {configured}: set {configured}=<path>")
    if name.startswith(PKG_PREFIX):
        path = package_path(name)
        if not path.exists():
            raise FileNotFoundError(f"{configured}={name}: no such file inside the installed package")
        return path
    path = Path(name).expanduser()
    if path.exists():
        return path
    if not hf_dataset or path.is_absolute():
        raise FileNotFoundError(f"{configured}={name}: no such file")
    return _download(hf_dataset, name, configured)


def package_path(name: str) -> Path:
    """``pkg://<package>/<path inside it>`` -> where that is on this machine; other names unchanged."""
    if not name.startswith(PKG_PREFIX):
        return Path(name).expanduser()
    package, _, inner = name.removeprefix(PKG_PREFIX).partition("/")
    return Path(str(resources.files(package) / inner))


def confined_path(root: str | Path | None, name: str, *, file: str | Path, record: str | int, field: str) -> Path:
    """``root / name`` with symlinks resolved, provided it stays inside ``root``.

    Every file a record names (an image) goes through here, so no record makes rpbench read, or send
    to an endpoint, a file outside its data: an absolute name, ``..`` or a symlink that leads out of
    ``root`` is a DataFormatError naming ``file``, ``record`` and ``field``. The file need not exist.
    Without a root, only a relative name without ``..`` is accepted, and returned as it is.
    """
    if root is None:
        if PurePath(name).is_absolute() or ".." in PurePath(name).parts:
            raise DataFormatError(file, record, field, f"a relative path without '..' (no root is set), got {name!r}")
        return Path(name)
    try:
        base = Path(root).resolve()
        path = (base / name).resolve()
    except (OSError, RuntimeError, ValueError) as error:  # a symlink loop, a NUL byte
        raise DataFormatError(file, record, field, f"a path inside {root}, got {name!r} ({error})") from None
    if not path.is_relative_to(base):
        raise DataFormatError(
            file,
            record,
            field,
            f"a path inside {base}; {name!r} leads to {path}, outside it "
            "(absolute paths, '..' and symlinks may not leave the root)",
        )
    return path


def _download(repo: str, filename: str, configured: str) -> Path:
    from huggingface_hub import hf_hub_download

    try:
        return Path(hf_hub_download(repo_id=repo, filename=filename, repo_type="dataset"))
    except Exception as error:  # offline, gated, or missing: all need the same advice
        raise FileNotFoundError(
            f"{configured}={filename} is not a local file and could not be fetched from the hub dataset "
            f"{repo} ({type(error).__name__}: {error}). Offline: download it elsewhere "
            f"(`hf download {repo} {filename} --repo-type dataset --local-dir <dir>`) and pass "
            f"{configured}=<dir>/{filename}."
        ) from error


def run_label(run_dir: str | Path) -> str:
    """An earlier run's ``run_name`` (from its config.yaml), else its folder name."""
    import yaml

    folder = Path(str(run_dir))
    config = folder / "config.yaml"
    if config.is_file():
        name = (yaml.safe_load(config.read_text()) or {}).get("run_name")
        if name:
            return str(name)
    return folder.name

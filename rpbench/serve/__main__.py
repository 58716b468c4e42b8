"""``python -m rpbench.serve [model=<entry>] [model.<key>=<value> ...] [<setting>=<value> ...]``: rpbench's
config composed with ``task=serve`` (a setting ``<key>=<value>`` is ``serve.<key>=<value>``), checked by
``rpbench.validate``, then served until stopped (Ctrl-C)."""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import fields

from rpbench.core.paths import CONF_DIR
from rpbench.models.config_tree import model_entries
from rpbench.serve.settings import SETTINGS_FILE, ServeRun, ServeSettings

SETTINGS = [field.name for field in fields(ServeSettings)]
# A line of conf/serve/default.yaml: `<key>: <value>  # <what it does>`.
DESCRIBED = re.compile(r"(?P<key>\w+):\s*(?P<value>.*?)\s+#\s*(?P<text>.*)")


def described_settings() -> dict[str, tuple[str, str]]:
    """Each setting's value and description (its line's comment) in conf/serve/default.yaml."""
    lines = (DESCRIBED.fullmatch(line) for line in SETTINGS_FILE.read_text().splitlines())
    return {match["key"]: (match["value"], match["text"]) for match in lines if match}


def usage() -> str:
    described = described_settings()
    shown = {key: f"{key}={described[key][0]}" for key in SETTINGS}
    width = max(map(len, shown.values()))
    settings = "\n".join(f"  {shown[key]:<{width}}  {described[key][1]}" for key in SETTINGS)
    models = textwrap.fill(", ".join(model_entries()), width=100, initial_indent="  ", subsequent_indent="  ")
    return (
        "usage: python -m rpbench.serve [model=<entry>] [model.<key>=<value> ...] [<setting>=<value> ...]\n\n"
        "Serves one model over OpenAI's HTTP API (/v1/chat/completions, /v1/completions, /v1/models, /health);\n"
        "the same as `python run.py task=serve`, where a setting is serve.<setting>=<value>.\n\n"
        f"Settings (conf/serve/default.yaml):\n{settings}\n\n"
        f"Models (model=<entry>; conf/config.yaml's when none is named; model.<key>=<value> changes one):\n{models}\n"
    )


def overrides(args: Sequence[str]) -> list[str]:
    """The Hydra overrides of the command's arguments; SystemExit naming one that is none of them."""
    out = ["task=serve"]
    for arg in args:
        key, assigned, _ = arg.partition("=")
        if assigned and (key == "model" or key.startswith("model.")):
            out.append(arg)
        elif assigned and key in SETTINGS:
            out.append(f"serve.{arg}")
        else:
            raise SystemExit(
                f"rpbench.serve: {arg!r}: expected model=<entry>, model.<key>=<value> or <setting>=<value>, "
                f"a setting being one of {', '.join(SETTINGS)} (--help says what each does)"
            )
    return out


def one_line(error: Exception) -> str:
    first, *rest = str(error).strip().splitlines()
    return " ".join([first, "; ".join(line.strip() for line in rest if line.strip())]).strip()


def validated(args: Sequence[str]) -> ServeRun:
    """The run the arguments compose, checked by ``validate``; SystemExit with one line naming what is wrong."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    from rpbench.core.errors import ConfigError
    from rpbench.validate import validate

    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return validate(compose("config", overrides=overrides(args)))
    except (ConfigError, HydraException) as error:
        raise SystemExit(f"rpbench.serve: {one_line(error)}") from None


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if "-h" in args or "--help" in args:
        print(usage())
        return
    from rpbench.serve.running import serve_run

    serve_run(validated(args))


if __name__ == "__main__":
    main()

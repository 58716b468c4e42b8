"""RoleBench (Wang et al. 2023, RoleLLM; huggingface.co/datasets/ZenMoore/RoleBench) in its released layout.

``data.files.test`` is the root of a download of the dataset (``git clone`` of the hub repository):

- ``profiles-eng/desc.json``: one JSON object, role name -> the role's description;
- ``rolebench-eng/<split>/<subset>/test.jsonl`` for split ``instruction-generalization`` (RoleMRC's
  RoleBenchInstEng, 32.8k records) or ``role-generalization`` (RoleBenchRoleEng, 7.5k) and subset
  ``general`` or ``role_specific``: one object per line, ``{"role": str, "question": str, "generated":
  [str, ...]}``; ``generated`` holds the reference answers (for general instructions, several RoleGPT
  answers).

Option ``rolebench`` (the data config's table, ``RoleBenchLayout``): ``split``, ``subsets``, ``profiles``
(paths inside the root) and ``system_prompt``, a template with ``{role}`` and ``{description}``: the system
turn each question is asked under. A record's reference is the first of ``generated`` (the one reference of RoleMRC's
converted files, and of OpenCompass's RoleBench loader); ``meta["references"]`` keeps them all. Records are
labelled by subset (``task``); ids are ``<subset>/`` plus ``readers.content_id``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rpbench.core.errors import ConfigError, DataFormatError
from rpbench.core.typed import Problem, Settings
from rpbench.data.errors import ReadResult
from rpbench.data.readers import (
    FORMATS,
    DataFormat,
    NoRubrics,
    ReadPolicy,
    Source,
    as_object,
    content_id,
    load_document,
    read_file,
    require_list,
    require_str,
)
from rpbench.data.records import EvalExample, Turn
from rpbench.data.templates import Template


@dataclass(frozen=True, kw_only=True)
class RoleBenchLayout(Settings):
    """``data.rolebench``: which split and subsets of the download are read, where the role descriptions are,
    and the system turn each question is asked under."""

    split: str
    subsets: tuple[str, ...]
    profiles: str
    system_prompt: str

    def problems(self) -> list[Problem]:
        found: list[Problem] = [
            (key, "a path inside the download") for key in ("split", "profiles") if not getattr(self, key)
        ]
        if not self.subsets:
            found.append(("subsets", "at least one subset (general, role_specific)"))
        if not self.system_prompt.strip():
            found.append(("system_prompt", "a template with {role} and {description}"))
        return found


@dataclass(frozen=True, kw_only=True)
class RoleBenchOptions(NoRubrics):
    """The keys of the ``rolebench`` format's data configs: the layout read (records are labelled by subset)."""

    rolebench: RoleBenchLayout


def read_descriptions(path: Path) -> dict[str, str]:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no role descriptions (data.rolebench.profiles, inside data.files.test)")
    document = load_document(path)
    if not isinstance(document, dict) or not document:
        raise DataFormatError(path, "file", "<document>", "one JSON object: role name -> description")
    for role, text in document.items():
        if not isinstance(text, str) or not text.strip():
            raise DataFormatError(path, repr(role), role, "a non-empty description string")
    return document


def read_test(path: str | Path, options: RoleBenchOptions, policy: ReadPolicy) -> ReadResult[EvalExample]:
    layout = options.rolebench
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: expected the root folder of a RoleBench download (data.files.test)")
    descriptions = read_descriptions(root / layout.profiles)
    system = Template("rolebench_system", layout.system_prompt, "data.rolebench.system_prompt")
    if set(system.slots) != {"role", "description"}:
        raise ConfigError(f"data.rolebench.system_prompt: slots {{role}} and {{description}}, got {list(system.slots)}")
    combined: ReadResult[EvalExample] = ReadResult(str(root), counts={"duplicates": 0})
    for subset in layout.subsets:
        file = root / layout.split / subset / "test.jsonl"

        def parse(raw: Any, source: Source, subset: str = subset) -> EvalExample:
            record = as_object(raw, source)
            role = require_str(record, "role", source)
            if role not in descriptions:
                raise source.error("role", f"a role described in {layout.profiles}, got {role!r}")
            question = require_str(record, "question", source)
            answers = require_list(record, "generated", source)
            for i, answer in enumerate(answers):
                if not isinstance(answer, str) or not answer.strip():
                    raise source.error(f"generated[{i}]", "a non-empty answer string")
            prompt = (Turn("system", system.render(role=role, description=descriptions[role])), Turn("user", question))
            meta = {"role": role, "references": list(answers), "dimensions": []}
            return EvalExample(f"{subset}/{content_id(record)}", prompt, answers[0], subset, meta)

        part = read_file(file, parse, policy.on_error)
        combined.examples += part.examples
        combined.skipped += part.skipped
        combined.counts["duplicates"] += part.counts.get("duplicates", 0)
        combined.counts[f"subset.{subset}"] = len(part.examples)
    return combined


FORMATS.register("rolebench")(DataFormat(RoleBenchOptions, test=read_test))

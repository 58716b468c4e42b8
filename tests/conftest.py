"""Shared fixtures: offline environment, Hydra composition, tiny models."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from lightning.pytorch.callbacks import Callback

import rpbench  # noqa: F401  (registers the ${rpb.*} config resolvers, as run.py does)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = REPO_ROOT / "conf"
SAMPLE_DIR = REPO_ROOT / "rpbench" / "resources" / "sample"  # the bundled sample (scripts/sample_data.py)
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}


@contextmanager
def registered(*entries):
    """``(registry, name, obj)`` entries registered while the block runs, then removed, so a toy extension
    of one test is not seen by the others (nor compared with a subprocess that never imported it)."""
    for registry, name, obj in entries:
        registry.register(name)(obj)
    try:
        yield
    finally:
        for registry, name, _ in entries:
            registry.unregister(name)


@dataclass(frozen=True)
class RawReply:
    """An HTTP 200 with this body and content type instead of a chat completion."""

    body: bytes
    content_type: str


class ChatStub(ThreadingHTTPServer):
    """An OpenAI-compatible chat-completions stub on 127.0.0.1 that keeps every raw request body and the
    Authorization header it came with (``authorizations``).

    ``reply(body)`` gives the assistant's text for a parsed request (None: a null content), an int: that HTTP
    error status, or a ``RawReply``: that body as it is (faults: cut-off JSON, an HTML page).
    ``usage(body)`` the (prompt, completion) tokens the reply reports (default: one each).
    """

    def __init__(self, reply: Callable[[dict], str | int], usage: Callable[[dict], tuple[int, int]] | None = None):
        super().__init__(("127.0.0.1", 0), _ChatStubHandler)
        self.reply = reply
        self.usage = usage or (lambda body: (1, 1))
        self.bodies: list[bytes] = []
        self.authorizations: list[str | None] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    @property
    def requests(self) -> list[dict]:
        with self.lock:
            return [json.loads(body) for body in self.bodies]


class _ChatStubHandler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        with self.server.lock:
            self.server.bodies.append(raw)
            self.server.authorizations.append(self.headers.get("Authorization"))
        body = json.loads(raw)
        content = self.server.reply(body)
        prompt_tokens, completion_tokens = self.server.usage(body)
        if isinstance(content, int):
            self.send_response(content)
            self.end_headers()
            return
        if isinstance(content, RawReply):
            self.send_response(200)
            self.send_header("Content-Type", content.content_type)
            self.send_header("Content-Length", str(len(content.body)))
            self.end_headers()
            self.wfile.write(content.body)
            return
        payload = json.dumps(
            {
                "id": "c1",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@contextmanager
def chat_stub(
    reply: Callable[[dict], str | int], usage: Callable[[dict], tuple[int, int]] | None = None
) -> Iterator[ChatStub]:
    """A running ``ChatStub``, shut down when the block ends."""
    server = ChatStub(reply, usage)
    # polled often: shutting down waits up to one poll interval (the default 0.5 s, on every stub of the suite)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


class SimulatedKill(Exception):
    """What ``KillAfterStep`` raises: the run ends there, as a killed one does."""


class KillAfterStep(Callback):
    """A Trainer callback (``+trainer.callbacks=[{_target_: conftest.KillAfterStep, step: N}]``) that ends
    training as the micro-batch after optimizer step ``step`` starts: the checkpoints written up to that step
    are there, nothing after it ran. In-process runs get SimulatedKill; with ``hard: true`` every rank's
    process is SIGKILLed (a `python run.py` subprocess, as a run killed from outside)."""

    def __init__(self, step: int, hard: bool = False):
        self.step, self.hard = step, hard

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step < self.step:
            return
        if self.hard:
            os.kill(os.getpid(), signal.SIGKILL)
        raise SimulatedKill(f"killed after step {trainer.global_step}")


def run_script(script: str, *overrides: str, **env: str) -> subprocess.CompletedProcess:
    """`python <script> <overrides>` from the repository root, offline, as a user runs it."""
    return subprocess.run(
        [sys.executable, script, *overrides],
        cwd=REPO_ROOT,
        env={**os.environ, **OFFLINE_ENV, **env},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@contextmanager
def served_from_command_line(*arguments: str) -> Iterator[tuple[str, str]]:
    """`python <arguments>` (`-m rpbench.serve ... port=0`, `run.py task=serve ...`) in a subprocess: yields
    (served model name, base URL) from the address line it prints once listening."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [sys.executable, *arguments],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        printed = iter(process.stdout.readline, "")  # until the process ends
        line = next((line for line in printed if line.startswith("rpbench.serve: ")), None)
        assert line is not None, f"the server stopped (exit status {process.wait()}) before printing its address"
        name, url = line.removeprefix("rpbench.serve: ").strip().rsplit(" at ", 1)
        yield name, url
    finally:
        process.terminate()
        process.wait(timeout=30)


def objective_settings(name: str, **overrides) -> dict:
    """The ``objective`` group of `python run.py objective=<name>` (default model, its tuning), with overrides."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", [f"objective={name}"])
    return {**OmegaConf.to_container(cfg.objective, resolve=True), **overrides}


def objective_config(name: str, **overrides):
    """``objective_settings`` parsed by the objective's ``config_class``, as ``validate`` parses the group."""
    from rpbench.objectives.registry import OBJECTIVES

    return OBJECTIVES.get(name).config_class.parse(objective_settings(name, **overrides), "objective")


def pytest_collection_modifyitems(config, items):
    import torch

    from rpbench.scoring.wordnet import WordNetMissingError, find_wordnet

    skips = {}
    if not torch.cuda.is_available():
        skips["gpu"] = pytest.mark.skip(reason="needs a CUDA device")
    try:
        find_wordnet()
    except WordNetMissingError as error:
        skips["wordnet"] = pytest.mark.skip(reason=f"needs WordNet for METEOR: {error}")
    for item in items:
        for marker, skip in skips.items():
            if item.get_closest_marker(marker):
                item.add_marker(skip)
        real = item.get_closest_marker("real_model")
        if real and importlib.util.find_spec(real.args[0]) is None:
            item.add_marker(pytest.mark.skip(reason=f"the real model's package {real.args[0]} is not installed"))


def composed(out: Path, *overrides: str):
    """The resolved DictConfig `python run.py <overrides>` would build, writing to ``out``."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = hydra_compose("config", overrides=[f"hydra.run.dir={out}", *overrides], return_hydra_config=True)
        with open_dict(cfg):
            cfg.hydra.runtime.output_dir = str(out)
        HydraConfig.instance().set_config(cfg)
    return cfg


def run_in_process(out: Path, *overrides: str, **run_options) -> dict:
    """What `python run.py <overrides> hydra.run.dir=<out>` runs, without the process (its import time):
    ``pipeline.run`` on the composed config less its ``hydra`` node, as run.py hands it (with ``run_options``,
    e.g. a scripted ``local_judge_server``); the run's results."""
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import open_dict

    from rpbench.pipeline import run
    from rpbench.validate import validate

    cfg = composed(out, *overrides)
    with open_dict(cfg):
        del cfg["hydra"]
        cfg.paths.output_dir = str(out)
    try:
        return run(validate(cfg), **run_options)
    finally:
        GlobalHydra.instance().clear()


@pytest.fixture(scope="session")
def ddp_run(tmp_path_factory) -> Path:
    """The folder of `python run.py` training the default SFT on two gloo ranks (DDP, batches of 4, one short
    epoch, its curve in metrics.csv), then evaluating: tests/test_run.py checks it, tests/test_deepspeed_cpu.py
    compares ZeRO-2 with it (one pair of processes for both)."""
    from test_run import SHORT_TRAINING, SMALL_EVAL

    out = tmp_path_factory.mktemp("ddp")
    settings = ["trainer.devices=2", "trainer.strategy=ddp", "logger=csv", "objective.batch_size=4"]
    result = run_script("run.py", f"hydra.run.dir={out}", *settings, *SHORT_TRAINING, *SMALL_EVAL)
    assert result.returncode == 0, result.stderr[-3000:]
    return out


@pytest.fixture
def compose(tmp_path):
    """compose(*overrides) -> resolved DictConfig, as `python run.py <overrides>` would build it."""
    from hydra.core.global_hydra import GlobalHydra

    yield lambda *overrides: composed(tmp_path / "run", *overrides)
    GlobalHydra.instance().clear()


def tiny_settings(family: str = "qwen2", *, lora: dict | None = None, tiny: dict | None = None, **changes):
    """The settings of conf/model/tiny-<family>.yaml (tiny-qwen2's for another family) with ``changes``;
    ``tiny``: sizes over the entry's,
    ``lora``: r and alpha (no dropout, the family's target modules unless given)."""
    import dataclasses

    from rpbench.models.config_tree import compose_model_config
    from rpbench.models.settings import LoraSettings

    entry = f"tiny-{family.replace('_', '-')}"
    if (CONF_DIR / "model" / f"{entry}.yaml").is_file():
        base = compose_model_config(entry)
    else:  # a family with no tiny entry: tiny-qwen2's sizes with that family's architecture
        base = dataclasses.replace(
            compose_model_config("tiny-qwen2"), name=entry, name_or_path=f"tiny:{family}", family=family
        )
    if tiny is not None:
        changes["tiny"] = {**base.tiny, **tiny}
    if lora is not None:
        changes["lora"] = LoraSettings(**{"dropout": 0.0, "target_modules": None, **lora})
    return dataclasses.replace(base, **changes)


@pytest.fixture(scope="session")
def tiny_model():
    """tiny_model(family="qwen2", **changes) -> the ModelSettings of a tiny model entry (see tiny_settings)."""
    return tiny_settings


@functools.cache
def group_values(group: str, option: str, key: str) -> dict:
    """The resolved ``key`` node of `python run.py <group>=<option>` (composed once per session)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    if GlobalHydra.instance().is_initialized():  # inside a test's own composition: the same conf/ tree
        cfg = hydra_compose("config", [f"{group}={option}"])
    else:
        with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
            cfg = hydra_compose("config", [f"{group}={option}"])
    return OmegaConf.to_container(OmegaConf.select(cfg, key), resolve=True)


def data_options(option: str, **overrides):
    """The format options of `python run.py data=<option>` (``DataSettings.options``, typed), with ``overrides``
    of the format's own keys (a mapping merged into the config's)."""
    from omegaconf import OmegaConf

    from rpbench.data.settings import data_spec

    values = OmegaConf.merge(group_values("data", option, "data"), overrides)
    return data_spec(OmegaConf.to_container(values)).options


def probe_observation(**changes):
    """What probe=topk_freq observes and counts (conf/probe/topk_freq.yaml's ``ProbeSettings``), with ``changes``."""
    from rpbench.core.typed import as_dict
    from rpbench.probes.stage import FrequencySettings
    from rpbench.probes.stats import ProbeSettings

    observed = FrequencySettings.parse(group_values("probe", "topk_freq", "probe"), "probe").observation()
    return ProbeSettings.parse({**as_dict(observed), **changes}, "probe")


def judge_settings(**overrides) -> dict:
    """conf/judge/vllm.yaml's values (an endpoint judge; base_url and model are the test's), without an API
    key, a cache or a progress bar unless ``overrides`` set them."""
    return {
        **group_values("judge", "vllm", "judge"),
        "api_key_env": None,
        "cache_path": None,
        "progress": False,
        **overrides,
    }


def judge_config(**overrides):
    """``judge_settings`` parsed, as ``validate`` parses the judge group."""
    from rpbench.scoring.chat.client import EndpointSettings

    return EndpointSettings.parse(judge_settings(**overrides), "judge")


def generation_options(**overrides):
    """evaluator=rolemrc's ``generation`` settings (conf/evaluator/rolemrc.yaml, the sample data's prompt
    length) without a progress bar, with ``overrides``."""
    from rpbench.models.generation import GenerationSettings

    values = {**group_values("evaluator", "rolemrc", "evaluator.generation"), "progress": False, **overrides}
    return GenerationSettings.parse(values, "evaluator.generation")


def generation_endpoint(base_url: str, model: str, **overrides):
    """evaluator=rolemrc's ``endpoint`` settings for the server at ``base_url`` answering as ``model``."""
    from rpbench.eval.settings import GenerationEndpoint

    values = {**group_values("evaluator", "rolemrc", "evaluator.endpoint"), "base_url": base_url, "model": model}
    return GenerationEndpoint.parse({**values, **overrides}, "evaluator.endpoint")


def evaluation_of(cfg, out_dir: Path, model=None, tokenizer=None, examples=()):
    """The evaluation stage's context for a composed config, as the pipeline builds it (validated first)."""
    from rpbench.pipeline import eval_context
    from rpbench.serve.running import local_judge
    from rpbench.validate import validate

    return eval_context(validate(cfg), model, tokenizer, list(examples), Path(out_dir), None, local_judge)


def generate_texts(model, tokenizer, conversations, *, stop_ids=None, images=None, **options) -> list[str]:
    """Each conversation's reply in input order, through evaluation's path (``render_prompts`` ->
    ``generate_batches``); ``options`` are ``GenerationSettings`` fields."""
    from rpbench.models.generation import default_stop_ids, generate_batches, render_prompts

    opts = generation_options(**options)
    stop_ids = list(stop_ids) if stop_ids is not None else default_stop_ids(model, tokenizer)
    texts = [""] * len(conversations)
    prompts = render_prompts(tokenizer, conversations, images)
    for batch, completions in generate_batches(model, tokenizer, prompts, opts, stop_ids, images=images):
        for i, text in zip(batch, completions):
            texts[i] = text
    return texts


def one_layer_llama(seed: int):
    """A one-layer Llama of vocabulary 64, randomly initialised under ``seed``, for checks against TRL's losses."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=32,
    )
    return LlamaForCausalLM(config).eval()

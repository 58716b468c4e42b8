"""Shared fixtures: offline environment, Hydra composition, tiny models, sample records, endpoint stubs.

The helpers below are handed to tests as fixtures (the block at the end of this file): a test takes
``run_in_process`` or ``data_options`` as an argument, never imports it from here or from another test module
(tests/test_imports.py checks it)."""

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
if os.environ.get("PYTEST_XDIST_WORKER"):  # `-n 2`: one thread per worker, so two workers share two cores
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)

REPO_ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = REPO_ROOT / "conf"
SAMPLE_DIR = REPO_ROOT / "rpbench" / "resources" / "sample"  # the bundled sample (scripts/sample_data.py)
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}

# Overrides of `python run.py` runs: a short training (one epoch of 48 samples), a small evaluation (8 test
# samples, short replies), and the short training without evaluation.
SHORT_TRAINING = (
    "objective.epochs=1",
    "trainer.enable_progress_bar=false",
    "data.max_train_samples=48",
    "objective.log_every_n_steps=1",
)
SMALL_EVAL = ("data.max_test_samples=8", "evaluator.generation.max_new_tokens=16")  # the default also evaluates
FAST = (*SHORT_TRAINING, "evaluator=none")
QUICK = ("trainer.enable_progress_bar=false", "data.max_train_samples=8")  # if a startup check let a run through


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


class InterruptDuringStep(Callback):
    """A Trainer callback (``+trainer.callbacks=[{_target_: conftest.InterruptDuringStep, step: N}]``) that
    sends its own process SIGINT ``times`` times, as Ctrl-C does, as the first micro-batch of optimizer step
    ``step`` starts."""

    def __init__(self, step: int, times: int = 1):
        self.step, self.times = step, times

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step - 1 and self.times:
            while self.times:
                self.times -= 1
                os.kill(os.getpid(), signal.SIGINT)


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


@pytest.fixture(scope="session")
def save_tiny_reward_model(tiny_model):
    """save_tiny_reward_model(folder, **config) -> folder: a tiny random one-label Qwen2 sequence classifier (seed
    0) and the tiny model's tokenizer saved there; ``config``: more Qwen2Config fields."""

    def save(folder, **config):
        import torch
        from transformers import Qwen2Config, Qwen2ForSequenceClassification

        from rpbench.models import load_tokenizer

        tokenizer = load_tokenizer(tiny_model())
        sizes = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}
        settings = {"num_key_value_heads": 2, "num_labels": 1, "pad_token_id": tokenizer.pad_token_id, **config}
        torch.manual_seed(0)
        model = Qwen2ForSequenceClassification(Qwen2Config(vocab_size=len(tokenizer), **sizes, **settings))
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        return folder

    return save


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


def run_py(*overrides: str) -> subprocess.CompletedProcess:
    """`python run.py <overrides>` in a subprocess (``run_script``)."""
    return run_script("run.py", *overrides)


CPU_ZERO = ("trainer.accelerator=cpu", "trainer.precision=32-true", "trainer.strategy.config.bf16.enabled=false")


def logged_losses(out: Path) -> list[float]:
    """The train/loss values a run logged in ``out``/metrics.csv, in order."""
    import csv

    return [float(row["train/loss"]) for row in csv.DictReader((out / "metrics.csv").open()) if row["train/loss"]]


def exported_weights(out: Path) -> dict:
    """The parameters of the model a run exported to ``out``/model."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(out / "model")
    return {name: param.detach() for name, param in model.named_parameters()}


def assert_same_weights(out: Path, plain_out: Path) -> None:
    """The run in ``out`` exported ``plain_out``'s weights (to tolerance)."""
    import torch

    plain, trained = exported_weights(plain_out), exported_weights(out)
    assert trained.keys() == plain.keys()
    for name, weight in plain.items():
        torch.testing.assert_close(trained[name], weight, rtol=1e-4, atol=1e-5, msg=name)


def checkpoint_step(path: Path) -> int | None:
    """The optimizer step of a (whole) checkpoint file, None when there is none yet."""
    import torch

    if not path.exists():
        return None
    return int(torch.load(path, map_location="cpu", weights_only=False)["global_step"])


def assert_nothing_trained_or_evaluated(out: Path) -> None:
    assert not (out / "checkpoints").exists() and not (out / "metrics.json").exists()
    assert not (out / "predictions.jsonl").exists()


def refused_at_startup(compose, *overrides: str) -> str:
    """``pipeline.run`` (what run.py calls) on the composed config: expect the error run.py prints as
    `error: <message>` before anything is trained or evaluated; the message."""
    from omegaconf import open_dict

    from rpbench.core.errors import RpbenchError
    from rpbench.pipeline import run
    from rpbench.validate import validate

    cfg = compose(*QUICK, *overrides)
    with open_dict(cfg):  # what run.py hands the pipeline
        del cfg["hydra"]
    with pytest.raises(RpbenchError) as error:
        run(validate(cfg))
    assert_nothing_trained_or_evaluated(Path(cfg.paths.output_dir))
    return str(error.value)


def check_config(cfg) -> None:
    """A composed config's model dtype, objective, data files and trainer strategy are ones rpbench knows."""
    from omegaconf import OmegaConf

    from rpbench.models.loading import DTYPES
    from rpbench.objectives.registry import OBJECTIVES
    from rpbench.training.fit import _strategy

    resolved = {
        k: OmegaConf.to_container(cfg[k], resolve=True) if OmegaConf.is_config(cfg[k]) else cfg[k]
        for k in cfg
        if k != "hydra"
    }
    assert resolved["model"]["dtype"] in DTYPES
    assert resolved["objective"]["name"] in {"none", *OBJECTIVES.names()}
    for split in ("train", "pairs", "test"):
        assert split in resolved["data"]["files"], f"data={cfg.data.name} lacks files.{split}"
    _strategy(resolved["trainer"], micro_batch_size=1)


def post(url: str, body: dict, timeout: float = 60) -> tuple[int, dict]:
    """POST ``body`` to the chat-completions route of the server at ``url``: (HTTP status, JSON reply)."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        f"{url}/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


LM_EVAL_TASK = """task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
"""


def write_task(folder, name: str, rows) -> None:
    """lm-eval's custom task ``name`` over ``rows`` (a local JSONL file beside its YAML in ``folder``)."""
    folder.mkdir(exist_ok=True)
    data = folder / f"{name}.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / f"{name}.yaml").write_text(LM_EVAL_TASK.format(name=name, data=data))


def naive_sequence_logps(model, batch):
    """Peer computation from full-vocabulary logits: log_softmax, shift, gather, sum."""
    logits = model(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=batch["position_ids"]
    ).logits.float()
    targets = batch["labels"][:, 1:]
    mask = targets != -100
    logps = logits[:, :-1].log_softmax(-1).gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return (logps * mask).sum(-1), mask.sum(-1)


@functools.cache
def _sample_pairs() -> tuple:
    from rpbench.data import readers

    return tuple(
        readers.read("rolemrc", "pairs", SAMPLE_DIR / "rolemrc" / "train-rl.jsonl", data_options("sample")).examples
    )


# The helpers above, handed to tests as fixtures: a test takes ``run_in_process`` (say) as an argument instead of
# importing it. Session-scoped: the same function, class or value for every test and fixture of any scope.


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository's root folder (run.py, conf/, rpbench/)."""
    return REPO_ROOT


@pytest.fixture(scope="session")
def sample_dir() -> Path:
    """The bundled sample data (rpbench/resources/sample, built by scripts/sample_data.py)."""
    return SAMPLE_DIR


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared data folder beside the repository (../shared/data), where the released data sets are."""
    return SHARED_DATA


@pytest.fixture(scope="session")
def rolemrc_options(data_options):
    """data=rolemrc's format options: the released test labels and their rubrics."""
    return data_options("rolemrc")


@pytest.fixture(scope="session")
def rpgbench_options(data_options):
    """data=rpgbench's format options."""
    return data_options("rpgbench")


@pytest.fixture(scope="session")
def offline_env() -> dict[str, str]:
    """The environment variables that keep a subprocess offline (Hugging Face Hub, W&B)."""
    return dict(OFFLINE_ENV)


@pytest.fixture(scope="session")
def short_training() -> tuple[str, ...]:
    """Overrides of a short training: one epoch of 48 samples, a loss logged per step, no progress bar."""
    return SHORT_TRAINING


@pytest.fixture(scope="session")
def small_eval() -> tuple[str, ...]:
    """Overrides of a small evaluation: 8 test samples, replies of up to 16 tokens."""
    return SMALL_EVAL


@pytest.fixture(scope="session")
def fast() -> tuple[str, ...]:
    """Overrides of a short training (``short_training``) that evaluates nothing."""
    return FAST


@pytest.fixture(scope="session")
def quick() -> tuple[str, ...]:
    """Overrides that keep a run short should a startup check let it through (``refused_at_startup``)."""
    return QUICK


@pytest.fixture(scope="session")
def cpu_zero() -> tuple[str, ...]:
    """Overrides that run a DeepSpeed strategy on CPU processes (fp32, no bf16)."""
    return CPU_ZERO


@pytest.fixture(scope="session", name="SimulatedKill")
def _simulated_kill() -> type[SimulatedKill]:
    """The exception ``KillAfterStep`` ends an in-process run with."""
    return SimulatedKill


@pytest.fixture(scope="session", name="RawReply")
def _raw_reply() -> type[RawReply]:
    """RawReply(body, content_type): what a ``chat_stub`` reply function returns for a reply that is no chat
    completion."""
    return RawReply


@pytest.fixture(scope="session", name="registered")
def _registered():
    """registered(*(registry, name, obj)): a context manager registering the entries while its block runs."""
    return registered


@pytest.fixture(scope="session", name="chat_stub")
def _chat_stub():
    """chat_stub(reply, usage=None): a context manager running an OpenAI-compatible chat stub (a ``ChatStub``)."""
    return chat_stub


@pytest.fixture(scope="session", name="run_script")
def _run_script():
    """run_script(script, *overrides, **env) -> CompletedProcess: `python <script> <overrides>`, offline."""
    return run_script


@pytest.fixture(scope="session", name="run")
def _run():
    """run(*overrides) -> CompletedProcess: `python run.py <overrides>` in a subprocess."""
    return run_py


@pytest.fixture(scope="session", name="served_from_command_line")
def _served_from_command_line():
    """served_from_command_line(*arguments): a context manager serving `python <arguments>`; yields (name, url)."""
    return served_from_command_line


@pytest.fixture(scope="session", name="objective_settings")
def _objective_settings():
    """objective_settings(name, **overrides) -> dict: the ``objective`` group of `python run.py objective=<name>`."""
    return objective_settings


@pytest.fixture(scope="session", name="objective_config")
def _objective_config():
    """objective_config(name, **overrides): ``objective_settings`` parsed by the objective's config class."""
    return objective_config


@pytest.fixture(scope="session", name="composed")
def _composed():
    """composed(out, *overrides): the resolved DictConfig `python run.py <overrides>` builds, writing to ``out``."""
    return composed


@pytest.fixture(scope="session", name="run_in_process")
def _run_in_process():
    """run_in_process(out, *overrides, **run_options) -> dict: what `python run.py <overrides>` runs, in-process."""
    return run_in_process


@pytest.fixture(scope="session", name="tiny_settings")
def _tiny_settings():
    """tiny_settings(family="qwen2", *, lora=None, tiny=None, **changes): the ModelSettings of a tiny model."""
    return tiny_settings


@pytest.fixture(scope="session", name="group_values")
def _group_values():
    """group_values(group, option, key) -> dict: the resolved ``key`` node of `python run.py <group>=<option>`."""
    return group_values


@pytest.fixture(scope="session", name="data_options")
def _data_options():
    """data_options(option, **overrides): the typed format options of `python run.py data=<option>`."""
    return data_options


@pytest.fixture(scope="session")
def sample_pairs() -> list:
    """The bundled sample's RoleMRC preference pairs (rolemrc/train-rl.jsonl), read as data=sample reads them."""
    return list(_sample_pairs())


@pytest.fixture(scope="session", name="probe_observation")
def _probe_observation():
    """probe_observation(**changes): the ``ProbeSettings`` of probe=topk_freq, with changes."""
    return probe_observation


@pytest.fixture(scope="session", name="judge_settings")
def _judge_settings():
    """judge_settings(**overrides) -> dict: conf/judge/vllm.yaml's values (no API key, cache or progress bar)."""
    return judge_settings


@pytest.fixture(scope="session", name="judge_config")
def _judge_config():
    """judge_config(**overrides): ``judge_settings`` parsed, as ``validate`` parses the judge group."""
    return judge_config


@pytest.fixture(scope="session", name="generation_options")
def _generation_options():
    """generation_options(**overrides): evaluator=rolemrc's ``generation`` settings without a progress bar."""
    return generation_options


@pytest.fixture(scope="session", name="generation_endpoint")
def _generation_endpoint():
    """generation_endpoint(base_url, model, **overrides): evaluator=rolemrc's ``endpoint`` settings."""
    return generation_endpoint


@pytest.fixture(scope="session", name="evaluation_of")
def _evaluation_of():
    """evaluation_of(cfg, out_dir, model=None, tokenizer=None, examples=()): the evaluation stage's context."""
    return evaluation_of


@pytest.fixture(scope="session", name="generate_texts")
def _generate_texts():
    """generate_texts(model, tokenizer, conversations, *, stop_ids=None, images=None, **options) -> replies."""
    return generate_texts


@pytest.fixture(scope="session", name="one_layer_llama")
def _one_layer_llama():
    """one_layer_llama(seed): a one-layer Llama of vocabulary 64, for checks against TRL's losses."""
    return one_layer_llama


@pytest.fixture(scope="session", name="logged_losses")
def _logged_losses():
    """logged_losses(out) -> list[float]: the train/loss values of the run in ``out``, in order."""
    return logged_losses


@pytest.fixture(scope="session", name="assert_same_weights")
def _assert_same_weights():
    """assert_same_weights(out, plain_out): the run in ``out`` exported ``plain_out``'s weights (to tolerance)."""
    return assert_same_weights


@pytest.fixture(scope="session", name="checkpoint_step")
def _checkpoint_step():
    """checkpoint_step(path) -> int | None: the optimizer step of a checkpoint file, None where there is none."""
    return checkpoint_step


@pytest.fixture(scope="session", name="assert_nothing_trained_or_evaluated")
def _assert_nothing_trained_or_evaluated():
    """assert_nothing_trained_or_evaluated(out): no checkpoint, metrics or predictions in ``out``."""
    return assert_nothing_trained_or_evaluated


@pytest.fixture(scope="session", name="refused_at_startup")
def _refused_at_startup():
    """refused_at_startup(compose, *overrides) -> str: the message a run of the composed config stops with."""
    return refused_at_startup


@pytest.fixture(scope="session", name="check_config")
def _check_config():
    """check_config(cfg): a composed config's model, objective, data files and strategy are ones rpbench knows."""
    return check_config


@pytest.fixture(scope="session", name="post")
def _post():
    """post(url, body, timeout=60) -> (status, reply): a chat-completions request to the server at ``url``."""
    return post


@pytest.fixture(scope="session", name="write_task")
def _write_task():
    """write_task(folder, name, rows): lm-eval's custom multiple-choice task ``name`` over ``rows``."""
    return write_task


@pytest.fixture(scope="session", name="naive_sequence_logps")
def _naive_sequence_logps():
    """naive_sequence_logps(model, batch) -> (logps, token counts): from full-vocabulary logits."""
    return naive_sequence_logps


@pytest.fixture(scope="session")
def scripted():
    """scripted(*, faults=(), replies=None, slow_s=5.0, retry_after=None): a scripted ``ChatServer``'s
    ``make_server`` (tests/scripted_server.py)."""
    from scripted_server import scripted

    return scripted


@pytest.fixture(scope="session")
def scripted_judge():
    """scripted_judge(**script): a ``judge=local`` server that is a scripted ``ChatServer``
    (tests/scripted_server.py)."""
    from scripted_server import scripted_judge

    return scripted_judge


@pytest.fixture(scope="session")
def garbage_reply() -> str:
    """The reply a scripted server sends for its ``garbage`` fault: one no judge parser accepts."""
    from scripted_server import GARBAGE_REPLY

    return GARBAGE_REPLY


@pytest.fixture(scope="session")
def run_records():
    """run_records(wandb_dir) -> list[dict]: what each offline W&B run in ``wandb_dir`` recorded
    (tests/wandb_records.py)."""
    from wandb_records import run_records

    return run_records

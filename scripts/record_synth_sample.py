"""Records the replies ``judge=replay`` answers the offline synthesis demo with
(``python run.py task=synthesize synth=rolemrc_sample judge=replay``): ``python -m scripts.record_synth_sample``
(from the repository root) rewrites rpbench/resources/synth_sample/replies.jsonl.

The generator here is scripted, not a language model: it answers each synthesis prompt in its format (a JSON
profile, a JSON list of chat turns, the seed reply restyled with an interjection, narration and the nested rule
where asked), so the demo shows what every stage writes rather than how a model writes. It serves on 127.0.0.1
while ``python run.py task=synthesize synth=rolemrc_sample judge=openai judge.record_to=...`` runs against it;
the recording is kept sorted by key. Record again after changing the synthesis prompts or the sample's inputs
or settings: the demo otherwise stops at the first request it has no reply for, naming it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORDING = ROOT / "rpbench" / "resources" / "synth_sample" / "replies.jsonl"
# A chat's exchanges: the user's turns and the role's replies, in order.
USER_LINES = (
    "How did you get started?",
    "What is the hardest part of your work?",
    "What do you enjoy most about it?",
    "What would you tell a beginner?",
)
ROLE_LINES = (
    "Someone patient showed me, one season at a time.",
    "The weather and my own impatience; neither listens to me.",
    "The quiet moments when the work goes right.",
    "Start small, watch closely and keep notes.",
)


def profile_reply(persona: str) -> str:
    """A seven-component profile of ``persona`` ("A <trade> who <craft>"), as JSON."""
    trade, craft = persona.split()[1], persona.split(" who ", 1)[-1]
    return json.dumps(
        {
            "name": "Sam " + trade.capitalize(),
            "description": persona + ".",
            "abilities": [craft],
            "speech_style": "warm and direct",
            "personality": "patient, curious",
            "background": "twenty years in the trade",
            "knowledge_boundaries": "knows their craft well; little about anything else",
            "speech_examples": ["(smiles) Let me show you.", "That is how it is done.", "(nods) Good question."],
        }
    )


def chat_reply(prompt: str) -> str:
    """The chat's turns, as JSON, with the exchanges, first speaker and narration the prompt asks for."""
    narration = "no narration" not in prompt
    exchanges = int(re.search(r"with (\d+) exchanges", prompt).group(1))
    turns = []
    if "The character speaks first." in prompt:
        turns.append({"speaker": "role", "text": "(waves) Hello there!" if narration else "Hello there!"})
    for i in range(exchanges):
        turns.append({"speaker": "user", "text": USER_LINES[i % len(USER_LINES)]})
        text = ROLE_LINES[i % len(ROLE_LINES)]
        turns.append({"speaker": "role", "text": f"(thinks) {text}" if narration and i == 0 else text})
    return json.dumps(turns)


def restyled_reply(prompt: str) -> str:
    """Each seed reply of the prompt in the character's voice, following its narration and nested rule."""
    narration = "no narration" not in prompt
    seeds = prompt.split("keep its meaning):\n", 1)[1].split("\n\n", 1)[0].split("\n###\n")
    replies = []
    for seed in seeds:
        reply = f"Well, friend, {seed[0].lower()}{seed[1:]}"
        if narration:
            reply = f"(leans in) {reply}"
        if "capital letters" in prompt:
            reply = reply.upper()
        if "exclamation mark" in prompt:
            reply = reply.rstrip(".") + "!"
        if word := re.search(r'Use the word "(\w+)"', prompt):
            reply += f" {word.group(1)}"
        replies.append(reply)
    return "\n###\n".join(replies)


def generator_reply(body: dict) -> str:
    """The scripted generator's reply to a synthesis request (an OpenAI chat-completions body)."""
    prompt = body["messages"][0]["content"]
    if prompt.startswith("Turn this one-sentence persona"):
        return profile_reply(re.search(r"Persona: (.*)", prompt).group(1))
    if prompt.startswith("You write dialogues"):
        return chat_reply(prompt)
    return restyled_reply(prompt)


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        message = {"role": "assistant", "content": generator_reply(body)}
        payload = json.dumps(
            {
                "id": "scripted",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def record(target: Path = RECORDING) -> int:
    """Run the demo's synthesis against the scripted generator and write its sorted recording; its length."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with tempfile.TemporaryDirectory() as work:
            recorded = Path(work) / "replies.jsonl"
            overrides = [
                "task=synthesize",
                "synth=rolemrc_sample",
                "judge=openai",
                f"judge.base_url=http://127.0.0.1:{server.server_address[1]}/v1",
                "judge.api_key_env=null",
                "judge.model=scripted",
                "judge.cache_path=null",
                "judge.progress=false",
                f"judge.record_to={recorded}",
                f"synth.out_dir={Path(work) / 'out'}",
                f"hydra.run.dir={Path(work) / 'run'}",
            ]
            subprocess.run([sys.executable, "run.py", *overrides], cwd=ROOT, check=True)
            lines = sorted(recorded.read_text(encoding="utf-8").splitlines(), key=lambda line: json.loads(line)["key"])
    finally:
        server.shutdown()
        server.server_close()
    target.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return len(lines)


if __name__ == "__main__":
    print(f"{record()} replies recorded in {RECORDING.relative_to(ROOT)}")

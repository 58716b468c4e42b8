"""What an offline W&B run recorded, read from its run-<id>.wandb file with W&B's own protobuf messages.

The file is a LevelDB-style log (W&B's datastore): a 7-byte file header, then 32 KiB blocks of records,
each a 7-byte header (crc32, length, type: 1 full, 2 first, 3 middle, 4 last) and its bytes."""

from __future__ import annotations

import struct
from pathlib import Path

BLOCK, HEADER = 32768, 7


def records(path: Path) -> list:
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path}: not a W&B datastore file"
    found, pending, pos = [], b"", HEADER
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        _, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        if left < HEADER or (length == 0 and kind == 0):  # block padding
            pos += left
            continue
        pending += data[pos + HEADER : pos + HEADER + length]
        pos += HEADER + length
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            found.append(record)
            pending = b""
    return found


def run_records(wandb_dir: Path) -> list[dict]:
    """Per offline run in ``wandb_dir`` (in start order): id, name, group, job_type, tags, exit_code."""
    runs = []
    for file in sorted(wandb_dir.glob("offline-run-*/run-*.wandb")):
        run: dict = {"exit_code": None}
        for record in records(file):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                r = record.run
                run.update(id=r.run_id, name=r.display_name, group=r.run_group, job_type=r.job_type, tags=list(r.tags))
            elif kind == "exit":
                run["exit_code"] = record.exit.exit_code
        runs.append(run)
    return runs

"""A tracked run writes the same namespaced metrics and the resolved config to TensorBoard, W&B
(offline) and trackio (local); a missing tracker package is a one-line config error."""

import json
import math
import os
import struct
import subprocess
import sys

import pytest
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from dgrpo.config import load_config
from dgrpo.errors import ConfigError
from dgrpo.metrics import trackers
from dgrpo.metrics.logger import read_metrics

COMMON = ["rounds=2", "swarm.nodes=2", "swarm.group_size=2", "swarm.prompts_per_round=2", "sampling.max_new_tokens=6",
          "eval.every=1", "eval.n_prompts=2", "task.n_train=20", "task.n_val=5", "task.few_shot=0"]


def _numeric(rec):
    return {k: v for k, v in rec.items() if k != "round" and isinstance(v, (int, float)) and not isinstance(v, bool)}


def _wandb_records(path):
    """The protobuf records of a W&B ``.wandb`` file: a LevelDB-style log (32 KiB blocks of
    crc32/length/type-headed chunks) after a 7-byte ``:W&B`` header; wandb ≥ 0.2x reads it in Go only."""
    buf = path.read_bytes()
    ident, magic, version = struct.unpack("<4sHB", buf[:7])
    assert (ident, magic, version) == (b":W&B", 0xBEE1, 0)
    pos, block, parts = 7, 32768, b""
    while pos + 7 <= len(buf):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        crc, length, kind = struct.unpack("<IHB", buf[pos:pos + 7])
        if length == 0 and kind == 0:
            break
        chunk = buf[pos + 7:pos + 7 + length]
        pos += 7 + length
        parts = chunk if kind in (1, 2) else parts + chunk  # FULL, FIRST start; MIDDLE, LAST continue
        if kind in (1, 4):
            yield parts


def test_tracked_run_writes_tensorboard_wandb_and_trackio(tmp_path, tiny_model_dir, monkeypatch):
    import trackio  # noqa: F401  (`.[dev]` installs both: a missing one fails here, it is never skipped)
    import wandb  # noqa: F401
    env = {**os.environ, "WANDB_SILENT": "true"}
    for var in ("WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR", "TRACKIO_DIR"):
        env[var] = str(tmp_path / var.lower())
    project = "dgrpo-test"
    # a process of its own: trackio reads TRACKIO_DIR when imported, and nothing lands in the home folder
    proc = subprocess.run([sys.executable, "-m", "dgrpo", "run", f"model.name={tiny_model_dir}", f"out_dir={tmp_path}",
                           "name=t", *COMMON, "tracking.trackers=[tensorboard, wandb, trackio]",
                           "tracking.wandb_mode=offline", f"tracking.project={project}"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    monkeypatch.setenv("TRACKIO_DIR", env["TRACKIO_DIR"])
    run = tmp_path / "t"
    records = read_metrics(run)
    resolved = yaml.safe_load((run / "config.yaml").read_text())
    assert [r["round"] for r in records] == [0, 1, 2]

    acc = EventAccumulator(str(run / "tb"))
    acc.Reload()
    for key in ("train/reward_honest", "time/generate", "swarm/messages"):
        want = [(r["round"], float(r[key])) for r in records if r.get(key) is not None]
        got = [(e.step, e.value) for e in acc.Scalars(key)]
        assert [s for s, _ in got] == [s for s, _ in want]
        assert all(math.isclose(a, b, rel_tol=1e-6) for (_, a), (_, b) in zip(got, want))
    (text,) = acc.Tensors("config/text_summary")
    assert json.loads(text.tensor_proto.string_val[0].decode().strip("`\n")) == resolved

    (wb,) = (run / "wandb").glob("offline-run-*")
    from wandb.proto import wandb_internal_pb2

    history, config = [], {}
    for data in _wandb_records(next(wb.glob("*.wandb"))):
        rec = wandb_internal_pb2.Record()
        rec.ParseFromString(data)
        if rec.WhichOneof("record_type") == "history":
            history.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item})
        elif rec.WhichOneof("record_type") in ("run", "config"):  # init's config travels in the run record
            updates = rec.run.config.update if rec.WhichOneof("record_type") == "run" else rec.config.update
            config.update({i.key: json.loads(i.value_json) for i in updates})
    assert {k: config[k] for k in resolved} == resolved
    assert [h["_step"] for h in history] == [0, 1, 2]
    for h, r in zip(history, records):
        assert {k: v for k, v in h.items() if not k.startswith("_")} == _numeric(r)

    code = (f"import json; from trackio.sqlite_storage import SQLiteStorage as S; "
            f"print(json.dumps([S.get_logs({project!r}, 't'), S.get_run_config({project!r}, 't')], default=str))")
    read = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    logs, stored = json.loads(read.stdout.strip().splitlines()[-1])
    assert [x["step"] for x in logs] == [0, 1, 2]
    for x, r in zip(logs, records):
        assert {k: x[k] for k in _numeric(r)} == _numeric(r)
    assert stored["swarm"] == resolved["swarm"] and stored["task"] == resolved["task"]


def test_a_missing_tracker_package_is_a_one_line_config_error(monkeypatch):
    real = trackers.importlib.util.find_spec
    monkeypatch.setattr(trackers.importlib.util, "find_spec", lambda name: None if name == "wandb" else real(name))
    with pytest.raises(ConfigError) as err:
        load_config(None, ["tracking.trackers=[wandb]"])
    assert 'tracking.trackers: tracker \'wandb\' needs the wandb package: pip install "dgrpo[wandb]"' in str(err.value)
    assert load_config(None, ["tracking.trackers=[tensorboard, tensorboard]"]).tracking.trackers == ["tensorboard"]

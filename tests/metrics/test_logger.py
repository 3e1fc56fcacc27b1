"""MetricsLogger: metrics.jsonl records and the optional TensorBoard mirror (``tensorboard: true``)."""

import math

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from dgrpo.metrics.logger import MetricsLogger, read_metrics, series


def test_jsonl_records_and_nan_become_null(tmp_path):
    log = MetricsLogger(tmp_path)
    log.log({"round": 0, "train/reward_honest": 0.25, "attack/asr": math.nan})
    log.log({"round": 1, "train/reward_honest": 0.75})
    log.close()
    records = read_metrics(tmp_path)
    assert records == [{"round": 0, "train/reward_honest": 0.25, "attack/asr": None},
                       {"round": 1, "train/reward_honest": 0.75}]
    assert series(records, "attack/asr") == ([], [])


def test_tensorboard_event_files_hold_the_scalars(tmp_path):
    log = MetricsLogger(tmp_path, tensorboard=True)
    log.log({"round": 0, "train/reward_honest": 0.25, "time/round": 3.5, "attack/asr": None})
    log.log({"round": 1, "train/reward_honest": 0.75, "time/round": 2.0})
    log.close()
    events = list((tmp_path / "tb").glob("events.out.tfevents.*"))
    assert len(events) == 1 and events[0].stat().st_size > 0
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    assert "attack/asr" not in acc.Tags()["scalars"]  # a null is not written as a number
    reward = [(e.step, e.value) for e in acc.Scalars("train/reward_honest")]
    assert reward == [(0, 0.25), (1, 0.75)]
    assert [(e.step, e.value) for e in acc.Scalars("time/round")] == [(0, 3.5), (1, 2.0)]

"""``checkpoint/replay_memory.json``: the last round's gathered messages, kept only when a hosted
attacker re-sends them next round (``replayed_round``), so a resumed run replays what a straight run
does (:meth:`dgrpo.swarm.swarm.Swarm.replay_memory`)."""

from __future__ import annotations

import json
from pathlib import Path

from dgrpo.errors import CheckpointError
from dgrpo.swarm.validation import parse_message
from dgrpo.training.durable import check_seal

REPLAY_MEMORY = "replay_memory.json"


def replay_memory_state(run, next_round: int) -> dict | None:
    """What ``replay_memory.json`` holds at a save before ``next_round``: the last round's gathered
    messages when a hosted attacker re-sends them (:meth:`dgrpo.swarm.swarm.Swarm.replay_memory`), so a
    resumed run replays what a straight one does; None (no file) otherwise. The checkpoint writes it
    (:func:`dgrpo.training.checkpoint.save_checkpoint`, sealed like every state file)."""
    messages = run.swarm.replay_memory(next_round - 1)
    return None if messages is None else {"round": next_round - 1, "messages": [m.to_dict() for m in messages]}


def load_replay_memory(root: Path, run, next_round: int) -> None:
    """Give the swarm back the messages the checkpoint kept (:func:`replay_memory_state`).

    Raises:
        CheckpointError: the file is not an object with ``round`` = ``next_round`` − 1 and a list of
            well-formed messages (names the file), was edited after the save (its own checksum), or is
            missing while a hosted attacker needs it.
    """
    path = root / REPLAY_MEMORY
    if not run.swarm.keeps_replay_memory or next_round == 0:
        return  # no attacker here re-sends messages (or nothing was gathered yet)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing; the attacker of this run re-sends the last round's messages, "
                              "resume from a checkpoint written with it") from None
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError, OSError):
        data = None
    parsed = [parse_message(m) for m in data["messages"]] if isinstance(data, dict) and isinstance(
        data.get("messages"), list) else None
    if parsed is None or data.get("round") != next_round - 1 or any(reason for _, reason in parsed):
        raise CheckpointError(f"{path}: not the messages of round {next_round - 1} (an object with 'round' and a list of "
                              "messages); the file is damaged, delete the checkpoint's replay_memory.json only "
                              "if the run has no replayed_round attacker")
    check_seal(path, data)
    run.swarm.restore_replay_memory(next_round - 1, [m for m, _ in parsed])

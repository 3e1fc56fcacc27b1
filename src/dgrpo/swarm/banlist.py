"""The ban list: refusals and rejections counted per peer, and the bans they lead to (``swarm.protocol.ban_after``;
``bans.json``). Split out of :mod:`dgrpo.swarm.protocol`, which re-exports it."""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("dgrpo.swarm.protocol")  # (the protocol's logger, as before the split)

BANS_FILE = "bans.json"


@dataclass
class BanList:
    """Refusals and rejections per peer; a peer reaching ``after`` of them is banned (0 = never).

    Saved to ``bans.json`` in the run directory after every round that changes it; loaded on resume.
    """

    after: int = 0
    strikes: Counter = field(default_factory=Counter)
    banned: dict[int, int] = field(default_factory=dict)  # node → round of the ban

    def strike(self, node: int, count: int, round_idx: int) -> bool:
        """Add ``count`` strikes to ``node``; True when this bans it."""
        if count <= 0 or node in self.banned:
            return False
        self.strikes[node] += count
        if self.after and self.strikes[node] >= self.after:
            self.banned[node] = round_idx
            log.warning("banned node %d in round %d: %d refused or rejected messages (swarm.protocol.ban_after=%d)",
                        node, round_idx, self.strikes[node], self.after)
            return True
        return False

    def save(self, run_dir: Path, round_idx: int | None = None) -> None:
        """Write ``bans.json``; ``round_idx``: the round that changed it (a resume from an earlier
        checkpoint puts the file back as that checkpoint saved it, dgrpo.training.run_files)."""
        data = {"ban_after": self.after, "strikes": {str(n): c for n, c in sorted(self.strikes.items())},
                "banned": {str(n): r for n, r in sorted(self.banned.items())},
                **({"round": round_idx} if round_idx is not None else {})}
        (Path(run_dir) / BANS_FILE).write_text(json.dumps(data, indent=1))

    @classmethod
    def load(cls, run_dir: Path | None, after: int) -> "BanList":
        path = Path(run_dir) / BANS_FILE if run_dir is not None else None
        if path is None or not path.exists():
            return cls(after)
        data = json.loads(path.read_text())
        return cls(after, Counter({int(n): int(c) for n, c in data.get("strikes", {}).items()}),
                   {int(n): int(r) for n, r in data.get("banned", {}).items()})

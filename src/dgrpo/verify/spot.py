"""Verifier-chosen spot checks (issue 36): which messages, and which positions within them, a node checks.

A receiver that checks every message of every peer pays for m − 1 peers' traffic each round. A spot
checker checks each message with probability ``fraction`` and, inside a checked message, each token
position with probability ``position_fraction``. The choice is a keyed hash of the message:

    u = HMAC-SHA256(secret, "message" ‖ digest)  (first 8 bytes / 2⁶⁴)     checked ⇔ u < fraction

where ``secret`` is the verifier's own 32 random bytes (never sent) and ``digest`` is SHA-256 of the
message's key (node, round, prompt, index), claimed seed and token ids (:func:`rollout_digest`). The
positions of a checked message are Bernoulli(``position_fraction``) draws of a generator seeded by
HMAC(secret, "positions" ‖ digest). What the sender can and cannot do (GRAIL's verifier-chosen
challenges, one-covenant/grail): it commits to the message (its digest) before any choice is made,
and without the secret each u is, to it, a uniform draw independent of everything it controls. So
grinding the content (or the slot) to dodge a check does not work; every message it sends, poisoned
or not, is checked with probability exactly ``fraction``, and every position with ``position_fraction``
(``tests/verify/test_spot.py`` grinds for it and measures the rate within a binomial interval). Each
verifier holds its own secret: two honest nodes check independent subsets.

A fixed ``seed`` makes the secret a function of it: for reproducible simulations and tests only (a
seed in a config that peers can read lets a cheater compute the checked set).
"""

from __future__ import annotations

import hashlib
import hmac
import random
import secrets
from typing import Sequence

_SCALE = float(2 ** 64)


def rollout_digest(key: Sequence, seed: int | None, ids: Sequence[int]) -> bytes:
    """SHA-256 of what a sender commits to in one message: its key (node, round, prompt id, index), its
    claimed seed and its token ids. Returns 32 bytes."""
    text = f"{tuple(key)!r}|{seed!r}|{','.join(str(int(t)) for t in ids)}"
    return hashlib.sha256(text.encode()).digest()


class SpotChecker:
    """One verifier's choice of messages and positions to check.

    Args:
        fraction: probability in (0, 1] that a message is checked (1: every message, the full check).
        position_fraction: probability in (0, 1] that a position of a checked message is checked
            (1: every position).
        seed: None draws the secret from the OS (:func:`secrets.token_bytes`); an int derives it
            (reproducible simulations only, see the module docstring).

    Raises:
        ValueError: a fraction outside (0, 1].
    """

    def __init__(self, fraction: float = 1.0, position_fraction: float = 1.0, seed: int | None = None):
        for name, value in (("fraction", fraction), ("position_fraction", position_fraction)):
            if not 0 < value <= 1:
                raise ValueError(f"SpotChecker: {name} must be in (0, 1], got {value!r}")
        self.fraction, self.position_fraction = float(fraction), float(position_fraction)
        self._secret = (secrets.token_bytes(32) if seed is None
                        else hashlib.sha256(f"dgrpo-spot-secret|{int(seed)}".encode()).digest())

    @property
    def full(self) -> bool:
        """Whether every message and every position is checked (no spot checking)."""
        return self.fraction >= 1 and self.position_fraction >= 1

    def _uniform(self, tag: bytes, digest: bytes) -> int:
        return int.from_bytes(hmac.new(self._secret, tag + digest, hashlib.sha256).digest()[:8], "big")

    def checks(self, digest: bytes) -> bool:
        """Whether the message of ``digest`` (:func:`rollout_digest`) is checked."""
        return self.fraction >= 1 or self._uniform(b"message", digest) / _SCALE < self.fraction

    def positions(self, digest: bytes, n: int) -> list[int] | None:
        """The positions of an ``n``-token checked message to check, ascending; None: all of them.
        (May be empty when ``position_fraction`` < 1: then only the message's length rules are checked.)"""
        if self.position_fraction >= 1:
            return None
        draw = random.Random(self._uniform(b"positions", digest)).random
        return [t for t in range(n) if draw() < self.position_fraction]

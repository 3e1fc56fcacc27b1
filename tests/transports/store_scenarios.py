"""Store attacks a rank plays on another's keys (``store:R:MODE:V`` of :func:`distributed_helpers.apply_scenario`):
the issue 31 reviewer's reproductions (``results/review_31/attack_status.py``) as scenarios."""

import json
import time


def store_attack(mode: str, victim: int, world: int = 4) -> None:
    """The issue 31 reviewer's store attacks (results/review_31/attack_status.py), played by this rank from a
    thread on its own store client as soon as it joined: ``jam`` (overwrites the victim's round status marks
    with junk every millisecond), ``left`` (writes an unsigned leave mark over the victim's start-up marks),
    ``subset`` / ``subseteq`` (replaces the victim's round payloads, once each, with a frame of its first
    message; ``subseteq`` also empties its relays), ``prepend`` (appends 7 junk messages under the victim's
    round keys before it posts)."""
    import threading

    import dgrpo.transports.distributed as D
    from dgrpo.transports.framing import frame, scan

    join = D.join_group

    def join_group(cfg):
        res = join(cfg)
        import torch.distributed as dist

        store = dist.PrefixStore("dgrpo", res[0])
        if mode == "prepend":
            for r in range(2):
                store.append(f"r{r}/data/{victim}", frame(json.dumps({"messages": [{}] * 7}).encode()))
            return res
            return res

        def attack():  # (peerserve: the store carries no round data; every write here must change nothing)
            tags = [*(f"{p}{r}" for p in ("r", "eq") for r in range(3)), "role", "config", "name", "roster",
                    "startup", "done"]
            keys = [f"{t}/{what}/{n}" for t in tags for what in ("data", "status") for n in range(world)]
            keys += [f"accuse/{n}" for n in range(world)] + ["accuse"]
            t0 = time.monotonic()
            while time.monotonic() - t0 < 60:
                for k in keys:
                    if mode == "wipe":
                        store.delete_key(k)
                    else:
                        store.set(k, b"left:" if mode == "left" else b"x")
                time.sleep(0.001)

        threading.Thread(target=attack, daemon=True).start()
        return res

    D.join_group = join_group

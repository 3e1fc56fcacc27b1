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

        def attack():
            t0, done = time.monotonic(), set()
            while time.monotonic() - t0 < 60:
                if mode in ("jam", "left"):
                    keys = ([f"role/status/{victim}", f"config/status/{victim}"] if mode == "left" else
                            [f"r{r}/status/{victim}" for r in range(3)])
                    for k in keys:
                        if store.check([k]):
                            store.set(k, b"left:" if mode == "left" else b"x")
                else:
                    for tag in ("r0", "r1", "eq0", "eq1") if mode == "subseteq" else ("r0", "r1"):
                        if tag in done or not store.check([f"{tag}/status/{victim}"]):
                            continue
                        raw = store.get(f"{tag}/data/{victim}")
                        if tag.startswith("r"):
                            body = json.loads(scan(raw).frames[-1])
                            body["messages"], body["labels"] = body["messages"][:1], body["labels"][:1]
                            store.set(f"{tag}/data/{victim}", frame(json.dumps(body).encode()))
                        else:
                            store.set(f"{tag}/data/{victim}", b"{}")
                        done.add(tag)
                        print(f"replaced {tag}/data/{victim}", flush=True)
                time.sleep(0.001)

        threading.Thread(target=attack, daemon=True).start()
        return res

    D.join_group = join_group

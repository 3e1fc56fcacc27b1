"""Store attacks a rank plays on others' keys (``store:R:MODE:V`` of :func:`rank_scenarios.apply_scenario`):
the issue 31 reviewers' reproductions (``results/review_31/attack_status.py``, review r31b) as scenarios."""

import json
import time


def store_attack(mode: str, victim: int, world: int = 4) -> None:
    """The issue 31 reviewers' store attacks, played by this rank from a thread on its own store client as soon
    as it joined, on every node's round and start-up keys (the victim only for ``prepend``), every millisecond
    for 60 s: ``jam`` (junk over them), ``left`` (an unsigned leave mark over them), ``wipe`` (deletes them);
    ``prepend`` appends 7 junk messages under the victim's round keys before anyone posts. Round data is
    served by each rank (peerserve), so none of it may change anything."""
    import threading

    import dgrpo.transports.distributed as D
    from dgrpo.transports.framing import frame

    join = D.join_group

    def join_group(cfg):
        res = join(cfg)
        import torch.distributed as dist

        store = dist.PrefixStore("dgrpo", res[0])
        if mode == "prepend":
            for r in range(2):
                store.append(f"r{r}/data/{victim}", frame(json.dumps({"messages": [{}] * 7}).encode()))
            return res

        def attack():  # (peerserve: the store carries no round data; every write here must change nothing)
            tags = [*(f"{p}{r}" for p in ("r", "eq") for r in range(3)), "role", "config", "name", "roster",
                    "startup", "done"]
            keys = [f"{t}/{what}/{n}" for t in tags for what in ("data", "status") for n in range(world)]
            keys += [f"accuse/{n}" for n in range(world)] + [f"accuse/by/{n}" for n in range(world)] + ["accuse"]
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


def checkin_attack(mode: str, victim: str) -> None:
    """``checkin:R:MODE:V``, played before this rank checks in (the run needs ``swarm.protocol.roster``):
    ``abandon`` writes the old unsigned list of absent ranks naming node V (``dgrpo/join/abandoned``) and this
    rank's own signed view that V is absent, with its own mark, then checks in 1 s later; ``mark`` writes a
    check-in mark for node V signed with this rank's key (V is to start late: ``slowstart:V:S``)."""
    import dgrpo.transports.rendezvous as R
    from dgrpo.transports.checkin import ABANDONED, JOIN, vote_key

    check_in = R.check_in

    def attack(store, rank, world, timeout_s, go_on=False, keys=None, chan=None):
        v = int(victim)
        if mode == "abandon":  # (its own mark and view, signed for its launch: its server's nonce)
            store.set(ABANDONED, victim.encode())
            store.append(f"{JOIN}/{rank}", f"\n{json.dumps({'nonce': chan.nonce, 'sig': keys.sign(f'join|{rank}|{chan.nonce}')})}\n".encode())
            view = json.dumps({"absent": [v], "nonce": chan.nonce, "sig": keys.sign(f"join/view|{rank}|{v}|{chan.nonce}")})
            store.append(vote_key(rank), f"\n{view}\n".encode())
            chan.set("join/view", f"{view}\n")
            print(f"rank {rank}: wrote {ABANDONED} and a view naming node {v}", flush=True)
            time.sleep(1.0)
        else:  # (node V's launch nonce is unknown to it: any)
            store.append(f"{JOIN}/{v}", f"\n{json.dumps({'nonce': 'ab' * 16, 'sig': keys.sign(f'join|{v}|' + 'ab' * 16)})}\n".encode())
            print(f"rank {rank}: forged the check-in mark of node {v}", flush=True)
        return check_in(store, rank, world, timeout_s, go_on=go_on, keys=keys, chan=chan)

    R.check_in = attack


def slow_start(seconds: str) -> None:
    """``slowstart:R:S``: this rank starts S seconds late (within ``swarm.startup_timeout_s``)."""
    time.sleep(float(seconds))


def address_wipe(seconds: str = "60") -> None:
    """``addrwipe:R``: from the moment it joined the store (before anyone checks in), this rank deletes every other
    rank's server address record (``addr/{k}``) every millisecond for ``seconds``; its own it leaves alone."""
    import os
    import threading

    import dgrpo.transports.distributed as D

    join = D.join_group

    def join_group(cfg):
        import torch.distributed as dist

        me, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        store = dist.PrefixStore("dgrpo", dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                                                        is_master=False))

        def attack():
            end = time.monotonic() + float(seconds)
            print(f"rank {me}: deleting every other rank's addr/k every millisecond", flush=True)
            while time.monotonic() < end:
                for k in range(world):
                    if k != me:
                        store.delete_key(f"addr/{k}")
                time.sleep(0.001)

        threading.Thread(target=attack, daemon=True).start()
        return join(cfg)

    D.join_group = join_group


def address_stall(args: list[str], victim: str, seconds: str = "40") -> None:
    """``addrstall:R:V[:SECONDS]``: review r31j F1. From this rank's process start (before its CLI runs, so before
    any rank checks in), it writes over node V's address record every millisecond for ``seconds`` a record node V's
    key signed in an earlier launch (its nonce dated an hour ago; played by signing with V's key from the test's key
    folder, as rank R kept it then) whose address is a port where this rank listens and never answers: what any
    address of an earlier launch that drops packets looks like (a moved machine, a firewall). The run's config comes
    from this rank's own ``args`` (``swarm.protocol.roster``); its store client retries until the store is up."""
    import os
    import secrets
    import socket
    import threading

    from dgrpo.cli import build_parser
    from dgrpo.config import load_config
    from dgrpo.swarm.identity import Roster, key_path, load_private_key
    from dgrpo.transports.fingerprint import config_fingerprint
    from dgrpo.transports.peerserve import AddressKeys

    ns = build_parser().parse_args(args)
    cfg = load_config(ns.config, ns.overrides)
    pc, v = cfg.swarm.protocol, int(victim)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1024)  # (never accepted: a connect succeeds, nothing ever answers)
    address_stall.held = silent
    addr = f"127.0.0.1:{silent.getsockname()[1]}"
    nonce = f"{time.time_ns() - 3600 * 10**9:016x}{secrets.token_hex(8)}"  # (a launch an hour ago)
    old = AddressKeys(v, load_private_key(key_path(pc.key_dir, v)), Roster.load(pc.roster),
                      config_fingerprint(cfg)).record(addr, nonce)

    def attack():
        import datetime

        import torch.distributed as dist

        while True:
            try:
                store = dist.PrefixStore("dgrpo", dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                                                                is_master=False, timeout=datetime.timedelta(seconds=60)))
                break
            except Exception:  # noqa: BLE001 - the store is not up yet
                time.sleep(0.05)
        print(f"rank {os.environ['RANK']}: writing node {v}'s record of an earlier launch (a silent listener at "
              f"{addr}) over addr/{v}", flush=True)
        end = time.monotonic() + float(seconds)
        while time.monotonic() < end:
            store.set(f"addr/{v}", old)
            time.sleep(0.001)

    threading.Thread(target=attack, daemon=True).start()


def claim_jam(claims: str = "64", hold_s: str = "20") -> None:
    """``claimjam:R:N``: this rank never checks in; it writes a junk check-in mark and N config claims of other
    configs, signed with its own roster key and dated like launch nonces, naming a server of its own that accepts
    connections and never answers (review r31j F9), then holds still ``hold_s`` seconds and exits 9."""
    import datetime
    import os
    import socket

    import dgrpo.transports.distributed as D
    from dgrpo.transports.checkin_claims import claim_text, config_key

    def join_group(cfg):
        import torch.distributed as dist

        from dgrpo.swarm.identity import key_path, load_private_key

        me, pc = int(os.environ["RANK"]), cfg.swarm.protocol
        key = load_private_key(key_path(pc.key_dir, me))
        silent = socket.create_server(("127.0.0.1", 0), backlog=4096)  # (never accepted: connects succeed, no answer)
        addr, base = f"127.0.0.1:{silent.getsockname()[1]}", time.time_ns()
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                              timeout=datetime.timedelta(seconds=60))
        lines = []
        for i in range(int(claims)):
            fp, nonce = f"other{i}", f"{base + i:016x}{i:016x}"
            lines.append(json.dumps({"fp": fp, "addr": addr, "nonce": nonce,
                                     "sig": key.sign(claim_text(me, fp, addr, nonce)).hex()}))
        store.set(config_key(me), ("\n".join(lines) + "\n").encode())
        store.set(f"dgrpo/join/{me}", b'{"nonce": "", "sig": "00"}\n')
        print(f"rank {me}: wrote {claims} signed config claims naming a silent server; not checking in", flush=True)
        time.sleep(float(hold_s))
        raise SystemExit(9)

    D.join_group = join_group

"""Start-up attacks a rank of a test swarm plays, most of them two-faced (review r31f H4, H6, H9, r31q Q2, r31s S3;
dispatched by ``rank_scenarios.apply_scenario``). Each patches only the attacking rank's own process: what its server
serves to one reader (everything it serves is validly signed by its own key, or, for a role, what it declares), or
when it enters the process group's join."""

from __future__ import annotations

import json


def split_record(victim: str) -> None:
    """``startsplit:R:V`` (H4): R's server serves node V a second start-up record, signed by R's own key for R's own
    server launch, with the same values and another launch nonce; every other reader gets R's real one."""
    import secrets

    from dgrpo.transports.distributed import DistributedTransport
    from dgrpo.transports.signedstore import SignedStore

    original, check = SignedStore.startup_record, DistributedTransport.check_startup

    def startup_record(self, values, *server):
        real, nonce = original(self, values, *server), self.nonce
        self.nonce = secrets.token_hex(16)
        try:
            self.alt = original(self, values, *server).encode()
        finally:
            self.nonce = nonce
        return real

    def check_startup(self, protocol, timeout_s):
        key = f"startup/data/{self.rank}"
        self.chan.hook = lambda k, reader: self.signed_store.alt if k == key and reader == victim else None
        print(f"rank {self.rank}: serving node {victim} a second start-up record", flush=True)
        return check(self, protocol, timeout_s)

    SignedStore.startup_record, DistributedTransport.check_startup = startup_record, check_startup


def split_view(victim: str) -> None:
    """``twoview:R:V`` (H6): at the check-in R votes its true view (store and server) but its server serves node V
    a view, signed by R, saying nobody is absent."""
    from dgrpo.transports.checkin import CheckIn
    from dgrpo.transports.peerserve import PeerChannel

    vote, serve, alt = CheckIn._vote, PeerChannel.serve, {}

    def _vote(self, view):
        vote(self, view)
        nonce = self.chan.nonce
        alt["line"] = (json.dumps({"absent": [], "nonce": nonce, "sig": self._sig(f"join/view|{self.rank}||{nonce}")})
                       + "\n").encode()
        print(f"rank {self.rank}: voted {list(view)}; serving node {victim} the view []", flush=True)

    def two_faced(self, key, reader):
        if key == "join/view" and reader == victim and "line" in alt:
            return alt["line"]
        return serve(self, key, reader)

    CheckIn._vote, PeerChannel.serve = _vote, two_faced


def split_role(victim: str) -> None:
    """``tworole:R:V`` (H9): R's server serves node V its start-up role as ``attacker`` and every other reader as
    ``honest`` (what it declares), each signed with R's key as an honest rank signs its role."""
    from dgrpo.transports.distributed import DistributedTransport

    original = DistributedTransport.post

    def post(self, tag, payload, framed=False):
        out = original(self, tag, payload, framed)
        if tag == "role":
            keys, nonce = self.chan.keys, self.chan.nonce  # (signed as its real role is, when a roster signs it)
            other = f"attacker|{keys.sign(f'role|{self.rank}|attacker|{nonce}') if keys else ''}".encode()
            served = self.chan.values[f"role/data/{self.rank}"]
            self.chan.hook = lambda k, reader: (other if reader == victim else served) if k == f"role/data/{self.rank}" else None
            print(f"rank {self.rank}: serving node {victim} another role", flush=True)
        return out

    DistributedTransport.post = post


def split_ready(victim: str, mode: str) -> None:
    """``tworeadies:R:V:MODE`` (review r31h F6): R's server serves node V another ready confirmation than every other
    reader, signed by R's own key for this launch: ``launch``: naming another launch id; ``drop``: quoting every
    rank's start-up record but node 0's."""
    from dgrpo.transports import ranklife, startready

    original = ranklife.barrier

    def barrier(t, own, timeout_s, **kw):  # (kw: ``until``, the start-up budget's end: startgather)
        real, store = json.loads(own), t.signed_store
        launch, records = real["launch"], real["records"]
        if mode == "launch":
            launch = ("0" if launch[0] != "0" else "1") + launch[1:]
        else:
            records = {k: v for k, v in records.items() if k != "0"}
        other = json.dumps({"launch": launch, "records": records,
                            "sig": store.sign(startready._text(t.rank, launch, records))}).encode()
        t.chan.hook = lambda k, reader: other if k == f"ready/data/{t.rank}" and reader == victim else None
        print(f"rank {t.rank}: serving node {victim} a second ready confirmation ({mode})", flush=True)
        return original(t, own, timeout_s, **kw)

    ranklife.barrier = barrier


def serve_other(victim: str, key: str, value: str, signed: str = "") -> None:
    """``serveother:R:V:KEY:VALUE[:signed]`` (review r31q Q2): R's server serves node V its value ``KEY``
    (``config/data/R``: its config fingerprint; ``resume/data/R``: its resume round) as ``VALUE``; with ``signed``,
    ``VALUE|SIG`` signed by R's key for its server's launch as R signs its real value
    (:func:`dgrpo.transports.startagree.checked_values`), else the bare text. Every other reader gets the real one."""
    from dgrpo.transports.peerserve import PeerChannel

    serve, tag = PeerChannel.serve, key.split("/")[0]

    def two_faced(self, k, reader):
        if k == key and reader == victim and serve(self, k, reader) is not None:
            print(f"rank {self.rank}: serving node {victim} {key} as {value!r}", flush=True)
            if signed and self.keys is not None:
                return f"{value}|{self.keys.sign(f'{tag}|{self.rank}|{value}|{self.nonce}')}".encode()
            return value.encode()
        return serve(self, k, reader)

    PeerChannel.serve = two_faced


def view_only(readers: str, slow: str, slow_s: str) -> None:
    """``viewonly:R:READERS:SLOW:SLOW_S`` (review r31r R1, the reviewer's ``x_viewonly``): R writes its check-in view
    to no store key and serves it to ``READERS`` (dot-separated) only, and leaves the challenges of ``SLOW`` unanswered
    for its first ``SLOW_S`` seconds (they see it checked in last). One launch, one honest signed view."""
    import time

    from dgrpo.transports.checkin import CheckIn
    from dgrpo.transports.peerserve import PeerChannel

    rs, sl, serve, start = set(readers.split(".")), set(slow.split(".")), PeerChannel.serve, []

    def _vote(self, view):
        csv, nonce = ",".join(map(str, view)), self.chan.nonce
        sig = self._sig(f"join/view|{self.rank}|{csv}|{nonce}")
        self.chan.set("join/view", json.dumps({"absent": list(view), "nonce": nonce, "sig": sig}) + "\n")
        print(f"rank {self.rank}: view {list(view)} served to nodes {sorted(rs)} only, none in the store", flush=True)

    def withholding(self, key, reader):
        if key.startswith("hello/") and reader in sl:
            start[:] = start or [time.monotonic()]
            if time.monotonic() - start[0] < float(slow_s):
                return None
        if key == "join/view" and reader not in rs:
            return None
        return serve(self, key, reader)

    CheckIn._vote, PeerChannel.serve = _vote, withholding


def two_launches(victims: str, views: str = "0") -> None:
    """``twolaunch:R:VICTIMS[:VIEWS]`` (review r31r R2, the reviewer's ``x_twolaunch``): R's server proves a second
    launch nonce L2 (a second signed address record, pushed to ``VICTIMS`` in its requests) to ``VICTIMS`` and its true
    one to the others, and signs for L2 what it serves them: its role, config value, own entry of its config echo, start-up
    record and ready confirmation (and, ``VIEWS=1``, its check-in view). Every value is the same; only the launch it is
    bound to differs per reader."""
    import time

    from dgrpo.transports import peerresolve, startready
    from dgrpo.transports.peeraddr import launch_nonce
    from dgrpo.transports.peerserve import PeerChannel
    from dgrpo.transports.signedstore import SignedStore

    vs, st = set(victims.split(".")), {}
    init, serve, answers, record = PeerChannel.__init__, PeerChannel.serve, peerresolve.answers, SignedStore.startup_record

    def __init__(self, rank, *a, **k):
        init(self, rank, *a, **k)
        if self.keys is not None and "chan" not in st:
            time.sleep(0.002)  # (L2 dated after L1: a reader keeps the newest record pushed)
            st.update(L2=launch_nonce(), chan=self)
            st["R2"] = self.keys.record(self.address, st["L2"])
            print(f"rank {rank}: second launch {st['L2']} (true {self.nonce}) for nodes {sorted(vs)}", flush=True)

    def _signed(self, key, out, l2):
        tag = key.split("/")[0]
        if key in (f"role/data/{self.rank}", f"config/data/{self.rank}", f"resume/data/{self.rank}"):
            val = out.decode().partition("|")[0]
            return f"{val}|{self.keys.sign(f'{tag}|{self.rank}|{val}|{l2}')}".encode()
        if key in (f"config_seen/data/{self.rank}", f"resume_seen/data/{self.rank}"):
            rec = json.loads(out)
            v = rec[str(self.rank)][0]
            rec[str(self.rank)] = [v, self.keys.sign(f"{tag.split('_')[0]}|{self.rank}|{v}|{l2}")]
            return json.dumps(rec).encode()
        if key == "join/view" and views == "1":
            lines = []
            for line in out.decode().splitlines():
                rec = json.loads(line)
                rec["nonce"] = l2
                rec["sig"] = self.keys.sign(f"join/view|{self.rank}|{','.join(map(str, rec['absent']))}|{l2}")
                lines.append(json.dumps(rec))
            return ("\n".join(lines) + "\n").encode()
        if key == f"startup/data/{self.rank}" and "ss" in st:
            rec = json.loads(out)
            body = json.dumps(rec["values"], sort_keys=True)
            rec["server"], rec["sig"] = l2, st["ss"].sign(f"startup|{body}|{rec['nonce']}|{l2}", bound=False)
            st["mine2"] = [rec["nonce"], l2, rec["sig"]]
            return json.dumps(rec).encode()
        if key == f"ready/data/{self.rank}" and "mine2" in st:
            rec = json.loads(out)
            rec["records"][str(self.rank)] = st["mine2"]
            rec["sig"] = st["ss"].sign(startready._text(self.rank, rec["launch"], rec["records"]))
            return json.dumps(rec).encode()
        return out

    def two_faced(self, key, reader):
        if reader not in vs or self is not st.get("chan"):
            return serve(self, key, reader)
        if key.startswith("hello/"):
            return self.keys.hello(st["L2"], key[6:])
        out = serve(self, key, reader)
        return None if out is None else _signed(self, key, out, st["L2"])

    def pushed(keys, owner, addr, nonce, reader=-1, end=None, record=None):
        if str(owner) in vs and "R2" in st and record is not None:
            record = st["R2"]
        return answers(keys, owner, addr, nonce, reader, end, record)

    def startup_record(self, values, server=""):
        st["ss"] = self
        return record(self, values, server)

    PeerChannel.__init__, PeerChannel.serve, peerresolve.answers = __init__, two_faced, pushed
    SignedStore.startup_record = startup_record


def join_late(seconds: str, where: str = "torch") -> None:
    """This rank enters the process group's set-up (after its check-in) ``seconds`` late (review r31s S3): inside
    torch's ``init_process_group`` (``where="torch"``, the review kit's ``x_joinlate``), or before it in the rank's own
    start-up (``where="before"``: as a rank that comes to the join late)."""
    import time

    import torch.distributed as dist

    from dgrpo.transports import rendezvous

    owner, name = (dist, "init_process_group") if where == "torch" else (rendezvous, "join_process_group")
    if not hasattr(owner, name):  # (the code before review r31s S3: its join ran in the rank's start-up itself)
        owner, name = dist, "init_process_group"
    original = getattr(owner, name)

    def late(*args, **kwargs):
        print(f"attacker: joining the process group {seconds}s late ({where})", flush=True)
        time.sleep(float(seconds))
        return original(*args, **kwargs)

    setattr(owner, name, late)


def apply(kind: str, rest: list[str]) -> None:
    """``startsplit:R:V`` / ``twoview:R:V`` / ``tworole:R:V`` / ``tworeadies:R:V:MODE`` / ``serveother:R:V:KEY:VALUE[:signed]``
    / ``viewonly:R:READERS:SLOW:SLOW_S`` / ``twolaunch:R:VICTIMS[:VIEWS]`` / ``joinlate:R:SECONDS[:before]`` (:func:`split_record`,
    :func:`split_view`, :func:`split_role`, :func:`split_ready`, :func:`serve_other`, :func:`view_only`,
    :func:`two_launches`, :func:`join_late`)."""
    return {"startsplit": split_record, "twoview": split_view, "tworole": split_role,
            "tworeadies": split_ready, "serveother": serve_other, "viewonly": view_only,
            "twolaunch": two_launches, "joinlate": join_late}[kind](*rest)

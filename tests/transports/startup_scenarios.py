"""Two-faced start-up attacks a rank of a test swarm plays (review r31f H4, H6, H9, r31q Q2; dispatched by
``rank_scenarios.apply_scenario``). Each patches only the attacking rank's own process: what its server serves to
one reader; everything it serves is validly signed by its own key (or, for a role, what it declares)."""

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

    def barrier(t, own, timeout_s):
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
        return original(t, own, timeout_s)

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


def apply(kind: str, rest: list[str]) -> None:
    """``startsplit:R:V`` / ``twoview:R:V`` / ``tworole:R:V`` / ``tworeadies:R:V:MODE`` / ``serveother:R:V:KEY:VALUE[:signed]``
    (:func:`split_record`, :func:`split_view`, :func:`split_role`, :func:`split_ready`, :func:`serve_other`)."""
    return {"startsplit": split_record, "twoview": split_view, "tworole": split_role,
            "tworeadies": split_ready, "serveother": serve_other}[kind](*rest)

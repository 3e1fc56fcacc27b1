"""Profile test_a_connection_flood_does_not_starve_honest_reads: why do honest reads miss 5 s?"""
import http.client, os, socket, subprocess, sys, threading, time, textwrap, json
sys.path.insert(0, os.environ.get("TESTS", "tests/transports"))
from test_peerserve import SERVER, ATTACKER

def netstat():
    lines = open("/proc/net/netstat").read().splitlines()
    h, v = lines[0].split(), lines[1].split()
    d = dict(zip(h, v))
    return {k: int(d[k]) for k in ("ListenOverflows", "ListenDrops", "TCPReqQFullDrop", "TCPReqQFullDoCookies") if k in d}

def attempt(address, rank):
    host, _, port = address.rpartition(":")
    t0 = time.monotonic()
    conn = http.client.HTTPConnection(host, int(port), timeout=1.0)
    phase = "connect"
    try:
        conn.connect(); tc = time.monotonic() - t0
        phase = "request"
        conn.request("GET", "/v/r0%2Fdata", headers={"X-Dgrpo-Reader": str(rank)})
        phase = "response"
        resp = conn.getresponse(); body = resp.read()
        return ("ok", round(tc, 3), round(time.monotonic() - t0, 3))
    except Exception as e:
        return (f"{phase}:{type(e).__name__}", None, round(time.monotonic() - t0, 3))
    finally:
        conn.close()

def main(extra=""):
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    address = server.stdout.readline().strip()
    host, port = address.rsplit(":", 1)
    n0 = netstat()
    attacker = subprocess.Popen([sys.executable, "-c", ATTACKER, host, port, "8"], stdout=subprocess.PIPE, text=True)
    time.sleep(1.5)
    log = []
    def read(rank):
        for rnd in range(4):
            start = time.monotonic(); deadline = start + 5; ok = False
            while not ok and time.monotonic() < deadline:
                r = attempt(address, rank); log.append((rank, rnd, round(time.monotonic()-start, 3), r)); ok = r[0] == "ok"
                if not ok: time.sleep(0.05)
            time.sleep(0.5)
    ts = [threading.Thread(target=read, args=(k,)) for k in (1, 2, 3)]
    [t.start() for t in ts]; [t.join() for t in ts]
    opened = int(attacker.communicate(timeout=30)[0])
    server.stdin.close(); ev, ref = server.stdout.readline().split(); server.kill()
    n1 = netstat()
    from collections import Counter
    print("opened", opened, "evicted", ev, "refused", ref, "netstat delta", {k: n1[k]-n0[k] for k in n0})
    print("attempts", Counter(r[0] for *_, r in log))
    rounds = {}
    for rank, rnd, el, r in log:
        if r[0] == "ok": rounds[(rank, rnd)] = el
    print("misses", 12 - len(rounds), "max", max(rounds.values(), default=None))
    print("ok connect times", sorted(r[1] for *_, r in log if r[0] == "ok")[-8:])
    print("slow ok totals", sorted(r[2] for *_, r in log if r[0] == "ok")[-8:])
    print("fail elapsed", Counter((r[0], round(r[2], 1)) for *_, r in log if r[0] != "ok").most_common(8))
main()

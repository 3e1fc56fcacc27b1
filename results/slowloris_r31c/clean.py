"""The clean run for slowloris.py's comparison: the same config, nobody attacks."""
import sys
from common import run4
mode = sys.argv[1] if len(sys.argv) > 1 else "continue"
run4(f"/tmp/h31c-clean-{mode}", ["swarm.timeout_s=6", "swarm.startup_timeout_s=20", f"swarm.on_peer_failure={mode}",
     "swarm.protocol.ban_after=2"], "", timeout=200)

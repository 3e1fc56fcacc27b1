"""One rank of a test swarm under torchrun: the ``dgrpo`` CLI with a fault scenario applied.

Run by :func:`distributed_helpers.launch` or by torchrun; the scenario comes from DGRPO_TEST_SCENARIO.
"""

import os
import sys

import torch

torch.set_num_threads(1)

from rank_scenarios import apply_scenario  # noqa: E402  (script directory)

from dgrpo.cli import main  # noqa: E402

if __name__ == "__main__":
    apply_scenario(os.environ.get("DGRPO_TEST_SCENARIO", ""), int(os.environ["RANK"]), sys.argv[1:])
    sys.exit(main(sys.argv[1:]))

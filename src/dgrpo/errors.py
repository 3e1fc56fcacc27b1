"""The errors the command line reports as one clear line (exit code 2, or 3 for a failed peer).

They live here, away from torch and transformers, so that ``dgrpo`` can catch them without importing
either: a bad config is reported in well under a second.
"""

from __future__ import annotations


class PolicyLoadError(RuntimeError):
    """Raised when a policy cannot be found or loaded; the message says what to install or fix."""


class PeerFailure(RuntimeError):
    """A peer (named in the message) sent nothing in time, or this node was excluded by its peers."""


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read back (names the file)."""


class DeviceError(ValueError):
    """``model.device`` names a device this machine does not have (names the device and the fix)."""

"""dgrpo.hardening: model-side hardening against harmful RL (TokenBuncher seed)."""

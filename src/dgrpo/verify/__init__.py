"""Framework-neutral checks of completions that the defenses (dgrpo.defenses) plug into the swarm."""

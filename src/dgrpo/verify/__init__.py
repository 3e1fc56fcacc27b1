"""Framework-neutral checks of completions (top-k support, seeded replay, step checker, judge client) that any trainer can call; dgrpo.defenses plugs them into the swarm."""

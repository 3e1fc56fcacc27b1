"""A user's own dgrpo kinds, outside dgrpo's package: a task, an attack, a defense and TRL-style reward
functions, each reached from a config by import path (README.md here; docs/architecture.md)."""

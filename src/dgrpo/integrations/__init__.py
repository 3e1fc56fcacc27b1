"""dgrpo's checks inside other trainers and generators: :mod:`dgrpo.integrations.trl` (TRL's GRPOTrainer,
``pip install "dgrpo[trl]"``) and :mod:`dgrpo.integrations.generate` (dgrpo's seeded sampler as a
``transformers`` logits processor, so ``generate``'s completions can be replayed)."""

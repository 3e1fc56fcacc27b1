"""dgrpo's checks inside other trainers: :mod:`dgrpo.integrations.trl` (``pip install "dgrpo[trl]"``)."""

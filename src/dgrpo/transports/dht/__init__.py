"""The hivemind DHT plumbing of ``swarm.transport=hivemind`` (:mod:`dgrpo.transports.hivemind`):
its config (``config``), signed records (``records``), the DHT process (``node``) and the launch
agreement (``launch``). Only ``config`` is light; the others import hivemind (and through it torch),
so they are imported by the transport when it starts, never by a config check."""

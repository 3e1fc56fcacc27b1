"""How messages move between the processes of a swarm (the all-gather of Algorithms 1-2), one module
per ``swarm.transport``; :class:`~dgrpo.transports.base.Transport` is what every transport provides."""

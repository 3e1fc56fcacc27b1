"""dgrpo.swarm"""

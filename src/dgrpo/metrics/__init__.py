"""dgrpo.metrics"""

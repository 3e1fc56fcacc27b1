"""dgrpo.policy"""

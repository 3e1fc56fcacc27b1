"""dgrpo.rewards"""

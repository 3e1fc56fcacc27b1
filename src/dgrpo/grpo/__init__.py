"""dgrpo.grpo"""

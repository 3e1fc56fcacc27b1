"""dgrpo.robust: robust aggregation, update attacks and ensemble voting (robust FRL seed)."""

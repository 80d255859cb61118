"""edgebyoc target diana (see plugin.py)."""

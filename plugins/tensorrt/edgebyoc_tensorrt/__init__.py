"""edgebyoc target tensorrt (see plugin.py)."""

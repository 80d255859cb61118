"""edgebyoc target ``gap9``: GreenWaves GAP9's 8-core cluster and NE16 accelerator (MATCH)."""

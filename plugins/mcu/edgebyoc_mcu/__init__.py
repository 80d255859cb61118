"""edgebyoc target mcu: plain Cortex-M and RISC-V microcontrollers."""

"""Flight controllers' own firmware in the loop (``goggles.firmware.betaflight``: Betaflight's SITL)."""

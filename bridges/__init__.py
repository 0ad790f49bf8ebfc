"""Bridges: processes that turn outside systems into goggles messages.

* ``bridges.mocap``: motion capture (OptiTrack/NatNet, Vicon, Qualisys, VRPN, mock) -> ``pose/<body>``
  and ``skeleton/<name>`` on ZeroMQ and LCM (``goggles bridge mocap``).
* ``bridges.natnet_emulator``, ``bridges.qtm_emulator``: wire-level servers for tests and trials.
"""

"""Sensor models on top of the renderer's ray queries: IR beacons and time-of-flight ranges.

Contract:
    * ``BeaconSensor(scene, beacons, cameras, noise=)``: ``detect(T_WC, T_WA)`` -> detections ordered
      by camera then id; projection is the camera model's (with distortion); occlusion by ray casting
      against the static scene and the placed actors.
    * ``RangeSensor(scene, model)``: ``measure(T_WS)`` -> (n, rows, cols) ranges with REP 117 values.
    * Noise is seeded per draw (``draw_seed``): new noise every call, the same on a rerun.
"""


def draw_seed(seed: int, draw: int) -> int:
    """The noise seed of a sensor's ``draw``-th measurement (a Warp kernel's 31-bit seed)."""
    return (seed * 1_000_003 + draw) % (2**31)

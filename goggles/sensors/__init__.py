"""Sensor models on top of the renderer's ray queries: IR beacons and time-of-flight ranges.

Contract:
    * ``BeaconSensor(scene, beacons, cameras, noise=)``: ``detect(T_WC, T_WA)`` -> detections ordered
      by camera then id; projection is the camera model's (with distortion); occlusion by ray casting
      against the static scene and the placed actors. ``launch`` then ``read`` split it around a
      caller's own synchronisation (a camera group collects its images and detections together).
    * ``RangeSensor(scene, model)``: ``measure(T_WS)`` -> (n, rows, cols) ranges with REP 117 values.
    * Noise is seeded per draw (``draws.NoiseDraws``, counted on the device): new noise every call, the
      same on a rerun.
"""

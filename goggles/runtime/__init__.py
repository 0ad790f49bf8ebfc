"""Plumbing every part uses and none is about: slow steps told as they go (``progress``), device
memory checked before allocating (``device_memory``), device-to-host copies counted
(``device_copies``), recorded device work (``recorded_work``), warm host pages (``host_memory``),
signals held around libraries that swallow them (``signals``), worker processes (``processes``),
C libraries' stderr captured (``c_stderr``) and failures told once then counted (``failures``)."""

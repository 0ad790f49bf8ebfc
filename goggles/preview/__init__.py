"""The preview: a web page showing what the vehicle sees (stereo pair, third-person view, WebXR).

Contract: ``PreviewServer(FrameSource(client, vehicle, camera, scene=...), host=, port=).run(stop)``
serves ``/`` (the page) and ``/stream`` (JPEG frames over a WebSocket) until ``stop`` is set.
"""

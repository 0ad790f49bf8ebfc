"""Where goggles talks by default: the engine's ZeroMQ endpoints, LCM's group, the viewers' ports.
One place names them (the run file, the command line and clients start from here); it imports
nothing, so the command line reads it without loading the transport."""

from __future__ import annotations

from dataclasses import dataclass

#: Default LCM URL: multicast that never leaves the machine, with room for images in the receive buffer.
DEFAULT_LCM_URL = "udpm://239.255.76.67:7667?ttl=0&recv_buf_size=8388608"
#: Foxglove's WebSocket server (``--foxglove``), the port Foxglove's app opens by default.
FOXGLOVE_PORT = 8765
#: The preview page (``goggles preview``).
PREVIEW_PORT = 8080


@dataclass(frozen=True)
class ZmqEndpoints:
    """Where the engine's ZeroMQ sockets bind."""

    publish: str = "tcp://127.0.0.1:5555"
    """Outputs (PUB): clients SUB-connect here."""
    inputs: str = "tcp://127.0.0.1:5556"
    """Inputs (SUB): clients PUB-connect here to send poses and commands."""
    control: str = "tcp://127.0.0.1:5557"
    """Lockstep (ROUTER): clients REQ/DEALER-connect here."""

    def exposed(self, address: str) -> ZmqEndpoints:
        """The same ports bound on ``address`` (0.0.0.0: every interface) instead of the loopback."""
        return ZmqEndpoints(*(e.replace("127.0.0.1", address) for e in (self.publish, self.inputs, self.control)))

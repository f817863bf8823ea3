"""Multi-worker tests: a cluster of worker processes on this machine."""
import socket


def free_ports(n):
    """n TCP ports free on 127.0.0.1 now (for the workers of a TF_CONFIG cluster)."""
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports

"""A TCP relay on 127.0.0.1 in front of a server, cut at once on demand: a client of the relay
then sees what it would see if the server behind had been killed (its open connections ended
mid-answer, new ones refused). The real-server test of a server dying mid-run uses it in front of the
session's vLLM server, instead of starting and killing a server of its own (one more vLLM start:
a minute or more of both cores).

Written by hand: a few lines of sockets and threads, no library does less."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from urllib.parse import urlsplit


class Relay:
    """Forwards each connection to ``127.0.0.1:<target port>``, byte for byte, both ways."""

    def __init__(self, target_url: str) -> None:
        parts = urlsplit(target_url)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        self.cut_down = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # the listener closed: cut
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self.lock:
                if self.cut_down:
                    client.close()
                    upstream.close()
                    return
                self.sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def cut(self) -> None:
        """Refuse new connections and end the open ones at once, mid-answer where one is under
        way (shut down: the client reads the end of the connection, as when the process behind
        it dies; then closed with SO_LINGER 0, which resets whatever is left)."""
        with self.lock:
            self.cut_down = True
            with contextlib.suppress(OSError):  # wakes the accept; new connections are refused
                self.listener.shutdown(socket.SHUT_RDWR)
            self.listener.close()
            for sock in self.sockets:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                with contextlib.suppress(OSError):  # wakes the pump blocked in recv on it
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

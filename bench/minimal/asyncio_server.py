"""The minimal Python server the bench compares the wrapper with.

A raw asyncio.Protocol that calls the same handler as the wrapper and answers with its JSON
result: keep-alive, Content-Length bodies, nothing else (no logs, no context, no errors, no
pipelining). It is the floor of what an asyncio server costs per request, not a runtime.

    python3.11 asyncio_server.py PORT CODE_DIR   (imports handler.handle from CODE_DIR)
"""

import asyncio
import json
import sys

_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"


class _Connection(asyncio.Protocol):
    def __init__(self, handle):
        self._handle = handle
        self._buf = b""

    def connection_made(self, transport):
        self._transport = transport

    def data_received(self, data):
        buf = self._buf + data if self._buf else data
        while True:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                break
            length = 0
            at = buf.find(b"\r\ncontent-length:", 0, end)
            if at < 0:
                at = buf.find(b"\r\nContent-Length:", 0, end)
            if at >= 0:
                length = int(buf[at + 17:buf.find(b"\r\n", at + 2)])
            if len(buf) < end + 4 + length:
                break
            body = buf[end + 4:end + 4 + length]
            buf = buf[end + 4 + length:]
            out = json.dumps(self._handle(json.loads(body) if body else None, None)).encode()
            self._transport.write(_HEAD % (len(out), out))
        self._buf = buf


def main():
    port, code_dir = int(sys.argv[1]), sys.argv[2]
    sys.path.insert(0, code_dir)
    from handler import handle

    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(
        loop.create_server(lambda: _Connection(handle), "127.0.0.1", port, backlog=1024))
    print("ready", flush=True)
    try:
        loop.run_forever()
    finally:
        server.close()


if __name__ == "__main__":
    main()

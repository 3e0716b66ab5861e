# test/conformance/probe.py: a TCP service on the host's 127.0.0.1 that logs every connection
# to a file; the isolation tests expect no sandbox to reach it.  Prints its port, then serves.
import socket, sys
hits = sys.argv[1]
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(16)
print(s.getsockname()[1], flush=True)
while True:
    c, addr = s.accept()
    with open(hits, "a") as f:
        f.write("connection from %s\n" % (addr,))
    try:
        c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
    finally:
        c.close()

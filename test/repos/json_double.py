"""json_double.py - what the provider API test doubles (github_double.py, gitlab_double.py) share:
a quiet HTTP handler that answers JSON and reads a JSON body, and the serving on a free
loopback port written to a file once listening."""
import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class JsonHandler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, code, doc=None):
        body = b"" if doc is None else json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def body(self):
        """The request's JSON body ({} when empty), or None when it is not JSON."""
        n = int(self.headers.get("Content-Length") or 0)
        try:
            return json.loads(self.rfile.read(n) or b"{}")
        except ValueError:
            return None


def serve(portfile, handler):
    """Serve HANDLER on 127.0.0.1, any free port, written to PORTFILE once listening."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    with open(portfile + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(portfile + ".tmp", portfile)
    server.serve_forever()

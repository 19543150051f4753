#!/usr/bin/env python3
"""A backend that holds a request open: POST with "X-Hold: <name>" is
answered 201 only once the file <dir>/go-<name> exists (30 s at most);
any other request at once; with "X-Usage: <n>" its response carries
"x-usage-units: <n>" (or "<h>: <n>" with "X-Usage-Header: <h>"). For tests/e2e/t_leases.sh (requests in flight) and
t_settle.sh (the real cost of a request).
Usage: hold_backend.py <port> <dir>"""
import http.server
import os
import sys
import time

PORT, DIR = int(sys.argv[1]), sys.argv[2]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        n = int(self.headers.get("content-length") or 0)
        if n:
            self.rfile.read(n)
        name = self.headers.get("x-hold", "")
        end = time.time() + 30
        while name and not os.path.exists(os.path.join(DIR, "go-" + name)) and time.time() < end:
            time.sleep(0.02)
        body = b'{"status":"accepted"}'
        self.send_response(201)
        # (settle=: what the request really cost, as an API would say it)
        if self.headers.get("x-usage"):
            self.send_header(self.headers.get("x-usage-header", "x-usage-units"),
                             self.headers.get("x-usage"))
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()

#!/usr/bin/env python3
"""A real gRPC server and client for tests/e2e/t_grpc.sh, and a raw view of
the HTTP/2 frames of one answer.

  grpc_edge.py serve PORTFILE
      a gRPC server on 127.0.0.1 (a free port, written to PORTFILE once it
      listens): any method of service chain.Query answers the request's
      bytes, and the x-account it was given as initial metadata. No protoc:
      a generic handler with raw bytes in and out.
  grpc_edge.py call TARGET METHOD [--tls CA] [--size N] [--md NAME=VALUE]...
      one unary call through the edge (h2c, or TLS with ALPN h2 trusting
      CA); prints one JSON object: code (grpc.StatusCode name), details,
      initial and trailing metadata (name -> value), reply size.
  grpc_edge.py frames PORT PATH [NAME=VALUE]...
      the frames of stream 1 of a POST with content-type application/grpc
      over h2c, one line each: "<TYPE> [END_STREAM]" until the stream ends
      (WINDOW_UPDATE left out).

Retries are off (the client's own, and transparent ones), so that one call
is one request at the edge.
"""
import json
import os
import socket
import struct
import sys
from concurrent import futures

import grpc

SERVICE = "chain.Query"
OPTIONS = [("grpc.enable_retries", 0), ("grpc.enable_http_proxy", 0)]


def serve(portfile):
    def echo(request, context):
        md = dict(context.invocation_metadata())
        context.send_initial_metadata((("x-account", md.get("x-account", "")),))
        return request

    handler = grpc.method_handlers_generic_handler(SERVICE, {
        name: grpc.unary_unary_rpc_method_handler(echo) for name in ("Block", "Open")
    })
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), handlers=(handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    with open(portfile + ".tmp", "w") as f:
        f.write("%d\n" % port)
    os.rename(portfile + ".tmp", portfile)
    server.wait_for_termination()


def call(argv):
    target, method = argv[0], argv[1]
    ca, size, md = None, 5, []
    i = 2
    while i < len(argv):
        if argv[i] == "--tls":
            ca = argv[i + 1]
        elif argv[i] == "--size":
            size = int(argv[i + 1])
        elif argv[i] == "--md":
            md.append(tuple(argv[i + 1].split("=", 1)))
        i += 2
    if ca:
        with open(ca, "rb") as f:
            creds = grpc.ssl_channel_credentials(root_certificates=f.read())
        channel = grpc.secure_channel(target, creds, OPTIONS + [("grpc.ssl_target_name_override", "localhost")])
    else:
        channel = grpc.insecure_channel(target, OPTIONS)
    stub = channel.unary_unary(method)
    out = {"code": "OK", "details": "", "initial": {}, "trailing": {}, "size": 0}
    try:
        reply, c = stub.with_call(b"x" * size, metadata=md, timeout=10)
        out["size"] = len(reply)
    except grpc.RpcError as e:
        c = e
        out["code"] = e.code().name
        out["details"] = e.details() or ""
    out["initial"] = dict(c.initial_metadata() or ())
    out["trailing"] = dict(c.trailing_metadata() or ())
    channel.close()
    print(json.dumps(out, sort_keys=True))


def _literal(name, value):
    # HPACK "literal without indexing, new name", no Huffman: short strings.
    n, v = name.encode(), value.encode()
    assert len(n) < 127 and len(v) < 127
    return b"\x00" + bytes([len(n)]) + n + bytes([len(v)]) + v


def _frame(ftype, flags, stream, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", stream) + payload


def frames(argv):
    port, path = int(argv[0]), argv[1]
    block = b"".join(_literal(n, v) for n, v in (
        (":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "127.0.0.1"),
        ("content-type", "application/grpc"), ("te", "trailers")))
    for a in argv[2:]:
        n, v = a.split("=", 1)
        block += _literal(n.lower(), v)
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(10)
    # SETTINGS, HEADERS (END_HEADERS), then one empty gRPC message ending
    # the stream.
    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + _frame(4, 0, 0, b"") + _frame(1, 4, 1, block)
              + _frame(0, 1, 1, b"\x00\x00\x00\x00\x00"))
    names = {0: "DATA", 1: "HEADERS", 3: "RST_STREAM", 9: "CONTINUATION"}
    buf, done = b"", False
    while not done:
        data = s.recv(65536)
        if not data:
            print("EOF")
            break
        buf += data
        while len(buf) >= 9 and not done:
            length = int.from_bytes(buf[:3], "big")
            if len(buf) < 9 + length:
                break
            ftype, flags = buf[3], buf[4]
            stream = int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
            buf = buf[9 + length:]
            if ftype == 4 and not flags & 1:
                s.sendall(_frame(4, 1, 0, b""))
            if stream != 1 or ftype == 8:
                continue
            end = ftype in (0, 1) and flags & 1
            print(names.get(ftype, str(ftype)) + (" END_STREAM" if end else ""))
            done = end or ftype == 3
    s.close()


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "serve":
        serve(sys.argv[2])
    elif cmd == "call":
        call(sys.argv[2:])
    elif cmd == "frames":
        frames(sys.argv[2:])
    else:
        sys.exit("usage: grpc_edge.py serve|call|frames ...")

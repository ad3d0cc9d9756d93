#!/usr/bin/env python3
"""tests/s3/fault_proxy.py - an HTTP proxy that fails on purpose, between the
S3 client and moto, to prove its retries.

    python3 tests/s3/fault_proxy.py --listen-port P --target HOST:PORT --ready-file F
        [--fail-500 N [--fail-status S[,S...]] [--fail-html]] [--reset N]
        [--cut N [--cut-bytes B] [--cut-close]] [--only-method M] [--down-file D]
        [--stats-file S] [--log L [--log-range]]

Listens on 127.0.0.1:P (0 = a free port; the port is written to F, atomically,
once it listens). Each request is read whole (headers and Content-Length
body), then: while --fail-500 has requests left, it is answered 500 with S3's
InternalError XML (with --fail-status, the statuses given in turn, e.g.
502,503; with --fail-html, the body is a load balancer's HTML page, not XML
and without an S3 error code); else while --reset has requests left, the connection is
reset (RST: SO_LINGER 0); else while --cut has requests left, the request
is forwarded and the reply's head and the first half of its body are sent,
then the connection is reset (a transfer dying midway; with --cut-bytes B,
the first B bytes of the body rather than half; with --cut-close, the
connection is then closed cleanly (FIN) rather than reset, so that every
byte sent arrives and the client knows exactly where its transfer broke);
with --only-method, only requests of that method
(PUT, GET, ...) count for these faults and the others pass; else it is sent on verbatim (the Host header the
client signed included) to the target on a new connection and the reply
sent back. While the file D exists, every connection is reset as it is
accepted (the store is "down"). After every request, S "requests=N
fail500=N resets=N maxinflight=N" (atomically; maxinflight: the most
requests forwarded at once, to see parallel uploads). Serves until SIGTERM/SIGINT or its
parent dies. With --log, one line per request is appended to L:
METHOD TARGET HOST (as the client sent them), and with --log-range its
Range header after them ("-" when it has none).
"""
import argparse
import ctypes
import os
import signal
import socket
import struct
import sys
import threading
import time

# what nginx answers when its upstream is gone: HTML, not well-formed XML
# (<hr> is never closed), no S3 <Code>
ERROR_HTML = (b'<html>\r\n<head><title>{status}</title></head>\r\n<body>\r\n'
              b'<center><h1>{status}</h1></center>\r\n<hr><center>nginx</center>\r\n'
              b'</body>\r\n</html>\r\n')
REASONS = {500: b"Internal Server Error", 502: b"Bad Gateway", 503: b"Service Unavailable",
           504: b"Gateway Timeout"}

ERROR_500 = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code>'
             b'<Message>We encountered an internal error. Please try again.</Message>'
             b'<RequestId>fault-proxy</RequestId></Error>')

lock = threading.Lock()
state = {"requests": 0, "fail500": 0, "resets": 0, "cuts": 0, "inflight": 0, "maxinflight": 0}
args = None


def write_atomic(path, text):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def reset(sock):
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


def close_cleanly(sock):
    """FIN after what was sent, then waits (a while) for the client to close
    its side, so that no unread byte turns the close into a reset."""
    try:
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(10)
        while sock.recv(65536):
            pass
    except OSError:
        pass
    sock.close()


def read_head(sock, pending):
    """Reads up to the blank line; returns (head, rest) or (None, b'') at EOF."""
    data = pending
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None, b""
        data += chunk
    i = data.index(b"\r\n\r\n") + 4
    return data[:i], data[i:]


def header(head, name):
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == name:
            return v.strip()
    return None


def read_exact(sock, have, n):
    while len(have) < n:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("short body")
        have += chunk
    return have[:n], have[n:]


def read_chunked(sock, data):
    """A chunked body, returned raw (with its framing)."""
    out = b""
    while True:
        while b"\r\n" not in data:
            c = sock.recv(65536)
            if not c:
                raise ConnectionError("short chunked body")
            data += c
        i = data.index(b"\r\n")
        size = int(data[:i].split(b";")[0], 16)
        out += data[:i + 2]
        data = data[i + 2:]
        body, data = read_exact(sock, data, size + 2)
        out += body
        if size == 0:
            # trailers end with the blank line already read as size+2 bytes
            return out, data


def read_reply(up, method):
    """One complete response from the upstream socket (bytes)."""
    data = b""
    while True:
        head, data = read_head(up, data)
        if head is None:
            raise ConnectionError("upstream closed")
        status = int(head.split(b" ", 2)[1])
        if 100 <= status < 200:
            continue  # 100 Continue: the proxy already has the body
        break
    if method == b"HEAD" or status in (204, 304):
        return head
    te = header(head, b"transfer-encoding")
    if te and b"chunked" in te.lower():
        body, _ = read_chunked(up, data)
        return head + body
    cl = header(head, b"content-length")
    if cl is not None:
        body, _ = read_exact(up, data, int(cl))
        return head + body
    while True:  # until the upstream closes
        c = up.recv(65536)
        if not c:
            return head + data
        data += c


def stats():
    if args.stats_file:
        write_atomic(args.stats_file, "requests={requests} fail500={fail500} resets={resets} "
                     "maxinflight={maxinflight} cuts={cuts}\n".format(**state))


def serve(conn):
    pending = b""
    try:
        while True:
            head, pending = read_head(conn, pending)
            if head is None:
                return
            method = head.split(b" ", 1)[0]
            cl = header(head, b"content-length")
            body = b""
            if header(head, b"expect") and cl:
                conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            if cl is not None:
                body, pending = read_exact(conn, pending, int(cl))
            with lock:
                if args.log:
                    with open(args.log, "ab") as f:
                        f.write(head.split(b" ", 2)[0] + b" " + head.split(b" ", 2)[1] + b" " +
                                (header(head, b"host") or b"") +
                                (b" " + (header(head, b"range") or b"-") if args.log_range
                                 else b"") + b"\n")
                state["requests"] += 1
                if args.only_method and method != args.only_method.encode():
                    action = "forward"
                elif args.fail_500 > 0:
                    args.fail_500 -= 1
                    fail_status = args.fail_status[state["fail500"] % len(args.fail_status)]
                    state["fail500"] += 1
                    action = "500"
                elif args.reset > 0:
                    args.reset -= 1
                    state["resets"] += 1
                    action = "reset"
                elif args.cut > 0:
                    args.cut -= 1
                    state["cuts"] += 1
                    action = "cut"
                else:
                    action = "forward"
                stats()
            if action == "500":
                code = str(fail_status).encode()
                if args.fail_html:
                    ctype = b"text/html"
                    page = ERROR_HTML.replace(b"{status}", code + b" " +
                                              REASONS.get(fail_status, b"Error"))
                else:
                    ctype, page = b"application/xml", ERROR_500
                conn.sendall(b"HTTP/1.1 " + code + b" " + REASONS.get(fail_status, b"Error") +
                             b"\r\nContent-Type: " + ctype + b"\r\nContent-Length: " +
                             str(len(page)).encode() + b"\r\n\r\n" + page)
                continue
            if action == "reset":
                reset(conn)
                return
            host, port = args.target.rsplit(":", 1)
            with lock:
                state["inflight"] += 1
                state["maxinflight"] = max(state["maxinflight"], state["inflight"])
            try:
                with socket.create_connection((host, int(port)), timeout=60) as up:
                    up.sendall(head + body)
                    reply = read_reply(up, method)
            finally:
                with lock:
                    state["inflight"] -= 1
                    stats()
            if action == "cut":
                i = reply.index(b"\r\n\r\n") + 4
                keep = (len(reply) - i) // 2 if args.cut_bytes is None else args.cut_bytes
                conn.sendall(reply[:i + keep])
                if args.cut_close:
                    close_cleanly(conn)
                else:
                    reset(conn)
                return
            conn.sendall(reply)
    except (OSError, ConnectionError, ValueError, IndexError):
        pass
    finally:
        try:
            conn.close()
        except OSError:
            pass


def die_with_parent():
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    ppid = os.getppid()

    def watch():
        while os.getppid() == ppid:
            time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, daemon=True).start()


def main():
    global args
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen-port", type=int, default=0)
    ap.add_argument("--target", required=True)
    ap.add_argument("--ready-file", required=True)
    ap.add_argument("--fail-500", type=int, default=0)
    ap.add_argument("--fail-status", default="500",
                    type=lambda v: [int(x) for x in v.split(",")])
    ap.add_argument("--fail-html", action="store_true")
    ap.add_argument("--reset", type=int, default=0)
    ap.add_argument("--cut", type=int, default=0)
    ap.add_argument("--cut-bytes", type=int)
    ap.add_argument("--cut-close", action="store_true")
    ap.add_argument("--only-method")
    ap.add_argument("--down-file")
    ap.add_argument("--stats-file")
    ap.add_argument("--log")
    ap.add_argument("--log-range", action="store_true")
    args = ap.parse_args()
    die_with_parent()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    signal.signal(signal.SIGINT, lambda *_: os._exit(0))

    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", args.listen_port))
    ls.listen(64)
    stats()
    write_atomic(args.ready_file, f"{ls.getsockname()[1]}\n")
    while True:
        conn, _ = ls.accept()
        if args.down_file and os.path.exists(args.down_file):
            reset(conn)
            continue
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())

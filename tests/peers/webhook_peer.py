"""Courrier's webhook test peer (run from the CI venv, which has `standardwebhooks`).

serve PORT CERT KEY LOG: an HTTPS receiver on 127.0.0.1:PORT with the given certificate. Every
POST is appended to LOG as one JSON line {path, headers, body, status}. The path decides the
answer: /fail-once answers 500 the first time it sees an X-Svc-Delivery and 200 after; /redirect
answers 302 to /ok; /gone answers 410; anything else 200.

verify SECRET: reads one logged request (JSON) on stdin and prints what the Standard Webhooks
reference verifier and a plain HMAC of the raw body keyed with the whole secret string make of it: the delivery as received, with its body tampered,
with a wrong secret, and six minutes after it was signed.
"""
import base64
import datetime as dt
import hashlib
import hmac
import json
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def serve(port, cert, key, log):
    seen = set()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_POST(self):
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length)
            body = raw.decode()
            delivery = self.headers.get("X-Svc-Delivery", "")
            with lock:
                first = delivery not in seen
                seen.add(delivery)
            extra = {}
            if self.path.startswith("/fail-once") and first:
                status = 500
            elif self.path.startswith("/redirect"):
                status = 302
                extra["Location"] = "https://127.0.0.1:%d/ok" % port
            elif self.path.startswith("/gone"):
                status = 410
            else:
                status = 200
            record = {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                      "body": body, "body_b64": base64.b64encode(raw).decode(), "status": status}
            with lock, open(log, "a") as f:
                f.write(json.dumps(record) + "\n")
                f.flush()
            self.send_response(status)
            for k, v in extra.items():
                self.send_header(k, v)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    server.serve_forever()


def verify(secret):
    from standardwebhooks import webhooks
    from standardwebhooks.webhooks import Webhook, WebhookVerificationError

    req = json.load(sys.stdin)
    headers, body = req["headers"], req["body"]

    def check(wh, data, hdrs):
        try:
            wh.verify(data, hdrs)
            return "ok"
        except WebhookVerificationError as e:
            return str(e)

    out = {"as_received": check(Webhook(secret), body, headers)}
    out["tampered_body"] = check(Webhook(secret), body.replace("}", " }", 1), headers)
    other = "whsec_" + base64.b64encode(b"another secret, 32 bytes long!!!").decode()
    out["wrong_secret"] = check(Webhook(other), body, headers)

    real = dt.datetime

    class Later(real):
        @classmethod
        def now(cls, tz=None):
            return real.now(tz) + dt.timedelta(minutes=6)

    webhooks.datetime = Later
    try:
        out["six_minutes_later"] = check(Webhook(secret), body, headers)
    finally:
        webhooks.datetime = real
    # The contract's X-Svc-Signature, as a receiver that read only mailing-service.md checks it: the
    # HMAC-SHA256 of the raw body (the bytes received) keyed with the webhook secret as creation
    # returned it, whsec_ and all.
    raw = base64.b64decode(req["body_b64"])
    expected = "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()
    out["svc_signature"] = "ok" if hmac.compare_digest(expected, headers.get("x-svc-signature", "")) else "mismatch"
    # The same HMAC keyed with the decoded part (Standard Webhooks' key) must not match: a receiver
    # of the contract would reject such deliveries.
    decoded = base64.b64decode(secret[len("whsec_"):])
    other = "sha256=" + hmac.new(decoded, raw, hashlib.sha256).hexdigest()
    out["svc_signature_with_decoded_key"] = "ok" if hmac.compare_digest(other, headers.get("x-svc-signature", "")) else "mismatch"
    print(json.dumps(out))


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5])
    elif sys.argv[1] == "verify":
        verify(sys.argv[2])

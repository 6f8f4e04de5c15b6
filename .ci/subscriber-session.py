"""Opens a subscriber session on a running server the way a subscriber does, for the fuzzing pass
over the /api/v1/me routes: subscribes ADDRESS to the list with the admin KEY, asks for a login
link, reads it from the SMTP sink's MAILDIR, opens the session, and prints two lines: the cookie
(`svc_subscriber=...`) and the session's CSRF token.

usage: subscriber-session.py BASE_URL KEY ADDRESS MAILDIR
"""
import email
import email.policy
import json
import pathlib
import re
import sys
import time
import urllib.request


def call(base, method, path, body=None, headers=None):
    req = urllib.request.Request(base + path, method=method, data=json.dumps(body).encode() if body else None,
                                 headers={"content-type": "application/json", **(headers or {})})
    with urllib.request.urlopen(req) as resp:
        return resp.status, resp.headers, json.loads(resp.read() or b"null")


def main():
    base, key, address, maildir = sys.argv[1:5]
    call(base, "POST", "/api/v1/domains/example.org/lists/news/members", {"email": address},
         {"authorization": f"Bearer {key}"})
    call(base, "POST", "/api/v1/me/login-link", {"email": address})
    deadline = time.time() + 20
    token = None
    while token is None:
        for path in pathlib.Path(maildir).glob("*/*"):
            msg = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
            found = re.search(r"/p/me/login/([A-Za-z0-9_-]+)", msg.get_body().get_content())
            if found:
                token = found.group(1)
        if token is None:
            if time.time() > deadline:
                sys.exit("no login link arrived")
            time.sleep(0.1)
    _, headers, body = call(base, "POST", "/api/v1/me/session", {"token": token})
    print(headers["set-cookie"].split(";")[0])
    print(body["data"]["csrf_token"])


if __name__ == "__main__":
    main()

"""Verifies a message's DKIM signature with dkimpy (PyPI), the reference verifier the tests use:
the selector's TXT record is given on the command line instead of being looked up in DNS.

    python dkim_verify.py MESSAGE_FILE 'v=DKIM1; k=rsa; p=...'

Prints "ok" and exits 0 when the signature verifies, prints "fail" and exits 1 otherwise.
"""
import sys

import dkim


def main():
    message = open(sys.argv[1], "rb").read()
    record = sys.argv[2].encode()
    # aiosmtpd's Maildir stores LF line ends; the signed form has CRLF.
    message = message.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
    ok = dkim.verify(message, dnsfunc=lambda name, timeout=5: record)
    print("ok" if ok else "fail")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

"""Signs a message with dkimpy (PyPI), the reference DKIM implementation the tests use, as a
poster's own mail server would before the message reaches the list:

    python dkim_sign.py MESSAGE_FILE DOMAIN SELECTOR PRIVATE_KEY_PEM

Prints the message with its DKIM-Signature field first (relaxed/relaxed, rsa-sha256).
"""
import sys

import dkim


def main():
    message = open(sys.argv[1], "rb").read()
    domain, selector = sys.argv[2].encode(), sys.argv[3].encode()
    key = open(sys.argv[4], "rb").read()
    signature = dkim.sign(
        message,
        selector,
        domain,
        key,
        canonicalize=(b"relaxed", b"relaxed"),
        include_headers=[b"from", b"to", b"subject", b"message-id", b"date"],
    )
    sys.stdout.buffer.write(signature + message)


if __name__ == "__main__":
    main()

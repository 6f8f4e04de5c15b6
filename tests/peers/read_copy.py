"""Reads a delivered copy with Python's own `email` package, a reader that shares nothing with the
server's (mail-builder writes the copies): what a member's mail client would show.

    python read_copy.py MESSAGE_FILE

Prints a JSON object: the decoded `Subject`, the `From` display name and address, the `List-Id`
as decoded, the content type, the longest line in bytes, any defects the parser found, and per
leaf part its content type and decoded text.
"""
import email
import email.policy
import json
import sys


def main():
    with open(sys.argv[1], "rb") as f:
        raw = f.read()
    message = email.message_from_bytes(raw, policy=email.policy.default)
    sender = message["From"].addresses[0]
    parts = []
    defects = [type(d).__name__ for d in message.defects]
    for part in message.walk():
        defects += [type(d).__name__ for d in part.defects]
        if part.is_multipart():
            continue
        parts.append({"content_type": part.get_content_type(), "text": part.get_content()})
    print(json.dumps({
        "subject": str(message["Subject"]),
        "from_name": sender.display_name,
        "from_address": sender.addr_spec,
        "list_id": str(message["List-Id"]),
        "content_type": message.get_content_type(),
        "longest_line": max(len(line) for line in raw.splitlines()),
        "defects": defects,
        "parts": parts,
    }))


if __name__ == "__main__":
    main()

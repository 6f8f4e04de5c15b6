"""Lists a message's leaf MIME parts with Python's own `email` package, a reader independent of
the server's (mail-parser), so a test checks what a member's mail client would find.

    python mime_parts.py MESSAGE_FILE

Prints a JSON array: per leaf part its content type, disposition, filename, Content-ID (without
angle brackets), its decoded bytes in hex, and for text parts the decoded text.
"""
import email
import email.policy
import json
import sys


def main():
    with open(sys.argv[1], "rb") as f:
        message = email.message_from_binary_file(f, policy=email.policy.default)
    parts = []
    for part in message.walk():
        if part.is_multipart():
            continue
        payload = part.get_payload(decode=True) or b""
        content_id = (part.get("Content-ID") or "").strip().strip("<>") or None
        entry = {
            "content_type": part.get_content_type(),
            "disposition": part.get_content_disposition(),
            "filename": part.get_filename(),
            "content_id": content_id,
            "hex": payload.hex(),
        }
        if part.get_content_maintype() == "text":
            entry["text"] = part.get_content()
        parts.append(entry)
    print(json.dumps(parts))


if __name__ == "__main__":
    main()

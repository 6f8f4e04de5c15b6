"""Reference clients for bench-credentials, measured against the same servers as courrier.

  mail_clients.py fill PORT CAFILE USER PASSWORD N FROM LIST     APPEND N posts to INBOX
  mail_clients.py drain PORT CAFILE USER PASSWORD                fetch and delete every message,
                                                                 one at a time (prints the count)
  mail_clients.py submit PORT CAFILE USER PASSWORD N SIZE TO     N messages of about SIZE bytes over
                                                                 one authenticated TLS session

Every session is TLS from the first byte, verified against CAFILE.
"""
import imaplib
import smtplib
import ssl
import sys
import time

mode, port, cafile, user, password = sys.argv[1:6]
ctx = ssl.create_default_context(cafile=cafile)

if mode == "fill":
    n, sender, to = int(sys.argv[6]), sys.argv[7], sys.argv[8]
    m = imaplib.IMAP4_SSL("127.0.0.1", int(port), ssl_context=ctx)
    m.login(user, password)
    for i in range(n):
        msg = ("From: %s\r\nTo: %s\r\nSubject: Post %d\r\nMessage-ID: <bench-%d-%d@example.net>\r\n"
               "Date: Thu, 26 Nov 2026 09:00:00 +0000\r\n\r\n%s\r\n") % (
            sender, to, i, i, time.time_ns(), "Bonjour. " * 60)
        typ, data = m.append("INBOX", None, None, msg.encode())
        assert typ == "OK", data
    m.logout()
elif mode == "drain":
    m = imaplib.IMAP4_SSL("127.0.0.1", int(port), ssl_context=ctx)
    m.login(user, password)
    m.select("INBOX")
    typ, data = m.uid("SEARCH", None, "ALL")
    uids = data[0].split()
    for uid in uids:
        typ, msg = m.uid("FETCH", uid, "(BODY.PEEK[])")
        assert typ == "OK" and msg[0] is not None, msg
        m.uid("STORE", uid, "+FLAGS.SILENT", "(\\Deleted)")
        m.uid("EXPUNGE", uid)
    m.logout()
    print(len(uids))
elif mode == "submit":
    n, size, to = int(sys.argv[6]), int(sys.argv[7]), sys.argv[8]
    line = ("Bonjour. " * 8)[:70] + "\r\n"
    body = (line * (size // len(line) + 1))[:size]
    s = smtplib.SMTP_SSL("127.0.0.1", int(port), context=ctx)
    s.login(user, password)
    for i in range(n):
        msg = "From: bench@example.org\r\nTo: %s\r\nSubject: Bench %d\r\n\r\n%s\r\n" % (to, i, body)
        s.sendmail("bench@example.org", [to], msg.encode())
    s.quit()
else:
    sys.exit("unknown mode " + mode)

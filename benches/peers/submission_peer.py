"""A submission server for courrier's tests and benchmark: aiosmtpd requiring AUTH (PLAIN or
LOGIN) of one account, over TLS from the first byte ("tls"), after STARTTLS ("starttls"), or
offering no TLS at all ("plain": a server that refuses STARTTLS, which courrier must not use).
Each message is written to a Maildir with the authenticated login in an X-Peer-Auth header.
With a throttle file present, MAIL FROM is answered 451 (a provider's rate limit).

usage: submission_peer.py PORT MODE CERT KEY USER PASSWORD MAILDIR THROTTLE_FILE
"""
import asyncio
import mailbox
import os
import ssl
import sys

from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword

port, mode, cert, key, user, password, maildir, throttle = sys.argv[1:9]
box = mailbox.Maildir(maildir, create=True)


def authenticator(server, session, envelope, mechanism, auth_data):
    ok = isinstance(auth_data, LoginPassword) and auth_data.login.decode() == user \
        and auth_data.password.decode() == password
    return AuthResult(success=ok, handled=False, auth_data=auth_data if ok else None)


class Handler:
    async def handle_MAIL(self, server, session, envelope, address, mail_options):
        if os.path.exists(throttle):
            return "451 4.7.0 rate limit exceeded, slow down"
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        login = session.auth_data.login.decode() if isinstance(session.auth_data, LoginPassword) else "-"
        head = "X-Peer-Auth: %s\r\nX-Peer-Rcpt: %s\r\n" % (login, ",".join(envelope.rcpt_tos))
        box.add(head.encode() + envelope.original_content)
        return "250 OK queued"


def context():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    return ctx


def factory():
    common = dict(authenticator=authenticator, auth_required=True, hostname="submission.test")
    if mode == "starttls":
        return SMTP(Handler(), tls_context=context(), require_starttls=True, auth_require_tls=True, **common)
    return SMTP(Handler(), auth_require_tls=False, **common)


async def main():
    loop = asyncio.get_running_loop()
    server = await loop.create_server(factory, "127.0.0.1", int(port),
                                      ssl=context() if mode == "tls" else None)
    async with server:
        await server.serve_forever()


asyncio.run(main())

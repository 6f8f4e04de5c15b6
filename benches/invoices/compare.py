#!/usr/bin/env python3
"""Invoice extraction accuracy and time per page: Courrier (a release server, profile=invoice)
against invoice2data (PyPI, its 215 bundled templates) on the same files of fixtures/invoices/,
in the same run, scored by the rules of tests/src/invoices.rs.

    cargo build --release -p courrier-cli
    python3 -m venv /tmp/i2d && /tmp/i2d/bin/pip install invoice2data
    /tmp/i2d/bin/python benches/invoices/compare.py [--smoke] [--courrier target/release/courrier]

invoice2data reads PDFs with pdftotext and images with the tesseract CLI (its `tesseract` input
module); it only returns fields when one of its templates matches a document.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import unicodedata
import urllib.request
import uuid

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIX = os.path.join(ROOT, "fixtures", "invoices")
SETS = [
    ("Factur-X, embedded XML", "facturx", ".pdf"),
    ("Factur-X pages (JPEG, no XML)", "facturx", ".jpg"),
    ("invoice2data compare set", "invoice2data", ".pdf"),
    ("generated text PDFs", "generated", ".pdf"),
    ("generated scans and photos", "generated", ".jpg"),
    # The ZUGFeRD corpus's pages through the text path, their XML removed (its fields are the truth).
    ("ZUGFeRD corpus pages as text, XML removed", "zugferd-text", ".pdf"),
    # Issue 17's European set (fixtures/invoices/europe.py): developed on dev, reported on held-out.
    ("Europe dev, text PDFs", "europe/dev", ".pdf"),
    ("Europe dev, scans", "europe/dev", ".jpg"),
    ("Europe held-out, text PDFs", "europe/held-out", ".pdf"),
    ("Europe held-out, scans", "europe/held-out", ".jpg"),
]
I2D_NAMES = {"amount": "amount", "amount_untaxed": "amount_untaxed", "date": "date", "date_due": "due_date",
              "invoice_number": "invoice_number", "vat": "supplier_numtva", "iban": "iban", "currency": "currency",
              "siren": "supplier_siret", "issuer": "supplier_name", "partner_name": "supplier_name"}


def alnum(s):
    s = unicodedata.normalize("NFKD", str(s))
    return "".join(c for c in s if c.isalnum() and not unicodedata.combining(c)).lower()


def is_amount(f):
    return f in ("amount", "amount_untaxed", "amount_tax", "exo_tax_base", "eco_part", "delivery_untaxed") \
        or f.startswith("value_tax") or f.startswith("amount_tax")


def matches(field, expected, got, credit_note):
    if got is None or got == "":
        return False
    if is_amount(field):
        try:
            e, g = float(expected), float(got)
        except ValueError:
            return False
        return abs(abs(e) - abs(g)) < 0.005 if credit_note else abs(e - g) < 0.005
    e, g = alnum(expected), alnum(got)
    if field == "supplier_name":
        return len(e) >= 3 and len(g) >= 3 and (e in g or g in e)
    if field == "supplier_siret":
        return e != "" and g.startswith(e)
    return e == g


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Courrier:
    def __init__(self, exe):
        self.data = tempfile.mkdtemp()
        self.port = free_port()
        env = dict(os.environ, COURRIER_LISTEN=f"127.0.0.1:{self.port}", COURRIER_LOG="warn")
        self.proc = subprocess.Popen([exe, "--data-dir", self.data, "serve"], env=env, stderr=subprocess.DEVNULL)
        for _ in range(200):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v1/system/health", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        subprocess.run([exe, "--data-dir", self.data, "user", "create", "--email", "bench@example.org", "--password-stdin"],
                       input=b"bench passphrase long enough 42\n", check=True, stdout=subprocess.DEVNULL)
        self.key = subprocess.run([exe, "--data-dir", self.data, "create-api-key", "--email", "bench@example.org", "--scope", "user",
                                   "--perms", "read", "--name", "bench", "--rate-limit-per-min", "100000"],
                                  check=True, capture_output=True, text=True).stdout.strip()

    def meta(self, path, lang):
        boundary = uuid.uuid4().hex
        with open(path, "rb") as f:
            data = f.read()
        body = b""
        for k, v in (("lang", lang), ("profile", "invoice")):
            body += f"--{boundary}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n".encode()
        body += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"pdf\"; filename=\"{os.path.basename(path)}\"\r\n"
                 f"Content-Type: application/octet-stream\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/api/ocrs", data=body, method="POST", headers={
            "Authorization": f"Bearer {self.key}", "Content-Type": f"multipart/form-data; boundary={boundary}"})
        with urllib.request.urlopen(req, timeout=300) as r:
            meta = json.load(r)["meta"]
        return meta if isinstance(meta, dict) else {}

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


class Invoice2data:
    def __init__(self):
        import logging
        logging.disable(logging.CRITICAL)
        from invoice2data import extract_data
        from invoice2data.extract.loader import read_templates
        from invoice2data.input import pdftotext, tesseract
        self.extract, self.templates = extract_data, read_templates()
        self.pdf, self.image = pdftotext, tesseract

    def meta(self, path, lang):
        module = self.pdf if path.endswith(".pdf") else self.image
        try:
            out = self.extract(path, templates=self.templates, input_module=module) or {}
        except Exception:  # noqa: BLE001 — a crash on one document counts as nothing found
            out = {}
        meta = {}
        for k, v in out.items():
            if k in I2D_NAMES and I2D_NAMES[k] not in meta:
                if hasattr(v, "strftime"):
                    v = v.strftime("%Y-%m-%d")
                meta[I2D_NAMES[k]] = str(v)
        return meta


def run(tool, cases, misses=None):
    per_field, seconds, matched = {}, 0.0, 0
    per_lang = {}
    for path, truth in cases:
        t = time.perf_counter()
        meta = tool.meta(path, truth.get("upload_lang", truth.get("lang", "fr")))
        seconds += time.perf_counter() - t
        matched += bool(meta)
        for field, expected in truth["meta"].items():
            ok = matches(field, expected, meta.get(field), truth.get("credit_note", False))
            r, n = per_field.get(field, (0, 0))
            per_field[field] = (r + ok, n + 1)
            r, n = per_lang.get(truth.get("lang", "fr"), (0, 0))
            per_lang[truth.get("lang", "fr")] = (r + ok, n + 1)
            if not ok and misses is not None:
                misses.append(f"{os.path.basename(path)} {field}: expected {expected!r}, got {meta.get(field)!r}")
    return per_field, seconds, matched, per_lang


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--smoke", action="store_true", help="one document per set")
    ap.add_argument("--courrier", default=os.path.join(ROOT, "target", "release", "courrier"))
    ap.add_argument("--sets", default="", help="only the sets whose title contains this text")
    ap.add_argument("--misses", action="store_true", help="list Courrier's wrong fields (for development, on dev sets)")
    ap.add_argument("--no-invoice2data", action="store_true", help="Courrier only")
    args = ap.parse_args()
    courrier = Courrier(args.courrier)
    i2d = None if args.no_invoice2data else Invoice2data()
    try:
        for title, folder, ext in SETS:
            if args.sets not in title:
                continue
            d = os.path.join(FIX, folder)
            names = sorted(n for n in os.listdir(d) if n.endswith(ext))
            if args.smoke:
                names = names[:1]
            cases = []
            for n in names:
                with open(os.path.join(d, n[: -len(ext)] + ".json")) as f:
                    cases.append((os.path.join(d, n), json.load(f)))
            misses = [] if args.misses else None
            ours, t_ours, _, lang_ours = run(courrier, cases, misses)
            if i2d is None:
                theirs, t_theirs, found, lang_theirs = {}, 0.0, 0, {}
            else:
                theirs, t_theirs, found, lang_theirs = run(i2d, cases)
            total = lambda pf: (sum(r for r, _ in pf.values()), sum(n for _, n in pf.values()))
            (ro, no), (rt, nt) = total(ours), total(theirs)
            print(f"\n### {title}: {len(cases)} documents")
            print(f"| field | Courrier | invoice2data |\n|---|---|---|")
            for field in sorted(ours):
                a, n = ours[field]
                b, _ = theirs.get(field, (0, n))
                print(f"| {field} | {a}/{n} ({100 * a / n:.0f}%) | {b}/{n} ({100 * b / n:.0f}%) |")
            print(f"| **all fields** | **{ro}/{no} ({100 * ro / max(no, 1):.1f}%)** | **{rt}/{nt} ({100 * rt / max(nt, 1):.1f}%)** |")
            print(f"| time per page (s) | {t_ours / len(cases):.2f} | {t_theirs / len(cases):.2f} |")
            print(f"| documents a template matched | n/a (no templates) | {found}/{len(cases)} |")
            if len(lang_ours) > 1:
                print(f"\n| {title}: language | Courrier | invoice2data |\n|---|---|---|")
                for lang in sorted(lang_ours):
                    a, n = lang_ours[lang]
                    b, _ = lang_theirs.get(lang, (0, n))
                    print(f"| {lang} | {a}/{n} ({100 * a / n:.1f}%) | {b}/{n} ({100 * b / n:.1f}%) |")
            for m in misses or []:
                print(f"   miss: {m}")
    finally:
        courrier.stop()


if __name__ == "__main__":
    sys.exit(main())

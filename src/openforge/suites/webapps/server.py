"""OpenForge's bundled local web apps: a shop, a mail client, a booking form and a docs wiki.

Shipped into the sandbox as a zipapp (:mod:`openforge.guest`) and started there by the
browser environment server (standard library only: ``http.server`` and ``sqlite3``). All
four apps are served by one process on the sandbox's loopback, under ``/shop/``,
``/mail/``, ``/booking/`` and ``/wiki/``. They are plain server-rendered HTML with forms:
every change an agent makes (an order, a sent mail, a booking, a page edit) is a POST that
the server writes to its SQLite database (``--db``), so a task's verifier reads the outcome
from the app's own state after the agent has stopped, not from what the page shows.

The database is created with fixed seed data on first start; :data:`SCHEMA` documents the
tables the verifiers' queries read.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import os
import sqlite3
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from openforge.guest.common import serve_until_term

SCHEMA = """
CREATE TABLE products (slug TEXT PRIMARY KEY, name TEXT, price_cents INTEGER,
  category TEXT, stock INTEGER);
CREATE TABLE cart (slug TEXT PRIMARY KEY, qty INTEGER);
CREATE TABLE orders (id INTEGER PRIMARY KEY, name TEXT, address TEXT, total_cents INTEGER);
CREATE TABLE order_items (order_id INTEGER, slug TEXT, qty INTEGER);
CREATE TABLE messages (id INTEGER PRIMARY KEY, folder TEXT, sender TEXT, recipient TEXT,
  subject TEXT, body TEXT, starred INTEGER DEFAULT 0, in_reply_to INTEGER);
CREATE TABLE bookings (id INTEGER PRIMARY KEY, name TEXT, day TEXT, time TEXT,
  party INTEGER, status TEXT);
CREATE TABLE pages (slug TEXT PRIMARY KEY, title TEXT, body TEXT, revision INTEGER);
"""

ME = "alex@example.org"
PRODUCTS = [
    ("blue-mug", "Blue Mug", 1200, "kitchen", 8),
    ("red-mug", "Red Mug", 1200, "kitchen", 5),
    ("tea-kettle", "Tea Kettle", 3450, "kitchen", 3),
    ("desk-lamp", "Desk Lamp", 2999, "office", 4),
    ("notebook", "Notebook A5", 450, "office", 30),
    ("fountain-pen", "Fountain Pen", 2200, "office", 6),
    ("wool-socks", "Wool Socks", 900, "clothing", 12),
    ("rain-jacket", "Rain Jacket", 7900, "clothing", 2),
]
MESSAGES = [
    ("inbox", "carol@example.org", ME, "Budget for Q1", "Can you review the Q1 budget by Friday?"),
    ("inbox", "dan@example.org", ME, "Lunch on Thursday?", "Are you free for lunch on Thursday?"),
    ("inbox", "news@shop.example", ME, "Weekly newsletter", "This week: new mugs and lamps."),
    ("inbox", "erin@example.org", ME, "Server keys", "The staging server listens on port 8443."),
    ("sent", ME, "carol@example.org", "Re: Offsite", "Booked the room for the offsite."),
]
DAYS = ["2026-12-10", "2026-12-11", "2026-12-12", "2026-12-13"]
TIMES = ["12:00", "13:00", "18:00", "19:00", "20:00"]
BOOKINGS = [("Grace Hopper", "2026-12-11", "19:00", 2, "confirmed")]
PAGES = [
    ("home", "Home", "Welcome to the team wiki. See Deploy, Onboarding and Style Guide."),
    ("deploy", "Deploy", "Deploy with release v1.2 using make deploy. Staging runs on port 8443."),
    ("onboarding", "Onboarding", "New starters get a laptop on day one and meet their buddy."),
    ("style-guide", "Style Guide", "Use sentence case in headings. Line length is 100."),
]

_CSS = """body{font:15px sans-serif;margin:0}header{background:#234;color:#fff;padding:8px 16px}
header a{color:#fff;margin-right:12px}main{padding:12px 16px}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:4px 8px}label{display:block;margin:6px 0}
.note{color:#060}.err{color:#a00}"""
# Focus the element marked autofocus: the attribute alone is ignored after some navigations.
# A window that gains focus later (a browser driven over DevTools) gives it back to that field.
_FOCUS = (
    "<script>var a=document.querySelector('[autofocus]');if(a){a.focus();"
    "addEventListener('focus',function(){if(document.activeElement===document.body)a.focus()})}"
    "</script>"
)


def esc(value: object) -> str:
    """HTML-escaped text."""
    return html.escape(str(value), quote=True)


def money(cents: int) -> str:
    """Cents as dollars."""
    return f"${cents // 100}.{cents % 100:02d}"


def seed(db: sqlite3.Connection) -> None:
    """Create the tables and their seed rows (a fresh database only)."""
    db.executescript(SCHEMA)
    db.executemany("INSERT INTO products VALUES (?,?,?,?,?)", PRODUCTS)
    db.executemany(
        "INSERT INTO messages (folder, sender, recipient, subject, body) VALUES (?,?,?,?,?)",
        MESSAGES,
    )
    db.executemany(
        "INSERT INTO bookings (name, day, time, party, status) VALUES (?,?,?,?,?)", BOOKINGS
    )
    db.executemany("INSERT INTO pages VALUES (?,?,?,1)", PAGES)
    db.commit()


class Reply:
    """A page (or a redirect) to send."""

    def __init__(self, body: str = "", status: int = 200, location: str = "") -> None:
        self.body, self.status, self.location = body, status, location


def page(app: str, title: str, body: str, note: str = "") -> Reply:
    """A full HTML page of ``app`` with its navigation bar."""
    nav = {
        "shop": '<a href="/shop/">Shop</a><a href="/shop/cart">Cart</a>',
        "mail": '<a href="/mail/">Inbox</a><a href="/mail/sent">Sent</a>'
        '<a href="/mail/archive">Archive</a><a href="/mail/compose">Compose</a>',
        "booking": '<a href="/booking/">Book a table</a><a href="/booking/list">Bookings</a>',
        "wiki": '<a href="/wiki/">Wiki home</a><a href="/wiki/new">New page</a>',
    }[app]
    flash = f'<p class="note">{esc(note)}</p>' if note else ""
    return Reply(
        f"<!doctype html><html><head><meta charset=utf-8><title>{esc(title)}</title>"
        f"<style>{_CSS}</style></head><body><header>{nav}</header><main>"
        f"<h1>{esc(title)}</h1>{flash}{body}</main>{_FOCUS}</body></html>"
    )


def see_other(location: str) -> Reply:
    """A 303 redirect after a POST."""
    return Reply(status=303, location=location)


def field(form: dict[str, list[str]], name: str) -> str:
    """A form field's value, stripped ('' when absent)."""
    return (form.get(name) or [""])[0].strip()


def control(label: str, name: str, attrs: str = "", text: str | None = None) -> str:
    """A labelled form control: an ``input``, or a ``textarea`` holding ``text``."""
    if text is None:
        return f'<label>{label} <input aria-label="{label}" name="{name}"{attrs}></label>'
    return (
        f'<label>{label} <textarea aria-label="{label}" name="{name}"{attrs}>'
        f"{esc(text)}</textarea></label>"
    )


# -- shop --------------------------------------------------------------------------


def shop_list(rows: list[sqlite3.Row], focus: bool) -> str:
    """Products as a list of links (the first one focused on a search result page)."""
    items = []
    for i, r in enumerate(rows):
        af = " autofocus" if focus and i == 0 else ""
        items.append(
            f'<li><a href="/shop/product/{r["slug"]}"{af}>{esc(r["name"])}</a> '
            f"<span>{money(r['price_cents'])}</span></li>"
        )
    return "<ul>" + "".join(items) + "</ul>" if items else "<p>No products found.</p>"


def shop(db: sqlite3.Connection, method: str, parts: list[str], q: dict[str, list[str]]) -> Reply:
    """The shop: search, product pages, a cart and a checkout that records the order."""
    search = (
        '<form action="/shop/search"><input name="q" placeholder="Search products" '
        'aria-label="Search products"{af}> <button>Search</button></form>'
    )
    if parts == [] and method == "GET":
        rows = db.execute("SELECT * FROM products ORDER BY name").fetchall()
        body = search.format(af=" autofocus") + shop_list(rows, False)
        return page("shop", "Shop", body)
    if parts == ["search"]:
        term = field(q, "q")
        rows = db.execute(
            "SELECT * FROM products WHERE name LIKE ? ORDER BY name", (f"%{term}%",)
        ).fetchall()
        body = search.format(af="") + shop_list(rows, True)
        return page("shop", f"Results for {term}", body)
    if len(parts) == 2 and parts[0] == "product":
        r = db.execute("SELECT * FROM products WHERE slug=?", (parts[1],)).fetchone()
        if r is None:
            return page("shop", "Not found", "<p>No such product.</p>")
        body = (
            f"<p>Price: {money(r['price_cents'])} · In stock: {r['stock']} · {r['category']}</p>"
            f'<form method="post" action="/shop/cart/add"><input type="hidden" name="slug" '
            f'value="{r["slug"]}">'
            + control("Quantity", "qty", ' type="number" min="1" placeholder="1" autofocus')
            + "<button>Add to cart</button></form>"
        )
        return page("shop", r["name"], body)
    if parts == ["cart", "add"] and method == "POST":
        slug, qty = field(q, "slug"), field(q, "qty") or "1"
        if db.execute("SELECT 1 FROM products WHERE slug=?", (slug,)).fetchone() is None:
            return page("shop", "Not found", "<p>No such product.</p>")
        n = max(1, int(qty)) if qty.isdigit() else 1
        db.execute(
            "INSERT INTO cart VALUES (?,?) ON CONFLICT(slug) DO UPDATE SET qty=qty+?",
            (slug, n, n),
        )
        return see_other("/shop/cart")
    if parts == ["cart"]:
        rows = db.execute(
            "SELECT p.slug, p.name, p.price_cents, c.qty FROM cart c "
            "JOIN products p USING (slug) ORDER BY p.name"
        ).fetchall()
        if not rows:
            return page("shop", "Your cart", "<p>Your cart is empty.</p>")
        lines = "".join(
            f"<tr><td>{esc(r['name'])}</td><td>{r['qty']}</td>"
            f"<td>{money(r['qty'] * r['price_cents'])}</td><td><form method=post "
            f'action="/shop/cart/remove"><input type=hidden name=slug value="{r["slug"]}">'
            f"<button>Remove</button></form></td></tr>"
            for r in rows
        )
        body = (
            f"<table><tr><th>Item</th><th>Qty</th><th>Total</th><th></th></tr>{lines}</table>"
            '<form action="/shop/checkout"><button autofocus>Checkout</button></form>'
        )
        return page("shop", "Your cart", body)
    if parts == ["cart", "remove"] and method == "POST":
        db.execute("DELETE FROM cart WHERE slug=?", (field(q, "slug"),))
        return see_other("/shop/cart")
    if parts == ["checkout"] and method == "GET":
        body = (
            '<form method="post" action="/shop/checkout">'
            + control("Full name", "name", " autofocus")
            + control("Address", "address")
            + "<button>Place order</button></form>"
        )
        return page("shop", "Checkout", body)
    if parts == ["checkout"] and method == "POST":
        return shop_order(db, field(q, "name"), field(q, "address"))
    if len(parts) == 2 and parts[0] == "order":
        r = db.execute("SELECT * FROM orders WHERE id=?", (parts[1],)).fetchone()
        if r is None:
            return page("shop", "Not found", "<p>No such order.</p>")
        text = f"<p>Order {r['id']} for {esc(r['name'])}: {money(r['total_cents'])}.</p>"
        return page("shop", "Thank you for your order", text)
    return page("shop", "Not found", "<p>No such page.</p>")


def shop_order(db: sqlite3.Connection, name: str, address: str) -> Reply:
    """Turn the cart into an order (name and address required)."""
    items = db.execute(
        "SELECT c.slug, c.qty, p.price_cents FROM cart c JOIN products p USING (slug)"
    ).fetchall()
    if not items or not name or not address:
        why = "Your cart is empty." if not items else "Name and address are required."
        return page("shop", "Checkout", f'<p class="err">{why}</p>')
    total = sum(r["qty"] * r["price_cents"] for r in items)
    cur = db.execute(
        "INSERT INTO orders (name, address, total_cents) VALUES (?,?,?)", (name, address, total)
    )
    db.executemany(
        "INSERT INTO order_items VALUES (?,?,?)", [(cur.lastrowid, r[0], r[1]) for r in items]
    )
    db.execute("DELETE FROM cart")
    return see_other(f"/shop/order/{cur.lastrowid}")


# -- mail --------------------------------------------------------------------------


def mail(db: sqlite3.Connection, method: str, parts: list[str], q: dict[str, list[str]]) -> Reply:
    """The mail client: folders, reading, starring, archiving, replying and composing."""
    folders = {"": "inbox", "sent": "sent", "archive": "archive"}
    if len(parts) <= 1 and (parts[0] if parts else "") in folders and method == "GET":
        folder = folders[parts[0] if parts else ""]
        rows = db.execute(
            "SELECT * FROM messages WHERE folder=? ORDER BY id DESC", (folder,)
        ).fetchall()
        lines = "".join(
            f"<tr><td>{'★' if r['starred'] else ''}</td><td>{esc(r['sender'])}</td>"
            f'<td><a href="/mail/m/{r["id"]}">{esc(r["subject"])}</a></td></tr>'
            for r in rows
        )
        body = f"<table>{lines}</table>" if rows else "<p>No messages.</p>"
        return page("mail", folder.capitalize(), body)
    if len(parts) == 2 and parts[0] == "m":
        r = db.execute("SELECT * FROM messages WHERE id=?", (parts[1],)).fetchone()
        if r is None:
            return page("mail", "Not found", "<p>No such message.</p>")
        act = (
            '<form method="post" action="/mail/m/{id}/{what}" style="display:inline">'
            "<button>{label}</button></form> "
        )
        star = "Unstar" if r["starred"] else "Star"
        body = (
            f"<p>From: {esc(r['sender'])}<br>To: {esc(r['recipient'])}</p>"
            f"<p>{esc(r['body'])}</p>"
            + act.format(id=r["id"], what="star", label=star)
            + act.format(id=r["id"], what="archive", label="Archive")
            + f'<a href="/mail/compose?reply={r["id"]}">Reply</a>'
        )
        return page("mail", r["subject"], body)
    if len(parts) == 3 and parts[0] == "m" and method == "POST":
        sql = {
            "star": "UPDATE messages SET starred = 1 - starred WHERE id=?",
            "archive": "UPDATE messages SET folder='archive' WHERE id=?",
        }.get(parts[2])
        if sql is None:
            return page("mail", "Not found", "<p>No such action.</p>")
        db.execute(sql, (parts[1],))
        return see_other(f"/mail/m/{parts[1]}" if parts[2] == "star" else "/mail/")
    if parts == ["compose"] and method == "GET":
        to = subject = reply = ""
        if field(q, "reply").isdigit():
            r = db.execute("SELECT * FROM messages WHERE id=?", (field(q, "reply"),)).fetchone()
            if r is not None:
                to, subject, reply = r["sender"], "Re: " + r["subject"], str(r["id"])
        body = (
            '<form method="post" action="/mail/compose">'
            f'<input type="hidden" name="reply" value="{reply}">'
            + control("To", "to", f' value="{esc(to)}"' + ("" if to else " autofocus"))
            + control("Subject", "subject", f' value="{esc(subject)}"')
            + control("Message", "body", " autofocus" if to else "", "")
            + "<button>Send</button></form>"
        )
        return page("mail", "Compose", body)
    if parts == ["compose"] and method == "POST":
        to, subject, text = field(q, "to"), field(q, "subject"), field(q, "body")
        if "@" not in to:
            return page("mail", "Compose", '<p class="err">A recipient address is required.</p>')
        reply = field(q, "reply")
        db.execute(
            "INSERT INTO messages (folder, sender, recipient, subject, body, in_reply_to) "
            "VALUES ('sent',?,?,?,?,?)",
            (ME, to, subject, text, int(reply) if reply.isdigit() else None),
        )
        return see_other("/mail/sent")
    return page("mail", "Not found", "<p>No such page.</p>")


# -- booking -----------------------------------------------------------------------


def booking(
    db: sqlite3.Connection, method: str, parts: list[str], q: dict[str, list[str]]
) -> Reply:
    """The booking form (a restaurant's tables) and the list of bookings, with cancelling."""
    if parts == [] and method == "GET":
        body = (
            f"<p>Open on {', '.join(DAYS)}; tables at {', '.join(TIMES)}.</p>"
            '<form method="post" action="/booking/">'
            '<label>Name <input aria-label="Name" name="name" autofocus></label>'
            '<label>Day <input aria-label="Day (YYYY-MM-DD)" name="day"></label>'
            '<label>Time <input aria-label="Time (HH:MM)" name="time"></label>'
            '<label>Guests <input aria-label="Guests" name="party" type="number" min="1" '
            'max="8" value="2"></label>'
            "<button>Book</button></form>"
        )
        return page("booking", "Book a table", body)
    if parts == [] and method == "POST":
        name, day, time_ = field(q, "name"), field(q, "day"), field(q, "time")
        party = field(q, "party")
        if not name or day not in DAYS or time_ not in TIMES or not party.isdigit():
            why = f"Fill in every field: a day in {', '.join(DAYS)}, a time in {', '.join(TIMES)}."
            return page("booking", "Book a table", f'<p class="err">{esc(why)}</p>')
        cur = db.execute(
            "INSERT INTO bookings (name, day, time, party, status) VALUES (?,?,?,?, 'confirmed')",
            (name, day, time_, int(party)),
        )
        return page("booking", "Booked", f"<p>Booking {cur.lastrowid} is confirmed.</p>")
    if parts == ["list"]:
        rows = db.execute("SELECT * FROM bookings ORDER BY day, time").fetchall()
        lines = "".join(
            f"<tr><td>{esc(r['name'])}</td><td>{r['day']}</td><td>{r['time']}</td>"
            f"<td>{r['party']}</td><td>{r['status']}</td><td>"
            + (
                f'<form method="post" action="/booking/cancel/{r["id"]}"><button>Cancel</button>'
                "</form>"
                if r["status"] == "confirmed"
                else ""
            )
            + "</td></tr>"
            for r in rows
        )
        return page("booking", "Bookings", f"<table>{lines}</table>")
    if len(parts) == 2 and parts[0] == "cancel" and method == "POST":
        db.execute("UPDATE bookings SET status='cancelled' WHERE id=?", (parts[1],))
        return see_other("/booking/list")
    return page("booking", "Not found", "<p>No such page.</p>")


# -- wiki --------------------------------------------------------------------------


def wiki(db: sqlite3.Connection, method: str, parts: list[str], q: dict[str, list[str]]) -> Reply:
    """The docs wiki: an index, pages, editing (each save a new revision) and new pages."""
    if parts == []:
        rows = db.execute("SELECT slug, title FROM pages ORDER BY title").fetchall()
        items = "".join(f'<li><a href="/wiki/{r["slug"]}">{esc(r["title"])}</a></li>' for r in rows)
        return page("wiki", "Wiki", f"<ul>{items}</ul>")
    if parts == ["new"] and method == "GET":
        body = (
            '<form method="post" action="/wiki/new">'
            + control("Title", "title", " autofocus")
            + control("Text", "body", "", "")
            + "<button>Create</button></form>"
        )
        return page("wiki", "New page", body)
    if parts == ["new"] and method == "POST":
        title, text = field(q, "title"), field(q, "body")
        slug = "-".join(title.lower().split())
        if not slug or db.execute("SELECT 1 FROM pages WHERE slug=?", (slug,)).fetchone():
            return page("wiki", "New page", '<p class="err">Give a title not used yet.</p>')
        db.execute("INSERT INTO pages VALUES (?,?,?,1)", (slug, title, text))
        return see_other(f"/wiki/{quote(slug)}")
    if len(parts) == 1:
        r = db.execute("SELECT * FROM pages WHERE slug=?", (parts[0],)).fetchone()
        if r is None:
            return page("wiki", "Not found", "<p>No such page.</p>")
        body = f'<p>{esc(r["body"])}</p><a href="/wiki/{r["slug"]}/edit">Edit</a>'
        return page("wiki", r["title"], body)
    if len(parts) == 2 and parts[1] == "edit":
        r = db.execute("SELECT * FROM pages WHERE slug=?", (parts[0],)).fetchone()
        if r is None:
            return page("wiki", "Not found", "<p>No such page.</p>")
        if method == "POST":
            db.execute(
                "UPDATE pages SET body=?, revision=revision+1 WHERE slug=?",
                (field(q, "body"), r["slug"]),
            )
            return see_other(f"/wiki/{r['slug']}")
        body = (
            '<form method="post">'
            + control("Text", "body", ' rows="6" cols="60" autofocus', r["body"])
            + "<button>Save</button></form>"
        )
        return page("wiki", f"Edit {r['title']}", body)
    return page("wiki", "Not found", "<p>No such page.</p>")


APPS = {"shop": shop, "mail": mail, "booking": booking, "wiki": wiki}


def handler(db_path: str) -> type[BaseHTTPRequestHandler]:
    """The request handler over the database at ``db_path`` (one write at a time)."""
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _serve(self, method: str) -> None:
            url = urlsplit(self.path)
            q = parse_qs(url.query)
            if method == "POST":
                length = int(self.headers.get("Content-Length") or 0)
                q.update(parse_qs(self.rfile.read(length).decode("utf-8", "replace")))
            parts = [p for p in url.path.split("/") if p]
            app = APPS.get(parts[0]) if parts else None
            if app is None:
                links = "".join(f'<li><a href="/{a}/">{a}</a></li>' for a in APPS)
                reply = Reply(f"<!doctype html><title>Apps</title><ul>{links}</ul>", 404)
            else:
                with lock, contextlib.closing(sqlite3.connect(db_path)) as db, db:
                    db.row_factory = sqlite3.Row
                    reply = app(db, method, parts[1:], q)
            data = reply.body.encode()
            self.send_response(reply.status)
            if reply.location:
                self.send_header("Location", reply.location)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

    return Handler


def main(argv: list[str] | None = None) -> int:
    """Create the database if new, then serve on the loopback until SIGTERM."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--db", required=True, help="the apps' SQLite database (created if new)")
    ap.add_argument("--port-file", required=True, help="written with the port once ready")
    args = ap.parse_args(argv)
    if not os.path.exists(args.db):
        with contextlib.closing(sqlite3.connect(args.db)) as db:
            seed(db)
    serve_until_term(ThreadingHTTPServer(("127.0.0.1", 0), handler(args.db)), args.port_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The daemon's HTTP listener in tests: a daemon with one (and with a
password and users of the ACL), requests to it as a user, the status page's
CSRF token and tables, and its clicks in headless Chromium (the ``browser``
fixture of tests/integration/conftest.py drives it)."""

from __future__ import annotations

import base64
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from html.parser import HTMLParser

from harness import HOST, Daemon, free_port
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait


def http_daemon(data_dir, env: dict | None = None, args: tuple = ()) -> Daemon:
    """A started daemon with its HTTP listener on a free port (``d.http``);
    ``args``: more of its command line (``("--replicaof", "127.0.0.1 6479")``)."""
    port = free_port()
    d = Daemon(str(data_dir), *args, env={"LEASEQ_HTTP_PORT": str(port), **(env or {})}).start()
    d.http = port
    return d


def basic_auth(user: str, password: str) -> str:
    """The Authorization header of HTTP Basic auth for ``user``."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def http_get(d: Daemon, path: str, method: str = "GET", user: tuple | None = None) -> tuple[int, str, str]:
    """(status, Content-Type, body text) of a request to ``http_daemon``'s
    listener, as ``user`` (name, password) when given; error statuses are
    answers too, not exceptions."""
    req = urllib.request.Request(f"http://{HOST}:{d.http}{path}", method=method)
    if user is not None:
        req.add_header("Authorization", basic_auth(*user))
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()




PASSWORDS = {"LEASEQ_REQUIREPASS": "s3cret"}


def acl_daemon(tmp_path, **env) -> Daemon:
    """A daemon with its HTTP listener, a password for the default user and
    two more users: ``ops`` (all queue commands) and ``viewer`` (read-only)."""
    conf = tmp_path / "leaseq.conf"
    conf.write_text("user ops on >opspass ~* +@all\n"
                    "user viewer on >viewpass ~* +@read +@connection\n")
    return http_daemon(tmp_path / "data", env={**PASSWORDS, **env}, args=("--config", str(conf)))


def ops_client(d):
    return d.client(protocol=2, username="ops", password="opspass")


def request(d: Daemon, path: str, form: dict | None = None, user: tuple | None = None,
            raw_body: bytes | None = None) -> tuple[int, dict, str]:
    """(status, headers, body) of a GET (or, with ``form``/``raw_body``, a POST); redirects not followed."""
    data = raw_body if raw_body is not None else (urllib.parse.urlencode(form).encode() if form is not None else None)
    req = urllib.request.Request(f"http://{HOST}:{d.http}{path}", data=data,
                                 method="POST" if data is not None else "GET")
    if user is not None:
        req.add_header("Authorization", basic_auth(*user))

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(req, timeout=15) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def csrf_of(page: str) -> str:
    """The one CSRF token of a status page's forms."""
    tokens = set(re.findall(r'name="csrf" value="([^"]+)"', page))
    assert len(tokens) == 1, tokens
    return tokens.pop()


class Tables(HTMLParser):
    """Each ``<table>`` of a page as rows of cell texts, and the text of
    every ``<h2>``, in page order."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.headings: list[str] = []
        self._cell: list[str] | None = None
        self._heading: list[str] | None = None
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "h2":
            self._heading = []

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "h2":
            self.headings.append("".join(self._heading))
            self._heading = None

    def handle_data(self, data):
        for part in (self._cell, self._heading):
            if part is not None:
                part.append(data)


# -- the status page in headless Chromium (the ``browser`` fixture of tests/integration/conftest.py) --


def log_in(driver, user: str, password: str) -> None:
    """HTTP Basic credentials on every request the page makes (the forms' POSTs too)."""
    driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {"Authorization": basic_auth(user, password)}})


def press(driver, button_title: str) -> None:
    """Click the button titled ``button_title`` on the page shown (it
    refreshes itself every 2 s: a button found stale is looked up again)."""
    deadline = time.monotonic() + 20
    while True:
        try:
            driver.find_element(By.CSS_SELECTOR, f'button[title="{button_title}"]').click()
            return
        except StaleElementReferenceException:
            if time.monotonic() > deadline:
                raise


def click(driver, d, button_title: str) -> None:
    """Open ``d``'s status page and click the button titled ``button_title``."""
    driver.get(f"http://{HOST}:{d.http}/")
    press(driver, button_title)


def notice(driver) -> str:
    """The notice of the page an action redirected to."""
    WebDriverWait(driver, 15).until(lambda drv: "done=" in drv.current_url)
    return driver.find_element(By.ID, "notice").text


def screenshot(driver, name: str) -> None:
    """Save the page as ``name`` in LEASEQ_SCREENSHOTS, when that names a directory."""
    where = os.environ.get("LEASEQ_SCREENSHOTS")
    if where:
        driver.save_screenshot(os.path.join(where, name))

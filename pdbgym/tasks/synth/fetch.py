"""Fetch a release's sdist from the package index, and unpack it, without building it.

``pip download`` of an sdist prepares its metadata by calling the sdist's own PEP 517 build backend: the
package author's code ran on the host, as whoever ran synthesis. Here the archive is found in the index
pages (PEP 503 HTML or PEP 691 JSON) and the find-links folders or pages, downloaded with urllib, checked
against the hash the index gives, and unpacked with every member checked first (``unpack.py``): nothing
in the archive runs. Which indexes are searched follows pip's own settings (``PIP_INDEX_URL``,
``PIP_EXTRA_INDEX_URL``, ``PIP_FIND_LINKS``, ``PIP_NO_INDEX``, then pip's config files as ``pip config list``
prints them, which runs pip's code only), so a private mirror keeps working.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import http.client
import json
import os
import re
import ssl
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath

from packaging.utils import InvalidSdistFilename, canonicalize_name, parse_sdist_filename
from packaging.version import InvalidVersion, Version

from pdbgym.errors import PdbgymError

DEFAULT_INDEX = "https://pypi.org/simple"
ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
MAX_PAGE_BYTES = 64 << 20      # an index page (a project with thousands of files is a few MB)
MAX_SDIST_BYTES = 512 << 20    # an sdist archive
# The sdist's file name is ours to store it under: nothing from the index names a path.
_SAFE_FILENAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+!-]*\.(?:tar\.gz|zip)")
_TRUE = {"1", "y", "yes", "t", "true", "on"}


class SynthSourceError(PdbgymError):
    """A synthesis source cannot be used (not found, will not download or unpack, has no tests...)."""


@dataclass(frozen=True)
class IndexConfig:
    """Where sdists are looked for, as pip would: ``index_urls`` empty under ``--no-index``."""

    index_urls: tuple[str, ...]
    find_links: tuple[str, ...]
    cert: str | None = None  # a CA bundle for https (pip's ``cert``)

    def describe(self) -> str:
        places = [f"index {_redact(u)}" for u in self.index_urls] + [f"find-links {_redact(f)}" for f in self.find_links]
        return ", ".join(places) or "nothing (PIP_NO_INDEX is set and there are no find-links)"


@dataclass(frozen=True)
class _Session:
    deadline: float  # time.monotonic() by which the whole fetch must be done
    cert: str | None


@dataclass(frozen=True)
class Candidate:
    filename: str
    url: str
    hashes: dict[str, str] = field(default_factory=dict)


def pip_config_files() -> dict[str, str]:
    """pip's config-file settings (``section.option`` to value) as ``pip config list`` prints them; {} when
    pip cannot say. Runs pip's own code only, never a package's."""
    argv = [sys.executable, "-P", "-m", "pip", "config", "list"]  # -P: no module from the working folder
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    values = {}
    for line in done.stdout.splitlines():
        key, sep, literal = line.partition("=")
        try:
            value = ast.literal_eval(literal) if sep else None
        except (ValueError, SyntaxError):
            continue
        if isinstance(value, str):
            values[key.strip()] = value
    return values


def index_config(environ: Mapping[str, str] | None = None, files: Mapping[str, str] | None = None) -> IndexConfig:
    """pip's index settings: the environment first, then config files (``download``, then ``global``)."""
    env = os.environ if environ is None else environ
    config = pip_config_files() if files is None else files

    def setting(option: str) -> str | None:
        name = "PIP_" + option.upper().replace("-", "_")
        if name in env:
            return env[name]
        return next((config[key] for key in (f"download.{option}", f"global.{option}") if key in config), None)

    no_index = (setting("no-index") or "").strip().lower() in _TRUE
    primary = (setting("index-url") or DEFAULT_INDEX).split()
    extras = (setting("extra-index-url") or "").split()
    find_links = tuple(_local_or_url(item) for item in (setting("find-links") or "").split())
    return IndexConfig(index_urls=() if no_index else tuple(primary[:1] + extras), find_links=find_links,
                       cert=setting("cert") or None)


def fetch_sdist(name: str, version: str, download_dir: Path, timeout_s: float = 300.0,
                config: IndexConfig | None = None) -> Path:
    """Download the sdist ``NAME-VERSION.tar.gz`` (or ``.zip``) into ``download_dir``; returns its path.
    Refuses an archive whose hash differs from the index's."""
    config = index_config() if config is None else config
    session = _Session(time.monotonic() + timeout_s, config.cert)
    problems: list[str] = []
    spec = f"{name}=={version}"
    try:
        wanted = (canonicalize_name(name), Version(version))
    except InvalidVersion as exc:
        raise SynthSourceError(f"{spec}: {version!r} is not a version") from exc
    candidates = _candidates(wanted, config, session, problems)
    if candidates:  # a hash mismatch is refused, never worked around with another copy
        return _download(candidates[0], download_dir, session)
    unread = f"; could not read {'; '.join(problems[:4])}" if problems else ""
    raise SynthSourceError(
        f"could not download the sdist of {spec}: no {canonicalize_name(name).replace('-', '_')}-{version}.tar.gz "
        f"(or .zip) in {config.describe()}{unread}. Check the name, the version and the network, or point pip's "
        "settings at where it is (PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS, PIP_NO_INDEX, `pip config`)")


# -- finding the file ------------------------------------------------------------------------------------


def _local_or_url(item: str) -> str:
    """A find-links entry as a URL: a local path (relative to here, as pip reads it) becomes ``file:``."""
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", item):
        return item
    return Path(os.path.expanduser(item)).absolute().as_uri()


def _candidates(wanted: tuple[str, Version], config: IndexConfig, session: _Session,
                problems: list[str]) -> list[Candidate]:
    """The matching sdists of the first place holding any (find-links, then the indexes in order),
    ``.tar.gz`` before ``.zip``; what could not be read is added to ``problems``."""
    pages = [(link, False) for link in config.find_links]
    pages += [(index.rstrip("/") + f"/{wanted[0]}/", True) for index in config.index_urls]
    for url, is_index in pages:
        try:
            found = [c for c in _listing(url, is_index, session) if _matches(c.filename, wanted)]
        except SynthSourceError as exc:
            problems.append(str(exc))
            continue
        if found:
            return sorted(found, key=lambda c: not c.filename.endswith(".tar.gz"))
    return []


def _matches(filename: str, wanted: tuple[str, Version]) -> bool:
    if not _SAFE_FILENAME.fullmatch(filename):
        return False
    try:
        return parse_sdist_filename(filename) == wanted
    except (InvalidSdistFilename, InvalidVersion):
        return False


def _listing(url: str, is_index: bool, session: _Session) -> list[Candidate]:
    """The files a find-links entry or an index's project page lists ([] when the project is not there)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "file":
        path = Path(urllib.request.url2pathname(parts.path))
        if path.is_dir() and not is_index:  # a find-links folder: its files
            return [Candidate(p.name, p.as_uri()) for p in sorted(path.iterdir()) if p.is_file()]
        if path.is_dir():
            path = path / "index.html"  # a file: index, as pip reads one
        if not path.is_file():
            return []
        if not path.name.endswith((".html", ".htm", ".json")):  # a find-links entry naming one archive
            return [Candidate(path.name, path.as_uri())]
        body, kind, final = _read_limited(path.open("rb"), url, MAX_PAGE_BYTES), path.suffix, path.as_uri()
    elif parts.scheme in ("http", "https"):
        if not is_index and _SAFE_FILENAME.fullmatch(PurePosixPath(parts.path).name):
            return [Candidate(PurePosixPath(parts.path).name, url)]
        try:
            response = _open(url, session, ACCEPT)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return []
            raise SynthSourceError(f"{_redact(url)}: HTTP {exc.code} {exc.reason}") from exc
        kind, final = response.headers.get_content_type(), _with_credentials(response.geturl(), url)
        body = _read_limited(response, url, MAX_PAGE_BYTES)
    else:
        raise SynthSourceError(f"{_redact(url)}: only http, https and file URLs are read")
    if "json" in kind:
        return _from_json(body, final)
    return _from_html(body.decode("utf-8", "replace"), final)


def _from_json(body: bytes, page_url: str) -> list[Candidate]:
    """PEP 691: ``{"files": [{"filename", "url", "hashes"}]}``."""
    try:
        files = json.loads(body)["files"]
        return [_candidate(str(f["filename"]), urllib.parse.urljoin(page_url, str(f["url"])), page_url,
                           {str(k): str(v) for k, v in dict(f.get("hashes") or {}).items()})
                for f in files if isinstance(f, dict)]
    except (ValueError, KeyError, TypeError) as exc:
        raise SynthSourceError(f"{_redact(page_url)}: not a PEP 691 project page ({exc})") from exc


class _Anchors(HTMLParser):
    """The ``href`` of each ``<a>`` (and a ``<base href>``) of a PEP 503 page."""

    def __init__(self) -> None:
        super().__init__()
        self.base: str | None = None
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        href = dict(attrs).get("href")
        if tag == "base" and href and self.base is None:
            self.base = href
        elif tag == "a" and href:
            self.hrefs.append(href)


def _from_html(text: str, page_url: str) -> list[Candidate]:
    """PEP 503: the file name is the link's last path segment, its hash the ``#sha256=`` fragment."""
    parser = _Anchors()
    parser.feed(text)
    base = urllib.parse.urljoin(page_url, parser.base) if parser.base else page_url
    found = []
    for href in parser.hrefs:
        url, _, fragment = urllib.parse.urljoin(base, href).partition("#")
        algorithm, _, digest = fragment.partition("=")
        filename = urllib.parse.unquote(PurePosixPath(urllib.parse.urlsplit(url).path).name)
        found.append(_candidate(filename, url, page_url, {algorithm: digest} if digest else {}))
    return found


def _candidate(filename: str, url: str, page_url: str, hashes: dict[str, str]) -> Candidate:
    """A listed file; a page served over the network may not point at a file on this machine."""
    scheme = urllib.parse.urlsplit(url).scheme
    allowed = ("http", "https", "file") if urllib.parse.urlsplit(page_url).scheme == "file" else ("http", "https")
    return Candidate(filename if scheme in allowed else "", url, hashes)


# -- downloading -----------------------------------------------------------------------------------------


class _HttpOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Follow redirects to http(s) only (urllib's default also follows one to ``ftp:``), and keep an index's
    credentials from another host (urllib's default sends them on)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        if urllib.parse.urlsplit(newurl).scheme not in ("http", "https"):
            raise urllib.error.HTTPError(newurl, code, f"redirect to {newurl} refused", headers, fp)
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urllib.parse.urlsplit(newurl).netloc != urllib.parse.urlsplit(req.full_url).netloc:
            new.remove_header("Authorization")
        return new


def _open(url: str, session: _Session, accept: str = "*/*"):  # type: ignore[no-untyped-def]
    """GET ``url``; credentials in it (``https://user:token@host/simple``) go in an Authorization header."""
    parts = urllib.parse.urlsplit(url)
    headers = {"Accept": accept, "User-Agent": "pdbgym-sdist-fetch"}
    if parts.username is not None:
        user = urllib.parse.unquote(parts.username)
        secret = urllib.parse.unquote(parts.password or "")
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{secret}".encode()).decode()
        url = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    remaining = session.deadline - time.monotonic()
    if remaining <= 0:
        raise SynthSourceError(f"{_redact(url)}: out of time")
    try:
        handlers: list[urllib.request.BaseHandler] = [_HttpOnlyRedirects()]  # proxies: as the environment says now
        if session.cert:  # pip's `cert` (PIP_CERT): a mirror's own certificate authority
            handlers.append(urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=session.cert)))
        opener = urllib.request.build_opener(*handlers)
        return opener.open(urllib.request.Request(url, headers=headers), timeout=remaining)
    except urllib.error.HTTPError:
        raise
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
        raise SynthSourceError(f"{_redact(url)}: {getattr(exc, 'reason', exc)}") from exc


def _with_credentials(final: str, requested: str) -> str:
    """The page's URL after redirects, with the requested URL's credentials when still on its host, so the
    page's relative links are fetched with them as pip would."""
    old, new = urllib.parse.urlsplit(requested), urllib.parse.urlsplit(final)
    if old.username is None or (new.hostname, new.port) != (old.hostname, old.port):
        return final
    return urllib.parse.urlunsplit(new._replace(netloc=old.netloc))


def _read_limited(stream, url: str, limit: int) -> bytes:  # type: ignore[no-untyped-def]
    try:
        with stream:
            body = stream.read(limit + 1)
    except (OSError, http.client.HTTPException) as exc:
        raise SynthSourceError(f"{_redact(url)}: {exc}") from exc
    if len(body) > limit:
        raise SynthSourceError(f"{_redact(url)}: larger than {limit >> 20} MiB")
    return body


def _download(candidate: Candidate, download_dir: Path, session: _Session) -> Path:
    """Copy the candidate into ``download_dir`` under its (checked) file name, refusing a hash mismatch."""
    algorithm = next((a for a in ("sha256", "sha512", "sha384", "sha224", "sha1", "md5")
                      if a in candidate.hashes), None)
    digest = hashlib.new(algorithm) if algorithm else None
    download_dir.mkdir(parents=True, exist_ok=True)
    partial = download_dir / f".{candidate.filename}.{os.getpid()}.partial"
    try:
        source = _source(candidate, session)
        with source, partial.open("wb") as out:
            size = 0
            while chunk := source.read(1 << 20):
                size += len(chunk)
                if size > MAX_SDIST_BYTES:
                    raise SynthSourceError(f"{candidate.filename}: larger than {MAX_SDIST_BYTES >> 20} MiB")
                if time.monotonic() > session.deadline:  # the socket timeout bounds each read only, not a slow drip
                    raise SynthSourceError(f"{candidate.filename}: the download ran out of time")
                if digest is not None:
                    digest.update(chunk)
                out.write(chunk)
        if digest is not None and digest.hexdigest() != candidate.hashes[str(algorithm)].strip().lower():
            raise SynthSourceError(
                f"{candidate.filename} from {_redact(candidate.url)}: its {algorithm} is {digest.hexdigest()}, the "
                f"index says {candidate.hashes[str(algorithm)]}; refusing it (a changed or corrupted file)")
        return partial.replace(download_dir / candidate.filename)
    except (OSError, http.client.HTTPException) as exc:
        raise SynthSourceError(f"cannot download {_redact(candidate.url)}: {exc}") from exc
    finally:
        partial.unlink(missing_ok=True)


def _source(candidate: Candidate, session: _Session):  # type: ignore[no-untyped-def]
    parts = urllib.parse.urlsplit(candidate.url)
    if parts.scheme == "file":
        path = Path(urllib.request.url2pathname(parts.path))
        if not stat.S_ISREG(path.stat().st_mode):
            raise SynthSourceError(f"{path}: not a file")
        return path.open("rb")
    try:
        return _open(candidate.url, session)
    except urllib.error.HTTPError as exc:
        raise SynthSourceError(f"cannot download {_redact(candidate.url)}: HTTP {exc.code} {exc.reason}") from exc


def _redact(url: str) -> str:
    """``url`` without a password, for messages."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{parts.username}:***@{parts.netloc.rpartition('@')[2]}"))

"""Synthesis fetches a release's sdist without running anything it ships (red-team finding 6).

``pip download --no-binary :all:`` prepared the sdist's metadata through the package's own PEP 517 build
backend, so a package author's code ran on the host. Here a hostile sdist (an in-tree backend and a
``setup.py`` that write a canary file) is served from a find-links folder, a ``file:`` index and a real
loopback HTTP index (PEP 503 HTML and PEP 691 JSON); the canary must never appear, the archive must be
fetched, checked against the index's hash and unpacked, and archives reaching outside their folder refused.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pdbgym.tasks.synth import fetch
from pdbgym.tasks.synth.project import SynthSourceError, download_sdist, prepare_project

BACKEND = '''
import os
CANARY = {canary!r}

def _ran(hook):
    with open(CANARY, "a") as out:
        out.write(hook + "\\n")

_ran("import")

def get_requires_for_build_wheel(config_settings=None):
    _ran("get_requires_for_build_wheel")
    return []

def get_requires_for_build_sdist(config_settings=None):
    _ran("get_requires_for_build_sdist")
    return []

def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    _ran("prepare_metadata_for_build_wheel")
    info = os.path.join(metadata_directory, "hostile-1.0.dist-info")
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w") as out:
        out.write("Metadata-Version: 2.1\\nName: hostile\\nVersion: 1.0\\n")
    return "hostile-1.0.dist-info"

def build_sdist(sdist_directory, config_settings=None):
    _ran("build_sdist")
    raise SystemExit(1)

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _ran("build_wheel")
    raise SystemExit(1)
'''


def _tar(path: Path, members: list[tarfile.TarInfo | tuple[str, bytes]]) -> Path:
    """A ``.tar.gz`` of (name, content) files and ready-made members (links, devices)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as bundle:
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                bundle.addfile(member)
                continue
            info = tarfile.TarInfo(member[0])
            info.size = len(member[1])
            bundle.addfile(info, io.BytesIO(member[1]))
    return path


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def hostile_sdist(folder: Path, canary: Path, filename: str = "hostile-1.0.tar.gz", top: str = "hostile-1.0") -> Path:
    """An sdist whose build backend (in-tree, ``backend-path = ["."]``) and ``setup.py`` write ``canary``."""
    pyproject = '[build-system]\nrequires = []\nbuild-backend = "evil_backend"\nbackend-path = ["."]\n'
    return _tar(folder / filename, [
        (f"{top}/PKG-INFO", b"Metadata-Version: 2.1\nName: hostile\nVersion: 1.0\n"),
        (f"{top}/pyproject.toml", pyproject.encode()),
        (f"{top}/evil_backend.py", BACKEND.format(canary=str(canary)).encode()),
        (f"{top}/setup.py", f"open({str(canary)!r}, 'a').write('setup.py\\n')\n".encode()),
        (f"{top}/hostile/__init__.py", b"def double(x):\n    return 2 * x\n"),
        (f"{top}/tests/test_hostile.py", b"from hostile import double\n\ndef test_double():\n    assert double(2) == 4\n"),
        _link(f"{top}/README.txt", "PKG-INFO"),  # a link inside the folder is fine
    ])


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(autouse=True)
def own_pip_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine's pip settings (config files, PIP_*) kept out: each test sets the ones it means."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture
def canary(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "canary-host-code-ran.txt"
    yield path
    assert not path.exists(), f"package code ran on the host: {path.read_text()}"


def test_a_hostile_sdist_from_find_links_is_fetched_and_unpacked_without_running_it(
        tmp_path: Path, canary: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reported attack: ``pip download`` called the in-tree backend's hooks, writing the canary."""
    hostile_sdist(tmp_path / "links", canary)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "links"))
    project = prepare_project("pypi:hostile==1.0", tmp_path / "work")
    assert not canary.exists()
    assert (tmp_path / "work" / "download" / "hostile-1.0.tar.gz").read_bytes() == \
        (tmp_path / "links" / "hostile-1.0.tar.gz").read_bytes()
    assert (tmp_path / "work" / "unpacked" / "hostile-1.0" / "evil_backend.py").is_file()
    assert "hostile/__init__.py" in project.source_files and project.test_files == ["tests/test_hostile.py"]
    assert (project.root / "hostile" / "__init__.py").read_text().startswith("def double")


def test_an_archive_in_the_download_folder_is_reused(tmp_path: Path, canary: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    hostile_sdist(tmp_path / "work" / "download", canary)
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # and no find-links: nothing to fetch from
    assert (download_sdist("hostile==1.0", tmp_path / "work") / "hostile" / "__init__.py").is_file()
    assert (download_sdist("hostile==1.0", tmp_path / "work") / "hostile" / "__init__.py").is_file()


def test_not_found_names_where_it_looked_and_what_to_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "links").mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "links"))
    with pytest.raises(SynthSourceError) as caught:
        download_sdist("hostile==1.0", tmp_path / "work")
    message = str(caught.value)
    assert "hostile==1.0" in message and (tmp_path / "links").as_uri() in message
    assert "PIP_INDEX_URL" in message and "PIP_FIND_LINKS" in message
    assert not list((tmp_path / "work" / "download").iterdir())


def test_pips_config_files_are_honoured(tmp_path: Path, canary: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A private mirror configured in ``pip.conf`` (read through ``pip config list``) keeps working."""
    hostile_sdist(tmp_path / "links", canary)
    config = tmp_path / "pip.conf"
    config.write_text(f"[global]\nno-index = true\nfind-links =\n    {tmp_path / 'nothing'}\n    {tmp_path / 'links'}\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
    settings = fetch.index_config()
    assert settings.index_urls == () and settings.find_links[-1] == (tmp_path / "links").as_uri()
    assert (download_sdist("hostile==1.0", tmp_path / "work") / "pyproject.toml").is_file()


def test_a_file_index_like_this_machines_mirror_is_read(tmp_path: Path, canary: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """``file:///…/simple`` whose project folders hold an ``index.html`` (as pip reads a local index); the
    name normalized (PEP 503) for the page and (PEP 625) in the file name."""
    archive = hostile_sdist(tmp_path / "files", canary, filename="hostile_pkg-1.0.tar.gz", top="hostile_pkg-1.0")
    page = tmp_path / "simple" / "hostile-pkg" / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text(f'<html><body><a href="../../files/{archive.name}#sha256={sha256(archive)}">x</a></body></html>')
    monkeypatch.setenv("PIP_INDEX_URL", (tmp_path / "simple").as_uri())
    folder = download_sdist("Hostile.Pkg==1.0.0", tmp_path / "work")
    assert folder.name == "hostile_pkg-1.0" and (folder / "hostile" / "__init__.py").is_file()


# -- a real index over loopback HTTP ----------------------------------------------------------------------


class _Index(ThreadingHTTPServer):
    routes: dict[str, tuple[str, bytes]]
    seen: list[tuple[str, str, str]]


class _Handler(BaseHTTPRequestHandler):
    server: _Index

    def do_GET(self) -> None:
        self.server.seen.append((self.path, self.headers.get("Accept", ""), self.headers.get("Authorization", "")))
        found = self.server.routes.get(self.path)
        if found is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", found[0])
        self.send_header("Content-Length", str(len(found[1])))
        self.end_headers()
        self.wfile.write(found[1])

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def index() -> Iterator[_Index]:
    server = _Index(("127.0.0.1", 0), _Handler)
    server.routes, server.seen = {}, []
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _base(server: _Index, credentials: str = "") -> str:
    return f"http://{credentials}127.0.0.1:{server.server_address[1]}"


def _serve_html(server: _Index, archive: Path, digest: str) -> None:
    page = f'<!DOCTYPE html><html><body><a href="../../files/{archive.name}#sha256={digest}">{archive.name}</a>'
    server.routes["/simple/hostile/"] = ("text/html", page.encode())
    server.routes[f"/files/{archive.name}"] = ("application/octet-stream", archive.read_bytes())


def test_an_http_index_with_the_right_sha256_is_fetched(tmp_path: Path, canary: Path, index: _Index,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    archive = hostile_sdist(tmp_path / "served", canary)
    _serve_html(index, archive, sha256(archive))
    monkeypatch.setenv("PIP_INDEX_URL", _base(index) + "/simple")
    project = prepare_project("pypi:hostile==1.0", tmp_path / "work")
    assert "hostile/__init__.py" in project.source_files
    assert [path for path, _, _ in index.seen] == ["/simple/hostile/", "/files/hostile-1.0.tar.gz"]
    assert "application/vnd.pypi.simple.v1+json" in index.seen[0][1]


def test_a_wrong_sha256_is_refused_and_nothing_is_kept(tmp_path: Path, canary: Path, index: _Index,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    archive = hostile_sdist(tmp_path / "served", canary)
    _serve_html(index, archive, "0" * 64)
    monkeypatch.setenv("PIP_INDEX_URL", _base(index) + "/simple")
    with pytest.raises(SynthSourceError, match=r"sha256 is [0-9a-f]{64}, the index says 0{64}; refusing"):
        download_sdist("hostile==1.0", tmp_path / "work")
    assert not list((tmp_path / "work" / "download").iterdir()) and not (tmp_path / "work" / "unpacked").exists()


def test_a_pep_691_json_page_and_its_hashes(tmp_path: Path, canary: Path, index: _Index,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    archive = hostile_sdist(tmp_path / "served", canary)
    files = [{"filename": "hostile-1.0.zip", "url": "/files/missing.zip", "hashes": {}},  # .tar.gz preferred
             {"filename": archive.name, "url": f"/files/{archive.name}", "hashes": {"sha256": "f" * 64}}]
    index.routes["/simple/hostile/"] = ("application/vnd.pypi.simple.v1+json",
                                        json.dumps({"meta": {"api-version": "1.0"}, "files": files}).encode())
    index.routes[f"/files/{archive.name}"] = ("application/octet-stream", archive.read_bytes())
    monkeypatch.setenv("PIP_INDEX_URL", _base(index) + "/simple/")
    with pytest.raises(SynthSourceError, match="refusing it"):
        download_sdist("hostile==1.0", tmp_path / "work")
    files[1]["hashes"] = {"sha256": sha256(archive).upper()}
    index.routes["/simple/hostile/"] = ("application/vnd.pypi.simple.v1+json", json.dumps({"files": files}).encode())
    assert (download_sdist("hostile==1.0", tmp_path / "work") / "hostile").is_dir()


def test_index_credentials_are_sent_and_never_printed(tmp_path: Path, canary: Path, index: _Index,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    archive = hostile_sdist(tmp_path / "served", canary)
    _serve_html(index, archive, sha256(archive))
    monkeypatch.setenv("PIP_INDEX_URL", _base(index, "me:s3cret@") + "/simple")
    download_sdist("hostile==1.0", tmp_path / "work")
    expected = "Basic " + base64.b64encode(b"me:s3cret").decode()
    assert [auth for _, _, auth in index.seen] == [expected, expected]
    with pytest.raises(SynthSourceError) as caught:
        download_sdist("nothere==1.0", tmp_path / "other")
    assert "s3cret" not in str(caught.value) and "me:***@127.0.0.1" in str(caught.value)


def test_a_page_over_http_cannot_point_at_a_file_on_this_machine(tmp_path: Path, canary: Path, index: _Index,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    archive = hostile_sdist(tmp_path / "private", canary)
    page = f'<a href="{archive.as_uri()}#sha256={sha256(archive)}">{archive.name}</a>'
    index.routes["/simple/hostile/"] = ("text/html", page.encode())
    monkeypatch.setenv("PIP_INDEX_URL", _base(index) + "/simple")
    with pytest.raises(SynthSourceError, match="could not download the sdist of hostile==1.0"):
        download_sdist("hostile==1.0", tmp_path / "work")


# -- archives that reach outside their folder ---------------------------------------------------------------


def _device(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
    return info


@pytest.mark.parametrize(("members", "said"), [
    ([("hostile-1.0/../../escaped.txt", b"x")], "outside the project folder"),
    ([("/tmp/pdbgym-escaped-absolute.txt", b"x")], "outside the project folder"),
    ([_link("hostile-1.0/etc", "/etc")], "links to '/etc'"),
    ([_link("hostile-1.0/up", "../../.."), ("hostile-1.0/up/escaped.txt", b"x")], "links to '../../..'"),
    ([_link("hostile-1.0/passwd", "/etc/passwd", tarfile.LNKTYPE)], "links to '/etc/passwd'"),
    ([_device("hostile-1.0/null")], "not a file, folder or link"),
])
def test_a_tar_reaching_outside_its_folder_is_refused(members: list, said: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _tar(tmp_path / "links" / "hostile-1.0.tar.gz", [("hostile-1.0/PKG-INFO", b"Name: hostile\n"), *members])
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "links"))
    with pytest.raises(SynthSourceError, match=f"hostile-1.0.tar.gz: refused, .*{said}"):
        download_sdist("hostile==1.0", tmp_path / "work")
    assert not list(tmp_path.rglob("escaped*")) and not Path("/tmp/pdbgym-escaped-absolute.txt").exists()
    assert not list((tmp_path / "work" / "unpacked").iterdir())


@pytest.mark.parametrize(("name", "link", "said"), [
    ("hostile-1.0/../../escaped.txt", False, "outside the project folder"),
    ("/escaped.txt", False, "outside the project folder"),
    ("hostile-1.0/etc", True, "is a link"),
])
def test_a_zip_reaching_outside_its_folder_or_holding_a_link_is_refused(name: str, link: bool, said: str,
                                                                        tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "links").mkdir()
    with zipfile.ZipFile(tmp_path / "links" / "hostile-1.0.zip", "w") as bundle:
        bundle.writestr("hostile-1.0/PKG-INFO", "Name: hostile\n")
        info = zipfile.ZipInfo(name)
        if link:
            info.external_attr = (0o120777 << 16)
        bundle.writestr(info, "/etc" if link else "x")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "links"))
    with pytest.raises(SynthSourceError, match=f"hostile-1.0.zip: refused, .*{said}"):
        download_sdist("hostile==1.0", tmp_path / "work")
    assert not list(tmp_path.rglob("escaped*"))

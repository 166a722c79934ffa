"""Unpack a fetched sdist, refusing any member that would land or point outside its folder.

``tarfile``'s ``data`` filter alone is not enough on every Python this runs on (3.11 and 3.12 before their
2025 fixes let a chain of links or a long path slip past it), so each member is checked first: no
absolute name or ``..``, no link whose target is absolute or has ``..`` (then no chain of links leaves the
folder either), nothing but files, folders and links, and no more than a bounded size. A zip may hold no
link at all (``zipfile`` would write its target as a file). The archive's own code never runs.
"""

from __future__ import annotations

import re
import stat
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

from pdbgym.tasks.synth.fetch import SynthSourceError

MAX_UNPACKED_BYTES = 2 << 30   # what an archive may unpack to: no decompression bomb fills the disk
MAX_MEMBERS = 200_000


def _unsafe_path(name: str) -> bool:
    path = PurePosixPath(name.replace("\\", "/"))
    return path.is_absolute() or ".." in path.parts


def check_tar(bundle: tarfile.TarFile, label: str) -> None:
    """Refuse any member outside the folder (absolute, ``..``), a link that is absolute or has a ``..``
    (so no chain of links leaves the folder either), a device or FIFO, and an archive too big to unpack."""
    total = 0
    for count, member in enumerate(bundle, 1):
        if count > MAX_MEMBERS:
            raise SynthSourceError(f"{label}: more than {MAX_MEMBERS} members")
        if _unsafe_path(member.name):
            raise SynthSourceError(f"{label}: refused, member {member.name!r} lies outside the project folder")
        if (member.issym() or member.islnk()) and _unsafe_path(member.linkname):
            raise SynthSourceError(f"{label}: refused, {member.name!r} links to {member.linkname!r}, "
                                   "outside the project folder")
        if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
            raise SynthSourceError(f"{label}: refused, {member.name!r} is not a file, folder or link")
        total += member.size
        if total > MAX_UNPACKED_BYTES:
            raise SynthSourceError(f"{label}: unpacks to more than {MAX_UNPACKED_BYTES >> 30} GiB")


def check_zip(bundle: zipfile.ZipFile, label: str) -> None:
    """Refuse any member outside the folder, any link (zipfile would write it as a file) and a zip bomb."""
    members = bundle.infolist()
    if len(members) > MAX_MEMBERS:
        raise SynthSourceError(f"{label}: more than {MAX_MEMBERS} members")
    for info in members:
        if _unsafe_path(info.filename) or re.match(r"^[A-Za-z]:", info.filename):
            raise SynthSourceError(f"{label}: refused, member {info.filename!r} lies outside the project folder")
        if stat.S_ISLNK(info.external_attr >> 16):
            raise SynthSourceError(f"{label}: refused, {info.filename!r} is a link")
    if sum(info.file_size for info in members) > MAX_UNPACKED_BYTES:
        raise SynthSourceError(f"{label}: unpacks to more than {MAX_UNPACKED_BYTES >> 30} GiB")


def unpack_sdist(archive: Path, dest: Path) -> Path:
    """Unpack ``archive`` into the empty folder ``dest`` after checking every member; returns the project
    folder (the archive's single top folder, else ``dest``)."""
    dest.mkdir(parents=True)
    try:
        if archive.name.endswith(".zip"):
            with zipfile.ZipFile(archive) as bundle:
                check_zip(bundle, archive.name)
                bundle.extractall(dest)
        else:
            with tarfile.open(archive) as bundle:
                check_tar(bundle, archive.name)
                bundle.extractall(dest, filter="data")  # checks again, and drops setuid and owners
    except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError) as exc:
        raise SynthSourceError(f"{archive.name}: cannot unpack ({exc})") from exc
    tops = [p for p in dest.iterdir() if p.is_dir() and not p.is_symlink()]
    return tops[0] if len(tops) == 1 else dest

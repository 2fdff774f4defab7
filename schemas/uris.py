"""Container image references and gs:// URIs, parsed into their parts, so that every rule compares parts, never text.

An image reference follows Docker's grammar (https://github.com/distribution/reference, `reference.go`):
`[HOST[:PORT]/]PATH[:TAG][@DIGEST]`, where the first component is a registry host only when it holds a `.` or a `:`
or is `localhost`, and each path component is lowercase letters and digits joined by `.`, `_`, `__` or dashes. So a
`.` or `..` component, an empty one, a percent-escape and a space are all outside the grammar; each is refused with
its own reason. A reference with no host is Docker Hub's (`docker.io`, `library/` for a one-component name), as
Docker and Vertex AI read it.

A gs:// URI is a bucket name (https://cloud.google.com/storage/docs/buckets#naming) and an object name whose
`/`-separated segments are never empty (`//`), `.` or `..`: a FUSE mount (`/gcs/BUCKET/NAME`, how Landfall's jobs
read data) would resolve those to another folder or bucket. Percent-escapes of `.`, `/`, `\\` and `%` itself are
refused where a tool that decodes URLs would turn them into those.

An allowed place for images (a prefix in the settings) is parsed the same way and compared component by component:
`host/a/b/` holds `host/a/b/image:tag`, never `host/a/bc/image` or `host/a/b/../c/image`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from schemas.errors import SchemaError

DOCKER_HUB = "docker.io"
_DOCKER_HUB_ALIASES = ("index.docker.io",)
MAX_IMAGE_NAME_CHARS = 255
"""Docker's limit on a reference's name (host and path, without tag or digest)."""

_HOST = re.compile(
    r"(?:(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*"
    r"|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
)
_PATH_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_TAG = re.compile(r"[\w][\w.-]{0,127}")
_DIGEST = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}")
_BUCKET = re.compile(r"[a-z0-9](?:[a-z0-9._-]{0,220}[a-z0-9])?")
_CONTROL_OR_SPACE = re.compile(r"[\s\x00-\x1f\x7f]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_HIDING_ESCAPE = re.compile(r"%(?:2e|2f|5c|25)", re.IGNORECASE)
"""Percent-escapes of '.', '/', '\\' and '%': what a URL-decoding tool would turn into a path step."""


@dataclass(frozen=True)
class ImageRef:
    """A parsed image reference."""

    host: str
    """The registry host (with its port), lower case; docker.io when the reference names none."""
    path: tuple[str, ...]
    """The repository path's components, e.g. ("acme-ml", "landfall", "team-nlp")."""
    tag: str = ""
    digest: str = ""

    def within(self, place: ImagePlace) -> bool:
        """Whether this image lies in place: the same host and the place's path components, in order, first."""
        n = len(place.path)
        deeper = len(self.path) > n if place.folder else len(self.path) >= n
        return self.host == place.host and self.path[:n] == place.path and deeper


@dataclass(frozen=True)
class ImagePlace:
    """A place images may come from: `host/path/` (a folder: images below it) or `host/path/name` (that image)."""

    host: str
    path: tuple[str, ...]
    folder: bool

    def __str__(self) -> str:
        return "/".join((self.host, *self.path)) + ("/" if self.folder else "")


@dataclass(frozen=True)
class GcsUri:
    """A parsed gs:// URI."""

    bucket: str
    name: str
    """The object name, or a folder's prefix (ending in '/', or "" for the whole bucket)."""

    @property
    def segments(self) -> tuple[str, ...]:
        return tuple(s for s in self.name.split("/") if s)


def _refuse(message: str, field: str) -> SchemaError:
    return SchemaError(message, field=field)


def _shown(text: str) -> str:
    return repr(text if len(text) <= 200 else text[:200] + "...")


def parse_image(text: str, field: str) -> ImageRef:
    """The reference's parts; SchemaError (naming field and the rule broken) when it is outside Docker's grammar."""
    shown = _shown(text)
    if not text:
        raise _refuse("is empty; name an image as HOST/PATH:TAG", field)
    if _CONTROL_OR_SPACE.search(text):
        raise _refuse(f"{shown} holds a space or a control character; an image reference holds neither", field)
    if "%" in text:
        raise _refuse(f"{shown} holds a percent-escape; write the reference as it is, without %XX escapes", field)
    if "://" in text:
        raise _refuse(f"{shown} is a URL; an image reference has no scheme (HOST/PATH:TAG)", field)
    name, _, digest = text.partition("@")
    if digest and not _DIGEST.fullmatch(digest):
        raise _refuse(f"{shown}: {digest!r} is not a digest (ALGORITHM:HEX, e.g. sha256: and 64 hex digits)", field)
    last_slash = name.rfind("/")
    tag = ""
    if name.rfind(":") > last_slash:
        name, _, tag = name.rpartition(":")
        if not _TAG.fullmatch(tag):
            raise _refuse(f"{shown}: {tag!r} is not a tag (letters, digits, '_', '.', '-'; at most 128)", field)
    if len(name) > MAX_IMAGE_NAME_CHARS:
        raise _refuse(f"{shown}: the name is longer than Docker's {MAX_IMAGE_NAME_CHARS} characters", field)
    host, path = _host_and_path(name, shown, field)
    return ImageRef(host=host, path=path, tag=tag, digest=digest)


def _host_and_path(name: str, shown: str, field: str) -> tuple[str, tuple[str, ...]]:
    components = name.split("/")
    if "" in components:
        raise _refuse(f"{shown} has an empty path component (a '//' or a leading or trailing '/')", field)
    if "." in components or ".." in components:
        raise _refuse(f"{shown} has a '.' or '..' path component; name the image by its real path", field)
    first = components[0]
    if len(components) > 1 and ("." in first or ":" in first or first == "localhost" or first != first.lower()):
        if not _HOST.fullmatch(first):
            raise _refuse(f"{shown}: {first!r} is not a registry host (a domain or address, optional :PORT)", field)
        host, path = first.lower(), components[1:]
    else:
        host, path = DOCKER_HUB, components if len(components) > 1 else ["library", *components]
    host = DOCKER_HUB if host in _DOCKER_HUB_ALIASES else host
    for component in path:
        if not _PATH_COMPONENT.fullmatch(component):
            raise _refuse(
                f"{shown}: path component {component!r} is outside Docker's grammar (lowercase letters and digits, "
                "joined by '.', '_', '__' or '-')",
                field,
            )
    return host, tuple(path)


def parse_image_place(text: str, field: str) -> ImagePlace:
    """An allowed place for images, `HOST/PATH/` or `HOST/PATH/NAME` (the host is required: a place says where)."""
    folder = text.endswith("/")
    name = text.removesuffix("/")
    ref = parse_image(name, field)
    named_host = name.split("/", 1)[0].lower()
    if ref.tag or ref.digest or "/" not in name or named_host not in (ref.host, *_DOCKER_HUB_ALIASES):
        raise _refuse(
            f"{_shown(text)} is not an image place: give HOST/PATH/ (a folder of images) or HOST/PATH/NAME, "
            "e.g. us-docker.pkg.dev/vertex-ai/training/",
            field,
        )
    return ImagePlace(host=ref.host, path=ref.path, folder=folder)


def parse_gcs_uri(text: str, field: str, *, folder: bool = False) -> GcsUri:
    """gs://BUCKET/NAME split and checked; folder=True takes a prefix (NAME may be "" or end in '/'), else an
    object. SchemaError names field and the rule broken."""
    shown = _shown(text)
    what = "gs://BUCKET/PREFIX/" if folder else "gs://BUCKET/PATH"
    if not text.startswith("gs://"):
        raise _refuse(f"{shown} is not a {what} URI", field)
    if _CONTROL.search(text):
        raise _refuse(f"{shown} holds a control character; a Cloud Storage name holds none", field)
    if "\\" in text:
        raise _refuse(f"{shown} holds a backslash; separate folders with '/'", field)
    if _HIDING_ESCAPE.search(text):
        raise _refuse(
            f"{shown} holds a percent-escape of '.', '/', '\\' or '%' (%2e, %2f, %5c, %25); write the name as it is",
            field,
        )
    bucket, _, name = text.removeprefix("gs://").partition("/")
    if not _BUCKET.fullmatch(bucket) or ".." in bucket:
        raise _refuse(
            f"{shown}: {bucket!r} is not a bucket name (lowercase letters, digits, '-', '_' and '.', starting and "
            f"ending with a letter or digit); expected {what}",
            field,
        )
    segments = name.split("/")
    if folder and segments[-1] == "":
        segments = segments[:-1]  # the prefix's trailing '/', or the whole bucket
    elif not folder and not name:
        raise _refuse(f"{shown} names a bucket, not an object; expected {what}", field)
    if "" in segments:
        raise _refuse(f"{shown} has an empty segment (a '//', or a '/' at either end of the name)", field)
    if "." in segments or ".." in segments:
        raise _refuse(f"{shown} has a '.' or '..' segment; name the object by its real path", field)
    if len(name.encode()) > 1024:
        raise _refuse(f"{shown}: an object name is at most 1,024 bytes", field)
    return GcsUri(bucket=bucket, name=name)

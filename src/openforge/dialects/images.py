"""Images arrive as remote URLs, ``data:`` URLs or base64 sources; all become ImagePart.

Inline images are decoded and checked here, while the dialect parses, so a bad one is a
400 in the dialect's own shape naming the field (``param``): the base64 must decode, the
bytes must be an image Pillow recognises, of the declared media type, within
:data:`MAX_IMAGE_BYTES` and :data:`MAX_IMAGE_PIXELS`. Pillow reads the header and checks
the file's structure (``verify``: PNG chunk CRCs, truncation) without decoding pixels;
a model that needs the pixels (a VLM) decodes them when it renders. An image re-sent
with every call (a GUI harness's screenshot history) is checked once: later copies of
the same base64 text are found in a bounded cache. Remote images keep
their URL; the gateway fetches them only when its options allow it and then checks the
bytes with :func:`decode_image`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import re
import struct
import threading
import warnings
from collections import OrderedDict
from dataclasses import replace

from PIL import Image, UnidentifiedImageError

from openforge.conversation import ImagePart
from openforge.dialects.errors import ApiError

__all__ = [
    "MAX_IMAGE_BYTES",
    "MAX_IMAGE_PIXELS",
    "MEDIA_TYPES",
    "decode_image",
    "image_from_base64",
    "image_from_url",
]

# Anthropic documents 5 MB per image and OpenAI 20 MB per image (50 MB per request);
# the larger bound keeps both APIs' valid requests valid here.
MAX_IMAGE_BYTES = 20 << 20
# 8K by 8K: above any screen; a decompression bomb (a small PNG of huge size) is refused
# before a single pixel is decoded.
_SIDE = 8192
MAX_IMAGE_PIXELS = _SIDE * _SIDE
# The formats both APIs accept, by Pillow format name.
MEDIA_TYPES = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp"}
_ALIASES = {"image/jpg": "image/jpeg"}
_PNG = b"\x89PNG\r\n\x1a\n"


def _bad(message: str, param: str | None) -> ApiError:
    return ApiError("invalid_request", message, param)


def _bomb(where: str, size: str, param: str | None) -> ApiError:
    return _bad(
        f"Invalid image at '{where}': refused as a decompression bomb: its header declares "
        f"{size}, over the limit of {MAX_IMAGE_PIXELS} pixels ({_SIDE}x{_SIDE}).",
        param,
    )


def decode_image(data: bytes, declared: str | None, param: str | None) -> ImagePart:
    """Check ``data`` is one image of ``declared`` media type (None: any we accept).

    Returns an :class:`ImagePart` with the bytes, their sha256, size and media type (its
    ``url`` empty: callers set it). Raises ``ApiError("invalid_request")`` naming ``param``.
    """
    where = param or "image"
    if len(data) > MAX_IMAGE_BYTES:
        raise _bad(
            f"Invalid image at '{where}': {len(data)} bytes exceed the limit of "
            f"{MAX_IMAGE_BYTES} bytes.",
            param,
        )
    if not data:
        raise _bad(f"Invalid image at '{where}': the image is empty.", param)
    try:
        with warnings.catch_warnings():
            # Pillow warns (DecompressionBombWarning) before it refuses; we refuse ourselves.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as img:
                fmt, (width, height) = img.format, img.size
                if width * height > MAX_IMAGE_PIXELS:
                    raise _bomb(where, f"{width}x{height} pixels", param)
                img.verify()
    except ApiError:
        raise
    except Image.DecompressionBombError as exc:
        # Pillow refuses past twice its own limit before it reports the size: a PNG's is
        # read from its header, any other's pixel count from Pillow's message.
        if data.startswith(_PNG) and len(data) >= 24:
            w, h = struct.unpack(">II", data[16:24])
            size = f"{w}x{h} pixels"
        else:
            found = re.search(r"\((\d+) pixels\)", str(exc))
            size = f"{found.group(1) if found else 'too many'} pixels"
        raise _bomb(where, size, param) from None
    except UnidentifiedImageError:
        raise _bad(
            f"Invalid image at '{where}': the bytes are not an image in a supported format "
            f"({', '.join(MEDIA_TYPES.values())}).",
            param,
        ) from None
    except (OSError, SyntaxError, ValueError) as exc:  # Pillow's errors for broken files
        raise _bad(f"Invalid image at '{where}': the image is corrupt ({exc}).", param) from None
    actual = MEDIA_TYPES.get(fmt or "")
    if actual is None:
        raise _bad(
            f"Invalid image at '{where}': {fmt} images are not supported "
            f"({', '.join(MEDIA_TYPES.values())}).",
            param,
        )
    wanted = _ALIASES.get(declared or "", declared)
    if wanted is not None and wanted != actual:
        raise _bad(
            f"Invalid image at '{where}': the media type is {declared!r} but the bytes are "
            f"{actual!r}.",
            param,
        )
    return ImagePart(
        url="",
        media_type=actual,
        data=data,
        sha256=hashlib.sha256(data).hexdigest(),
        width=width,
        height=height,
        param=param,
    )


class _Checked:
    """Images already decoded and checked, keyed by their base64 text (bounded in bytes).

    A GUI harness re-sends every screenshot of its history on every call; each is checked
    once, later copies cost a dictionary lookup instead of base64 decoding, Pillow's
    verification and a sha256. Locked: large bodies are parsed on worker threads."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._d: OrderedDict[tuple[str, str], ImagePart] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str]) -> ImagePart | None:
        with self._lock:
            found = self._d.get(key)
            if found is not None:
                self._d.move_to_end(key)
            return found

    def put(self, key: tuple[str, str], part: ImagePart) -> None:
        with self._lock:
            if key in self._d:
                return
            self._d[key] = part
            self._bytes += len(part.data or b"")
            while self._bytes > self.max_bytes and self._d:
                _, old = self._d.popitem(last=False)
                self._bytes -= len(old.data or b"")


_CHECKED = _Checked(256 << 20)


def _checked_base64(payload: str, declared: str | None, param: str | None) -> ImagePart:
    """The image ``payload`` (base64) holds, checked once per distinct payload."""
    key = (declared or "", payload)
    found = _CHECKED.get(key)
    if found is None or len(found.data or b"") > MAX_IMAGE_BYTES:  # (the limit may change)
        found = decode_image(_b64(payload, param), declared, param)
        _CHECKED.put(key, found)
    return replace(found, param=param)


def _b64(data: str, param: str | None) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        where = param or "image"
        raise _bad(f"Invalid image at '{where}': the data is not valid base64.", param) from None


def image_from_url(url: str, param: str | None = None, detail: str | None = None) -> ImagePart:
    """An :class:`ImagePart` for ``url``: a ``data:`` URL is decoded and checked now, an
    http(s) URL is kept for the gateway to fetch; any other scheme is refused."""
    if url.startswith("data:"):
        head, comma, payload = url[5:].partition(",")
        media_type, _, encoding = head.partition(";")
        if not comma or encoding != "base64":
            raise _bad(
                f"Invalid image URL at '{param or 'image'}': a data URL must be "
                "'data:<media type>;base64,<data>'.",
                param,
            )
        part = _checked_base64(payload, media_type or None, param)
        part.url, part.detail = url, detail
        return part
    if url.startswith(("http://", "https://")):
        return ImagePart(url=url, detail=detail, param=param)
    raise _bad(
        f"Invalid image URL at '{param or 'image'}': expected an http(s) or base64 data URL.",
        param,
    )


def image_from_base64(media_type: str, data: str, param: str | None = None) -> ImagePart:
    """An :class:`ImagePart` from base64 ``data`` of ``media_type``, decoded and checked."""
    part = _checked_base64(data, media_type, param)
    part.url = f"data:{media_type};base64,{data}"
    return part

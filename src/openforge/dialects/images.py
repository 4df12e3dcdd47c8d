"""Images arrive as remote URLs, ``data:`` URLs or base64 sources; all become ImagePart."""

from __future__ import annotations

from openforge.conversation import ImagePart

__all__ = ["image_from_base64", "image_from_url"]


def image_from_url(url: str) -> ImagePart:
    """An :class:`ImagePart` for ``url``; the media type is read from a ``data:`` URL."""
    media_type = None
    if url.startswith("data:"):
        head = url[5 : url.find(",")] if "," in url else url[5:]
        media_type = head.split(";", 1)[0] or None
    return ImagePart(url=url, media_type=media_type)


def image_from_base64(media_type: str, data: str) -> ImagePart:
    """An :class:`ImagePart` holding base64 ``data`` as a ``data:`` URL."""
    return ImagePart(url=f"data:{media_type};base64,{data}", media_type=media_type)

"""A call's images: fetched when allowed, stored once by sha256, referenced from the record.

Dialects decode and check inline images while they parse (:mod:`openforge.dialects.images`);
remote ones (``https://…``) reach the gateway as URLs. :class:`CallImages` fetches those
only when :class:`~openforge.gateway.limits.Limits` allows it (off by default: a sandboxed
agent should not make the gateway fetch arbitrary addresses), within a size and a time
limit, and checks the bytes the same way. Each image's bytes go to the store's blobs once
(the store ignores a digest it has; this gateway also remembers the digests it stored, so
a screenshot re-sent on every call of a rollout costs one hash, not one write). The call
record keeps the conversation and the raw request with every image replaced by a
reference, ``sha256:<hex>``, so 30 calls that re-send 30 screenshots store 30 images,
not 465.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import replace

import httpx

from openforge.conversation import Conversation, ImagePart, Message
from openforge.dialects.errors import ApiError
from openforge.dialects.images import decode_image
from openforge.gateway.limits import Limits
from openforge.store.base import Store, StoreError
from openforge.store.schemas import Blob

__all__ = ["BLOB_REF", "CallImages", "image_parts", "stored_conversation", "stored_request"]

# How a stored request or conversation names an image kept in the store's blobs.
BLOB_REF = "sha256:"
_KNOWN = 4096  # digests this gateway remembers having stored


def image_parts(conversation: Conversation) -> list[ImagePart]:
    """Every image of ``conversation``, in order."""
    return [p for m in conversation.messages for p in m.content if isinstance(p, ImagePart)]


def stored_conversation(conversation: Conversation) -> Conversation:
    """``conversation`` as recorded: images keep their digest, size and media type, not
    their bytes (an inline image's ``url`` becomes its ``sha256:`` reference)."""
    if not image_parts(conversation):
        return conversation
    messages: list[Message] = []
    for m in conversation.messages:
        if any(isinstance(p, ImagePart) for p in m.content):
            content = [
                replace(p, data=None, url=_stored_url(p)) if isinstance(p, ImagePart) else p
                for p in m.content
            ]
            m = replace(m, content=content)
        messages.append(m)
    return replace(conversation, messages=messages)


def _stored_url(part: ImagePart) -> str:
    if part.url.startswith("data:") or not part.url:
        return f"{BLOB_REF}{part.sha256}"
    return part.url


def stored_request(body: bytes, images: list[ImagePart]) -> bytes:
    """The raw request with each inline image's base64 replaced by its reference.

    The base64 text is found as the client sent it (JSON writes base64 without escapes),
    each occurrence searched from the end of the previous one: images appear in the body
    in conversation order, so the body is scanned once, however many screenshots it
    re-sends. One that cannot be found (an escaped ``\\/``) is left in place.
    """
    pieces: list[bytes] = []
    pos = 0
    for part in images:
        if part.sha256 is None or not part.url.startswith("data:"):
            continue
        payload = part.url.partition(",")[2].encode()
        at = body.find(payload, pos) if payload else -1
        if at < 0:
            continue
        pieces += [body[pos:at], f"{BLOB_REF}{part.sha256}".encode()]
        pos = at + len(payload)
    if not pieces:
        return body
    pieces.append(body[pos:])
    return b"".join(pieces)


class CallImages:
    """Resolves and stores the images of calls, for one gateway."""

    def __init__(self, store: Store, limits: Limits) -> None:
        self.store = store
        self.limits = limits
        self._known: OrderedDict[str, None] = OrderedDict()
        self._client: httpx.AsyncClient | None = None

    async def resolve(self, conversation: Conversation) -> list[ImagePart]:
        """Fetch remote images (when allowed) and store every new image; returns them all.

        Raises ApiError (``invalid_request``, naming the field) for a URL the gateway may
        not fetch or whose answer is not a valid image."""
        parts = image_parts(conversation)
        if not parts:
            return parts
        remote = [p for p in parts if p.data is None]
        if remote:
            await asyncio.gather(*(self._fetch(p) for p in remote))
        fresh: dict[str, Blob] = {}
        for p in parts:
            assert p.data is not None and p.sha256 is not None and p.media_type is not None
            if p.sha256 not in self._known and p.sha256 not in fresh:
                fresh[p.sha256] = Blob(p.sha256, p.media_type, p.data)
        if fresh:
            try:
                await self.store.put_blobs(list(fresh.values()))
            except StoreError as exc:
                raise ApiError(
                    "internal", f"The gateway could not store this call's images ({exc}); retry."
                ) from None
            for digest in fresh:
                self._known[digest] = None
                if len(self._known) > _KNOWN:
                    self._known.popitem(last=False)
        return parts

    async def _fetch(self, part: ImagePart) -> None:
        where = part.param or "image"
        limits = self.limits
        if not limits.fetch_image_urls:
            raise ApiError(
                "invalid_request",
                f"Invalid image at '{where}': this gateway does not fetch image URLs (start it "
                "with --fetch-image-urls); send the image inline as base64.",
                part.param,
            )
        if self._client is None:
            self._client = httpx.AsyncClient(follow_redirects=True, trust_env=False)
        data = bytearray()
        try:
            async with asyncio.timeout(limits.image_fetch_timeout_s):
                async with self._client.stream("GET", part.url) as answer:
                    if answer.status_code != 200:
                        raise ApiError(
                            "invalid_request",
                            f"Invalid image at '{where}': fetching {part.url} answered "
                            f"HTTP {answer.status_code}.",
                            part.param,
                        )
                    async for chunk in answer.aiter_bytes():
                        data += chunk
                        if len(data) > limits.image_fetch_max_bytes:
                            raise ApiError(
                                "invalid_request",
                                f"Invalid image at '{where}': {part.url} is larger than "
                                f"{limits.image_fetch_max_bytes} bytes.",
                                part.param,
                            )
        except TimeoutError:
            raise ApiError(
                "invalid_request",
                f"Invalid image at '{where}': {part.url} did not arrive within "
                f"{limits.image_fetch_timeout_s:g} s.",
                part.param,
            ) from None
        except httpx.HTTPError as exc:
            raise ApiError(
                "invalid_request",
                f"Invalid image at '{where}': fetching {part.url} failed ({exc}).",
                part.param,
            ) from None
        found = decode_image(bytes(data), None, part.param)
        part.data, part.sha256, part.media_type = found.data, found.sha256, found.media_type
        part.width, part.height = found.width, found.height

    async def close(self) -> None:
        """Close the HTTP client used for fetching."""
        if self._client is not None:
            await self._client.aclose()

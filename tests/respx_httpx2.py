"""respx for the SDKs' HTTP stack: anthropic 2.x and openai 3.x send through `httpx2`, which
respx (built for `httpx`) does not patch. This registers a respx mocker named "httpx2"
that routes every `httpx2.Client` request through the active respx routers, so tests use
plain respx routes and side effects:

    with respx.mock(using="httpx2", assert_all_mocked=True) as router: ...

Requests are converted to `httpx.Request` (same method, URL, headers, body bytes) and
responses back to `httpx2.Response`, streamed chunk for chunk as the side effect produced
them (chunk boundaries are kept: the SSE property tests depend on it). Closing the
converted response closes the respx stream, which is how a test sees a cancelled request.
"""

from __future__ import annotations

import httpx
import httpx2
from respx.mocks import Mocker
from respx.models import PassThrough


class _ChunkStream(httpx2.SyncByteStream):
    """The respx response's raw byte stream, chunk for chunk, closable from any thread."""

    def __init__(self, response: httpx.Response):
        self._response = response

    def __iter__(self):
        try:
            for chunk in self._response.stream:  # type: ignore[union-attr]
                if chunk:
                    yield bytes(chunk)
        except httpx.ReadError as exc:  # the same failure, as the SDKs' HTTP stack raises it
            raise httpx2.ReadError(str(exc)) from None

    def close(self) -> None:
        stream = self._response.stream
        inner = getattr(stream, "_stream", None)  # httpx wraps a plain iterable; close it too
        for target in (stream, inner):
            closer = getattr(target, "close", None)
            if closer is not None:
                closer()


def _to_httpx(request: httpx2.Request) -> httpx.Request:
    return httpx.Request(
        request.method,
        str(request.url),
        headers=list(request.headers.raw),
        content=request.read(),
    )


def _to_httpx2(response: httpx.Response, request: httpx2.Request) -> httpx2.Response:
    return httpx2.Response(
        response.status_code,
        headers=list(response.headers.raw),
        stream=_ChunkStream(response),
        request=request,
    )


class HTTPX2Mocker(Mocker):
    """Patches httpx2.Client._transport_for_url to a mock transport backed by respx."""

    name = "httpx2"
    targets = ["httpx2._client.Client"]
    target_methods = ["_transport_for_url"]

    @classmethod
    def mock(cls, spec):
        def _transport_for_url(self, *args, **kwargs):
            def handle(request: httpx2.Request) -> httpx2.Response:
                try:
                    response = cls.handler(_to_httpx(request))
                except PassThrough:  # pragma: no cover - tests never pass through
                    raise AssertionError("respx pass-through is not allowed for httpx2 tests")
                except httpx.TransportError as exc:  # e.g. side_effect=httpx.ConnectError
                    raise getattr(httpx2, type(exc).__name__, httpx2.TransportError)(str(exc), request=request) from None
                return _to_httpx2(response, request)

            return httpx2.MockTransport(handle)

        return _transport_for_url

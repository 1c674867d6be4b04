"""HTTP to a server: loopback and unspecified addresses reached directly (never through a
proxy), and the first of a server's JSON endpoints that answers."""

from __future__ import annotations

import ipaddress
import json
import urllib.parse
import urllib.request
from typing import Any, Optional, Union

__all__ = ["get_json", "is_local", "is_loopback", "urlopen"]


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def is_local(url_or_host: str) -> bool:
    """A loopback or unspecified address (what servers specexp starts listen on), reached
    directly, never through a proxy."""
    host = urllib.parse.urlsplit(url_or_host).hostname if "//" in url_or_host else url_or_host
    if not host:
        return False
    try:
        return is_loopback(host) or ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def urlopen(request: Union[str, urllib.request.Request], timeout: float) -> Any:
    """urllib's urlopen, direct to a local server whatever $HTTP_PROXY and the like say
    (urllib would send loopback requests to the proxy); other servers honour them."""
    url = request if isinstance(request, str) else request.full_url
    if is_local(url):
        return _DIRECT.open(request, timeout=timeout)
    return urllib.request.urlopen(request, timeout=timeout)


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get_json(base_url: Optional[str], paths: tuple[str, ...]) -> Optional[dict]:
    """The first of ``paths`` on the server that answers with JSON, or None (also with no
    ``base_url``: a server known not to answer, which would hold each request its timeout)."""
    if base_url is None:
        return None
    for path in paths:
        try:
            with urlopen(base_url + path, timeout=10) as response:
                return json.loads(response.read())
        except (OSError, ValueError):
            continue
    return None

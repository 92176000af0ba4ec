"""Who may use the run console: authentication, the Host allow-list and cross-site refusal.

Every request to ``agentctl serve`` passes :func:`guard` (an aiohttp middleware) before any
handler runs:

1. **Host allow-list** (DNS rebinding): a ``Host`` whose name is not allowed gets 421, GETs
   included. Allowed by default: the bind address, ``127.0.0.1``, ``localhost`` and ``[::1]``;
   ``AGENT_CONSOLE_ALLOWED_HOSTS`` (comma-separated names) adds more.
2. **Authentication**, always on (:class:`Authenticator`): mode ``token`` (the default; Jupyter's
   model), ``oidc`` (JWT bearer tokens checked against a JWKS with PyJWT) or ``proxy`` (identity
   from a header set by a trusted reverse proxy, oauth2-proxy style). No identity: 401.
3. **Cross-site refusal** of state changes: a ``POST`` needs ``Content-Type: application/json``
   (so a browser preflights it, and we answer no CORS), an ``Origin`` equal to the console's own
   (or listed in ``AGENT_CONSOLE_ALLOWED_ORIGINS``) or, without ``Origin``, a ``Sec-Fetch-Site``
   of ``same-origin``/``none``; and, when the person authenticated by cookie, the
   ``X-CSRF-Token`` that ``GET /api/session`` gave the page (an HMAC of the session under a
   secret of this server process: another origin can neither read nor compute it). Refusals: 403.

The identity (:class:`Identity`) is put on the request under :data:`IDENTITY_KEY`; handlers take
the principal from it, never from the body.

Sources: Jupyter Server's token + XSRF + ``allow_origin``/``local_hostnames`` design; OWASP's
CSRF prevention cheat sheet (Fetch Metadata, Origin check, synchronizer tokens); oauth2-proxy's
``X-Forwarded-User``/``X-Forwarded-Groups`` headers.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import logging
import os
import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from aiohttp import web
from aiohttp.typedefs import Middleware

logger = logging.getLogger(__name__)

AuthMode = Literal["token", "oidc", "proxy"]
COOKIE = "agent_console"
"""Name of the session cookie (HttpOnly, SameSite=Strict)."""
CSRF_HEADER = "X-CSRF-Token"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


class AuthConfigError(ValueError):
    """The console's authentication settings cannot work (the message says what to set)."""


@dataclass(frozen=True)
class Identity:
    """An authenticated person.

    ``tenants`` holds the tenant ids whose runs the person may see and act on; ``"*"`` in it means
    every tenant, which only the local token's owner can hold (:func:`granted_tenants` drops a
    ``"*"`` coming from a proxy header or an OIDC claim). ``via`` is how they authenticated:
    ``bearer`` (``Authorization`` header), ``cookie`` or ``proxy``.
    """

    principal_id: str
    roles: frozenset[str] = frozenset()
    tenants: frozenset[str] = frozenset({"default"})
    via: str = "bearer"

    def may_see(self, tenant_id: str | None) -> bool:
        """Whether runs of ``tenant_id`` are this person's to see and act on."""
        return "*" in self.tenants or (tenant_id or "default") in self.tenants

    def public(self) -> dict[str, Any]:
        """The identity as JSON for ``GET /api/session``."""
        return {
            "principal_id": self.principal_id,
            "roles": sorted(self.roles),
            "tenants": sorted(self.tenants),
        }


IDENTITY_KEY = web.RequestKey("agent_console_identity", Identity)
"""``request[IDENTITY_KEY]``: the :class:`Identity` set by :func:`guard`."""


def token_file(state_dir: str | Path) -> Path:
    """``<state_dir>/console-token``: where the local token lives (mode 0600)."""
    return Path(state_dir).expanduser() / "console-token"


def load_or_create_token(state_dir: str | Path) -> str:
    """The console token, created (32 random bytes, URL-safe) with mode 0600 on first use.

    Raises:
        OSError: the state folder cannot be written.
    """
    path = token_file(state_dir)
    try:
        tok = path.read_text().strip()
        if tok:
            return tok
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tok = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(tok + "\n")
    os.chmod(path, 0o600)
    return tok


def read_token(state_dir: str | Path) -> str | None:
    """The console token if one was created (what ``agentctl`` sends), else None."""
    try:
        return token_file(state_dir).read_text().strip() or None
    except OSError:
        return None


def granted_tenants(names: Sequence[Any], source: str, principal: str) -> frozenset[str]:
    """The tenant ids a proxy header or an OIDC claim grants: ``names`` as strings, without ``"*"``.

    Only the local token's owner (``AGENT_CONSOLE_TENANTS``) may see every tenant: a ``"*"`` (and
    a blank name) from ``source`` is dropped, with a warning naming ``principal``. Nothing left:
    ``{"default"}``, as when no tenant was named.
    """
    out = {str(n).strip() for n in names}
    if "*" in out:
        logger.warning(
            "console: ignored tenant '*' for %r from %s (only the local token may see every "
            "tenant; name the tenants)",
            principal,
            source,
        )
    return frozenset(out - {"*", ""}) or frozenset({"default"})


def split_list(raw: str | Sequence[str] | None) -> list[str]:
    """``"a, b,"`` or a sequence -> ``["a", "b"]`` (blanks dropped)."""
    if raw is None:
        return []
    items = raw.split(",") if isinstance(raw, str) else list(raw)
    return [x.strip() for x in items if x and x.strip()]


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or address) is this machine only."""
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class Authenticator:
    """Turns a request into an :class:`Identity`, or None (401).

    Built by :func:`authenticator_from_settings`. ``token``: the secret of mode ``token``;
    ``principal``/``tenants``: who the token's holder is. ``proxy_header``/``trusted_proxies``:
    mode ``proxy``. ``jwks_url``/``issuer``/``audience``: mode ``oidc`` (claims ``sub`` or
    ``principal_claim``, ``roles``, ``tenants``).
    """

    mode: AuthMode = "token"
    token: str | None = None
    principal: str = "console"
    tenants: frozenset[str] = frozenset({"*"})
    proxy_header: str = "X-Forwarded-User"
    groups_header: str = "X-Forwarded-Groups"
    trusted_proxies: frozenset[str] = frozenset()
    jwks_url: str | None = None
    issuer: str | None = None
    audience: str | None = None
    principal_claim: str = "sub"
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    _jwks: Any = None

    def csrf_for(self, ident: Identity) -> str:
        """The CSRF token of ``ident``'s session (HMAC-SHA256 under this process's secret)."""
        return hmac.new(self.secret, ident.principal_id.encode(), hashlib.sha256).hexdigest()

    def _bearer(self, request: web.Request) -> str | None:
        auth = request.headers.get("Authorization", "")
        return auth[7:].strip() if auth.lower().startswith("bearer ") else None

    async def identify(self, request: web.Request) -> Identity | None:
        """The request's identity under this mode, or None."""
        if self.mode == "proxy":
            return self._from_proxy(request)
        bearer = self._bearer(request)
        if self.mode == "oidc":
            return await self._from_jwt(bearer, "bearer") if bearer else None
        assert self.token is not None
        for value, via in ((bearer, "bearer"), (request.cookies.get(COOKIE), "cookie")):
            if value and hmac.compare_digest(value.encode(), self.token.encode()):
                return Identity(self.principal, frozenset(), self.tenants, via)
        return None

    def _from_proxy(self, request: web.Request) -> Identity | None:
        peer = (request.remote or "").strip("[]")
        if peer not in self.trusted_proxies:
            return None
        user = request.headers.get(self.proxy_header, "").strip()
        if not user:
            return None
        groups = split_list(request.headers.get(self.groups_header))
        return Identity(
            user,
            frozenset(g[5:] for g in groups if g.startswith("role:")),
            granted_tenants(
                [g[7:] for g in groups if g.startswith("tenant:")], self.groups_header, user
            ),
            "proxy",
        )

    async def _from_jwt(self, token: str, via: str) -> Identity | None:
        import jwt

        try:
            if self._jwks is None:
                self._jwks = jwt.PyJWKClient(self.jwks_url or "", cache_keys=True)
            # PyJWKClient fetches (and caches) the JWKS with blocking I/O: off the event loop
            key = await asyncio.to_thread(self._jwks.get_signing_key_from_jwt, token)
            claims = jwt.decode(
                token,
                key.key,
                algorithms=["RS256", "ES256", "EdDSA", "PS256"],
                audience=self.audience,
                issuer=self.issuer,
                options={"require": ["exp", "sub"]},
            )
        except jwt.PyJWTError:
            return None
        principal = str(claims.get(self.principal_claim) or "")
        if not principal:
            return None
        tenants = claims.get("tenants") or claims.get("tenant_id") or ["default"]
        tenants = tenants if isinstance(tenants, list) else [tenants]
        roles = claims.get("roles") or []
        granted = granted_tenants(tenants, "the OIDC claim tenants/tenant_id", principal)
        return Identity(principal, frozenset(map(str, roles)), granted, via)


def authenticator_from_settings(settings: Any, host: str) -> Authenticator:
    """The :class:`Authenticator` the settings ask for, serving on ``host``.

    Raises:
        AuthConfigError: mode ``token`` on a non-loopback address, ``oidc`` without a JWKS URL,
            or ``proxy`` without trusted proxies (the message names the variable to set).
    """
    mode: AuthMode = settings.console_auth
    if mode == "token":
        if not is_loopback(host):
            raise AuthConfigError(
                f"refusing to serve the console on {host} with only the local token: bind to "
                "127.0.0.1, or set AGENT_CONSOLE_AUTH=oidc (with AGENT_OIDC_JWKS_URL, "
                "AGENT_OIDC_ISSUER, AGENT_OIDC_AUDIENCE) or AGENT_CONSOLE_AUTH=proxy (with "
                "AGENT_CONSOLE_TRUSTED_PROXIES)"
            )
        return Authenticator(
            mode="token",
            token=load_or_create_token(settings.state_dir),
            principal=settings.console_principal,
            tenants=frozenset(split_list(settings.console_tenants)) or frozenset({"*"}),
        )
    if mode == "oidc":
        if not settings.oidc_jwks_url:
            raise AuthConfigError("AGENT_CONSOLE_AUTH=oidc needs AGENT_OIDC_JWKS_URL")
        return Authenticator(
            mode="oidc",
            jwks_url=settings.oidc_jwks_url,
            issuer=settings.oidc_issuer,
            audience=settings.oidc_audience,
        )
    proxies = frozenset(split_list(settings.console_trusted_proxies))
    if not proxies:
        raise AuthConfigError("AGENT_CONSOLE_AUTH=proxy needs AGENT_CONSOLE_TRUSTED_PROXIES")
    return Authenticator(
        mode="proxy", proxy_header=settings.console_identity_header, trusted_proxies=proxies
    )


@dataclass(frozen=True)
class Gate:
    """What :func:`guard` checks: allowed host names, extra allowed origins, the authenticator."""

    auth: Authenticator
    hosts: frozenset[str]
    origins: frozenset[str] = frozenset()

    @staticmethod
    def build(
        auth: Authenticator, bind_host: str, hosts: Sequence[str] = (), origins: Sequence[str] = ()
    ) -> Gate:
        """The gate for a server bound to ``bind_host`` (always allowed, with the loopback names)."""
        return Gate(
            auth,
            allowed_hosts(bind_host, hosts),
            frozenset(o.rstrip("/") for o in origins if o),
        )


def allowed_hosts(bind_host: str, extra: Sequence[str] = ()) -> frozenset[str]:
    """The Host names a server bound to ``bind_host`` answers for (lower case, no port).

    ``bind_host``, the loopback names (:data:`LOOPBACK_NAMES`) and ``extra`` (e.g.
    ``AGENT_CONSOLE_ALLOWED_HOSTS`` split by :func:`split_list`). The console and the codec
    server use the same list.
    """
    names = {bind_host.strip("[]"), *LOOPBACK_NAMES, *(h.strip() for h in extra if h.strip())}
    return frozenset(n.lower() for n in names)


def host_allowed(hosts: frozenset[str], host_header: str | None) -> bool:
    """Whether a ``Host`` header (``name``, ``name:port``, ``[v6]:port``) names one of ``hosts``.

    A missing header is not allowed (DNS-rebinding defence; answer 421 when False).
    """
    return _host_name(host_header or "") in hosts


def _host_name(host_header: str) -> str:
    h = host_header.strip().lower()
    if h.startswith("["):
        return h[1 : h.find("]")] if "]" in h else h
    return h.rsplit(":", 1)[0] if h.count(":") == 1 else h


def _refuse(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


PUBLIC_PATHS = ("/static/", "/callbacks/")
"""Paths served without authentication: the page's script and style (nothing about runs), and
the callbacks of tools finished later (their signed token is the credential,
workers/console/callbacks.py)."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def guard(gate: Gate) -> Middleware:
    """The middleware enforcing the checks in this module's docstring."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not host_allowed(gate.hosts, request.headers.get("Host")):
            return _refuse(421, "this console does not answer for that host name")
        if request.path.startswith(PUBLIC_PATHS):
            return await handler(request)
        if request.method == "GET" and request.path == "/" and "token" in request.query:
            _token_login(gate, request)
        ident = await gate.auth.identify(request)
        if ident is None:
            if request.path == "/":
                raise web.HTTPUnauthorized(
                    text="Open the console with the URL `agentctl serve` printed (it carries "
                    "the token), or sign in through your proxy.",
                )
            return _refuse(401, "not authenticated: send Authorization: Bearer <token>")
        if request.method not in ("GET", "HEAD", "OPTIONS"):
            problem = _cross_site_problem(gate, request, ident)
            if problem:
                return _refuse(403, problem)
        request[IDENTITY_KEY] = ident
        return await handler(request)

    return middleware


def _token_login(gate: Gate, request: web.Request) -> None:
    """``GET /?token=T``: a right token sets the session cookie and redirects to ``/``.

    Raises:
        web.HTTPFound: always (to ``/``; with the cookie only when the token is right).
    """
    tok = request.query.get("token", "")
    want = gate.auth.token or ""
    resp = web.HTTPFound("/")
    if gate.auth.mode == "token" and want and hmac.compare_digest(tok.encode(), want.encode()):
        resp.set_cookie(COOKIE, want, httponly=True, samesite="Strict", path="/")
    raise resp


def _cross_site_problem(gate: Gate, request: web.Request, ident: Identity) -> str | None:
    """Why a state-changing request is refused as cross-site, or None."""
    ctype = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if ctype != "application/json":
        return "state-changing requests need Content-Type: application/json"
    origin = request.headers.get("Origin")
    own = f"{request.scheme}://{request.headers.get('Host', '')}".lower()
    if origin is not None:
        if origin.rstrip("/").lower() != own and origin.rstrip("/") not in gate.origins:
            return f"cross-origin request refused (Origin {origin})"
    else:
        site = request.headers.get("Sec-Fetch-Site")
        if site is not None and site not in ("same-origin", "none"):
            return f"cross-site request refused (Sec-Fetch-Site {site})"
    if ident.via == "cookie":
        sent = request.headers.get(CSRF_HEADER, "")
        if not hmac.compare_digest(sent.encode(), gate.auth.csrf_for(ident).encode()):
            return f"missing or wrong {CSRF_HEADER} (GET /api/session gives it to the page)"
    return None

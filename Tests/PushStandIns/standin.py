#!/usr/bin/env python3
"""Local stand-in of APNs, FCM or a web push service for Rouse's tests.

One program, three roles (--role apns|fcm|webpush). It speaks HTTP/2 over TLS with ALPN h2 only
(Debian's libcurl 7.88.1 cannot reuse cleartext h2c connections), on a loopback port, with a
certificate it makes at start, signed by a throw-away CA whose PEM it writes to <state-dir>/ca.pem.

When it listens it prints one JSON line to stdout, e.g.
    {"port": 43121, "ca_file": "/tmp/x/ca.pem", "role": "apns", ...}
and appends every request it receives, with the answer it chose, as one JSON line to
<state-dir>/requests.jsonl (written before the answer is sent). SIGTERM or SIGINT stop it with exit
status 0; with --exit-on-stdin-eof it also stops when its standard input closes (its parent died).

Requests are validated the way Apple and Google document (web push: RFC 8030, RFC 8292 VAPID and
RFC 8291 encryption, the payload decrypted with the subscription's keys); then the device token's
(or subscription's) prefix picks a scripted answer (see APNS_SCRIPT, FCM_SCRIPT and WEBPUSH_SCRIPT
below, and README.md beside this file).
"""

import argparse
import asyncio
import base64
import datetime
import hashlib
import hmac
import ipaddress
import json
import os
import re
import secrets
import signal
import ssl
import sys
import threading
import time
import traceback
import urllib.parse
import uuid

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from cryptography import x509
from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

STALL = object()  # a handler's answer meaning: keep the stream open and never answer it
RESET = object()  # a fault's answer meaning: drop the whole connection without answering

# Token prefix (lower-case hex) -> (status, reason, once). `once`: answer so only the first time a
# token is seen, then answer 200. Checked after every validation passed.
APNS_SCRIPT = [
    ("dead", 410, "Unregistered", False),
    ("badd", 400, "BadDeviceToken", False),
    ("0f0f", 400, "DeviceTokenNotForTopic", False),
    ("5555", 503, "ServiceUnavailable", True),
    ("500e", 500, "InternalServerError", True),
    ("a11a", 429, "TooManyRequests", False),
    ("510e", None, "Stalled", False),
]

# Token prefix -> (HTTP status, google.rpc status, FcmError errorCode, message, once).
FCM_SCRIPT = [
    ("unregistered", 404, "NOT_FOUND", "UNREGISTERED", "Requested entity was not found.", False),
    ("invalid", 400, "INVALID_ARGUMENT", "INVALID_ARGUMENT",
     "The registration token is not a valid FCM registration token", False),
    ("mismatch", 403, "PERMISSION_DENIED", "SENDER_ID_MISMATCH", "SenderId mismatch", False),
    ("unavailable", 503, "UNAVAILABLE", "UNAVAILABLE", "The service is currently unavailable.", True),
    ("internal", 500, "INTERNAL", "INTERNAL", "Internal error encountered.", True),
    ("quota", 429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED",
     "Quota exceeded for quota metric 'Send requests'.", False),
    ("stall", None, None, None, None, False),
]

APNS_PUSH_TYPES = {
    "alert", "background", "controls", "location", "voip", "complication", "fileprovider",
    "liveactivity", "pushtotalk", "mdm", "widgets",
}
# Suffixes Apple appends to the bundle ID for some push types; a listed bundle ID allows these too.
APNS_TOPIC_SUFFIXES = (".voip", ".complication", ".pushkit.fileprovider", ".push-type.liveactivity")
FCM_SCOPE = "https://www.googleapis.com/auth/firebase.messaging"
FCM_ERROR_TYPE = "type.googleapis.com/google.firebase.fcm.v1.FcmError"
BAD_REQUEST_TYPE = "type.googleapis.com/google.rpc.BadRequest"
UUID_RE = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
TOPIC_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
TTL_RE = re.compile(r"^[0-9]+(\.[0-9]{1,9})?s$")

# Field names the FCM v1 API knows (proto JSON accepts snake_case and lowerCamelCase); any other
# name is rejected as Google does ("Unknown name ...: Cannot find field.").
FCM_REQUEST_FIELDS = {"message", "validate_only", "validateOnly"}
FCM_MESSAGE_FIELDS = {
    "name", "data", "notification", "android", "webpush", "apns", "fcm_options", "fcmOptions",
    "token", "topic", "condition",
}
FCM_ANDROID_FIELDS = {
    "collapse_key", "collapseKey", "priority", "ttl", "restricted_package_name",
    "restrictedPackageName", "data", "notification", "fcm_options", "fcmOptions",
    "direct_boot_ok", "directBootOk", "bandwidth_constrained_ok", "bandwidthConstrainedOk",
    "restricted_satellite_ok", "restrictedSatelliteOk",
}


class Verdict(Exception):
    """The answer to one request: raised by validation, returned by handlers."""

    def __init__(self, status, reason, body=b"", headers=(), detail=None):
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.body = body
        self.headers = list(headers)
        self.detail = detail


def b64url_decode(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def decode_jwt(token):
    """Splits a compact JWT; returns (header, claims, signing_input, signature) or raises ValueError."""
    parts = token.split(".")
    if len(parts) != 3:
        raise ValueError("not three dot-separated parts")
    try:
        header = json.loads(b64url_decode(parts[0]))
        claims = json.loads(b64url_decode(parts[1]))
        signature = b64url_decode(parts[2])
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"undecodable part: {error}") from None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise ValueError("header or claims is not a JSON object")
    return header, claims, (parts[0] + "." + parts[1]).encode("ascii"), signature


def compact_json(value):
    return json.dumps(value, separators=(",", ":")).encode()


def is_integer(value):
    return isinstance(value, int) and not isinstance(value, bool)


class Request:
    def __init__(self, connection_id, stream_id, headers):
        self.connection_id = connection_id
        self.stream_id = stream_id
        self.header_list = headers
        self.headers = {}
        self.duplicates = []
        for name, value in headers:
            if name in self.headers and not name.startswith(":"):
                self.duplicates.append(name)
                self.headers[name] += ", " + value
            else:
                self.headers[name] = value
        self.method = self.headers.get(":method", "")
        self.path = self.headers.get(":path", "")
        self.body = bytearray()


class Log:
    """requests.jsonl: one JSON object a line, each written with one append so readers see whole lines."""

    def __init__(self, path):
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, record):
        os.write(self.fd, (json.dumps(record, sort_keys=True) + "\n").encode())


class APNs:
    """Apple's provider API: POST /3/device/<token> with token-based (JWT) authentication."""

    def __init__(self, args):
        self.environment = args.environment
        self.team_id = args.apns_team_id
        self.keys = {}
        for item in args.apns_key:
            key_id, sep, path = item.partition("=")
            if not sep or not key_id or not path:
                raise SystemExit(f"--apns-key wants KEYID=path, got {item!r}")
            self.keys[key_id] = load_public_key(path, ec.EllipticCurvePublicKey)
        self.topics = [t for item in args.apns_topics for t in item.split(",") if t]
        self.other_environment_prefixes = [
            p.lower() for p in (args.sandbox_tokens if self.environment == "production" else args.production_tokens)
        ]
        self.token_lifetime = args.provider_token_lifetime
        self.min_token_update_interval = args.min_token_update_interval
        self.unregistered_timestamp = args.unregistered_timestamp
        self.seen_tokens = set()
        self.current_jwt = {}  # kid -> (jwt, first seen, iat)

    def error(self, status, reason, detail=None, apns_id=None, extra=None):
        body = {"reason": reason}
        if extra:
            body.update(extra)
        return Verdict(status, reason, compact_json(body), [("apns-id", apns_id or str(uuid.uuid4()).upper())], detail)

    def handle(self, request, record):
        headers = request.headers
        apns_id = headers.get("apns-id")
        if apns_id is not None and not UUID_RE.match(apns_id):
            raise self.error(400, "BadMessageId", f"apns-id {apns_id!r} is not a canonical UUID")
        match = re.match(r"^/3/device/([^/?]*)$", request.path)
        if not match:
            raise self.error(404, "BadPath", f"path {request.path!r} is not /3/device/<token>", apns_id)
        if request.method != "POST":
            raise self.error(405, "MethodNotAllowed", f"method {request.method}", apns_id)
        if request.duplicates:
            raise self.error(400, "DuplicateHeaders", f"repeated: {', '.join(request.duplicates)}", apns_id)
        self.check_provider_token(headers, record, apns_id)

        topic = headers.get("apns-topic")
        if topic is None:
            raise self.error(400, "MissingTopic", "no apns-topic header", apns_id)
        if not TOPIC_RE.match(topic):
            raise self.error(400, "BadTopic", f"apns-topic {topic!r} is not a bundle ID", apns_id)
        if self.topics and not self.topic_allowed(topic):
            raise self.error(400, "TopicDisallowed", f"apns-topic {topic!r} is not one of {self.topics}", apns_id)
        push_type = headers.get("apns-push-type")
        if push_type is None:
            record["notes"].append("apns-push-type missing (Apple: required on watchOS, recommended elsewhere)")
        elif push_type not in APNS_PUSH_TYPES:
            raise self.error(400, "InvalidPushType", f"apns-push-type {push_type!r}", apns_id)
        if (push_type == "voip") != topic.endswith(".voip"):
            raise self.error(400, "BadTopic", f"apns-push-type {push_type} with apns-topic {topic!r}: "
                             "voip pushes, and only they, go to <bundle ID>.voip", apns_id)
        priority = headers.get("apns-priority", "10")
        if priority not in ("1", "5", "10"):
            raise self.error(400, "BadPriority", f"apns-priority {priority!r} is not 1, 5 or 10", apns_id)
        if push_type == "background" and priority != "5":
            raise self.error(400, "BadPriority", f"background push with apns-priority {priority} (must be 5)", apns_id)
        expiration = headers.get("apns-expiration")
        if expiration is not None and not re.match(r"^[0-9]+$", expiration):
            raise self.error(400, "BadExpirationDate", f"apns-expiration {expiration!r}", apns_id)
        collapse_id = headers.get("apns-collapse-id")
        if collapse_id is not None and len(collapse_id.encode()) > 64:
            raise self.error(400, "BadCollapseId", f"apns-collapse-id is {len(collapse_id.encode())} bytes", apns_id)

        token = match.group(1)
        if not token:
            raise self.error(400, "MissingDeviceToken", "empty token in path", apns_id)
        if not re.match(r"^[0-9a-fA-F]+$", token) or len(token) < 64 or len(token) % 2:
            raise self.error(400, "BadDeviceToken", f"token is not 64 or more hex digits ({len(token)} chars)", apns_id)

        body = bytes(request.body)
        if not body:
            raise self.error(400, "PayloadEmpty", "empty body", apns_id)
        limit = 5120 if push_type == "voip" else 4096
        if len(body) > limit:
            raise self.error(413, "PayloadTooLarge", f"{len(body)} bytes > {limit}", apns_id)
        try:
            payload = json.loads(body)
        except ValueError as error:
            raise self.error(400, "PayloadEmpty", f"payload is not JSON: {error}", apns_id) from None
        if not isinstance(payload, dict) or not isinstance(payload.get("aps"), dict):
            raise self.error(400, "PayloadEmpty", "payload is not a JSON object with an \"aps\" dictionary", apns_id)
        if push_type == "background" and payload["aps"].get("content-available") != 1:
            record["notes"].append("background push without aps.content-available = 1")

        lower = token.lower()
        for prefix in self.other_environment_prefixes:
            if lower.startswith(prefix):
                raise self.error(400, "BadDeviceToken",
                                 f"token of the other environment sent to {self.environment}", apns_id)
        first_time = lower not in self.seen_tokens
        self.seen_tokens.add(lower)
        for prefix, status, reason, once in APNS_SCRIPT:
            if not lower.startswith(prefix) or (once and not first_time):
                continue
            if status is None:
                return STALL
            extra = None
            if status == 410:
                stamp = self.unregistered_timestamp
                extra = {"timestamp": stamp if stamp is not None else int(time.time() * 1000)}
            raise self.error(status, reason, f"scripted by token prefix {prefix}", apns_id, extra)
        headers_out = [("apns-id", apns_id or str(uuid.uuid4()).upper())]
        if self.environment == "sandbox":
            headers_out.append(("apns-unique-id", str(uuid.uuid4())))
        return Verdict(200, "OK", b"", headers_out)

    def topic_allowed(self, topic):
        if topic in self.topics:
            return True
        return any(topic.endswith(s) and topic[: -len(s)] in self.topics for s in APNS_TOPIC_SUFFIXES)

    def check_provider_token(self, headers, record, apns_id):
        authorization = headers.get("authorization")
        if authorization is None:
            raise self.error(403, "MissingProviderToken", "no authorization header", apns_id)
        match = re.match(r"^bearer (\S+)$", authorization, re.IGNORECASE)
        if not match:
            raise self.error(403, "InvalidProviderToken", "authorization is not 'bearer <JWT>'", apns_id)
        jwt = match.group(1)
        try:
            header, claims, signing_input, signature = decode_jwt(jwt)
        except ValueError as error:
            raise self.error(403, "InvalidProviderToken", f"malformed JWT: {error}", apns_id) from None
        record["jwt_header"], record["jwt_claims"] = header, claims

        def invalid(detail):
            return self.error(403, "InvalidProviderToken", detail, apns_id)

        if header.get("alg") != "ES256":
            raise invalid(f"alg {header.get('alg')!r} is not ES256")
        kid = header.get("kid")
        if kid not in self.keys:
            raise invalid(f"unknown kid {kid!r}")
        if len(signature) != 64:
            raise invalid(f"signature is {len(signature)} bytes, not raw r||s (64); DER?")
        der = encode_dss_signature(int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big"))
        try:
            self.keys[kid].verify(der, signing_input, ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            raise invalid(f"signature does not verify with key {kid}") from None
        issuer = claims.get("iss")
        if not isinstance(issuer, str) or not issuer:
            raise invalid("no iss (team ID) claim")
        if self.team_id is not None and issuer != self.team_id:
            raise invalid(f"iss {issuer!r} is not team {self.team_id!r}")
        issued = claims.get("iat")
        if not is_integer(issued):
            raise invalid("iat is not an integer")
        now = time.time()
        if issued > now + 300:
            raise invalid(f"iat is {issued - now:.0f} s in the future")
        if now - issued > self.token_lifetime:
            raise self.error(403, "ExpiredProviderToken", f"iat is {now - issued:.0f} s old", apns_id)
        if self.min_token_update_interval > 0:
            # A new JWT while the previous one of its key is still valid and younger than the interval.
            previous = self.current_jwt.get(kid)
            if previous is None or previous[0] != jwt:
                if (previous is not None and now - previous[1] < self.min_token_update_interval
                        and now - previous[2] <= self.token_lifetime):
                    raise self.error(429, "TooManyProviderTokenUpdates",
                                     f"new JWT {now - previous[1]:.0f} s after the previous one", apns_id)
                self.current_jwt[kid] = (jwt, now, issued)


class FCM:
    """Google's OAuth2 token endpoint (POST /token) and FCM HTTP v1 messages:send."""

    def __init__(self, args):
        with open(args.fcm_service_account) as file:
            self.account = json.load(file)
        for field in ("project_id", "private_key", "client_email", "token_uri"):
            if not isinstance(self.account.get(field), str):
                raise SystemExit(f"{args.fcm_service_account}: no {field}")
        private_key = serialization.load_pem_private_key(self.account["private_key"].encode(), None)
        if not isinstance(private_key, rsa.RSAPrivateKey):
            raise SystemExit(f"{args.fcm_service_account}: private_key is not RSA")
        self.public_key = private_key.public_key()
        self.token_ttl = args.access_token_ttl
        self.revoke_after = args.revoke_after
        self.retry_after = args.retry_after
        self.own_token_uris = set()
        self.tokens = {}  # access token -> expiry
        self.revoked = set()
        self.messages = 0
        self.seen_tokens = set()

    def listening(self, port, state_dir):
        """Returns extra ready-line fields: a copy of the service account whose token_uri is this server."""
        own = f"https://127.0.0.1:{port}/token"
        self.own_token_uris = {own, f"https://localhost:{port}/token", self.account["token_uri"]}
        account = dict(self.account, token_uri=own)
        path = os.path.join(state_dir, "service-account.json")
        with open(path, "w") as file:
            json.dump(account, file, indent=2)
        return {"service_account_file": path, "token_uri": own, "project_id": self.account["project_id"]}

    def handle(self, request, record):
        if request.path == "/token" or request.path.startswith("/token?"):
            return self.token(request, record)
        match = re.match(r"^/v1/projects/([^/]+)/messages:send$", request.path)
        if match and request.method == "POST":
            return self.send(request, record, match.group(1))
        raise self.google_error(404, "NOT_FOUND", f"{request.method} {request.path} is not served here")

    # OAuth2 token endpoint (RFC 7523 JWT bearer grant, as Google runs it).
    def oauth_error(self, error, description):
        body = compact_json({"error": error, "error_description": description})
        return Verdict(400, error, body, [("content-type", "application/json; charset=utf-8")], description)

    def token(self, request, record):
        if request.method != "POST":
            raise self.oauth_error("invalid_request", f"method {request.method}")
        form = urllib.parse.parse_qs(bytes(request.body).decode("utf-8", "replace"), keep_blank_values=True)
        content_type = request.headers.get("content-type", "")
        if not content_type.startswith("application/x-www-form-urlencoded"):
            record["notes"].append(f"content-type {content_type!r} is not application/x-www-form-urlencoded")
        grant_type = form.get("grant_type", [""])[0]
        if grant_type != "urn:ietf:params:oauth:grant-type:jwt-bearer":
            raise self.oauth_error("unsupported_grant_type", f"Invalid grant_type: {grant_type}")
        assertion = form.get("assertion", [""])[0]
        if not assertion:
            raise self.oauth_error("invalid_request", "Missing required parameter: assertion")
        try:
            header, claims, signing_input, signature = decode_jwt(assertion)
        except ValueError as error:
            raise self.oauth_error("invalid_grant", f"Invalid JWT: {error}") from None
        record["jwt_header"], record["jwt_claims"] = header, claims
        if header.get("alg") != "RS256":
            raise self.oauth_error("invalid_grant", f"Invalid JWT Signature. (alg {header.get('alg')!r})")
        kid = header.get("kid")
        if kid is not None and kid != self.account.get("private_key_id"):
            raise self.oauth_error("invalid_grant", f"Invalid JWT Signature. (kid {kid!r} is not private_key_id)")
        try:
            self.public_key.verify(signature, signing_input, padding.PKCS1v15(), hashes.SHA256())
        except InvalidSignature:
            raise self.oauth_error("invalid_grant", "Invalid JWT Signature.") from None
        if claims.get("iss") != self.account["client_email"]:
            raise self.oauth_error("invalid_grant", f"Invalid email or User ID (iss {claims.get('iss')!r})")
        scope = claims.get("scope")
        if not isinstance(scope, str) or FCM_SCOPE not in scope.split():
            raise self.oauth_error("invalid_scope", f"Invalid OAuth scope or ID token audience provided. (scope {scope!r})")
        if claims.get("aud") not in self.own_token_uris:
            raise self.oauth_error("invalid_grant", f"Invalid JWT: Failed audience check (aud {claims.get('aud')!r})")
        issued, expires, now = claims.get("iat"), claims.get("exp"), time.time()
        if (not is_integer(issued) or not is_integer(expires) or expires - issued > 3600 or expires <= issued
                or expires <= now or issued > now + 300):
            raise self.oauth_error(
                "invalid_grant",
                "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. "
                f"Check your iat and exp values in the JWT claim. (iat {issued!r}, exp {expires!r}, now {int(now)})")
        access_token = "ya29.standin-" + secrets.token_urlsafe(24)
        self.tokens[access_token] = now + self.token_ttl
        body = compact_json({"access_token": access_token, "expires_in": self.token_ttl, "token_type": "Bearer"})
        return Verdict(200, "OK", body, [("content-type", "application/json; charset=utf-8")])

    # messages:send
    def google_error(self, code, status, message, error_code=None, details=None, headers=()):
        error = {"code": code, "message": message, "status": status}
        if details is None and error_code is not None:
            details = [{"@type": FCM_ERROR_TYPE, "errorCode": error_code}]
        if details:
            error["details"] = details
        out = [("content-type", "application/json; charset=UTF-8")] + list(headers)
        return Verdict(code, error_code or status, compact_json({"error": error}), out, message)

    def bad_field(self, field, description):
        details = [{"@type": BAD_REQUEST_TYPE, "fieldViolations": [{"field": field, "description": description}]}]
        return self.google_error(400, "INVALID_ARGUMENT", description, "INVALID_ARGUMENT", details)

    def unknown_fields(self, value, known, where):
        for name in value:
            if name not in known:
                message = f"Invalid JSON payload received. Unknown name \"{name}\" at '{where}': Cannot find field."
                raise self.bad_field(where, message)

    def send(self, request, record, project):
        authorization = request.headers.get("authorization", "")
        match = re.match(r"^Bearer (\S+)$", authorization, re.IGNORECASE)
        access_token = match.group(1) if match else None
        expiry = self.tokens.get(access_token)
        if access_token is None or expiry is None or expiry <= time.time() or access_token in self.revoked:
            why = ("no bearer token" if access_token is None else "unknown access token" if expiry is None
                   else "revoked access token" if access_token in self.revoked else "expired access token")
            error = self.google_error(
                401, "UNAUTHENTICATED",
                "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie "
                "or other valid authentication credential. "
                "See https://developers.google.com/identity/sign-in/web/devconsole-project.",
                headers=[("www-authenticate", 'Bearer realm="https://accounts.google.com/", error="invalid_token"')])
            error.detail = why
            raise error
        self.messages += 1
        if self.revoke_after is not None and self.messages == self.revoke_after:
            self.revoked.update(self.tokens)
            record["notes"].append(f"message {self.messages}: every access token issued so far is now revoked")
        if project != self.account["project_id"]:
            raise self.google_error(
                403, "PERMISSION_DENIED",
                f"Permission 'cloudmessaging.messages.create' denied on resource '//fcm.googleapis.com/projects/{project}' "
                "(or it may not exist).")
        try:
            body = json.loads(bytes(request.body))
        except ValueError as error:
            raise self.bad_field("", f"Invalid JSON payload received. {error}") from None
        if not isinstance(body, dict) or not isinstance(body.get("message"), dict):
            raise self.bad_field("message", "Request contains an invalid argument: no message object.")
        self.unknown_fields(body, FCM_REQUEST_FIELDS, "")
        message = body["message"]
        self.unknown_fields(message, FCM_MESSAGE_FIELDS, "message")
        token = message.get("token")
        if not isinstance(token, str) or not token:
            raise self.bad_field("message.token", "Request contains an invalid argument: this stand-in sends to "
                                 "registration tokens only (message.token)")
        data = message.get("data", {})
        if not isinstance(data, dict):
            raise self.bad_field("message.data", "Invalid value at 'message.data': not a map")
        size = 0
        for index, (key, value) in enumerate(data.items()):
            if not isinstance(value, str):
                description = f"Invalid value at 'message.data[{index}].value' (TYPE_STRING), {json.dumps(value)}"
                raise self.bad_field(f"message.data[{index}].value", description)
            if key in ("from", "gcm") or key.lower().startswith("google"):
                raise self.google_error(400, "INVALID_ARGUMENT", f"Invalid data payload key: {key}", "INVALID_ARGUMENT")
            size += len(key.encode()) + len(value.encode())
        if size > 4096:
            raise self.google_error(400, "INVALID_ARGUMENT",
                                    f"Message is too big: data is {size} bytes (limit 4096)", "INVALID_ARGUMENT")
        if "notification" in message:
            record["notes"].append("notification block present: not a data-only message")
        android = message.get("android")
        if android is not None:
            if not isinstance(android, dict):
                raise self.bad_field("message.android", "Invalid value at 'message.android': not an object")
            self.unknown_fields(android, FCM_ANDROID_FIELDS, "message.android")
            priority = android.get("priority")
            if priority is not None and (not isinstance(priority, str) or priority.lower() not in ("normal", "high")):
                raise self.bad_field("message.android.priority", "Invalid value at 'message.android.priority' "
                                     f"(type.googleapis.com/google.firebase.fcm.v1.AndroidMessagePriority), {json.dumps(priority)}")
            ttl = android.get("ttl")
            if ttl is not None and (not isinstance(ttl, str) or not TTL_RE.match(ttl)):
                raise self.bad_field("message.android.ttl",
                                     f"Invalid value at 'message.android.ttl' (type.googleapis.com/google.protobuf.Duration), {json.dumps(ttl)}")
            for name in ("collapse_key", "collapseKey"):
                if name in android and not isinstance(android[name], str):
                    raise self.bad_field(f"message.android.{name}", f"Invalid value at 'message.android.{name}' (TYPE_STRING)")
        if body.get("validate_only") or body.get("validateOnly"):
            return Verdict(200, "OK", compact_json({"name": f"projects/{project}/messages/fake_message_id"}),
                           [("content-type", "application/json; charset=UTF-8")])

        first_time = token not in self.seen_tokens
        self.seen_tokens.add(token)
        for prefix, code, status, error_code, text, once in FCM_SCRIPT:
            if not token.startswith(prefix) or (once and not first_time):
                continue
            if code is None:
                return STALL
            headers = [("retry-after", str(self.retry_after))] if code == 429 else []
            verdict = self.google_error(code, status, text, error_code, headers=headers)
            verdict.detail = f"scripted by token prefix {prefix}"
            raise verdict
        name = f"projects/{project}/messages/0:{int(time.time() * 1e6)}%{secrets.token_hex(8)}"
        return Verdict(200, "OK", compact_json({"name": name}), [("content-type", "application/json; charset=UTF-8")])


# Subscription-name prefix -> (status, reason, once). Checked after every validation passed (and
# after the payload was decrypted), like the token prefixes of APNs and FCM.
WEBPUSH_SCRIPT = [
    ("gone", 410, "Gone", False),
    ("toolarge", 413, "PayloadTooLarge", False),
    ("busy", 429, "TooManyRequests", False),
    ("unavailable", 503, "ServiceUnavailable", True),
    ("stall", None, "Stalled", False),
]
WEBPUSH_URGENCIES = ("very-low", "low", "normal", "high")
BASE64URL_RE = re.compile(r"^[A-Za-z0-9_-]+$")
VAPID_MAX_LIFETIME = 24 * 3600


def b64url_encode(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def hkdf_sha256(salt, ikm, info, length):
    """RFC 5869 with HMAC-SHA-256 (length <= 32 here)."""
    prk = hmac.new(salt, ikm, hashlib.sha256).digest()
    return hmac.new(prk, info + b"\x01", hashlib.sha256).digest()[:length]


def webpush_decrypt(body, private_key, auth_secret):
    """RFC 8291 / RFC 8188 aes128gcm, the browser's side: returns the plaintext or raises ValueError."""
    if len(body) < 21:
        raise ValueError("shorter than an aes128gcm header")
    salt, record_size, id_length = body[:16], int.from_bytes(body[16:20], "big"), body[20]
    if record_size < 18:
        raise ValueError(f"record size {record_size} < 18")
    if id_length != 65:
        raise ValueError(f"keyid is {id_length} bytes, not a 65-byte P-256 point (RFC 8291 §4)")
    sender_bytes = body[21:86]
    try:
        sender = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), sender_bytes)
    except ValueError:
        raise ValueError("keyid is not a P-256 point") from None
    receiver_bytes = private_key.public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    secret = private_key.exchange(ec.ECDH(), sender)
    key_info = b"WebPush: info\x00" + receiver_bytes + sender_bytes
    ikm = hkdf_sha256(auth_secret, secret, key_info, 32)
    cek = hkdf_sha256(salt, ikm, b"Content-Encoding: aes128gcm\x00", 16)
    nonce = hkdf_sha256(salt, ikm, b"Content-Encoding: nonce\x00", 12)
    records = body[86:]
    if not records:
        raise ValueError("no record after the header")
    plaintext = b""
    for sequence, start in enumerate(range(0, len(records), record_size)):
        chunk = records[start:start + record_size]
        iv = nonce[:4] + (int.from_bytes(nonce[4:], "big") ^ sequence).to_bytes(8, "big")
        try:
            padded = AESGCM(cek).decrypt(iv, chunk, None)
        except InvalidTag:
            raise ValueError(f"record {sequence}: the AES-GCM tag does not verify (wrong keys or auth secret)") from None
        padded = padded.rstrip(b"\x00")
        last = start + record_size >= len(records)
        if not padded or padded[-1] != (2 if last else 1):
            raise ValueError(f"record {sequence}: no padding delimiter {2 if last else 1}")
        plaintext += padded[:-1]
    return plaintext


class WebPush:
    """A web push service (RFC 8030) for subscriptions it makes itself: POST /subscribe, then
    POST /push/<id> from the application server with VAPID (RFC 8292) and an aes128gcm body
    (RFC 8291), which it decrypts with the subscription's keys and logs."""

    def __init__(self, args):
        self.names = args.subscription
        self.origins = set()
        self.base = None
        self.subscriptions = {}  # id -> {"key", "auth", "application_server_key", "gone", "name"}
        self.seen = set()

    def listening(self, port, state_dir):
        """Ready-line fields: the origin, and the subscriptions asked for with --subscription."""
        self.base = f"https://127.0.0.1:{port}"
        self.origins = {self.base, f"https://localhost:{port}"}
        made = {name: self.subscribe(name, None) for name in self.names}
        return {"origin": self.base, "subscriptions": made}

    def subscribe(self, name, application_server_key):
        """A new subscription, as PushSubscription.toJSON() shows it."""
        prefix = re.sub(r"[^A-Za-z0-9_-]", "", name or "")
        subscription_id = (prefix + "-" if prefix else "") + secrets.token_urlsafe(18)
        key = ec.generate_private_key(ec.SECP256R1())
        auth = secrets.token_bytes(16)
        self.subscriptions[subscription_id] = {
            "key": key, "auth": auth, "application_server_key": application_server_key, "gone": False, "name": name,
        }
        public = key.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
        return {"endpoint": f"{self.base}/push/{subscription_id}", "expirationTime": None,
                "keys": {"p256dh": b64url_encode(public), "auth": b64url_encode(auth)}}

    def error(self, status, reason, detail, headers=()):
        body = compact_json({"code": status, "errno": status, "error": reason, "message": detail})
        return Verdict(status, reason, body, [("content-type", "application/json")] + list(headers), detail)

    def handle(self, request, record):
        if request.path == "/subscribe":
            return self.handle_subscribe(request)
        match = re.match(r"^/subscription/([A-Za-z0-9_-]+)$", request.path)
        if match and request.method == "DELETE":
            subscription = self.subscriptions.get(match.group(1))
            if subscription is None:
                raise self.error(404, "NotFound", "no such subscription")
            subscription["gone"] = True
            return Verdict(204, "NoContent", b"", [])
        match = re.match(r"^/push/([A-Za-z0-9_-]+)$", request.path)
        if not match:
            raise self.error(404, "NotFound", f"{request.method} {request.path} is not served here")
        if request.method != "POST":
            raise self.error(405, "MethodNotAllowed", f"method {request.method}")
        subscription_id = match.group(1)
        record["subscription"] = subscription_id
        body = bytes(request.body)
        record["body"] = b64url_encode(body)
        subscription = self.subscriptions.get(subscription_id)
        if subscription is None:
            raise self.error(404, "NotFound", "no such subscription (never made, or expired)")
        self.check_vapid(request, record, subscription)
        if subscription["gone"]:
            raise self.error(410, "Gone", "the subscription was unsubscribed")

        ttl = request.headers.get("ttl")
        if ttl is None or not re.match(r"^[0-9]+$", ttl):
            raise self.error(400, "BadRequest", f"TTL {ttl!r}: a TTL header with whole seconds is required (RFC 8030 §5.2)")
        urgency = request.headers.get("urgency")
        if urgency is not None and urgency not in WEBPUSH_URGENCIES:
            raise self.error(400, "BadRequest", f"Urgency {urgency!r} is not one of {', '.join(WEBPUSH_URGENCIES)}")
        topic = request.headers.get("topic")
        if topic is not None and (len(topic) > 32 or not BASE64URL_RE.match(topic)):
            raise self.error(400, "BadRequest", f"Topic {topic!r}: at most 32 base64url characters (RFC 8030 §5.4)")
        if len(body) > 4096:
            raise self.error(413, "PayloadTooLarge", f"{len(body)} bytes > 4096")
        if body:
            encoding = request.headers.get("content-encoding")
            if encoding != "aes128gcm":
                raise self.error(400, "BadRequest", f"Content-Encoding {encoding!r}: a payload must be aes128gcm (RFC 8291)")
            try:
                plaintext = webpush_decrypt(body, subscription["key"], subscription["auth"])
            except ValueError as error:
                raise self.error(400, "BadRequest", f"the payload does not decrypt with the subscription's keys: {error}") from None
            record["plaintext"] = plaintext.decode("utf-8", "replace")
        else:
            record["notes"].append("push without payload")

        name = subscription_id.lower()
        first_time = subscription_id not in self.seen
        self.seen.add(subscription_id)
        for prefix, status, reason, once in WEBPUSH_SCRIPT:
            if not name.startswith(prefix) or (once and not first_time):
                continue
            if status is None:
                return STALL
            headers = [("retry-after", "1")] if status == 429 else []
            raise self.error(status, reason, f"scripted by subscription prefix {prefix}", headers)
        message = str(uuid.uuid4())
        return Verdict(201, "Created", b"", [("location", f"{self.base}/message/{message}"), ("ttl", ttl)])

    def handle_subscribe(self, request):
        if request.method != "POST":
            raise self.error(405, "MethodNotAllowed", f"method {request.method}")
        options = {}
        if request.body:
            try:
                options = json.loads(bytes(request.body))
            except ValueError:
                raise self.error(400, "BadRequest", "the body is not JSON") from None
            if not isinstance(options, dict):
                raise self.error(400, "BadRequest", "the body is not a JSON object")
        server_key = options.get("applicationServerKey")
        if server_key is not None:
            try:
                ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), b64url_decode(server_key))
            except (ValueError, TypeError):
                raise self.error(400, "BadRequest", "applicationServerKey is not a base64url P-256 point") from None
        made = self.subscribe(options.get("name"), server_key)
        return Verdict(201, "Created", compact_json(made), [("content-type", "application/json")])

    def check_vapid(self, request, record, subscription):
        authorization = request.headers.get("authorization")
        challenge = [("www-authenticate", "vapid")]
        if authorization is None:
            raise self.error(401, "Unauthorized", "no Authorization header (VAPID, RFC 8292)", challenge)
        match = re.match(r"^vapid\s+(.*)$", authorization, re.IGNORECASE)
        if not match:
            raise self.error(401, "Unauthorized", "Authorization is not the vapid scheme", challenge)
        params = {}
        for item in match.group(1).split(","):
            name, _, value = item.strip().partition("=")
            params[name.strip().lower()] = value.strip()
        token, key_text = params.get("t"), params.get("k")
        if not token or not key_text:
            raise self.error(401, "Unauthorized", "vapid needs t=<JWT> and k=<public key>", challenge)
        try:
            key_bytes = b64url_decode(key_text)
            key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), key_bytes)
        except (ValueError, TypeError):
            raise self.error(401, "Unauthorized", "k is not a base64url uncompressed P-256 point", challenge) from None
        try:
            header, claims, signing_input, signature = decode_jwt(token)
        except ValueError as error:
            raise self.error(401, "Unauthorized", f"malformed JWT: {error}", challenge) from None
        record["jwt_header"], record["jwt_claims"] = header, claims
        record["vapid_key"] = key_text
        if header.get("alg") != "ES256":
            raise self.error(401, "Unauthorized", f"alg {header.get('alg')!r} is not ES256", challenge)
        if header.get("typ") not in (None, "JWT"):
            raise self.error(401, "Unauthorized", f"typ {header.get('typ')!r} is not JWT", challenge)
        if len(signature) != 64:
            raise self.error(401, "Unauthorized", f"signature is {len(signature)} bytes, not raw r||s (64)", challenge)
        der = encode_dss_signature(int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big"))
        try:
            key.verify(der, signing_input, ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            raise self.error(401, "Unauthorized", "the JWT signature does not verify with k", challenge) from None
        if claims.get("aud") not in self.origins:
            raise self.error(401, "Unauthorized", f"aud {claims.get('aud')!r} is not this push service's origin {self.base}",
                             challenge)
        expires, now = claims.get("exp"), time.time()
        if not is_integer(expires) or expires <= now:
            raise self.error(401, "Unauthorized", f"exp {expires!r} is not a future time", challenge)
        if expires > now + VAPID_MAX_LIFETIME:
            raise self.error(401, "Unauthorized", f"exp is {expires - now:.0f} s ahead: more than 24 hours", challenge)
        subject = claims.get("sub")
        if not isinstance(subject, str) or not (subject.startswith("mailto:") or subject.startswith("https:")):
            raise self.error(401, "Unauthorized", f"sub {subject!r} is not a mailto: or https: contact", challenge)
        expected = subscription["application_server_key"]
        if expected is not None and b64url_decode(expected) != key_bytes:
            raise self.error(403, "Forbidden", "k is not the applicationServerKey the subscription was made with")


def load_public_key(path, kind):
    with open(path, "rb") as file:
        data = file.read()
    if b"PRIVATE KEY" in data:
        key = serialization.load_pem_private_key(data, None).public_key()
    else:
        key = serialization.load_pem_public_key(data)
    if not isinstance(key, kind):
        raise SystemExit(f"{path}: not a {kind.__name__}")
    if isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name != "secp256r1":
        raise SystemExit(f"{path}: curve {key.curve.name}, APNs keys are P-256")
    return key


def fault_verdict(server, request, record):
    """The answer the fault file imposes on a push request, or None to answer normally.

    <state-dir>/fault holds one line, read at every push request (APNs /3/device/..., FCM
    messages:send; never FCM's /token), so a test switches faults while the stand-in runs:
      unavailable [SECONDS]   503 (APNs {"reason":"ServiceUnavailable"}, FCM UNAVAILABLE), with
                              Retry-After: SECONDS when given
      stall                   the stream is never answered
      reset                   the connection is dropped without an answer
      invalid-argument FIELD  (FCM only) 400 INVALID_ARGUMENT with a google.rpc.BadRequest field
                              violation at FIELD (message.token, message.data[0].value, ...)
    An absent or empty file: no fault. A refused connection needs no mode: use a closed port.
    """
    if server.role == "fcm" and not request.path.startswith("/v1/"):
        return None
    if server.role == "webpush" and not request.path.startswith("/push/"):
        return None
    path = os.path.join(os.path.dirname(server.log.path), "fault")
    try:
        with open(path) as file:
            words = file.read().split()
    except FileNotFoundError:
        return None
    if not words:
        return None
    record["notes"].append("fault file: " + " ".join(words))
    mode = words[0]
    if mode == "stall":
        return STALL
    if mode == "reset":
        return RESET
    if mode == "unavailable":
        extra = [("retry-after", words[1])] if len(words) > 1 else []
        if server.role == "webpush":
            return Verdict(503, "ServiceUnavailable", b"", extra, "fault file: unavailable")
        if server.role == "apns":
            apns_id = request.headers.get("apns-id") or str(uuid.uuid4()).upper()
            return Verdict(503, "ServiceUnavailable", compact_json({"reason": "ServiceUnavailable"}),
                           [("apns-id", apns_id)] + extra, "fault file: unavailable")
        return server.handler.google_error(503, "UNAVAILABLE", "The service is currently unavailable.", "UNAVAILABLE",
                                           headers=extra)
    if mode == "invalid-argument" and server.role == "fcm" and len(words) == 2:
        field = words[1]
        return server.handler.bad_field(field, f"Invalid value at '{field}' (fault file)")
    detail = f"{path}: unknown fault {mode!r} (unavailable [SECONDS], stall, reset, invalid-argument FIELD on FCM)"
    print(detail, file=sys.stderr, flush=True)
    return Verdict(500, "StandInError", compact_json({"reason": "InternalServerError"}), [], detail)


def make_certificates(state_dir):
    """A throw-away CA (ca.pem) and a server certificate for loopback (and the real host names)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"Rouse push stand-in CA {secrets.token_hex(4)}")])
    ca = (x509.CertificateBuilder()
          .subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName(n) for n in ("localhost", "api.push.apple.com", "api.sandbox.push.apple.com",
                                        "fcm.googleapis.com", "oauth2.googleapis.com")]
    names += [x509.IPAddress(ipaddress.ip_address(a)) for a in ("127.0.0.1", "::1")]
    certificate = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
                   .issuer_name(ca_name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(hours=1))
                   .not_valid_after(now + datetime.timedelta(days=2))
                   .add_extension(x509.SubjectAlternativeName(names), critical=False)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
                   .sign(ca_key, hashes.SHA256()))
    paths = {name: os.path.join(state_dir, name) for name in ("ca.pem", "server.pem", "server-key.pem")}
    with open(paths["ca.pem"], "wb") as file:
        file.write(ca.public_bytes(serialization.Encoding.PEM))
    with open(paths["server.pem"], "wb") as file:
        file.write(certificate.public_bytes(serialization.Encoding.PEM))
    with open(paths["server-key.pem"], "wb") as file:
        file.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption()))
    return paths


class Connection:
    """One TLS connection speaking HTTP/2 (server side), any number of streams."""

    def __init__(self, server, reader, writer, connection_id):
        self.server = server
        self.reader = reader
        self.writer = writer
        self.id = connection_id
        self.h2 = None
        self.streams = {}
        self.pending = {}  # stream id -> response bytes not yet sent (flow control)

    async def run(self):
        ssl_object = self.writer.get_extra_info("ssl_object")
        if ssl_object is None or ssl_object.selected_alpn_protocol() != "h2":
            # No h2 in ALPN: answer an HTTP/1.x client in its own words, then close.
            text = b"this stand-in speaks HTTP/2 only (ALPN h2)\n"
            self.writer.write(b"HTTP/1.1 505 HTTP Version Not Supported\r\nconnection: close\r\ncontent-length: "
                              + str(len(text)).encode() + b"\r\n\r\n" + text)
            await self.close()
            return
        config = h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        self.h2 = h2.connection.H2Connection(config=config)
        self.h2.local_settings = h2.settings.Settings(
            client=False, initial_values={h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 1000})
        self.h2.initiate_connection()
        await self.flush()
        try:
            while True:
                data = await self.reader.read(65536)
                if not data:
                    break
                try:
                    events = self.h2.receive_data(data)
                except h2.exceptions.ProtocolError:
                    await self.flush()
                    break
                for event in events:
                    self.on_event(event)
                await self.flush()
                if any(isinstance(e, h2.events.ConnectionTerminated) for e in events):
                    break
        except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError):
            pass
        finally:
            await self.close()

    def on_event(self, event):
        if isinstance(event, h2.events.RequestReceived):
            self.streams[event.stream_id] = Request(self.id, event.stream_id, event.headers)
        elif isinstance(event, h2.events.DataReceived):
            request = self.streams.get(event.stream_id)
            if request is not None:
                request.body += event.data
            self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded):
            request = self.streams.pop(event.stream_id, None)
            if request is not None:
                self.answer(request)
        elif isinstance(event, h2.events.StreamReset):
            self.streams.pop(event.stream_id, None)
            self.pending.pop(event.stream_id, None)
        elif isinstance(event, h2.events.WindowUpdated):
            self.pump()

    def answer(self, request):
        record = {
            "time": time.time(), "role": self.server.role, "connection": self.id, "stream": request.stream_id,
            "method": request.method, "path": request.path, "headers": request.headers,
            "body": bytes(request.body).decode("utf-8", "replace"), "body_bytes": len(request.body),
            "jwt_header": None, "jwt_claims": None, "notes": [],
        }
        if self.server.role == "apns":
            record["environment"] = self.server.handler.environment
        try:
            verdict = fault_verdict(self.server, request, record) or self.server.handler.handle(request, record)
        except Verdict as raised:
            verdict = raised
        except Exception:  # a bug here must show, not hang the client
            detail = traceback.format_exc()
            verdict = Verdict(500, "StandInError", compact_json({"reason": "InternalServerError"}), [], detail)
            print(detail, file=sys.stderr, flush=True)
        if verdict is STALL:
            record.update(verdict_status=None, verdict_reason="Stalled", verdict_detail="scripted: never answered")
            self.server.log.write(record)
            return
        if verdict is RESET:
            record.update(verdict_status=None, verdict_reason="Reset", verdict_detail="fault file: connection dropped")
            self.server.log.write(record)
            self.writer.transport.abort()
            return
        record.update(verdict_status=verdict.status, verdict_reason=verdict.reason, verdict_detail=verdict.detail)
        self.server.log.write(record)
        headers = [(":status", str(verdict.status))] + verdict.headers
        if verdict.body:
            headers.append(("content-length", str(len(verdict.body))))
        try:
            self.h2.send_headers(request.stream_id, headers, end_stream=not verdict.body)
        except h2.exceptions.StreamClosedError:
            return
        if verdict.body:
            self.pending[request.stream_id] = verdict.body
            self.pump()

    def pump(self):
        for stream_id in list(self.pending):
            body = self.pending[stream_id]
            try:
                while body:
                    window = min(self.h2.local_flow_control_window(stream_id), self.h2.max_outbound_frame_size)
                    if window <= 0:
                        break
                    self.h2.send_data(stream_id, body[:window], end_stream=len(body) <= window)
                    body = body[window:]
            except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
                body = b""
            if body:
                self.pending[stream_id] = body
            else:
                del self.pending[stream_id]

    async def flush(self):
        if self.h2 is None:
            return
        data = self.h2.data_to_send()
        if data:
            self.writer.write(data)
            await self.writer.drain()

    async def close(self):
        try:
            if self.h2 is not None and self.h2.state_machine.state != h2.connection.ConnectionState.CLOSED:
                self.h2.close_connection()
                await self.flush()
        except Exception:
            pass
        self.writer.close()
        try:
            await asyncio.wait_for(self.writer.wait_closed(), 0.5)
        except Exception:
            pass


class Server:
    def __init__(self, args):
        self.role = args.role
        self.handler = {"apns": APNs, "fcm": FCM, "webpush": WebPush}[args.role](args)
        self.log = Log(os.path.join(args.state_dir, "requests.jsonl"))
        self.connections = {}
        self.next_id = 1

    async def accept(self, reader, writer):
        connection = Connection(self, reader, writer, self.next_id)
        self.next_id += 1
        task = asyncio.current_task()
        self.connections[connection.id] = task
        try:
            await connection.run()  # closes the connection however it ends, cancelled too
        except asyncio.CancelledError:
            pass
        finally:
            self.connections.pop(connection.id, None)


async def serve(args):
    paths = make_certificates(args.state_dir)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(paths["server.pem"], paths["server-key.pem"])
    context.set_alpn_protocols(["h2"])
    server = Server(args)
    listener = await asyncio.start_server(server.accept, args.host, args.port, ssl=context)
    port = listener.sockets[0].getsockname()[1]

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, stop.set)
    if args.exit_on_stdin_eof:
        def watch_stdin():
            while sys.stdin.buffer.read(4096):
                pass
            loop.call_soon_threadsafe(stop.set)
        threading.Thread(target=watch_stdin, daemon=True).start()

    ready = {"port": port, "ca_file": paths["ca.pem"], "role": args.role, "pid": os.getpid(),
             "state_dir": args.state_dir, "requests_file": server.log.path}
    if args.role == "apns":
        ready["environment"] = args.environment
    else:
        ready.update(server.handler.listening(port, args.state_dir))
    sys.stdout.write(json.dumps(ready) + "\n")
    sys.stdout.flush()

    await stop.wait()
    listener.close()
    # The request log is written unbuffered, so nothing is lost by leaving at once; waiting for
    # TLS close handshakes and the stdin watcher only made every test wait seconds for the exit.
    sys.stdout.flush()
    os._exit(0)


def parse_arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--role", choices=("apns", "fcm", "webpush"), required=True)
    parser.add_argument("--state-dir", required=True, help="ca.pem, server certificate, requests.jsonl go here")
    parser.add_argument("--host", default="127.0.0.1", help="a loopback address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="0 (default): any free port, told in the ready line")
    parser.add_argument("--exit-on-stdin-eof", action="store_true", help="stop when standard input closes")
    apns = parser.add_argument_group("apns")
    apns.add_argument("--environment", choices=("production", "sandbox"), default="production")
    apns.add_argument("--apns-key", action="append", default=[], metavar="KEYID=PATH",
                      help="P-256 key (PEM, public or private, e.g. a .p8) that verifies JWTs with this kid; repeatable")
    apns.add_argument("--apns-team-id", help="when given, the JWT's iss must be this team ID")
    apns.add_argument("--apns-topics", action="append", default=[], metavar="BUNDLE[,BUNDLE...]",
                      help="allowed bundle IDs (their .voip etc. topics too); none given: any topic")
    apns.add_argument("--sandbox-tokens", action="append", metavar="PREFIX",
                      help="tokens with this prefix are sandbox tokens: BadDeviceToken on production (default 5a0d)")
    apns.add_argument("--production-tokens", action="append", metavar="PREFIX",
                      help="tokens with this prefix are production tokens: BadDeviceToken on sandbox (default 9d0d)")
    apns.add_argument("--provider-token-lifetime", type=float, default=3600,
                      help="seconds after iat that a JWT gets ExpiredProviderToken (default 3600)")
    apns.add_argument("--min-token-update-interval", type=float, default=0,
                      help="a new JWT sooner than this many seconds after the previous one of its kid, while that "
                           "one has not expired, gets 429 TooManyProviderTokenUpdates (Apple: 1200); 0 (default): "
                           "not checked")
    apns.add_argument("--unregistered-timestamp", type=int, help="the ms timestamp of 410 answers (default now)")
    fcm = parser.add_argument_group("fcm")
    fcm.add_argument("--fcm-service-account", help="service account JSON whose private_key signs the JWTs")
    fcm.add_argument("--access-token-ttl", type=int, default=3600, help="expires_in of issued access tokens")
    fcm.add_argument("--revoke-after", type=int, help="after N messages, revoke every access token issued so far (once)")
    fcm.add_argument("--retry-after", type=int, default=1, help="Retry-After seconds of 429 QUOTA_EXCEEDED")
    webpush = parser.add_argument_group("webpush")
    webpush.add_argument("--subscription", action="append", default=[], metavar="NAME",
                         help="make a subscription at start, listed under its name in the ready line; its id starts "
                              "with NAME, so a scripted prefix (gone, toolarge, busy, unavailable, stall) applies; repeatable")
    args = parser.parse_args(argv)
    if ipaddress.ip_address(args.host).is_loopback is False:
        parser.error("--host must be a loopback address")
    if args.role == "apns" and not args.apns_key:
        parser.error("--role apns needs at least one --apns-key KEYID=PATH")
    if args.role == "fcm" and not args.fcm_service_account:
        parser.error("--role fcm needs --fcm-service-account PATH")
    args.sandbox_tokens = args.sandbox_tokens or ["5a0d"]
    args.production_tokens = args.production_tokens or ["9d0d"]
    args.state_dir = os.path.abspath(args.state_dir)
    os.makedirs(args.state_dir, exist_ok=True)
    return args


def main(argv):
    args = parse_arguments(argv)
    asyncio.run(serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

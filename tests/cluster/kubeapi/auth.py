# kubeapi/auth.py: who a request comes from. Bearer tokens are either the
# admin token of the state directory (user "admin", group system:masters: may
# do anything, as kubeadm's admin.conf) or service-account tokens issued by
# the TokenRequest API (POST .../serviceaccounts/NAME/token, `kubectl create
# token`): JWTs signed with the state directory's key (HS256), bound to the
# ServiceAccount's uid, so that a token stops working when its ServiceAccount
# is deleted or it expires, as on a real server. Must not: log a token.

import base64
import datetime
import hashlib
import hmac
import json
import os
import secrets
import time
from dataclasses import dataclass, field

from . import errors

ISSUER = "https://kubernetes.default.svc.cluster.local"
MAX_EXPIRATION = 48 * 3600
MIN_EXPIRATION = 600


@dataclass
class User:
    name: str
    groups: list = field(default_factory=list)
    sa: tuple = None          # (namespace, name) for service accounts
    uid: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def admin(self):
        return "system:masters" in self.groups


ADMIN = User("admin", ["system:masters", "system:authenticated"])


def sa_user(ns, name):
    return User("system:serviceaccount:%s:%s" % (ns, name),
                ["system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"],
                sa=(ns, name))


def split_sa_username(name):
    """(namespace, name) of a "system:serviceaccount:NS:NAME" user name, or None."""
    parts = name.split(":")
    if len(parts) == 4 and parts[0] == "system" and parts[1] == "serviceaccount" and parts[2] and parts[3]:
        return parts[2], parts[3]
    return None


def _b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Authenticator:
    def __init__(self, state, admin_token, store):
        self.admin_token = admin_token
        self.store = store
        path = os.path.join(state, "sa.key")
        if not os.path.exists(path):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(secrets.token_bytes(32))
        with open(path, "rb") as f:
            self.key = f.read()

    def _sign(self, signing_input):
        return _b64(hmac.new(self.key, signing_input.encode(), hashlib.sha256).digest())

    def issue(self, sa, audiences, seconds):
        """A token for ServiceAccount object `sa`; (token, expiry as RFC 3339)."""
        now = int(time.time())
        meta = sa["metadata"]
        claims = {"iss": ISSUER, "sub": "system:serviceaccount:%s:%s" % (meta["namespace"], meta["name"]),
                  "aud": audiences or [ISSUER], "iat": now, "nbf": now, "exp": now + seconds,
                  "kubernetes.io": {"namespace": meta["namespace"],
                                    "serviceaccount": {"name": meta["name"], "uid": meta["uid"]}}}
        head = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
        body = _b64(json.dumps(claims, separators=(",", ":")).encode())
        token = "%s.%s" % (head, body)
        exp = datetime.datetime.fromtimestamp(now + seconds, datetime.timezone.utc)
        return token + "." + self._sign(token), exp.strftime("%Y-%m-%dT%H:%M:%SZ")

    def authenticate(self, header):
        """The User of an Authorization header, or None (401)."""
        if not header.startswith("Bearer "):
            return None
        token = header[7:].strip()
        if hmac.compare_digest(token.encode(), self.admin_token.encode()):
            return ADMIN
        parts = token.split(".")
        if len(parts) != 3:
            return None
        if not hmac.compare_digest(self._sign(parts[0] + "." + parts[1]).encode(), parts[2].encode()):
            return None
        try:
            claims = json.loads(_unb64(parts[1]))
            k8s = claims["kubernetes.io"]
            ns, name, uid = k8s["namespace"], k8s["serviceaccount"]["name"], k8s["serviceaccount"]["uid"]
        except (ValueError, KeyError, TypeError):
            return None
        if claims.get("exp", 0) < time.time():
            return None
        sa = self.store.get("serviceaccounts", ns, name)
        if sa is None or sa["metadata"]["uid"] != uid or sa["metadata"].get("deletionTimestamp"):
            return None     # a bound token dies with its ServiceAccount
        return sa_user(ns, name)

    def token_request(self, sa, body):
        """The TokenRequest answer for POST serviceaccounts/NAME/token."""
        spec = (body or {}).get("spec") or {}
        seconds = spec.get("expirationSeconds") or 3600
        if not isinstance(seconds, int) or seconds < MIN_EXPIRATION:
            raise errors.invalid("TokenRequest", "authentication.k8s.io", sa["metadata"]["name"], [(
                "spec.expirationSeconds", "FieldValueInvalid",
                "Invalid value: %s: may not specify a duration less than 10 minutes" % seconds)])
        seconds = min(seconds, MAX_EXPIRATION)
        token, exp = self.issue(sa, spec.get("audiences") or [], seconds)
        out_spec = {"audiences": spec.get("audiences") or [ISSUER], "expirationSeconds": seconds,
                    "boundObjectRef": spec.get("boundObjectRef")}
        return {"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"name": sa["metadata"]["name"], "namespace": sa["metadata"]["namespace"],
                             "creationTimestamp": None},
                "spec": out_spec, "status": {"token": token, "expirationTimestamp": exp}}

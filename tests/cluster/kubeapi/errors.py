# kubeapi/errors.py: API errors and the metav1.Status bodies the real server
# sends: the test server raises and answers them, and the one client of the
# test cluster (../kubeclient.py) raises them again from a Status it read.


class ApiError(Exception):
    """An error answered as a metav1.Status with the given HTTP code."""

    def __init__(self, code, reason, message, details=None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    @classmethod
    def from_response(cls, code, body):
        """The error an answer with this code and (decoded) body stands for."""
        if isinstance(body, dict):
            return cls(code, body.get("reason", ""), body.get("message"), body.get("details"))
        return cls(code, "", str(body)[:300])

    def status(self):
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Failure", "message": self.message,
                "reason": self.reason, "code": self.code}
        if not self.reason:     # StatusReasonUnknown is "", omitted
            del body["reason"]
        if self.details is not None:
            body["details"] = self.details
        return body


def qualified(rtype):
    """'pods' or 'vitjobs.vitjob.dev', as the server names a resource in messages."""
    return rtype.resource if not rtype.group else rtype.resource + "." + rtype.group


def _details(rtype, name):
    d = {"name": name, "kind": rtype.resource}
    if rtype.group:
        d["group"] = rtype.group
    return d


def not_found(rtype, name):
    return ApiError(404, "NotFound", '%s "%s" not found' % (qualified(rtype), name),
                    _details(rtype, name))


def already_exists(rtype, name):
    return ApiError(409, "AlreadyExists", '%s "%s" already exists' % (qualified(rtype), name),
                    _details(rtype, name))


def conflict(rtype, name, why="the object has been modified; please apply your changes to the latest version and try again"):
    return ApiError(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": %s'
                    % (qualified(rtype), name, why), _details(rtype, name))


def bad_request(message):
    return ApiError(400, "BadRequest", message)


def gone(message):
    return ApiError(410, "Expired", message)


def forbidden(message):
    return ApiError(403, "Forbidden", message)


def forbidden_named(resource, group, name, why):
    """apierrors.NewForbidden: '<resource>[.<group>] "<name>" is forbidden: <why>'
    (no name: '<resource> is forbidden: <why>'); details name the resource."""
    q = resource + "." + group if group else resource
    msg = ('%s "%s" is forbidden: %s' % (q, name, why)) if name else ("%s is forbidden: %s" % (q, why))
    d = {"kind": resource}
    if name:
        d["name"] = name
    if group:
        d["group"] = group
    return ApiError(403, "Forbidden", msg, d)


def unauthorized():
    return ApiError(401, "Unauthorized", "Unauthorized")


def method_not_allowed(message="the server does not allow this method on the requested resource"):
    return ApiError(405, "MethodNotAllowed", message)


def unsupported_media_type(accepted):
    return ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                    "accepted media types include: " + ", ".join(accepted))


def invalid(kind, group, name, field_errors):
    """422 Invalid. field_errors: list of (field, reason, text) where text is
    the part after 'field: ', e.g. ('spec.image', 'FieldValueRequired', 'Required value')."""
    qkind = kind + "." + group if group else kind
    parts = ["%s: %s" % (f, t) if f else t for f, _, t in field_errors]
    joined = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    causes = [{"reason": r, "message": t, "field": f} for f, r, t in field_errors]
    details = {"name": name, "kind": kind, "causes": causes}
    if group:
        details["group"] = group
    return ApiError(422, "Invalid", '%s "%s" is invalid: %s' % (qkind, name, joined), details)

# kubeapi/admission.py: the admission plugins of a real server that this
# project's pods meet, with their wording:
#  - ServiceAccount: a pod runs as spec.serviceAccountName (default
#    "default"), which must exist (403 otherwise); unless automounting is
#    off (pod or ServiceAccount), the pod gets the projected token volume
#    kube-api-access-xxxxx mounted at /var/run/secrets/kubernetes.io/
#    serviceaccount in every container;
#  - PodSecurity: the namespace labels pod-security.kubernetes.io/enforce
#    (403, "violates PodSecurity") and warn (a Warning header) at the
#    baseline and restricted levels of "latest", checks in the real order
#    (baseline IDs sorted, then restricted IDs sorted; the restricted
#    versions of volumes, capabilities and seccomp replace the baseline
#    ones). Not modelled: AppArmor and procMount (feature-gated), Windows
#    pods, exemptions, version pinning beyond printing the label;
#  - DefaultTolerationSeconds: on create and update of a pod, a toleration
#    of node.kubernetes.io/not-ready and of node.kubernetes.io/unreachable
#    (Exists, NoExecute, 300 s) unless one already tolerates that taint with
#    effect NoExecute (an empty key or effect tolerates it too).
# Must not: look at anything but the pod and its namespace.

import random

from . import errors

SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
LEVELS = ("privileged", "baseline", "restricted")
BASELINE_CAPS = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
                 "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies",
                "net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"}
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t"}


# --- ServiceAccount -----------------------------------------------------------------

def service_account(store, pod, ns):
    spec = pod.setdefault("spec", {})
    name = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    spec["serviceAccountName"] = name
    spec["serviceAccount"] = name
    sa = store.get("serviceaccounts", ns, name)
    if sa is None:
        raise errors.forbidden_named("pods", "", pod.get("metadata", {}).get("name", ""),
                                     'error looking up service account %s/%s: serviceaccount "%s" not found'
                                     % (ns, name, name))
    automount = spec.get("automountServiceAccountToken")
    if automount is None:
        automount = sa.get("automountServiceAccountToken", True)
    if not automount:
        return
    containers = (spec.get("initContainers") or []) + (spec.get("containers") or [])
    if any(m.get("mountPath") == SA_MOUNT for c in containers for m in c.get("volumeMounts") or []):
        return
    vol = "kube-api-access-" + "".join(random.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
    spec.setdefault("volumes", []).append({"name": vol, "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
                                                                      "fieldPath": "metadata.namespace"}}]}}]}})
    for c in containers:
        c.setdefault("volumeMounts", []).append({"name": vol, "readOnly": True, "mountPath": SA_MOUNT})


# --- DefaultTolerationSeconds ----------------------------------------------------------

NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
DEFAULT_TOLERATION_SECONDS = 300


def _tolerates(t, key):
    return (t.get("key") in (key, "", None)) and (t.get("effect") in ("NoExecute", "", None))


def default_toleration_seconds(pod):
    spec = pod.setdefault("spec", {})
    tols = spec.get("tolerations") or []
    add = [k for k in (NOT_READY, UNREACHABLE) if not any(_tolerates(t, k) for t in tols)]
    if not add:
        return
    tols = list(tols)
    for k in add:
        tols.append({"key": k, "operator": "Exists", "effect": "NoExecute",
                     "tolerationSeconds": DEFAULT_TOLERATION_SECONDS})
    spec["tolerations"] = tols


# --- Pod Security ----------------------------------------------------------------------

def _jq(items):
    return '"' + '", "'.join(items) + '"'


def _plural(singular, plural, n):
    return singular if n == 1 else plural


def _containers(spec):
    return (spec.get("initContainers") or []) + (spec.get("containers") or []) + \
        (spec.get("ephemeralContainers") or [])


def _sc(c):
    return c.get("securityContext") or {}


def _who(names):
    return "%s %s" % (_plural("container", "containers", len(names)), _jq(names))


def _setters(pod_bad, names):
    parts = (["pod"] if pod_bad else []) + ([_who(names)] if names else [])
    return " and ".join(parts)


def _host_namespaces(spec, cs):
    bad = [k + "=true" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    return ("host namespaces", ", ".join(bad)) if bad else None


def _privileged(spec, cs):
    names = [c["name"] for c in cs if _sc(c).get("privileged")]
    return ("privileged", "%s must not set securityContext.privileged=true" % _who(names)) if names else None


def _caps_add(cs, allowed):
    names, bad = [], set()
    for c in cs:
        add = [a for a in ((_sc(c).get("capabilities") or {}).get("add") or []) if a not in allowed]
        if add:
            names.append(c["name"])
            bad.update(add)
    return names, sorted(bad)


def _capabilities_baseline(spec, cs):
    names, bad = _caps_add(cs, BASELINE_CAPS)
    if not names:
        return None
    return ("non-default capabilities", "%s must not include %s in securityContext.capabilities.add"
            % (_who(names), _jq(bad)))


def _host_path(spec, cs):
    vols = [v["name"] for v in spec.get("volumes") or [] if v.get("hostPath") is not None]
    return ("hostPath volumes", "%s %s" % (_plural("volume", "volumes", len(vols)), _jq(vols))) if vols else None


def _host_ports(spec, cs):
    names, ports = [], set()
    for c in cs:
        ps = [str(p["hostPort"]) for p in c.get("ports") or [] if p.get("hostPort")]
        if ps:
            names.append(c["name"])
            ports.update(ps)
    if not names:
        return None
    return ("hostPort", "%s %s %s %s" % (_who(names), _plural("uses", "use", len(names)),
                                         _plural("hostPort", "hostPorts", len(ports)), ", ".join(sorted(ports))))


def _selinux(spec, cs):
    types, user, role, pod_bad, names = set(), False, False, False, []
    for owner, sc in [(None, spec.get("securityContext") or {})] + [(c["name"], _sc(c)) for c in cs]:
        o = sc.get("seLinuxOptions")
        if not o:
            continue
        bad = False
        if o.get("type", "") not in SELINUX_TYPES:
            types.add(o["type"])
            bad = True
        if o.get("user"):
            user = bad = True
        if o.get("role"):
            role = bad = True
        if bad:
            if owner is None:
                pod_bad = True
            else:
                names.append(owner)
    if not (pod_bad or names):
        return None
    parts = []
    if types:
        parts.append("%s %s" % (_plural("type", "types", len(types)), _jq(sorted(types))))
    if user:
        parts.append("user may not be set")
    if role:
        parts.append("role may not be set")
    return ("seLinuxOptions", "%s set forbidden securityContext.seLinuxOptions: %s"
            % (_setters(pod_bad, names), "; ".join(parts)))


def _seccomp_baseline(spec, cs):
    pod_t = ((spec.get("securityContext") or {}).get("seccompProfile") or {}).get("type")
    pod_bad = pod_t is not None and pod_t not in ("RuntimeDefault", "Localhost")
    bad_types = {pod_t} if pod_bad else set()
    names = []
    for c in cs:
        t = (_sc(c).get("seccompProfile") or {}).get("type")
        if t is not None and t not in ("RuntimeDefault", "Localhost"):
            names.append(c["name"])
            bad_types.add(t)
    if not (pod_bad or names):
        return None
    return ("seccompProfile", "%s must not set securityContext.seccompProfile.type to %s"
            % (_setters(pod_bad, names), _jq(sorted(bad_types))))


def _sysctls(spec, cs):
    bad = [s.get("name", "") for s in (spec.get("securityContext") or {}).get("sysctls") or []
           if s.get("name") not in SAFE_SYSCTLS]
    return ("forbidden sysctls", ", ".join(bad)) if bad else None


def _host_process(spec, cs):
    pod_bad = bool(((spec.get("securityContext") or {}).get("windowsOptions") or {}).get("hostProcess"))
    names = [c["name"] for c in cs if (_sc(c).get("windowsOptions") or {}).get("hostProcess")]
    if not (pod_bad or names):
        return None
    return ("hostProcess", "%s must not set securityContext.windowsOptions.hostProcess=true"
            % _setters(pod_bad, names))


def _allow_privilege_escalation(spec, cs):
    names = [c["name"] for c in cs if _sc(c).get("allowPrivilegeEscalation") is not False]
    if not names:
        return None
    return ("allowPrivilegeEscalation != false", "%s must set securityContext.allowPrivilegeEscalation=false"
            % _who(names))


def _capabilities_restricted(spec, cs):
    no_drop = [c["name"] for c in cs if "ALL" not in ((_sc(c).get("capabilities") or {}).get("drop") or [])]
    names, bad = _caps_add(cs, {"NET_BIND_SERVICE"})
    parts = []
    if no_drop:
        parts.append('%s must set securityContext.capabilities.drop=["ALL"]' % _who(no_drop))
    if names:
        parts.append("%s must not include %s in securityContext.capabilities.add" % (_who(names), _jq(bad)))
    return ("unrestricted capabilities", "; ".join(parts)) if parts else None


def _restricted_volumes(spec, cs):
    names, types = [], set()
    for v in spec.get("volumes") or []:
        kinds = [k for k in v if k != "name"]
        bad = [k for k in kinds if k not in RESTRICTED_VOLUMES] or ([] if kinds else ["unknown"])
        if bad:
            names.append(v["name"])
            types.update(bad)
    if not names:
        return None
    return ("restricted volume types", "%s %s %s %s %s" % (
        _plural("volume", "volumes", len(names)), _jq(names), _plural("uses", "use", len(names)),
        _plural("restricted volume type", "restricted volume types", len(types)), _jq(sorted(types))))


def _run_as_non_root(spec, cs):
    pod_v = (spec.get("securityContext") or {}).get("runAsNonRoot")
    explicit = [c["name"] for c in cs if _sc(c).get("runAsNonRoot") is False]
    if pod_v is False or explicit:
        return ("runAsNonRoot != true", "%s must not set securityContext.runAsNonRoot=false"
                % _setters(pod_v is False, explicit))
    implicit = [c["name"] for c in cs if _sc(c).get("runAsNonRoot") is None and pod_v is not True]
    if implicit:
        return ("runAsNonRoot != true", "pod or %s must set securityContext.runAsNonRoot=true" % _who(implicit))
    return None


def _run_as_user(spec, cs):
    pod_bad = (spec.get("securityContext") or {}).get("runAsUser") == 0
    names = [c["name"] for c in cs if _sc(c).get("runAsUser") == 0]
    if not (pod_bad or names):
        return None
    return ("runAsUser=0", "%s must not set runAsUser=0" % _setters(pod_bad, names))


def _seccomp_restricted(spec, cs):
    pod_t = ((spec.get("securityContext") or {}).get("seccompProfile") or {}).get("type")
    good = ("RuntimeDefault", "Localhost")
    pod_bad = pod_t is not None and pod_t not in good
    bad_types = {pod_t} if pod_bad else set()
    explicit, implicit = [], []
    for c in cs:
        t = (_sc(c).get("seccompProfile") or {}).get("type")
        if t is not None and t not in good:
            explicit.append(c["name"])
            bad_types.add(t)
        elif t is None and pod_t not in good:
            implicit.append(c["name"])
    if pod_bad or explicit:
        return ("seccompProfile", "%s must not set securityContext.seccompProfile.type to %s"
                % (_setters(pod_bad, explicit), _jq(sorted(bad_types))))
    if implicit:
        return ("seccompProfile", 'pod or %s must set securityContext.seccompProfile.type to "RuntimeDefault" '
                'or "Localhost"' % _who(implicit))
    return None


# (id, level, check); baseline IDs sorted, then restricted IDs sorted, as the real registry
CHECKS = [
    ("capabilities_baseline", "baseline", _capabilities_baseline),
    ("hostNamespaces", "baseline", _host_namespaces),
    ("hostPathVolumes", "baseline", _host_path),
    ("hostPorts", "baseline", _host_ports),
    ("privileged", "baseline", _privileged),
    ("seLinuxOptions", "baseline", _selinux),
    ("seccompProfile_baseline", "baseline", _seccomp_baseline),
    ("sysctls", "baseline", _sysctls),
    ("windowsHostProcess", "baseline", _host_process),
    ("allowPrivilegeEscalation", "restricted", _allow_privilege_escalation),
    ("capabilities_restricted", "restricted", _capabilities_restricted),
    ("restrictedVolumes", "restricted", _restricted_volumes),
    ("runAsNonRoot", "restricted", _run_as_non_root),
    ("runAsUser", "restricted", _run_as_user),
    ("seccompProfile_restricted", "restricted", _seccomp_restricted),
]
OVERRIDDEN = {"hostPathVolumes": "restrictedVolumes", "capabilities_baseline": "capabilities_restricted",
              "seccompProfile_baseline": "seccompProfile_restricted"}


def evaluate(pod, level):
    """'reason (detail), ...' of the checks pod fails at level, or ''."""
    if level not in ("baseline", "restricted"):
        return ""
    spec = pod.get("spec") or {}
    cs = _containers(spec)
    out = []
    for cid, clevel, fn in CHECKS:
        if clevel == "restricted" and level != "restricted":
            continue
        if level == "restricted" and cid in OVERRIDDEN:
            continue
        r = fn(spec, cs)
        if r:
            out.append("%s (%s)" % r if r[1] else r[0])
    return ", ".join(out)


def _policy(labels, mode):
    level = labels.get("pod-security.kubernetes.io/" + mode)
    version = labels.get("pod-security.kubernetes.io/%s-version" % mode) or "latest"
    return level, version


def namespace_label_errs(labels):
    errs = []
    for mode in ("enforce", "audit", "warn"):
        key = "pod-security.kubernetes.io/" + mode
        if key in labels and labels[key] not in LEVELS:
            errs.append(("metadata.labels[%s]" % key, "FieldValueInvalid", 'Invalid value: "%s": must be one of '
                         "privileged, baseline, restricted" % labels[key]))
        vkey = key + "-version"
        v = labels.get(vkey)
        if v is not None and not (v == "latest" or (v.startswith("v1.") and v[3:].isdigit()
                                                     and (v[3:] == "0" or not v[3:].startswith("0")))):
            errs.append(("metadata.labels[%s]" % vkey, "FieldValueInvalid", 'Invalid value: "%s": must be '
                         '"latest" or "v1.x"' % v))
    return errs


def pod_security(store, pod, ns):
    """Raises the 403 of an enforced level; returns the warnings of warn."""
    nso = store.get("namespaces", "", ns) or {}
    labels = (nso.get("metadata") or {}).get("labels") or {}
    level, version = _policy(labels, "enforce")
    if level is not None and level not in LEVELS:
        level = "restricted"     # an invalid enforce label is evaluated as restricted
    detail = evaluate(pod, level) if level else ""
    if detail:
        raise errors.forbidden_named("pods", "", pod["metadata"].get("name", ""),
                                     'violates PodSecurity "%s:%s": %s' % (level, version, detail))
    wlevel, wversion = _policy(labels, "warn")
    if wlevel is None and level in ("baseline", "restricted"):
        wlevel, wversion = level, version
    wdetail = evaluate(pod, wlevel) if wlevel in ("baseline", "restricted") else ""
    return ['would violate PodSecurity "%s:%s": %s' % (wlevel, wversion, wdetail)] if wdetail else []

# kubeapi/kueue_webhook.py: the stand-in for Kueue's pod webhooks (mutating
# mpod.kb.io on CREATE, validating vpod.kb.io on CREATE and UPDATE), as Kueue
# v0.19.2 registers them with the pod integration on (facts and sources:
# tests/cluster/controllers/KUEUE_FACTS.md). They are "installed" while the
# Kueue CRDs are (the CRD workloads.kueue.x-k8s.io exists), and act in every
# namespace but kube-system and kueue-system (Kueue's default
# managedJobsNamespaceSelector and webhook namespaceSelector).
# Reproduced (pkg/controller/jobs/pod/pod_webhook.go, pkg/controller/
# jobframework/validation.go, pkg/controller/jobs/pod/pod_controller.go
# groupTotalCount, v0.19.2):
#  - mutating, for a pod with the kueue.x-k8s.io/queue-name label: the label
#    kueue.x-k8s.io/managed=true, the finalizer kueue.x-k8s.io/managed, the
#    scheduling gate kueue.x-k8s.io/admission (appended once), the
#    kueue.x-k8s.io/role-hash annotation (a sha256 of the spec's containers'
#    names, images and requests, nodeSelector and tolerations here; Kueue
#    hashes more fields of the spec: the value is opaque to pods' users);
#  - validating (any pod of a managed namespace): group name without total
#    count and the reverse, a total count that is not an integer or is < 1,
#    a queue or group name that is not a DNS-1123 subdomain, a managed label
#    other than "true"; on update: the group name is immutable, the queue name
#    too unless the pod is gated or terminal, retriable-in-group "false" is
#    final, a priority-class label cannot be removed, nor added to an ungated
#    pod. A refusal is a 403 worded as the API server words a webhook's denial
#    ('admission webhook "vpod.kb.io" denied the request: ' + the aggregate).
# Not reproduced: manageJobsWithoutQueueName, the default LocalQueue, pods
# owned by another Kueue-managed job, the prebuilt-workload, TAS, elastic and
# max-exec-time labels, the warning for managed pods of managed owners, the
# WorkloadIdentifierAnnotations gate (group name as an annotation).
# Must not: look at anything but the pod, its old version and whether the
# Kueue CRDs exist.

import hashlib
import json
import re

from . import errors
from .validation import DNS1123_SUBDOMAIN, SUBDOMAIN_MSG, q

QUEUE = "kueue.x-k8s.io/queue-name"
PRIORITY = "kueue.x-k8s.io/priority-class"
GROUP = "kueue.x-k8s.io/pod-group-name"
TOTAL = "kueue.x-k8s.io/pod-group-total-count"
RETRIABLE = "kueue.x-k8s.io/retriable-in-group"
MANAGED = "kueue.x-k8s.io/managed"
ROLE_HASH = "kueue.x-k8s.io/role-hash"
GATE = "kueue.x-k8s.io/admission"
FINALIZER = MANAGED
UNMANAGED_NAMESPACES = ("kube-system", "kueue-system")
CRD = "workloads.kueue.x-k8s.io"
CRD_KEY = "customresourcedefinitions.apiextensions.k8s.io"
ATOI = re.compile(r"^[+-]?[0-9]+$")


def installed(store):
    return store.get(CRD_KEY, "", CRD) is not None


def applies(store, ns):
    return ns not in UNMANAGED_NAMESPACES and installed(store)


def role_hash(spec):
    shape = {"containers": [{"name": c.get("name"), "image": c.get("image"),
                             "requests": (c.get("resources") or {}).get("requests") or {}}
                            for c in spec.get("initContainers") or []] +
             [{"name": c.get("name"), "image": c.get("image"),
               "requests": (c.get("resources") or {}).get("requests") or {}}
              for c in spec.get("containers") or []],
             "nodeSelector": spec.get("nodeSelector") or {}, "tolerations": spec.get("tolerations") or []}
    return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:8]


def mutate(store, pod, ns):
    """mpod.kb.io on CREATE (PW Default)."""
    if not applies(store, ns):
        return
    meta = pod.setdefault("metadata", {})
    labels = meta.get("labels") or {}
    if not labels.get(QUEUE):
        return
    meta.setdefault("labels", {})[MANAGED] = "true"
    fins = meta.setdefault("finalizers", [])
    if FINALIZER not in fins:
        fins.append(FINALIZER)
    spec = pod.setdefault("spec", {})
    gates = spec.setdefault("schedulingGates", [])
    if not any(g.get("name") == GATE for g in gates):
        gates.append({"name": GATE})
    meta.setdefault("annotations", {})[ROLE_HASH] = role_hash(spec)


def _common(pod):
    meta = pod.get("metadata") or {}
    labels, ann = meta.get("labels") or {}, meta.get("annotations") or {}
    errs = []
    if MANAGED in labels and labels[MANAGED] != "true":
        errs.append("metadata.labels[%s]: Forbidden: managed label value can only be 'true'" % MANAGED)
    both = ("both the '%s' annotation and the '%s' label should be set" % (TOTAL, GROUP))
    group = labels.get(GROUP, "")
    if not group:
        if TOTAL in ann:
            errs.append("metadata.labels[%s]: Required value: %s" % (GROUP, both))
            return errs
    else:
        if not DNS1123_SUBDOMAIN.match(group):
            errs.append("metadata.labels[%s]: Invalid value: %s: %s" % (GROUP, q(group), SUBDOMAIN_MSG))
        if TOTAL not in ann:
            errs.append("metadata.annotations[%s]: Required value: %s" % (TOTAL, both))
            return errs
    if TOTAL in ann:
        v = ann[TOTAL]
        if not ATOI.match(v):
            errs.append('metadata.annotations[%s]: Invalid value: %s: strconv.Atoi: parsing %s: invalid syntax'
                        % (TOTAL, q(v), q(v)))
            return errs
        if int(v) < 1:
            errs.append("metadata.annotations[%s]: Invalid value: %s: incorrect annotation value '%s=%s': "
                        "group total count should be greater than zero" % (TOTAL, q(v), TOTAL, v))
    return errs


def _queue_name_errs(pod):
    v = ((pod.get("metadata") or {}).get("labels") or {}).get(QUEUE)
    if v and not DNS1123_SUBDOMAIN.match(v):
        return ["metadata.labels[%s]: Invalid value: %s: %s" % (QUEUE, q(v), SUBDOMAIN_MSG)]
    return []


def _suspended(pod):
    gated = any(g.get("name") == GATE for g in (pod.get("spec") or {}).get("schedulingGates") or [])
    return gated or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _deny(errs):
    seen = []
    for e in errs:
        if e not in seen:
            seen.append(e)
    msg = seen[0] if len(seen) == 1 else "[" + ", ".join(seen) + "]"
    return errors.ApiError(403, "Forbidden", 'admission webhook "vpod.kb.io" denied the request: ' + msg)


def validate_create(store, pod, ns):
    if not applies(store, ns):
        return
    errs = _queue_name_errs(pod) + _common(pod)
    if errs:
        raise _deny(errs)


def validate_update(store, old, new, ns):
    if not applies(store, ns):
        return
    ol = (old.get("metadata") or {}).get("labels") or {}
    nl = (new.get("metadata") or {}).get("labels") or {}
    errs = []
    if not _suspended(new) and ol.get(QUEUE, "") != nl.get(QUEUE, ""):
        errs.append("metadata.labels[%s]: Invalid value: %s: field is immutable" % (QUEUE, q(nl.get(QUEUE, ""))))
    if not nl.get(PRIORITY) and ol.get(PRIORITY):
        errs.append("metadata.labels[%s]: Invalid value: \"\": WorkloadPriorityClass cannot be removed from a "
                    "workload" % PRIORITY)
    elif not _suspended(new) and not ol.get(PRIORITY) and nl.get(PRIORITY):
        errs.append("metadata.labels[%s]: Invalid value: %s: WorkloadPriorityClass cannot be added to a "
                    "non-suspended workload" % (PRIORITY, q(nl[PRIORITY])))
    errs += _common(new)
    oa = (old.get("metadata") or {}).get("annotations") or {}
    na = (new.get("metadata") or {}).get("annotations") or {}
    if nl.get(GROUP) and oa.get(RETRIABLE) == "false" and na.get(RETRIABLE) != "false":
        errs.append("metadata.annotations[%s]: Forbidden: unretriable pod group can't be converted to retriable"
                    % RETRIABLE)
    if ol.get(GROUP) and nl.get(GROUP, "") != ol[GROUP]:
        errs.append("metadata.labels[%s]: Invalid value: %s: field is immutable" % (GROUP, q(nl.get(GROUP, ""))))
    if errs:
        raise _deny(errs)

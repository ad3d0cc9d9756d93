# kubeapi/api.py: the semantics of the REST verbs on top of the store: object
# metadata (uid, creationTimestamp, generation, managedFields: kubeapi/
# managed.py), optimistic concurrency (409),
# the status subresource, patches, CRD registration and custom object
# validation, the built-in types' validation (kubeapi/validation.py) with
# pod spec immutability on update, pods/binding (the only way to set
# spec.nodeName after create), the admission a real server runs
# (ServiceAccount, DefaultTolerationSeconds, Pod Security: kubeapi/
# admission.py; Kueue's pod webhooks while its CRDs are installed:
# kubeapi/kueue_webhook.py) and RBAC's escalation checks on roles and bindings, the
# controllers a pod needs (a namespace's default ServiceAccount and
# kube-root-ca.crt), deletion (deletionTimestamp, finalizers, grace periods)
# and the garbage collector (ownerReferences, foreground/background/orphan,
# namespaces).

import base64
import copy
import datetime
import json
import random
import threading
import uuid

from . import admission, apply, crdcheck, errors, kueue_webhook, managed, patch, rbac, schema, selectors, validation
from .resources import Registry
SERVER_META = ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
               "deletionGracePeriodSeconds", "generation", "selfLink", "managedFields")
CRD_KEY = "customresourcedefinitions.apiextensions.k8s.io"
INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


def now(delta=0):
    t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=delta)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def normalize_meta(meta):
    """Empty labels, annotations, finalizers, ownerReferences are omitted, as
    Go's omitempty does on the real server."""
    for k in ("labels", "annotations", "finalizers", "ownerReferences"):
        if k in meta and not meta[k]:
            del meta[k]


def _rest(obj):
    """Everything but metadata and status: what counts as a spec change."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


class Api:
    def __init__(self, store, auth=None, ca_pem=""):
        self.store = store
        self.auth = auth
        self.authz = rbac.Authorizer(store)
        self.ca_pem = ca_pem
        self.registry = Registry()
        self.gc_wake = threading.Event()
        self.stopping = threading.Event()
        for crd in self.store.list(CRD_KEY)[0]:
            if not crd["metadata"].get("deletionTimestamp"):
                self.registry.add_crd(crd)
        ns_type = self.registry.by_key("namespaces")
        for ns in INITIAL_NAMESPACES:
            if self.store.get("namespaces", "", ns) is None:
                self.create(ns_type, "v1", "", {"apiVersion": "v1", "kind": "Namespace",
                                                "metadata": {"name": ns}}, {})
            else:
                self._namespace_controllers(ns)

    # --- helpers ----------------------------------------------------------------

    def present(self, rtype, version, obj):
        obj["apiVersion"] = rtype.api_version(version)
        obj["kind"] = rtype.kind
        return obj

    def _ns(self, rtype, ns):
        return ns if rtype.namespaced else ""

    def _check_namespace(self, rtype, ns, name, creating):
        if not rtype.namespaced:
            return
        nso = self.store.get("namespaces", "", ns)
        if nso is None:
            raise errors.not_found(self.registry.by_key("namespaces"), ns)
        if creating and nso["metadata"].get("deletionTimestamp"):
            raise errors.forbidden('%s "%s" is forbidden: unable to create new content in namespace %s '
                                   'because it is being terminated' % (errors.qualified(rtype), name, ns))

    def _custom_checks(self, rtype, version, obj, params, name, old=None):
        """Defaulting, pruning, schema validation and the CEL rules of a custom object."""
        sch = rtype.schemas.get(version) or {}
        schema.apply_defaults(sch, obj)
        dropped = schema.prune(sch, obj, root=True)
        if dropped and params.get("fieldValidation") == "Strict":
            raise errors.bad_request('%s in version "%s" cannot be handled as a %s: strict decoding error: %s'
                                     % (rtype.kind, version, rtype.kind,
                                        ", ".join('unknown field "%s"' % d for d in dropped)))
        errs = schema.validate(sch, obj)
        errs += schema.validate_rules(sch, obj, old, errs)
        if errs:
            raise errors.invalid(rtype.kind, rtype.group, name, errs)
        return ['unknown field "%s"' % d for d in dropped]

    def _validate_meta(self, rtype, obj):
        meta = obj["metadata"]
        name = meta.get("name", "")
        errs = []
        if not name:
            errs.append(("metadata.name", "FieldValueRequired", "Required value: name or generateName is required"))
        elif rtype.crd:
            errs += validation.subdomain_errs("metadata.name", name)
        else:
            errs += validation.name_errs(rtype, name)
        for k, v in (meta.get("labels") or {}).items():
            errs += validation.qualified_name_errs("metadata.labels", k)
            errs += validation.label_value_errs("metadata.labels", v)
        if rtype.resource == "pods" and not (obj.get("spec") or {}).get("containers"):
            errs.append(("spec.containers", "FieldValueRequired", "Required value"))
        elif not rtype.crd:
            errs += validation.validate_builtin(rtype, obj)
        if rtype.resource == "namespaces":
            errs += admission.namespace_label_errs(meta.get("labels") or {})
        if rtype.key == CRD_KEY and name and not errs:
            errs = crdcheck.validate_crd(obj)
        if errs:
            raise errors.invalid(rtype.kind, rtype.group, name, errs)

    def _escalation(self, rtype, obj, ns, user):
        """RBAC's own check on roles and bindings: grant only what you hold."""
        if user is None or rtype.group != rbac.RBAC_GROUP:
            return
        name = obj["metadata"].get("name", "")
        if rtype.resource in ("roles", "clusterroles"):
            if not self.authz.may_escalate(user, ns, rtype.resource):
                self.authz.confirm_no_escalation(user, ns, obj.get("rules") or [], rtype.resource, name)
        elif rtype.resource in ("rolebindings", "clusterrolebindings"):
            ref = obj.get("roleRef") or {}
            if not self.authz.may_bind(user, ns, ref):
                self.authz.confirm_no_escalation(user, ns, self.authz.role_ref_rules(ref, ns),
                                                 rtype.resource, name)

    def _namespace_controllers(self, ns):
        """What the controller manager puts in every namespace: the default
        ServiceAccount and the kube-root-ca.crt ConfigMap."""
        if self.store.get("serviceaccounts", ns, "default") is None:
            self.create(self.registry.by_key("serviceaccounts"), "v1", ns,
                        {"metadata": {"name": "default"}}, {})
        if self.store.get("configmaps", ns, "kube-root-ca.crt") is None:
            self.create(self.registry.by_key("configmaps"), "v1", ns,
                        {"metadata": {"name": "kube-root-ca.crt",
                                      "annotations": {"kubernetes.io/description": (
                                          "Contains a CA bundle that can be used to verify the "
                                          "kube-apiserver when using internal endpoints such as the "
                                          "internal service IP or kubernetes.default.svc. No other usage "
                                          "is guaranteed across distributions of Kubernetes clusters.")}},
                         "data": {"ca.crt": self.ca_pem}}, {})

    def token_request(self, ns, name, body):
        sa = self.store.get("serviceaccounts", ns, name)
        if sa is None:
            raise errors.not_found(self.registry.by_key("serviceaccounts"), name)
        return self.auth.token_request(sa, body)

    def _builtin_defaults(self, rtype, obj, creating):
        spec = obj.get("spec")
        if rtype.resource == "pods" and isinstance(spec, dict):
            spec.setdefault("restartPolicy", "Always")
            spec.setdefault("terminationGracePeriodSeconds", 30)
            spec.setdefault("dnsPolicy", "ClusterFirst")
            spec.setdefault("schedulerName", "default-scheduler")
            spec.setdefault("serviceAccountName", "default")
            spec.setdefault("securityContext", {})
            spec.setdefault("enableServiceLinks", True)
            spec.setdefault("preemptionPolicy", "PreemptLowerPriority")   # the Priority admission plugin
            spec.setdefault("priority", 0)
            for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
                c.setdefault("resources", {})
                for p in c.get("ports") or []:
                    p.setdefault("protocol", "TCP")
                c.setdefault("terminationMessagePath", "/dev/termination-log")
                c.setdefault("terminationMessagePolicy", "File")
                c.setdefault("imagePullPolicy", "Always" if c.get("image", "").endswith(":latest")
                             or ":" not in c.get("image", "") else "IfNotPresent")
            if creating:
                obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
                if spec.get("schedulingGates"):     # PrepareForCreate (1.27+: PodSchedulingReadiness)
                    obj["status"]["conditions"] = [{
                        "type": "PodScheduled", "status": "False", "lastProbeTime": None,
                        "lastTransitionTime": now(), "reason": "SchedulingGated",
                        "message": "Scheduling is blocked due to non-empty scheduling gates"}]
        elif rtype.resource == "services" and isinstance(spec, dict):
            spec.setdefault("type", "ClusterIP")
            if creating and not spec.get("clusterIP"):
                spec["clusterIP"] = "10.96.%d.%d" % (random.randint(0, 255), random.randint(1, 254))
            if spec.get("clusterIP"):
                spec.setdefault("clusterIPs", [spec["clusterIP"]])
            for p in spec.get("ports") or []:
                p.setdefault("protocol", "TCP")
                p.setdefault("targetPort", p.get("port"))
            obj.setdefault("status", {"loadBalancer": {}})
        elif rtype.resource == "namespaces":
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})
            if creating:
                obj["status"] = {"phase": "Active"}
        elif rtype.resource == "secrets":
            obj.setdefault("type", "Opaque")

    def _crd_status(self, crd):
        spec = crd["spec"]
        t = now()
        crd["status"] = {
            "acceptedNames": copy.deepcopy(spec["names"]),
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                 "message": "no conflicts found", "lastTransitionTime": t},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                 "message": "the initial names have been accepted", "lastTransitionTime": t}],
            "storedVersions": [v["name"] for v in spec.get("versions", []) if v.get("storage")]}
        crd["status"]["acceptedNames"].setdefault("singular", spec["names"]["kind"].lower())
        crd["status"]["acceptedNames"].setdefault("listKind", spec["names"]["kind"] + "List")

    # --- reads --------------------------------------------------------------------

    def get(self, rtype, version, ns, name):
        obj = self.store.get(rtype.key, self._ns(rtype, ns), name)
        if obj is None:
            raise errors.not_found(rtype, name)
        return self.present(rtype, version, obj)

    def list(self, rtype, version, ns, params):
        """(items, resourceVersion, continue token, remainingItemCount)."""
        labels = selectors.parse_labels(params.get("labelSelector"))
        fields = selectors.parse_fields(params.get("fieldSelector"), rtype)
        items, rv = self.store.list(rtype.key, self._ns(rtype, ns) if ns else None)
        items = [self.present(rtype, version, o) for o in items
                 if selectors.labels_match(labels, o) and selectors.fields_match(fields, o)]
        cont = params.get("continue")
        if cont:
            start_rv, after = decode_continue(cont)
            self.store.check_not_compacted(start_rv)
            items = [o for o in items if (o["metadata"].get("namespace", ""), o["metadata"]["name"]) > after]
        limit = int(params.get("limit") or 0)
        token, remaining = None, None
        if limit and len(items) > limit:
            last = items[limit - 1]["metadata"]
            token = encode_continue(rv, (last.get("namespace", ""), last["name"]))
            remaining = len(items) - limit
            items = items[:limit]
        return items, rv, token, remaining

    # --- create ---------------------------------------------------------------------

    def create(self, rtype, version, ns, body, params, user=None, agent="", applied=None):
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request was not a JSON object")
        want = rtype.api_version(version)
        if body.get("apiVersion") and body.get("apiVersion") != want:
            raise errors.bad_request("the API version in the data (%s) does not match the expected API version (%s)"
                                     % (body["apiVersion"], want))
        if body.get("kind") and body["kind"] != rtype.kind:
            raise errors.bad_request("the kind in the data (%s) does not match the expected kind (%s)"
                                     % (body["kind"], rtype.kind))
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if rtype.namespaced:
            if meta.get("namespace") and meta["namespace"] != ns:
                raise errors.bad_request("the namespace of the provided object does not match the namespace "
                                         "sent on the request")
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(random.choice("bcdfghjklmnpqrstvwxz2456789")
                                                          for _ in range(5))
        for k in SERVER_META:
            meta.pop(k, None)
        normalize_meta(meta)
        written = copy.deepcopy(obj)    # what the writer set (admission's additions aside)
        if rtype.resource == "pods":
            validation.check_quantities(rtype.kind, version, obj)
        self._escalation(rtype, obj, ns, user)
        if rtype.resource == "pods":
            self._check_namespace(rtype, ns, meta.get("name", ""), creating=True)
            admission.service_account(self.store, obj, ns)
            admission.default_toleration_seconds(obj)
            kueue_webhook.mutate(self.store, obj, ns)
        self._validate_meta(rtype, obj)
        if rtype.status and rtype.crd:
            obj.pop("status", None)
        warnings = []
        if rtype.crd:
            warnings = self._custom_checks(rtype, version, obj, params, meta["name"])
        self._builtin_defaults(rtype, obj, creating=True)
        if rtype.resource == "pods":
            warnings += admission.pod_security(self.store, obj, ns)
            kueue_webhook.validate_create(self.store, obj, ns)
        if rtype.key == CRD_KEY:
            self._crd_status(obj)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now()
        if rtype.generation:
            meta["generation"] = 1
        self._builtin_defaults(rtype, written, creating=False)
        mf = managed.on_create(written, managed.manager_of(params, agent), rtype.api_version(version),
                               meta["creationTimestamp"], bool(rtype.status)) if applied is None else applied
        if mf:
            meta["managedFields"] = mf
        self.present(rtype, version, obj)
        dry = params.get("dryRun") == "All"
        with self.store.lock:
            self._check_namespace(rtype, meta.get("namespace", ""), meta["name"], creating=True)
            if self.store.get(rtype.key, meta.get("namespace", ""), meta["name"]) is not None:
                raise errors.already_exists(rtype, meta["name"])
            out = self.store.put(rtype.key, obj, dry_run=dry)
            if rtype.key == CRD_KEY and not dry:
                self.registry.add_crd(out)
            if rtype.resource == "namespaces" and not dry:
                self._namespace_controllers(meta["name"])
        return self.present(rtype, version, out), warnings

    # --- update and patch -------------------------------------------------------------

    def update(self, rtype, version, ns, name, body, params, subresource=None, user=None, agent=""):
        with self.store.lock:
            old = self.store.get(rtype.key, self._ns(rtype, ns), name)
            if old is None:
                raise errors.not_found(rtype, name)
            return self._update(rtype, version, old, body, params, subresource, user, agent)

    def patch(self, rtype, version, ns, name, ctype, body, params, subresource=None, user=None, agent=""):
        ctype = (ctype or "").split(";")[0].strip()
        if ctype not in apply.patch_types(rtype) or ctype == apply.CONTENT_TYPE:
            raise errors.unsupported_media_type(apply.patch_types(rtype))
        apply.check_options(params, is_apply=False)
        with self.store.lock:
            old = self.store.get(rtype.key, self._ns(rtype, ns), name)
            if old is None:
                raise errors.not_found(rtype, name)
            current = self.present(rtype, version, copy.deepcopy(old))
            if ctype == "application/merge-patch+json":
                new = patch.merge_patch(current, body)
            elif ctype == "application/json-patch+json":
                new = patch.json_patch(current, body)
            else:
                new = patch.strategic_merge_patch(current, body)
            if not isinstance(new, dict):
                raise errors.bad_request("the patch did not produce an object")
            return self._update(rtype, version, old, new, params, subresource, user, agent)

    def apply(self, rtype, version, ns, name, raw, params, subresource=None, user=None, agent=""):
        """PATCH application/apply-patch+yaml (kubeapi/apply.py): (object,
        warnings, created); an object that does not exist is created
        (never through a subresource)."""
        apply.check_options(params, is_apply=True)
        config = apply.decode(raw)
        apply.check_config(rtype, version, config, self._ns(rtype, ns), name)
        manager, force = params["fieldManager"], apply.forced(params)
        api_version = rtype.api_version(version)
        with self.store.lock:
            old = self.store.get(rtype.key, self._ns(rtype, ns), name)
            if old is None:
                if subresource:
                    raise errors.not_found(rtype, name)
                obj, mf = apply.apply(None, config, [], manager, api_version, now(), None,
                                      bool(rtype.status), force)
                oname = (obj.get("metadata") or {}).get("name", "")
                if oname != name:
                    raise errors.bad_request("the name of the object (%s) does not match the name on the URL (%s)"
                                             % (oname, name))
                obj, warnings = self.create(rtype, version, ns, obj, params, user, agent, applied=mf)
                return obj, warnings, True
            current = self.present(rtype, version, copy.deepcopy(old))
            new, mf = apply.apply(current, config, old["metadata"].get("managedFields"), manager, api_version,
                                  now(), subresource, bool(rtype.status), force)
            new["metadata"].pop("managedFields", None)
            obj, warnings = self._update(rtype, version, old, new, params, subresource, user, agent, applied=mf)
            return obj, warnings, False

    def _update(self, rtype, version, old, body, params, subresource, user=None, agent="", applied=None):
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request was not a JSON object")
        name = old["metadata"]["name"]
        rv = (body.get("metadata") or {}).get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise errors.conflict(rtype, name)
        bname = (body.get("metadata") or {}).get("name")
        if bname and bname != name:
            raise errors.bad_request("the name of the object (%s) does not match the name on the URL (%s)"
                                     % (bname, name))
        warnings = []
        if subresource == "status":
            new = copy.deepcopy(old)
            if "status" in body:
                new["status"] = copy.deepcopy(body["status"])
            else:
                new.pop("status", None)
            if rtype.crd:
                warnings = self._custom_checks(rtype, version, new, params, name, old)
        else:
            new = copy.deepcopy(body)
            meta = new.setdefault("metadata", {})
            for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                      "generation", "name", "namespace"):
                if k in old["metadata"]:
                    meta[k] = old["metadata"][k]
                else:
                    meta.pop(k, None)
            if rtype.status:
                if "status" in old:
                    new["status"] = copy.deepcopy(old["status"])
                else:
                    new.pop("status", None)
            if old["metadata"].get("deletionTimestamp"):
                added = set(meta.get("finalizers") or []) - set(old["metadata"].get("finalizers") or [])
                if added:
                    raise errors.invalid(rtype.kind, rtype.group, name, [(
                        "metadata.finalizers", "FieldValueForbidden",
                        "Forbidden: no new finalizers can be added if the object is being deleted, found new "
                        "finalizers []string{%s}" % ", ".join('"%s"' % f for f in sorted(added)))])
            normalize_meta(meta)
            if rtype.resource == "pods":
                validation.check_quantities(rtype.kind, version, new)
            if _rest(new) != _rest(old):
                self._escalation(rtype, new, old["metadata"].get("namespace", ""), user)
            self._validate_meta(rtype, new)
            if rtype.crd:
                warnings = self._custom_checks(rtype, version, new, params, name, old)
            self._builtin_defaults(rtype, new, creating=False)
            if rtype.resource == "pods":
                admission.default_toleration_seconds(new)
                errs = validation.pod_update_errs(old, new)
                if errs:
                    raise errors.invalid(rtype.kind, rtype.group, name, errs)
                kueue_webhook.validate_update(self.store, old, new, old["metadata"].get("namespace", ""))
            if rtype.key == CRD_KEY:
                self._crd_status(new)
                new["status"]["conditions"] = old.get("status", {}).get("conditions", new["status"]["conditions"])
            if rtype.generation and _rest(new) != _rest(old):
                meta["generation"] = old["metadata"].get("generation", 1) + 1
        self.present(rtype, version, new)
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        # managedFields: the request's own when it sends a list ([] clears
        # them), else the stored ones; a change updates its manager's entry
        sent = (body.get("metadata") or {}).get("managedFields") if subresource != "status" else None
        mf = sent if isinstance(sent, list) else old["metadata"].get("managedFields")
        if applied is not None:     # server-side apply computed them (kubeapi/apply.py)
            mf = applied
        new["metadata"].pop("managedFields", None)
        if mf:
            new["metadata"]["managedFields"] = mf
        cmp_old = self.present(rtype, version, copy.deepcopy(old))
        if new == cmp_old:
            return new, warnings
        if applied is None:
            mf = managed.on_update(mf, old, new, managed.manager_of(params, agent), rtype.api_version(version),
                                   now(), subresource, bool(rtype.status))
        new["metadata"].pop("managedFields", None)
        if mf:
            new["metadata"]["managedFields"] = mf
        dry = params.get("dryRun") == "All"
        # the last finalizer gone: removed, unless a graceful deletion (a pod's
        # grace period) is still running, which only the kubelet ends
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers") and \
                not new["metadata"].get("deletionGracePeriodSeconds"):
            out = self.store.remove(rtype.key, new["metadata"].get("namespace", ""), name, dry_run=dry)
            self.gc_wake.set()
            return self.present(rtype, version, out), warnings
        out = self.store.put(rtype.key, new, dry_run=dry)
        if rtype.key == CRD_KEY and not dry:
            self.registry.add_crd(out)
        return self.present(rtype, version, out), warnings

    # --- pods/binding -----------------------------------------------------------------

    def bind(self, rtype, ns, name, body, params):
        """POST pods/NAME/binding: sets spec.nodeName once, as the real
        BindingREST does; answers the Status a real server sends."""
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request was not a JSON object")
        if body.get("kind") and body["kind"] != "Binding":
            raise errors.bad_request("the kind in the data (%s) does not match the expected kind (Binding)"
                                     % body["kind"])
        if (body.get("metadata") or {}).get("name", "") != name:
            raise errors.bad_request("name in URL does not match name in Binding object")
        errs = validation.binding_target_errs(body)
        if errs:
            # ValidatePodBinding's errors reach the client as a plain error: 500, no reason
            msg = "; ".join("%s: %s" % (f, t) for f, _, t in errs)
            raise errors.ApiError(500, "", msg if len(errs) == 1 else "[" + ", ".join(
                "%s: %s" % (f, t) for f, _, t in errs) + "]")
        node = body["target"]["name"]
        binding_rt = _BindingType()
        with self.store.lock:
            pod = self.store.get(rtype.key, ns, name)
            if pod is None:
                raise errors.not_found(rtype, name)
            if pod["metadata"].get("deletionTimestamp"):
                raise errors.conflict(binding_rt, name, "pod %s is being deleted, cannot be assigned to a host"
                                      % name)
            if (pod.get("spec") or {}).get("nodeName"):
                raise errors.conflict(binding_rt, name, 'pod %s is already assigned to node "%s"'
                                      % (name, pod["spec"]["nodeName"]))
            pod.setdefault("spec", {})["nodeName"] = node
            annotations = (body.get("metadata") or {}).get("annotations") or {}
            if annotations:
                pod["metadata"].setdefault("annotations", {}).update(annotations)
            conds = pod.setdefault("status", {}).setdefault("conditions", [])
            for c in conds:
                if c.get("type") == "PodScheduled":
                    if c.get("status") != "True":
                        c["status"] = "True"
                        c["lastTransitionTime"] = now()
                    break
            else:
                conds.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                              "lastTransitionTime": now()})
            self.store.put(rtype.key, pod, dry_run=params.get("dryRun") == "All")
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    # --- delete --------------------------------------------------------------------

    def delete(self, rtype, version, ns, name, options, params):
        options = dict(options or {})
        for k in ("gracePeriodSeconds", "propagationPolicy"):
            if params.get(k) is not None and options.get(k) is None:
                options[k] = int(params[k]) if k == "gracePeriodSeconds" else params[k]
        if params.get("orphanDependents") == "true" or options.get("orphanDependents"):
            options.setdefault("propagationPolicy", "Orphan")
        dry = params.get("dryRun") == "All" or "All" in (options.get("dryRun") or [])
        with self.store.lock:
            obj = self.store.get(rtype.key, self._ns(rtype, ns), name)
            if obj is None:
                raise errors.not_found(rtype, name)
            meta = obj["metadata"]
            pre = options.get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != meta["uid"]:
                raise errors.conflict(rtype, name, "Precondition failed: UID in precondition: %s, UID in object "
                                      "meta: %s" % (pre["uid"], meta["uid"]))
            if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
                raise errors.conflict(rtype, name, "Precondition failed: ResourceVersion in precondition: %s, "
                                      "ResourceVersion in object meta: %s" % (pre["resourceVersion"],
                                                                              meta["resourceVersion"]))
            policy = options.get("propagationPolicy")
            finalizers = list(meta.get("finalizers") or [])
            if policy == "Foreground" and "foregroundDeletion" not in finalizers:
                finalizers.append("foregroundDeletion")
            if policy == "Orphan" and "orphan" not in finalizers:
                finalizers.append("orphan")
            grace = options.get("gracePeriodSeconds")
            if rtype.resource == "pods":
                if grace is None:
                    grace = (obj.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
                if not (obj.get("spec") or {}).get("nodeName"):
                    grace = 0     # never scheduled: nothing to wait for
            else:
                grace = 0
            if rtype.resource == "namespaces":
                finalizers = finalizers or []
                obj.setdefault("status", {})["phase"] = "Terminating"
                grace = 0
            if meta.get("deletionTimestamp"):
                if grace == 0 and not finalizers and not dry:
                    out = self.store.remove(rtype.key, meta.get("namespace", ""), name)
                    self.gc_wake.set()
                    return self.present(rtype, version, out)
                changed = finalizers != (meta.get("finalizers") or [])
                if finalizers:
                    meta["finalizers"] = finalizers
                # a shorter grace period shortens the running one (BeforeDelete), e.g. the
                # kubelet's final grace-0 DELETE of a pod that a finalizer still holds
                if rtype.resource == "pods" and grace < (meta.get("deletionGracePeriodSeconds") or 0):
                    meta["deletionTimestamp"] = now(grace)
                    meta["deletionGracePeriodSeconds"] = grace
                    changed = True
                if changed:
                    obj = self.store.put(rtype.key, obj, dry_run=dry)
                return self.present(rtype, version, obj)
            if finalizers or grace > 0 or rtype.resource == "namespaces":
                meta["deletionTimestamp"] = now(grace)
                meta["deletionGracePeriodSeconds"] = grace
                if finalizers:
                    meta["finalizers"] = finalizers
                out = self.store.put(rtype.key, obj, dry_run=dry)
            else:
                out = self.store.remove(rtype.key, meta.get("namespace", ""), name, dry_run=dry)
            if rtype.key == CRD_KEY and not dry:
                self._delete_crd_instances(out)
            self.gc_wake.set()
            return self.present(rtype, version, out)

    def delete_collection(self, rtype, version, ns, options, params):
        items, rv, _, _ = self.list(rtype, version, ns, {k: params.get(k) for k in ("labelSelector", "fieldSelector")})
        out = []
        for o in items:
            try:
                out.append(self.delete(rtype, version, o["metadata"].get("namespace", ""), o["metadata"]["name"],
                                       options, params))
            except errors.ApiError as e:
                if e.code != 404:
                    raise
        return out, rv

    def _delete_crd_instances(self, crd):
        rt = self.registry.remove_crd(crd)
        if rt is None:
            return
        for o in self.store.list(rt.key)[0]:
            self.store.remove(rt.key, o["metadata"].get("namespace", ""), o["metadata"]["name"])
        if crd["metadata"].get("deletionTimestamp"):
            with self.store.lock:
                cur = self.store.get(CRD_KEY, "", crd["metadata"]["name"])
                if cur is not None and not cur["metadata"].get("finalizers"):
                    self.store.remove(CRD_KEY, "", crd["metadata"]["name"])

    # --- garbage collector -----------------------------------------------------------

    def gc_loop(self, period=0.5):
        while not self.stopping.is_set():
            self.gc_wake.wait(period)
            self.gc_wake.clear()
            try:
                while self.gc_pass():
                    pass
            except Exception as e:  # keep collecting; a failed pass is retried
                print("gc: %r" % (e,), flush=True)

    def _type_of(self, tkey):
        return self.registry.by_key(tkey)

    def _gc_delete(self, key, policy="Background"):
        rt = self._type_of(key[0])
        if rt is None:
            return
        try:
            self.delete(rt, rt.versions[0], key[1], key[2], {"propagationPolicy": policy}, {})
        except errors.ApiError:
            pass

    def _remove_finalizer(self, key, fin):
        with self.store.lock:
            obj = self.store.get(*key)
            if obj is None or fin not in (obj["metadata"].get("finalizers") or []):
                return
            obj["metadata"]["finalizers"].remove(fin)
            if not obj["metadata"]["finalizers"]:
                del obj["metadata"]["finalizers"]
                if obj["metadata"].get("deletionTimestamp"):
                    self.store.remove(*key)
                    return
            self.store.put(key[0], obj)

    def gc_pass(self):
        """One sweep; True if it changed something (another sweep may follow)."""
        with self.store.lock:
            snapshot = {k: self.store.objects[k] for k in self.store.keys()}
        by_uid = {o["metadata"]["uid"]: (k, o) for k, o in snapshot.items()}
        dependents = {}
        for k, o in snapshot.items():
            for ref in o["metadata"].get("ownerReferences") or []:
                dependents.setdefault(ref.get("uid"), []).append(k)
        changed = False
        for k, o in snapshot.items():
            meta = o["metadata"]
            refs = meta.get("ownerReferences") or []
            if refs and not meta.get("deletionTimestamp"):
                owners = [by_uid.get(r.get("uid")) for r in refs]
                live = [ow for ow in owners if ow is not None]
                if not live:
                    self._gc_delete(k)
                    changed = True
                    continue
                if all("foregroundDeletion" in (ow[1]["metadata"].get("finalizers") or []) for ow in live):
                    self._gc_delete(k, "Foreground")
                    changed = True
                    continue
            fins = meta.get("finalizers") or []
            if meta.get("deletionTimestamp") and "orphan" in fins:
                for dk in dependents.get(meta["uid"], []):
                    with self.store.lock:
                        d = self.store.get(*dk)
                        if d is not None:
                            d["metadata"]["ownerReferences"] = [r for r in d["metadata"].get("ownerReferences", [])
                                                                if r.get("uid") != meta["uid"]]
                            if not d["metadata"]["ownerReferences"]:
                                del d["metadata"]["ownerReferences"]
                            self.store.put(dk[0], d)
                self._remove_finalizer(k, "orphan")
                changed = True
            elif meta.get("deletionTimestamp") and "foregroundDeletion" in fins:
                if not [dk for dk in dependents.get(meta["uid"], []) if dk in snapshot]:
                    self._remove_finalizer(k, "foregroundDeletion")
                    changed = True
            if k[0] == "namespaces" and meta.get("deletionTimestamp"):
                inside = [ok for ok in snapshot if ok[1] == meta["name"] and ok[0] != "namespaces"]
                for ok in inside:
                    if not snapshot[ok]["metadata"].get("deletionTimestamp"):
                        self._gc_delete(ok)
                        changed = True
                if not inside:
                    self.store.remove(*k)
                    changed = True
        return changed


class _BindingType:
    """How errors name the pods/binding subresource: resource "pods/binding"."""
    resource = "pods/binding"
    group = ""


def encode_continue(rv, after):
    return base64.urlsafe_b64encode(json.dumps({"rv": rv, "start": list(after)}).encode()).decode()


def decode_continue(token):
    try:
        d = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(d["rv"]), tuple(d["start"])
    except Exception:
        raise errors.bad_request("continue key is not valid: illegal base64 data")

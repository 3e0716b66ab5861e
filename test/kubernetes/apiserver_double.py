#!/usr/bin/env python3
"""TEST DOUBLE of a Kubernetes API server (core/v1 pods), for mesh_exec's kubernetes driver.

These machines have no Kubernetes cluster and cannot download one, so the tests run the driver
against this double.  It implements the subset the driver uses, with the real paths, JSON shapes
and errors of the Kubernetes API reference (v1.28):

  POST   /api/v1/namespaces/{ns}/pods[?fieldValidation=Strict]   201 Pod | 409 AlreadyExists
  GET    /api/v1/namespaces/{ns}/pods/{name}                     Pod | 404 NotFound
  DELETE /api/v1/namespaces/{ns}/pods/{name}                     Pod (deletionTimestamp) | 404
  GET    /api/v1/namespaces/{ns}/pods?labelSelector=&fieldSelector=   PodList
  GET    /api/v1/namespaces/{ns}/pods?watch=true&timeoutSeconds=N&...    WatchEvent stream
  *      /api/v1/namespaces/{ns}/pods/{name}[:port]/proxy/{path}      forwarded to the pod

Errors are meta/v1 Status objects (kind, status Failure, reason, code, message, details).
A missing or wrong bearer token is 401 Unauthorized; the --denied-token-file token authenticates
but no Role binds it (403 Forbidden on everything); a pod naming a RuntimeClass the double
does not have is 403 Forbidden (admission), and so is a pod the shipped manifests
(deploy/kubernetes/) refuse in their namespace: Pod Security at the namespace's level and the
pod-shape ValidatingAdmissionPolicy, evaluated by pod_policy.py, with the policy's image
repository taken from the double's own --image; unknown fields under fieldValidation=Strict and
wrong JSON types are 400 BadRequest; semantic errors 422 Invalid; a body that is not
application/json is 415 UnsupportedMediaType.  Pods take time: Pending (scheduled) first, then
Running with the Ready condition only once the container serves.  The container is a REAL
mesh-sandboxd, started through the pod image's own entry point (deploy/kubernetes/
entrypoint.sh) with the pod's args and env, listening on a loopback port the double maps to the
pod's containerPort; pods/proxy forwards to it (the Authorization header is consumed, as the
real API server does after authentication).  Deleting a pod destroys what its daemon holds and
kills it, as a container's end would.  An image the double does not know is ErrImagePull, then
ImagePullBackOff.

Test-only control (not Kubernetes): POST /_double/mode with body normal | error500 | hang.
  error500: every API request answers 500 InternalError; hang: requests are held unanswered
  until the mode changes.  GET /_double/pods: the pods and their daemons' ports (for tests).

usage: apiserver_double.py --cert C --key K --token-file F --port-file P --namespace NS
                           --image NAME=ENTRYPOINT --daemon PATH --work DIR
"""
import argparse
import json
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import http.client
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit, parse_qs, unquote

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pod_policy  # noqa: E402  (the admission the shipped manifests ask for)

ARGS = None
LOCK = threading.Condition()
PODS = {}          # (ns, name) -> pod dict
RUNTIME = {}       # (ns, name) -> {"proc", "port", "dir", "cgroup"}
EVENTS = []        # (resourceVersion, type, pod snapshot)
RV = [1000]
MODE = ["normal"]
ADMISSION = []     # the shipped manifests (deploy/kubernetes/), once read

# ---- schema for strict decoding: field -> type, nested objects by name ----
SCHEMA = {
    "Pod": {"apiVersion": str, "kind": str, "metadata": "ObjectMeta", "spec": "PodSpec",
            "status": dict},
    "ObjectMeta": {"name": str, "generateName": str, "namespace": str, "labels": "strmap",
                   "annotations": "strmap", "uid": str, "resourceVersion": str,
                   "creationTimestamp": str, "deletionTimestamp": str, "finalizers": list,
                   "ownerReferences": list, "deletionGracePeriodSeconds": int},
    "PodSpec": {"containers": ["Container"], "initContainers": ["Container"],
                "restartPolicy": str, "automountServiceAccountToken": bool,
                "enableServiceLinks": bool, "runtimeClassName": str, "nodeSelector": "strmap",
                "tolerations": ["Toleration"], "serviceAccountName": str,
                "securityContext": dict, "volumes": list, "terminationGracePeriodSeconds": int,
                "activeDeadlineSeconds": int, "hostNetwork": bool, "dnsPolicy": str,
                "priorityClassName": str, "affinity": dict, "nodeName": str, "hostUsers": bool,
                "hostPID": bool, "hostIPC": bool, "ephemeralContainers": list},
    "Container": {"name": str, "image": str, "imagePullPolicy": str, "command": [str],
                  "args": [str], "env": ["EnvVar"], "ports": ["ContainerPort"],
                  "resources": "ResourceRequirements", "readinessProbe": "Probe",
                  "livenessProbe": "Probe", "startupProbe": "Probe", "securityContext": dict,
                  "volumeMounts": list, "workingDir": str},
    "EnvVar": {"name": str, "value": str, "valueFrom": dict},
    "ContainerPort": {"name": str, "containerPort": int, "protocol": str, "hostPort": int,
                      "hostIP": str},
    "ResourceRequirements": {"requests": "strmap", "limits": "strmap", "claims": list},
    "Probe": {"tcpSocket": "TCPSocketAction", "httpGet": dict, "exec": dict, "grpc": dict,
              "initialDelaySeconds": int, "periodSeconds": int, "timeoutSeconds": int,
              "successThreshold": int, "failureThreshold": int,
              "terminationGracePeriodSeconds": int},
    "TCPSocketAction": {"port": (int, str), "host": str},
    "Toleration": {"key": str, "operator": str, "value": str, "effect": str,
                   "tolerationSeconds": int},
    "DeleteOptions": {"apiVersion": str, "kind": str, "gracePeriodSeconds": int,
                      "propagationPolicy": str, "preconditions": dict, "orphanDependents": bool,
                      "dryRun": list},
}
GO_TYPES = {str: "string", int: "int64", bool: "bool", dict: "object", list: "array"}
QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")


class Reject(Exception):
    """An answer other than success: a Status the handler sends."""

    def __init__(self, code, reason, message, details=None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details


def now():
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_object(code, reason, message, details=None):
    doc = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code}
    if details:
        doc["details"] = details
    return doc


def decode(doc, kind, path, strict, unknown):
    """Go's json decoding into the typed struct: wrong types fail; unknown fields collected."""
    schema = SCHEMA[kind]
    for key, value in doc.items():
        where = f"{path}.{key}" if path else key
        if key not in schema:
            unknown.append(where)
            continue
        check(value, schema[key], where, strict, unknown, kind)


def check(value, want, where, strict, unknown, parent):
    if value is None:
        return
    if isinstance(want, list):
        if not isinstance(value, list):
            type_error(value, "array", where, parent)
        for i, item in enumerate(value):
            check(item, want[0], f"{where}[{i}]", strict, unknown, parent)
    elif want == "strmap":
        if not isinstance(value, dict):
            type_error(value, "map[string]string", where, parent)
        for k, v in value.items():
            if not isinstance(v, str):
                type_error(v, "string", f"{where}.{k}", parent)
    elif isinstance(want, str):
        if not isinstance(value, dict):
            type_error(value, want, where, parent)
        decode(value, want, where, strict, unknown)
    else:
        types = want if isinstance(want, tuple) else (want,)
        if isinstance(value, bool) and bool not in types:
            type_error(value, GO_TYPES[types[0]], where, parent)
        if not isinstance(value, types):
            type_error(value, GO_TYPES[types[0]], where, parent)


def type_error(value, go_type, where, parent):
    got = {dict: "object", list: "array", str: "string", bool: "bool"}.get(type(value), "number")
    raise Reject(400, "BadRequest", f'Pod in version "v1" cannot be handled as a Pod: json: cannot '
                 f'unmarshal {got} into Go struct field {parent}.{where} of type {go_type}')


def validate_pod(pod, ns):
    """The API server's semantic validation of the fields the driver sends (422 Invalid)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    name = meta.get("name", "")
    causes = []
    if pod.get("apiVersion") != "v1" or pod.get("kind") != "Pod":
        raise Reject(400, "BadRequest", "the object provided is unrecognized (must be apiVersion v1, kind Pod)")
    if meta.get("namespace") not in (None, ns):
        raise Reject(400, "BadRequest", "the namespace of the provided object does not match the namespace sent on the request")
    if not DNS_SUBDOMAIN.match(name):
        causes.append(("metadata.name", f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters'))
    for k, v in (meta.get("labels") or {}).items():
        if not LABEL_VALUE.match(v):
            causes.append((f"metadata.labels", f'Invalid value: "{v}": a valid label must be an empty string or consist of alphanumeric characters'))
    containers = spec.get("containers") or []
    if not containers:
        causes.append(("spec.containers", "Required value"))
    if spec.get("restartPolicy", "Always") not in ("Always", "OnFailure", "Never"):
        causes.append(("spec.restartPolicy", "Unsupported value"))
    for i, c in enumerate(containers):
        if not c.get("name") or not c.get("image"):
            causes.append((f"spec.containers[{i}]", "Required value: name and image"))
        if c.get("imagePullPolicy", "IfNotPresent") not in ("Always", "IfNotPresent", "Never"):
            causes.append((f"spec.containers[{i}].imagePullPolicy", "Unsupported value"))
        res = c.get("resources") or {}
        for part in ("requests", "limits"):
            for rname, q in (res.get(part) or {}).items():
                if not QUANTITY.match(q):
                    causes.append((f"spec.containers[{i}].resources.{part}[{rname}]",
                                   f'Invalid value: "{q}": must match the regex for quantities'))
    if causes:
        raise Reject(422, "Invalid", f'Pod "{name}" is invalid: ' + ", ".join(f"{f}: {m}" for f, m in causes),
                     {"name": name, "kind": "Pod",
                      "causes": [{"reason": "FieldValueInvalid", "message": m, "field": f} for f, m in causes]})
    rc = spec.get("runtimeClassName")
    if rc is not None and rc not in ARGS.runtime_class:
        raise Reject(403, "Forbidden", f'pods "{name}" is forbidden: pod rejected: RuntimeClass "{rc}" not found')


def admit(pod, ns):
    """Admission as deploy/kubernetes/ asks of the API server: 403 Forbidden for a pod that
    breaks the namespace's Pod Security level or the pod-shape policy (namespaces the
    manifests do not configure admit everything, as a real cluster's unlabelled ones would)."""
    if not ADMISSION:
        ADMISSION.append(pod_policy.load_documents())   # read once: the files do not change
    docs = ADMISSION[0]
    name = (pod.get("metadata") or {}).get("name", "")
    level, version = pod_policy.namespace_level(docs, ns)
    if level is None:
        return
    broken = pod_policy.pod_security_violations(pod, docs, ns)
    if broken:
        raise Reject(403, "Forbidden", f'pods "{name}" is forbidden: violates PodSecurity '
                     f'"{level}:v{version[0]}.{version[1]}": {", ".join(broken)}')
    repository = next(iter(ARGS.images), "").rsplit(":", 1)[0]
    refusals = pod_policy.policy_refusals(pod, docs, ns, params={"data": {"imageRepository": repository}})
    if refusals:
        raise Reject(403, "Forbidden", f'pods "{name}" is forbidden: ValidatingAdmissionPolicy '
                     f"'mesh-exec-pod-shape' with binding 'mesh-exec-pod-shape' denied request: {refusals[0]}")


# ---- pod store and events ----

def bump(pod):
    RV[0] += 1
    pod["metadata"]["resourceVersion"] = str(RV[0])


def emit(kind, pod):
    """Record a change and wake watchers (LOCK held)."""
    EVENTS.append((RV[0], kind, json.loads(json.dumps(pod))))
    del EVENTS[:-1000]
    LOCK.notify_all()


def set_condition(pod, ctype, value):
    conds = pod["status"].setdefault("conditions", [])
    for c in conds:
        if c["type"] == ctype:
            c["status"], c["lastTransitionTime"] = value, now()
            return
    conds.append({"type": ctype, "status": value, "lastProbeTime": None, "lastTransitionTime": now()})


def update(key, change):
    with LOCK:
        pod = PODS.get(key)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return False
        change(pod)
        bump(pod)
        emit("MODIFIED", pod)
        return True


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def container_status(c, state, ready):
    return {"name": c["name"], "state": state, "lastState": {}, "ready": ready, "restartCount": 0,
            "image": c["image"], "imageID": "", "started": "running" in state}


def run_pod(key):
    """The kubelet's part: schedule, pull, start the container, probe it, report Ready."""
    pod = PODS[key]
    c = pod["spec"]["containers"][0]
    time.sleep(0.05)   # scheduling takes a moment: Pending with PodScheduled first

    def scheduled(p):
        set_condition(p, "PodScheduled", "True")
        p["spec"]["nodeName"] = "double-node"
        p["status"]["hostIP"] = "127.0.0.1"
    if not update(key, scheduled):
        return
    entry = ARGS.images.get(c["image"])
    if entry is None:
        def pull_failed(p):
            p["status"]["containerStatuses"] = [container_status(c, {"waiting": {
                "reason": "ErrImagePull",
                "message": f'rpc error: code = NotFound desc = failed to pull and unpack image "{c["image"]}": not found'}}, False)]
        update(key, pull_failed)
        time.sleep(0.2)
        update(key, lambda p: p["status"]["containerStatuses"][0]["state"]["waiting"].update(
            reason="ImagePullBackOff", message=f'Back-off pulling image "{c["image"]}"'))
        return
    port = free_port()
    pod_dir = os.path.join(ARGS.work, "pods", key[0], key[1])
    os.makedirs(pod_dir, exist_ok=True)
    cgroup = f"mesh-k8sdouble-{os.getpid()}-{secrets.token_hex(3)}"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "MESH_SANDBOXD_LISTEN": f"127.0.0.1:{port}",
           "MESH_SANDBOXD_STATE_DIR": os.path.join(pod_dir, "state"),
           "MESH_SANDBOXD_TOKEN_FILE": os.path.join(pod_dir, "token"),
           "MESH_SANDBOXD_BIN": ARGS.daemon,
           }
    for e in c.get("env") or []:
        env[e["name"]] = e.get("value", "")
    read_end, write_end = os.pipe()
    env["MESH_SANDBOXD_EXTRA_ARGS"] = f"--cgroup-name {cgroup} --ready-fd {write_end}"
    with open(os.path.join(pod_dir, "container.log"), "ab") as log:
        proc = subprocess.Popen([entry] + (c.get("args") or []), env=env, stdout=log, stderr=log,
                                pass_fds=(write_end,), start_new_session=True)
    os.close(write_end)
    with LOCK:
        RUNTIME[key] = {"proc": proc, "port": port, "dir": pod_dir, "cgroup": cgroup,
                        "token": env.get("MESH_SANDBOXD_TOKEN", "")}
    started = now()

    def running(p):
        p["status"].update(phase="Running", podIP="127.0.0.1", podIPs=[{"ip": "127.0.0.1"}],
                           startTime=started)
        p["status"]["containerStatuses"] = [container_status(c, {"running": {"startedAt": started}}, False)]
        set_condition(p, "Initialized", "True")
        set_condition(p, "ContainersReady", "False")
        set_condition(p, "Ready", "False")
    if not update(key, running):
        os.close(read_end)
        return
    # the readiness probe: the container's port answers once the daemon said it serves
    ready = os.read(read_end, 64)
    os.close(read_end)
    if ready:
        def is_ready(p):
            p["status"]["containerStatuses"][0]["ready"] = True
            set_condition(p, "ContainersReady", "True")
            set_condition(p, "Ready", "True")
        update(key, is_ready)
    code = proc.wait()

    def terminated(p):
        p["status"]["phase"] = "Failed" if code else "Succeeded"
        p["status"]["containerStatuses"] = [container_status(c, {"terminated": {
            "exitCode": code, "reason": "Error" if code else "Completed", "finishedAt": now()}}, False)]
        set_condition(p, "Ready", "False")
        set_condition(p, "ContainersReady", "False")
    update(key, terminated)


def stop_container(key):
    """A container's end: every process in it dies, its files go (the daemon keeps its
    workspaces across its own exit, so they are destroyed through it first)."""
    with LOCK:
        rt = RUNTIME.pop(key, None)
    if rt is None:
        return
    if rt["proc"].poll() is None:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", rt["port"], timeout=10)
            headers = {"X-Mesh-Sandboxd-Token": rt["token"]}
            conn.request("GET", "/v1/workspaces", headers=headers)
            for w in json.loads(conn.getresponse().read()).get("workspaces", []):
                conn.request("DELETE", f"/v1/workspaces/{w['id']}", headers=headers)
                conn.getresponse().read()
        except (OSError, ValueError, http.client.HTTPException):
            pass
        try:
            os.killpg(rt["proc"].pid, signal.SIGKILL)
        except OSError:
            pass
    rt["proc"].wait()
    remove_cgroups(rt["cgroup"])
    shutil.rmtree(rt["dir"], ignore_errors=True)


def remove_cgroups(name):
    """What the container runtime does at a container's end: every process left in the
    container's cgroups (sandboxes outlive their daemon by design) is killed, then the
    groups are removed, deepest first, once their processes are gone."""
    tops = [os.path.join("/sys/fs/cgroup", h, name) for h in
            (os.listdir("/sys/fs/cgroup") if os.path.isdir("/sys/fs/cgroup") else [])]
    tops = [t for t in tops if os.path.isdir(t)]
    for _ in range(100):
        left = False
        for top in tops:
            for root, _dirs, _files in sorted(os.walk(top), key=lambda w: -len(w[0])):
                try:
                    with open(os.path.join(root, "cgroup.procs")) as f:
                        for pid in f.read().split():
                            os.kill(int(pid), signal.SIGKILL)
                except OSError:
                    pass
                try:
                    os.rmdir(root)
                except FileNotFoundError:
                    pass
                except OSError:
                    left = True
        if not left:
            return
        time.sleep(0.1)


def delete_pod(key, grace):
    """Terminating now; gone once the container has stopped (after at most the grace)."""
    def finish():
        stop_container(key)
        with LOCK:
            pod = PODS.pop(key, None)
            if pod is not None:
                bump(pod)
                emit("DELETED", pod)
    with LOCK:
        pod = PODS[key]
        if not pod["metadata"].get("deletionTimestamp"):
            pod["metadata"]["deletionTimestamp"] = now()
            pod["metadata"]["deletionGracePeriodSeconds"] = grace
            bump(pod)
            emit("MODIFIED", pod)
            threading.Thread(target=finish, daemon=True).start()
        return json.loads(json.dumps(pod))


# ---- selectors ----

def parse_selector(text, what):
    reqs = []
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        m = re.match(r"^(!?)([A-Za-z0-9./_-]+)\s*(?:(==|=|!=)\s*([A-Za-z0-9._-]*))?$", part)
        if not m:
            raise Reject(400, "BadRequest", f'unable to parse requirement: invalid {what}: "{part}"')
        reqs.append(m.groups())
    return reqs


def field_value(pod, field):
    table = {"metadata.name": pod["metadata"]["name"], "metadata.namespace": pod["metadata"]["namespace"],
             "status.phase": pod["status"].get("phase", ""), "spec.nodeName": pod["spec"].get("nodeName", "")}
    if field not in table:
        raise Reject(400, "BadRequest", f'"{field}" is not a known field selector: only "metadata.name", "metadata.namespace", "spec.nodeName", "status.phase"')
    return table[field]


def matches(pod, labels, fields):
    lab = pod["metadata"].get("labels") or {}
    for neg, key, op, value in labels:
        if op is None:
            if bool(neg) == (key in lab):
                return False
        elif (op == "!=") == (lab.get(key) == value):
            return False
    for neg, key, op, value in fields:
        if op is None or neg:
            raise Reject(400, "BadRequest", f'invalid field selector "{key}"')
        if (op == "!=") == (field_value(pod, key) == value):
            return False
    return True


# ---- HTTP ----

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kube-apiserver-double"

    def setup(self):
        super().setup()
        # headers and body go out in two writes: without this, Nagle and the client's delayed
        # ACK hold the second for 40 ms
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, fmt, *args):   # never the headers: they carry the token
        sys.stderr.write("%s %s\n" % (self.command, self.path.split("?")[0]))

    def send(self, code, doc, ctype="application/json"):
        data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def fail(self, r):
        self.send(r.code, status_object(r.code, r.reason, r.message, r.details))

    def do_GET(self):
        self.handle_any()

    def do_POST(self):
        self.handle_any()

    def do_PUT(self):
        self.handle_any()

    def do_DELETE(self):
        self.handle_any()

    def handle_any(self):
        url = urlsplit(self.path)
        raw = self.body()
        if url.path.startswith("/_double/"):
            return self.control(url.path, raw)
        with LOCK:
            while MODE[0] == "hang":
                LOCK.wait()
            mode = MODE[0]
        try:
            if mode == "error500":
                raise Reject(500, "InternalError", "Internal error occurred: etcdserver: request timed out")
            self.authenticate()
            self.route(url, raw)
        except Reject as r:
            self.fail(r)

    def control(self, path, raw):
        if path == "/_double/mode" and self.command == "POST":
            with LOCK:
                MODE[0] = raw.decode().strip() or "normal"
                LOCK.notify_all()
            return self.send(200, {"mode": MODE[0]})
        if path == "/_double/pods":
            with LOCK:
                return self.send(200, {f"{k[0]}/{k[1]}": {"port": v["port"], "pid": v["proc"].pid}
                                       for k, v in RUNTIME.items()})
        self.send(404, status_object(404, "NotFound", "no such control"))

    def authenticate(self):
        """401 for an unknown token; the denied one authenticates but RBAC allows it nothing."""
        auth = self.headers.get("Authorization", "")
        presented = auth[7:].encode() if auth.startswith("Bearer ") else b""
        if ARGS.denied and secrets.compare_digest(presented, ARGS.denied.encode()):
            verb = {"POST": "create", "DELETE": "delete"}.get(self.command, "get")
            raise Reject(403, "Forbidden", f'pods is forbidden: User "system:serviceaccount:mesh:unbound" '
                         f'cannot {verb} resource "pods" in API group "" in the namespace "mesh"', {"kind": "pods"})
        if not presented or not secrets.compare_digest(presented, ARGS.token.encode()):
            raise Reject(401, "Unauthorized", "Unauthorized")
        del self.headers["Authorization"]   # consumed, as the real server does

    def route(self, url, raw):
        m = re.match(r"^/api/v1/namespaces/([^/]+)/pods(?:/([^/]+)(?:/(proxy)(/.*)?)?)?$", url.path)
        if not m:
            raise Reject(404, "NotFound", "the server could not find the requested resource")
        ns, name, proxy, rest = m.groups()
        if ns not in ARGS.namespace:
            raise Reject(404, "NotFound", f'namespaces "{ns}" not found', {"name": ns, "kind": "namespaces"})
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        if proxy:
            return self.proxy(ns, unquote(name), rest or "/", url.query)
        if name is None and self.command == "POST":
            return self.create(ns, raw, query)
        if name is None and self.command == "GET":
            return self.watch(ns, query) if query.get("watch") in ("1", "true") else self.list(ns, query)
        if name is not None and self.command == "GET":
            return self.send(200, self.get(ns, name))
        if name is not None and self.command == "DELETE":
            return self.delete(ns, name, raw)
        raise Reject(405, "MethodNotAllowed", f"the server does not allow this method on the requested resource")

    def json_body(self, raw, kind, query):
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        if ctype != "application/json":
            raise Reject(415, "UnsupportedMediaType", f'the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf')
        try:
            doc = json.loads(raw)
        except ValueError as e:
            raise Reject(400, "BadRequest", f"the object provided is unrecognized: {e}")
        if not isinstance(doc, dict):
            raise Reject(400, "BadRequest", "the object provided is unrecognized")
        unknown = []
        decode(doc, kind, "", True, unknown)
        if unknown and query.get("fieldValidation", "Warn") == "Strict":
            raise Reject(400, "BadRequest", f'{kind} in version "v1" cannot be handled as a {kind}: strict decoding error: '
                         + ", ".join(f'unknown field "{u}"' for u in unknown))
        return doc

    def get(self, ns, name):
        with LOCK:
            pod = PODS.get((ns, name))
            if pod is None:
                raise Reject(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
            return json.loads(json.dumps(pod))

    def create(self, ns, raw, query):
        pod = self.json_body(raw, "Pod", query)
        validate_pod(pod, ns)
        admit(pod, ns)
        name = pod["metadata"]["name"]
        with LOCK:
            if (ns, name) in PODS:
                raise Reject(409, "AlreadyExists", f'pods "{name}" already exists', {"name": name, "kind": "pods"})
            pod["metadata"].update(namespace=ns, uid=secrets.token_hex(16), creationTimestamp=now())
            pod["spec"].setdefault("restartPolicy", "Always")
            pod["status"] = {"phase": "Pending", "qosClass": "Guaranteed"}
            bump(pod)
            PODS[(ns, name)] = pod
            emit("ADDED", pod)
            answer = json.loads(json.dumps(pod))
        threading.Thread(target=run_pod, args=((ns, name),), daemon=True).start()
        self.send(201, answer)

    def delete(self, ns, name, raw):
        grace = 30
        if raw:
            opts = self.json_body(raw, "DeleteOptions", {"fieldValidation": "Strict"})
            grace = opts.get("gracePeriodSeconds", grace)
        self.get(ns, name)
        self.send(200, delete_pod((ns, name), grace))

    def selected(self, ns, query):
        labels = parse_selector(query.get("labelSelector"), "label selector")
        fields = parse_selector(query.get("fieldSelector"), "field selector")
        return [p for (pns, _), p in sorted(PODS.items()) if pns == ns and matches(p, labels, fields)], labels, fields

    def list(self, ns, query):
        with LOCK:
            items, _, _ = self.selected(ns, query)
            doc = {"kind": "PodList", "apiVersion": "v1",
                   "metadata": {"resourceVersion": str(RV[0])}, "items": json.loads(json.dumps(items))}
        self.send(200, doc)

    def chunk(self, doc):
        data = json.dumps(doc).encode() + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def watch(self, ns, query):
        """The current state (ADDED, without a resourceVersion), then changes, until timeoutSeconds."""
        timeout = min(int(query.get("timeoutSeconds") or 1800), 1800)
        end = time.monotonic() + timeout
        with LOCK:
            items, labels, fields = self.selected(ns, query)
            initial = [json.loads(json.dumps(p)) for p in items]
            seen = RV[0]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for p in initial:
            self.chunk({"type": "ADDED", "object": p})
        while True:
            with LOCK:
                fresh = [e for e in EVENTS if e[0] > seen]
                if not fresh:
                    left = end - time.monotonic()
                    if left <= 0:
                        break
                    LOCK.wait(left)
                    continue
                seen = fresh[-1][0]
                picked = [(t, p) for _, t, p in fresh if p["metadata"]["namespace"] == ns and matches(p, labels, fields)]
            for t, p in picked:
                self.chunk({"type": t, "object": p})
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def proxy(self, ns, name, rest, query):
        pod_name, _, port = name.partition(":")
        pod = self.get(ns, pod_name)
        with LOCK:
            rt = RUNTIME.get((ns, pod_name))
        ports = [p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports") or []]
        if pod["status"].get("phase") != "Running" or rt is None or (port and int(port) not in ports):
            raise Reject(503, "ServiceUnavailable", f'error trying to reach service: pod "{pod_name}" is not running or the port is not declared')
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in ("host", "connection", "authorization", "content-length", "keep-alive", "transfer-encoding")}
        body = self._raw
        try:
            conn = http.client.HTTPConnection("127.0.0.1", rt["port"], timeout=600)
            conn.connect()
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.request(self.command, rest + (f"?{query}" if query else ""), body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException) as e:
            raise Reject(503, "ServiceUnavailable", f"error trying to reach service: {e.__class__.__name__}")
        self.send(resp.status, data, resp.getheader("Content-Type") or "application/octet-stream")

    def parse_request(self):
        ok = super().parse_request()
        self._raw = None
        return ok

    def body(self):   # kept raw for the proxy
        n = int(self.headers.get("Content-Length") or 0)
        self._raw = self.rfile.read(n) if n else b""
        return self._raw


def shutdown(*_):
    for key in list(RUNTIME):
        stop_container(key)
    os._exit(0)


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--token-file", required=True)
    ap.add_argument("--denied-token-file", help="a token that authenticates but may do nothing (403)")
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--namespace", action="append", required=True)
    ap.add_argument("--image", action="append", default=[], help="NAME=ENTRYPOINT")
    ap.add_argument("--runtime-class", action="append", default=[])
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--work", required=True)
    ARGS = ap.parse_args()
    ARGS.token = open(ARGS.token_file).read().strip()
    ARGS.denied = open(ARGS.denied_token_file).read().strip() if ARGS.denied_token_file else ""
    ARGS.images = dict(i.split("=", 1) for i in ARGS.image)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(ARGS.cert, ARGS.key)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    with open(ARGS.port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(ARGS.port_file + ".tmp", ARGS.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()

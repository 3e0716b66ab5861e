#!/usr/bin/env python3
"""Static test of the shipped Kubernetes manifests (deploy/kubernetes/), as TAP.

No API server can run here, so each property the manifests promise is checked from the files
themselves, and the admission they ask for is evaluated by test/kubernetes/pod_policy.py (the
ValidatingAdmissionPolicy's own CEL expressions, and Pod Security at the pinned level):

- the sandbox namespace enforces, audits and warns Pod Security "restricted" at a pinned version;
- the controller's Role grants exactly the verbs the driver's requests need (read from
  src/backends/kubernetes*.c and sandboxd.c), in its namespace only;
- the policy has every rule of RULES below, each refusing its sample pods, for containers,
  initContainers and ephemeralContainers alike, and admits the pod the driver builds
  (fixtures/pod-create-request.json, the body of src/backends/kubernetes_pod.c's create);
- that pod also passes the namespace's Pod Security level, and each break of it does not;
- the NetworkPolicies deny by default, let in only the API server on the daemon's port, and let
  out only the public internet (every private, CGNAT, link-local, loopback, IPv6 ULA/link-local/
  v4-mapped range excepted) and DNS to the cluster's resolver;
- the Localhost seccomp profile refuses what the daemon's own filter refuses, bar what
  bubblewrap needs.

Each check is also run on copies of the manifests in a temporary directory, each mutated to
break one property, and must then fail: a check that cannot fail is itself a failure.
"""
import copy
import ipaddress
import json
import os
import re
import shutil
import sys
import tempfile

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import pod_policy  # noqa: E402

NAMESPACE = "mesh"
RESULTS = []


def ok(passed, name, diag=None):
    """Record one TAP result; diag lines are printed under a failure."""
    RESULTS.append((bool(passed), name, diag))


def driver_pod():
    """The pod the driver creates (src/backends/kubernetes_pod.c, pod_manifest)."""
    with open(os.path.join(HERE, "fixtures", "pod-create-request.json")) as f:
        return json.load(f)


# ---- the pod-shape rules: one place for their names, the fields each must read, and the
# ---- sample pods each must refuse (the manifest's header comment lists the same names)

def sandboxd(pod):
    """The pod's one container, the daemon's."""
    return pod["spec"]["containers"][0]


def with_extra(kind, **security):
    """A mutation adding a second container of kind (initContainers, ephemeralContainers)."""
    def mutate(pod):
        extra = copy.deepcopy(sandboxd(pod))
        extra["name"] = "extra"
        extra["securityContext"].update(security)
        pod["spec"].setdefault(kind, []).append(extra)
    return mutate


def set_path(path, value):
    """A mutation setting pod[path...] = value (creating the objects on the way)."""
    def mutate(pod):
        node = pod
        for key in path[:-1]:
            node = node[key] if isinstance(key, int) else node.setdefault(key, {})
        node[path[-1]] = value
    return mutate


def drop_path(path):
    """A mutation removing pod[path...]."""
    def mutate(pod):
        node = pod
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
    return mutate


C0 = ["spec", "containers", 0]
RULES = {
    "no-host-namespaces": (["hostNetwork", "hostPID", "hostIPC"], False, [
        ("hostNetwork", set_path(["spec", "hostNetwork"], True)),
        ("hostPID", set_path(["spec", "hostPID"], True)),
        ("hostIPC", set_path(["spec", "hostIPC"], True))]),
    "own-user-namespace": (["hostUsers"], False, [
        ("hostUsers true", set_path(["spec", "hostUsers"], True)),
        ("hostUsers unset", drop_path(["spec", "hostUsers"]))]),
    "no-service-account-token": (["automountServiceAccountToken"], False, [
        ("a mounted service-account token", set_path(["spec", "automountServiceAccountToken"], True))]),
    "no-host-path": (["hostPath"], False, [
        ("a hostPath volume", set_path(["spec", "volumes"], [{"name": "root", "hostPath": {"path": "/"}}]))]),
    "empty-dir-volumes-only": (["emptyDir"], False, [
        ("a secret volume", set_path(["spec", "volumes"], [{"name": "s", "secret": {"secretName": "mesh-exec-token"}}]))]),
    "run-as-non-root": (["runAsNonRoot", "runAsUser"], True, [
        ("pod runAsNonRoot false", set_path(["spec", "securityContext", "runAsNonRoot"], False)),
        ("pod runAsNonRoot unset", drop_path(["spec", "securityContext", "runAsNonRoot"])),
        ("pod runAsUser 0", set_path(["spec", "securityContext", "runAsUser"], 0)),
        ("container runAsNonRoot false", set_path(C0 + ["securityContext", "runAsNonRoot"], False)),
        ("initContainer runAsUser 0", with_extra("initContainers", runAsUser=0)),
        ("ephemeralContainer runAsNonRoot false", with_extra("ephemeralContainers", runAsNonRoot=False))]),
    "no-privileged": (["privileged"], True, [
        ("a privileged container", set_path(C0 + ["securityContext", "privileged"], True)),
        ("a privileged initContainer", with_extra("initContainers", privileged=True)),
        ("a privileged ephemeralContainer", with_extra("ephemeralContainers", privileged=True))]),
    "no-privilege-escalation": (["allowPrivilegeEscalation"], True, [
        ("allowPrivilegeEscalation true", set_path(C0 + ["securityContext", "allowPrivilegeEscalation"], True)),
        ("allowPrivilegeEscalation unset", drop_path(C0 + ["securityContext", "allowPrivilegeEscalation"])),
        ("an initContainer escalating", with_extra("initContainers", allowPrivilegeEscalation=True)),
        ("an ephemeralContainer escalating", with_extra("ephemeralContainers", allowPrivilegeEscalation=True))]),
    "no-added-capabilities": (["capabilities", "add"], True, [
        ("capabilities.add SYS_ADMIN", set_path(C0 + ["securityContext", "capabilities", "add"], ["SYS_ADMIN"])),
        ("capabilities.add NET_BIND_SERVICE", set_path(C0 + ["securityContext", "capabilities", "add"], ["NET_BIND_SERVICE"])),
        ("an initContainer adding NET_ADMIN", with_extra("initContainers", capabilities={"add": ["NET_ADMIN"]})),
        ("an ephemeralContainer adding SYS_PTRACE", with_extra("ephemeralContainers", capabilities={"add": ["SYS_PTRACE"]}))]),
    "no-host-port": (["hostPort"], True, [
        ("a hostPort", set_path(C0 + ["ports", 0, "hostPort"], 7070)),
        ("an initContainer's hostPort", lambda p: (with_extra("initContainers")(p),
                                                   p["spec"]["initContainers"][0]["ports"][0].update(hostPort=22)))]),
    "project-image": (["image", "params.data.imageRepository"], True, [
        ("another image", set_path(C0 + ["image"], "docker.io/library/alpine:3")),
        ("a repository the name only starts with", set_path(C0 + ["image"], "registry.example/mesh-sandboxd-evil:1")),
        ("an ephemeralContainer of another image", lambda p: (with_extra("ephemeralContainers")(p),
                                                              p["spec"]["ephemeralContainers"][0].update(image="busybox")))]),
}


def validations(docs):
    """The policy's validations by rule name (the message's first word)."""
    found = {}
    for policy in pod_policy.of_kind(docs, "ValidatingAdmissionPolicy"):
        for v in policy["spec"].get("validations", []):
            found[v["message"].split(":")[0]] = v
    return found


def check_policy_static(directory, docs):
    """Every rule present, reading its fields in every container list; bound, fail-closed."""
    problems = []
    found = validations(docs)
    with open(os.path.join(directory, "pod-policy.yaml")) as f:
        header = f.read().split("apiVersion:")[0]
    for rule, (fields, per_container, _) in RULES.items():
        v = found.get(rule)
        if v is None:
            problems.append(f"rule {rule} has no validation")
            continue
        if not re.search(rf"^#\s+{re.escape(rule)}:", header, re.M):
            problems.append(f"rule {rule} is not listed in the manifest's header comment")
        for field in fields:
            if field not in v["expression"]:
                problems.append(f"rule {rule} does not read {field}")
        if per_container:
            for lst in ("object.spec.containers", "object.spec.initContainers", "object.spec.ephemeralContainers"):
                if lst + ".all(" not in v["expression"]:
                    problems.append(f"rule {rule} does not check every one of {lst}")
    policies = pod_policy.of_kind(docs, "ValidatingAdmissionPolicy")
    for p in policies:
        if p["spec"].get("failurePolicy") != "Fail":
            problems.append(f"policy {p['metadata']['name']}: failurePolicy is not Fail")
        rules = (p["spec"].get("matchConstraints") or {}).get("resourceRules") or []
        resources = {r for rr in rules for r in rr.get("resources", []) if "CREATE" in rr.get("operations", [])}
        updates = {r for rr in rules for r in rr.get("resources", []) if "UPDATE" in rr.get("operations", [])}
        if "pods" not in resources or "pods/ephemeralcontainers" not in updates:
            problems.append("the policy does not match pod creates and ephemeral-container updates")
    bindings = pod_policy.of_kind(docs, "ValidatingAdmissionPolicyBinding")
    if not any(pod_policy.binding_selects(b, NAMESPACE) and "Deny" in b["spec"].get("validationActions", [])
               and (b["spec"].get("paramRef") or {}).get("parameterNotFoundAction") == "Deny" for b in bindings):
        problems.append("no binding denies in the sandbox namespace with parameterNotFoundAction Deny")
    return problems


def check_policy_admits_driver(directory, docs):
    """The driver's pod passes every rule of the policy."""
    return pod_policy.policy_refusals(driver_pod(), docs, NAMESPACE)


def check_policy_refuses(directory, docs):
    """Every sample pod of every rule refused by that rule."""
    problems = []
    for rule, (_, _, mutations) in RULES.items():
        for what, mutate in mutations:
            pod = driver_pod()
            mutate(pod)
            refused_by = [m.split(":")[0] for m in pod_policy.policy_refusals(pod, docs, NAMESPACE)]
            if rule not in refused_by:
                problems.append(f"{what}: admitted by rule {rule} (refused by: {refused_by or 'nothing'})")
    return problems


# ---- Pod Security ----

PSS_BREAKS = [
    ("allowPrivilegeEscalation true", set_path(C0 + ["securityContext", "allowPrivilegeEscalation"], True)),
    ("seccomp Unconfined", set_path(["spec", "securityContext", "seccompProfile"], {"type": "Unconfined"})),
    ("seccomp unset", drop_path(["spec", "securityContext", "seccompProfile"])),
    ("capabilities not dropped", drop_path(C0 + ["securityContext", "capabilities"])),
    ("capabilities.add SYS_ADMIN", set_path(C0 + ["securityContext", "capabilities", "add"], ["SYS_ADMIN"])),
    ("privileged", set_path(C0 + ["securityContext", "privileged"], True)),
    ("hostPath volume", set_path(["spec", "volumes"], [{"name": "root", "hostPath": {"path": "/"}}])),
    ("hostNetwork", set_path(["spec", "hostNetwork"], True)),
    ("hostPort", set_path(C0 + ["ports", 0, "hostPort"], 7070)),
    ("AppArmor Unconfined", set_path(C0 + ["securityContext", "appArmorProfile"], {"type": "Unconfined"})),
    ("/proc unmasked in the node's user namespace", set_path(["spec", "hostUsers"], True)),
    ("root in the node's user namespace", lambda p: (set_path(["spec", "hostUsers"], True)(p),
                                                      set_path(C0 + ["securityContext", "procMount"], "Default")(p),
                                                      set_path(["spec", "securityContext", "runAsUser"], 0)(p))),
]


def check_pod_security(directory, docs):
    """Restricted enforced, audited and warned, version pinned; the driver's pod passes it."""
    problems = []
    ns = [n for n in pod_policy.of_kind(docs, "Namespace") if n["metadata"]["name"] == NAMESPACE]
    labels = ns[0]["metadata"].get("labels", {}) if ns else {}
    versions = set()
    for mode in ("enforce", "audit", "warn"):
        if labels.get(f"pod-security.kubernetes.io/{mode}") != "restricted":
            problems.append(f"{mode} is not restricted")
        version = labels.get(f"pod-security.kubernetes.io/{mode}-version", "")
        if not re.match(r"^v1\.\d+$", version):
            problems.append(f"{mode}-version is not pinned (is {version!r})")
        versions.add(version)
    if len(versions) != 1:
        problems.append(f"enforce, audit and warn pin different versions: {sorted(versions)}")
    problems += [f"the driver's pod breaks {v}" for v in pod_policy.pod_security_violations(driver_pod(), docs, NAMESPACE)]
    with_apparmor = driver_pod()   # config "apparmor_profile": a Localhost AppArmor profile
    with_apparmor["spec"]["securityContext"]["appArmorProfile"] = {"type": "Localhost", "localhostProfile": "mesh-sandboxd"}
    problems += [f"the driver's pod with an AppArmor profile breaks {v}"
                 for v in pod_policy.pod_security_violations(with_apparmor, docs, NAMESPACE) +
                 pod_policy.policy_refusals(with_apparmor, docs, NAMESPACE)]
    return problems


def check_pod_security_refuses(directory, docs):
    """Each break of restricted (PSS_BREAKS) is refused at the namespace's level."""
    problems = []
    for what, mutate in PSS_BREAKS:
        pod = driver_pod()
        mutate(pod)
        if not pod_policy.pod_security_violations(pod, docs, NAMESPACE):
            problems.append(f"{what}: admitted by Pod Security")
    return problems


# ---- RBAC: the verbs the driver's requests need ----

PROXY_VERBS = {"GET": "get", "POST": "create", "PUT": "update", "DELETE": "delete", "PATCH": "patch"}


def driver_verbs():
    """{resource: {verbs}} from the driver's own requests (src/backends/)."""
    needed = {"pods": set(), "pods/proxy": set()}
    for name in os.listdir(os.path.join(ROOT, "src", "backends")):
        if name.startswith("kubernetes") and name.endswith(".c"):
            with open(os.path.join(ROOT, "src", "backends", name)) as f:
                text = f.read()
            for method, path in re.findall(r'k8s_begin\([^,]+,[^,]+,\s*"([A-Z]+)",\s*(.*?)\);', text, re.S):
                if "watch=true" in path:
                    needed["pods"].add("watch")
                elif re.search(r'"/pods/%s', path) and method == "GET":
                    needed["pods"].add("get")
                elif method == "GET":
                    needed["pods"].add("list")
                else:
                    needed["pods"].add({"POST": "create", "DELETE": "delete"}.get(method, method.lower()))
            if "/proxy" in text:
                with open(os.path.join(ROOT, "src", "backends", "sandboxd.c")) as s:
                    for method in re.findall(r'sandboxd_begin\([^,]+,[^,]+,\s*"([A-Z]+)"', s.read()):
                        needed["pods/proxy"].add(PROXY_VERBS[method])
    return needed


def check_rbac(directory, docs):
    """Namespaced Role only, core group only, verbs equal to the driver's needs, no token automount."""
    problems = []
    if pod_policy.of_kind(docs, "ClusterRole") or pod_policy.of_kind(docs, "ClusterRoleBinding"):
        problems.append("a cluster-wide role is shipped")
    granted = {}
    for role in pod_policy.of_kind(docs, "Role"):
        if role["metadata"].get("namespace") != NAMESPACE:
            problems.append(f"role {role['metadata']['name']} is outside the sandbox namespace")
        for rule in role.get("rules", []):
            if rule.get("apiGroups") != [""]:
                problems.append(f"a rule on API groups {rule.get('apiGroups')}")
            for res in rule.get("resources", []):
                granted.setdefault(res, set()).update(rule.get("verbs", []))
    needed = driver_verbs()
    if not needed["pods"] or not needed["pods/proxy"]:
        problems.append(f"the driver's requests were not found in src/backends ({needed})")
    if granted != needed:
        problems.append(f"granted {dict(sorted((k, sorted(v)) for k, v in granted.items()))}, "
                        f"the driver needs {dict(sorted((k, sorted(v)) for k, v in needed.items()))}")
    for sa in pod_policy.of_kind(docs, "ServiceAccount"):
        if sa.get("automountServiceAccountToken") is not False:
            problems.append(f"service account {sa['metadata']['name']} automounts its token")
    return problems


# ---- NetworkPolicy ----

PRIVATE_V4 = ["0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
              "172.16.0.0/12", "192.168.0.0/16"]
PRIVATE_V6 = ["::1/128", "::ffff:0:0/96", "fc00::/7", "fe80::/10"]
NAT64 = ipaddress.ip_network("64:ff9b::/96")


def nat64_of(v4):
    """The NAT64 (well-known prefix) range that embeds an IPv4 range."""
    net = ipaddress.ip_network(v4)
    return ipaddress.ip_network((int(NAT64.network_address) + int(net.network_address), 96 + net.prefixlen))


def workspace_policies(docs):
    """The NetworkPolicies that select the workspace pods."""
    return [p for p in pod_policy.of_kind(docs, "NetworkPolicy")
            if p["metadata"].get("namespace") == NAMESPACE and
            (p["spec"].get("podSelector") or {}).get("matchLabels", {}).get("app.kubernetes.io/managed-by") == "mesh-exec"]


def covered(required, excepts):
    """Whether one except range holds the whole required range."""
    net = ipaddress.ip_network(required)
    return any(net.version == e.version and net.subnet_of(e) for e in excepts)


def check_ipblock(block):
    """Problems of an egress ipBlock: only the whole internet of one family, private ranges out."""
    cidr = ipaddress.ip_network(block["cidr"])
    excepts = [ipaddress.ip_network(e) for e in block.get("except", [])]
    if cidr.prefixlen != 0:
        return [f"egress to {cidr}: only the public internet (0.0.0.0/0, ::/0 less private ranges) may be allowed"]
    required = PRIVATE_V4 if cidr.version == 4 else PRIVATE_V6 + [str(nat64_of(v4)) for v4 in PRIVATE_V4]
    return [f"egress to {cidr} does not except {r}" for r in required if not covered(r, excepts)]


def check_network(directory, docs):
    """Default deny; ingress only from one address to 7070; egress only public or DNS, in both families."""
    problems = []
    policies = workspace_policies(docs)
    if not any(set(p["spec"].get("policyTypes", [])) == {"Ingress", "Egress"} and not p["spec"].get("ingress")
               and not p["spec"].get("egress") for p in policies):
        problems.append("no default-deny policy (both directions, no rule) selects the workspace pods")
    families = set()
    for p in policies:
        for rule in p["spec"].get("ingress") or []:
            peers, ports = rule.get("from") or [], rule.get("ports") or []
            if not peers or any(set(peer) != {"ipBlock"} or ipaddress.ip_network(peer["ipBlock"]["cidr"]).num_addresses > 1
                                for peer in peers):
                problems.append(f"{p['metadata']['name']}: ingress from more than the API server's address")
            if [(x.get("protocol"), x.get("port")) for x in ports] != [("TCP", 7070)]:
                problems.append(f"{p['metadata']['name']}: ingress to more than the daemon's port")
        for rule in p["spec"].get("egress") or []:
            peers = rule.get("to") or []
            if not peers:
                problems.append(f"{p['metadata']['name']}: egress to anywhere")
            for peer in peers:
                if "ipBlock" in peer:
                    problems += check_ipblock(peer["ipBlock"])
                    families.add(ipaddress.ip_network(peer["ipBlock"]["cidr"]).version)
                else:
                    problems += check_dns_peer(p, peer, rule)
    if families != {4, 6}:
        problems.append(f"public egress is not stated for both IPv4 and IPv6 (have {sorted(families)})")
    return problems


def check_dns_peer(policy, peer, rule):
    """A selector peer: only the cluster's resolver, and only on port 53."""
    problems = []
    ns = (peer.get("namespaceSelector") or {}).get("matchLabels") or {}
    pods = (peer.get("podSelector") or {}).get("matchLabels") or {}
    if ns != {"kubernetes.io/metadata.name": "kube-system"} or pods != {"k8s-app": "kube-dns"}:
        problems.append(f"{policy['metadata']['name']}: egress to pods other than the cluster's resolver")
    ports = sorted((x.get("protocol"), x.get("port")) for x in rule.get("ports") or [])
    if ports != [("TCP", 53), ("UDP", 53)]:
        problems.append(f"{policy['metadata']['name']}: egress to the resolver on more than port 53 ({ports})")
    return problems


# ---- the seccomp profile ----

BWRAP_NEEDS = {"mount", "umount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsmount",
               "fsconfig", "fspick", "mount_setattr", "setns", "unshare", "clone", "clone3"}


def daemon_denied_calls():
    """The calls src/sandboxd/seccomp.c refuses in every sandbox."""
    with open(os.path.join(ROOT, "src", "sandboxd", "seccomp.c")) as f:
        block = re.search(r"denied_calls\[\] = \{(.*?)NULL\}", f.read(), re.S).group(1)
    return set(re.findall(r'"([a-z0-9_]+)"', re.sub(r"/\*.*?\*/", "", block, flags=re.S)))


def check_seccomp(directory, docs):
    """The profile refuses seccomp.c's list less bubblewrap's needs, refuses none of those, covers x86's 32-bit calls, and is the pod's."""
    problems = []
    path = os.path.join(directory, "seccomp", "mesh-sandboxd.json")
    with open(path) as f:
        profile = json.load(f)
    denied = set()
    for entry in profile.get("syscalls", []):
        if entry.get("action") == "SCMP_ACT_ERRNO" and not entry.get("args"):
            denied |= set(entry["names"])
        elif entry.get("action") != "SCMP_ACT_ERRNO":
            problems.append(f"a rule with action {entry.get('action')}")
    want = daemon_denied_calls() - BWRAP_NEEDS
    if len(want) < 20:
        problems.append(f"src/sandboxd/seccomp.c's list was not read ({sorted(want)})")
    problems += [f"the profile allows {c}" for c in sorted(want - denied)]
    problems += [f"the profile refuses {c}, which bubblewrap or the daemon needs" for c in sorted(denied & BWRAP_NEEDS)]
    if not {"SCMP_ARCH_X86_64", "SCMP_ARCH_X86"} <= set(profile.get("architectures", [])):
        problems.append("the profile does not cover x86-64 and its 32-bit entry points")
    pod_profile = driver_pod()["spec"]["securityContext"]["seccompProfile"]
    if pod_profile != {"type": "Localhost", "localhostProfile": os.path.basename(path)}:
        problems.append(f"the driver's pod names seccomp profile {pod_profile}")
    return problems


# ---- the fixture is the driver's pod ----

def check_fixture_is_driver(directory, docs):
    """The security fields of the fixture, as src/backends/kubernetes_pod.c writes them."""
    problems = []
    with open(os.path.join(ROOT, "src", "backends", "kubernetes_pod.c")) as f:
        src = f.read()
    pod = driver_pod()
    uid = re.search(r"#define K8S_DAEMON_UID (\d+)", src)
    profile = re.search(r'#define K8S_SECCOMP_PROFILE "([^"]+)"', src)
    sc = pod["spec"]["securityContext"]
    if not uid or sc.get("runAsUser") != int(uid.group(1)) or sc.get("runAsGroup") != int(uid.group(1)):
        problems.append("runAsUser/runAsGroup differ from K8S_DAEMON_UID")
    if not profile or sc["seccompProfile"].get("localhostProfile") != profile.group(1):
        problems.append("the seccomp profile differs from K8S_SECCOMP_PROFILE")
    for literal in ['"hostUsers", false', '"automountServiceAccountToken", false', '"runAsNonRoot", true',
                    '"allowPrivilegeEscalation", false', '"privileged", false', '"drop", "ALL"',
                    '"procMount", "Unmasked"', '"type", "Localhost"']:
        if literal not in src:
            problems.append(f"kubernetes_pod.c no longer writes {literal}")
    with open(os.path.join(directory, "Dockerfile")) as f:
        if uid and not re.search(rf"^USER {uid.group(1)}:{uid.group(1)}$", f.read(), re.M):
            problems.append("the image does not run as K8S_DAEMON_UID")
    return problems


# ---- the CEL interpreter itself: the semantics the policy's rules rely on ----

ERROR = "error"
CEL_CASES = [
    ("has(object.spec.hostUsers)", True),
    ("has(object.spec.hostNetwork)", False),
    ("has(object.spec.nothing.deeper)", ERROR),             # selecting a missing field errs
    ("object.spec.hostNetwork == true", ERROR),
    ("true || object.spec.nothing", True),                  # || and && absorb the other side's error
    ("object.spec.nothing || true", True),
    ("object.spec.nothing && false", False),
    ("object.spec.nothing || false", ERROR),
    ("object.spec.containers.all(c, c.image.startsWith('registry.example/'))", True),
    ("object.spec.containers.all(c, c.securityContext.runAsUser == 0)", ERROR),
    ("object.spec.containers.exists(c, c.name == 'sandboxd')", True),
    ("[1, 2].all(x, x > 1)", False),
    ("size(object.spec.containers[0].securityContext.capabilities.drop) == 1", True),
    ("1 == true", False),                                   # no cross-type equality
    ("'a' + 'b' == 'ab' && !(1 != 1) && (false ? 1 : 2) == 2 && 'x' in ['x']", True),
]


def check_cel_interpreter(directory, docs):
    """The interpreter's answers (values and errors) on the driver's pod, case by case."""
    problems = []
    for expression, want in CEL_CASES:
        try:
            got = pod_policy.evaluate(pod_policy.Parser(expression).parse(), {"object": driver_pod()})
        except pod_policy.CelError:
            got = ERROR
        if got != want or type(got) is not type(want):
            problems.append(f"{expression} gave {got!r}, CEL gives {want!r}")
    return problems


# ---- mutations of the manifests, each breaking one property ----

def edit_text(name, old, new=""):
    """A mutation replacing text in one file of the copy (fails loudly if old is absent)."""
    def mutate(directory):
        path = os.path.join(directory, name)
        with open(path) as f:
            text = f.read()
        if old not in text:
            raise AssertionError(f"mutation target {old!r} not in {name}")
        with open(path, "w") as f:
            f.write(text.replace(old, new, 1))
    return mutate


def edit_yaml(name, change):
    """A mutation of one file's documents (a list), written back as YAML."""
    def mutate(directory):
        path = os.path.join(directory, name)
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        change(docs)
        with open(path, "w") as f:
            yaml.safe_dump_all(docs, f)
    return mutate


def edit_json(name, change):
    """A mutation of one JSON file of the copy."""
    def mutate(directory):
        path = os.path.join(directory, name)
        with open(path) as f:
            doc = json.load(f)
        change(doc)
        with open(path, "w") as f:
            json.dump(doc, f)
    return mutate


def drop_validation(rule):
    """A mutation removing one rule's validation from the policy."""
    def change(docs):
        spec = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"][0]["spec"]
        spec["validations"] = [v for v in spec["validations"] if not v["message"].startswith(rule + ":")]
    return edit_yaml("pod-policy.yaml", change)


def weaken_validation(rule, old, new):
    """A mutation rewriting part of one rule's expression."""
    def change(docs):
        spec = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"][0]["spec"]
        for v in spec["validations"]:
            if v["message"].startswith(rule + ":"):
                assert old in v["expression"], (rule, old)
                v["expression"] = v["expression"].replace(old, new)
    return edit_yaml("pod-policy.yaml", change)


def role_rule(index, **changes):
    """A mutation changing one rule of the Role."""
    def change(docs):
        [d for d in docs if d["kind"] == "Role"][0]["rules"][index].update(changes)
    return edit_yaml("rbac.yaml", change)


CHECKS = [
    ("the CEL interpreter answers as CEL does, errors included", check_cel_interpreter, []),
    ("Pod Security: restricted enforced, audited, warned, version pinned; the driver's pod meets it",
     check_pod_security, [
         ("enforce lowered to baseline", edit_text("namespace.yaml", "enforce: restricted", "enforce: baseline")),
         ("enforce set to privileged", edit_text("namespace.yaml", "enforce: restricted", "enforce: privileged")),
         ("warn removed", edit_text("namespace.yaml", "pod-security.kubernetes.io/warn: restricted\n")),
         ("audit version unpinned", edit_text("namespace.yaml", "audit-version: v1.34", "audit-version: latest")),
         ("versions pinned before the user-namespace relaxation (v1.33)",
          lambda d: [edit_text("namespace.yaml", f"{m}-version: v1.34", f"{m}-version: v1.33")(d)
                     for m in ("enforce", "audit", "warn")])]),
    ("Pod Security refuses every break of restricted", check_pod_security_refuses, [
        ("enforce lowered to privileged", edit_text("namespace.yaml", "enforce: restricted", "enforce: privileged"))]),
    ("pod-shape policy: every rule, over every container list, bound fail-closed",
     check_policy_static, [
         ("the no-privileged rule dropped", drop_validation("no-privileged")),
         ("the hostPort rule dropped", drop_validation("no-host-port")),
         ("ephemeralContainers no longer checked for privileged",
          weaken_validation("no-privileged", "object.spec.ephemeralContainers.all(", "object.spec.ephemeralContainers.exists(")),
         ("failurePolicy Ignore", edit_text("pod-policy.yaml", "failurePolicy: Fail", "failurePolicy: Ignore")),
         ("binding only warns", edit_text("pod-policy.yaml", 'validationActions: ["Deny"]', 'validationActions: ["Warn"]')),
         ("a missing parameter allowed", edit_text("pod-policy.yaml", "    parameterNotFoundAction: Deny", "    parameterNotFoundAction: Allow")),
         ("ephemeral-container updates not matched", edit_text("pod-policy.yaml", ', "pods/ephemeralcontainers"]', "]"))]),
    ("the pod-shape policy admits the driver's pod", check_policy_admits_driver, [
        ("the image repository parameter changed",
         edit_text("pod-policy.yaml", "imageRepository: registry.example/mesh-sandboxd", "imageRepository: other/image")),
        ("the parameter ConfigMap gone", edit_yaml("pod-policy.yaml", lambda docs: docs.pop(0)))]),
    ("the pod-shape policy refuses every sample of every rule", check_policy_refuses, [
        ("the no-privileged rule dropped", drop_validation("no-privileged")),
        ("the host-namespace rule forgets hostIPC",
         weaken_validation("no-host-namespaces", "&& !(has(object.spec.hostIPC) && object.spec.hostIPC)", "")),
        ("the capabilities rule only looks at containers",
         weaken_validation("no-added-capabilities", "&& (!has(object.spec.initContainers)", "|| (!has(object.spec.initContainers)")),
        ("the image rule takes any prefix",
         weaken_validation("project-image", "params.data.imageRepository + ':'", "params.data.imageRepository")),
        ("runAsNonRoot may be unset", weaken_validation(
            "run-as-non-root", "has(object.spec.securityContext) && has(object.spec.securityContext.runAsNonRoot)"
            " && object.spec.securityContext.runAsNonRoot == true",
            "(!has(object.spec.securityContext) || !has(object.spec.securityContext.runAsNonRoot) || object.spec.securityContext.runAsNonRoot == true)"))]),
    ("RBAC: exactly the verbs the driver's requests need, in the sandbox namespace", check_rbac, [
        ("patch added on pods", role_rule(0, verbs=["create", "get", "list", "watch", "delete", "patch"])),
        ("pods/exec granted", role_rule(1, resources=["pods/proxy", "pods/exec"])),
        ("secrets granted", role_rule(0, resources=["pods", "secrets"])),
        ("the service account automounts its token",
         edit_text("rbac.yaml", "automountServiceAccountToken: false", "automountServiceAccountToken: true"))]),
    ("NetworkPolicy: default deny; in from the API server only; out to the public internet and DNS only",
     check_network, [
         ("172.16.0.0/12 not excepted", edit_text("networkpolicy.yaml", "- 172.16.0.0/12")),
         ("192.168.0.0/16 not excepted", edit_text("networkpolicy.yaml", "- 192.168.0.0/16")),
         ("100.64.0.0/10 (CGNAT) not excepted", edit_text("networkpolicy.yaml", "- 100.64.0.0/10")),
         ("169.254.0.0/16 narrowed to the metadata address", edit_text("networkpolicy.yaml", "- 169.254.0.0/16", "- 169.254.169.254/32")),
         ("10.0.0.0/8 not excepted", edit_text("networkpolicy.yaml", "- 10.0.0.0/8")),
         ("127.0.0.0/8 not excepted", edit_text("networkpolicy.yaml", "- 127.0.0.0/8")),
         ("0.0.0.0/8 not excepted", edit_text("networkpolicy.yaml", "- 0.0.0.0/8")),
         ("fc00::/7 narrowed to fd00::/8", edit_text("networkpolicy.yaml", "- fc00::/7", "- fd00::/8")),
         ("fe80::/10 not excepted", edit_text("networkpolicy.yaml", "- fe80::/10")),
         ("::1/128 not excepted", edit_text("networkpolicy.yaml", "- ::1/128")),
         ("::ffff:0:0/96 not excepted", edit_text("networkpolicy.yaml", "- ::ffff:0:0/96")),
         ("NAT64 of 10.0.0.0/8 not excepted", edit_text("networkpolicy.yaml", "- 64:ff9b::a00:0/104")),
         ("IPv6 egress left out", edit_yaml("networkpolicy.yaml", lambda docs: docs[2]["spec"]["egress"][0]["to"].pop(1))),
         ("the default deny removed", edit_yaml("networkpolicy.yaml", lambda docs: docs.pop(0))),
         ("DNS to every port", edit_yaml("networkpolicy.yaml", lambda docs: docs[3]["spec"]["egress"][0].pop("ports"))),
         ("DNS to every pod of kube-system", edit_yaml("networkpolicy.yaml", lambda docs: docs[3]["spec"]["egress"][0]["to"][0].pop("podSelector"))),
         ("ingress from every pod", edit_yaml("networkpolicy.yaml", lambda docs: docs[1]["spec"]["ingress"][0]["from"].append({"podSelector": {}}))),
         ("ingress from a whole network", edit_text("networkpolicy.yaml", "cidr: 10.0.0.1/32", "cidr: 10.0.0.0/8"))]),
    ("seccomp profile: refuses the daemon filter's list bar what bubblewrap needs", check_seccomp, [
        ("keyctl allowed", edit_json("seccomp/mesh-sandboxd.json", lambda p: p["syscalls"][0]["names"].remove("keyctl"))),
        ("bpf allowed", edit_json("seccomp/mesh-sandboxd.json", lambda p: p["syscalls"][0]["names"].remove("bpf"))),
        ("mount refused (bubblewrap fails)", edit_json("seccomp/mesh-sandboxd.json", lambda p: p["syscalls"][0]["names"].append("mount"))),
        ("32-bit entry points left out", edit_json("seccomp/mesh-sandboxd.json", lambda p: p["architectures"].remove("SCMP_ARCH_X86")))]),
    ("the fixture is the pod kubernetes_pod.c writes; the image runs as its user",
     check_fixture_is_driver, [
         ("the image runs as root", edit_text("Dockerfile", "USER 10001:10001", "USER root"))]),
]


def run_check(fn, directory):
    """The check's problems for the manifests in directory (a crash is a problem too)."""
    try:
        return fn(directory, pod_policy.load_documents(directory))
    except Exception as e:  # a check that cannot read what it checks fails
        return [f"{type(e).__name__}: {e}"]


def main():
    """Every check on the shipped manifests, then on each mutated copy; TAP on stdout."""
    shipped = os.path.join(ROOT, "deploy", "kubernetes")
    with tempfile.TemporaryDirectory(prefix="mesh-k8s-manifests.") as tmp:
        for name, fn, mutations in CHECKS:
            problems = run_check(fn, shipped)
            ok(not problems, name, problems)
            for what, mutate in mutations:
                copy_dir = os.path.join(tmp, f"case{len(RESULTS)}")
                shutil.copytree(shipped, copy_dir)
                try:
                    mutate(copy_dir)
                except AssertionError as e:
                    ok(False, f"{name}: fails when {what}", [f"the mutation did not apply: {e}"])
                    continue
                ok(run_check(fn, copy_dir), f"{name}: fails when {what}",
                   ["the check passed on the mutated manifests"])
    print(f"1..{len(RESULTS)}")
    for i, (passed, name, diag) in enumerate(RESULTS, 1):
        print(f"{'ok' if passed else 'not ok'} {i} - {name}")
        if not passed:
            for line in diag or []:
                print(f"# {line}")
    return 0 if all(p for p, _, _ in RESULTS) else 1


if __name__ == "__main__":
    sys.exit(main())

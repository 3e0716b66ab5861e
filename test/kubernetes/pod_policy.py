#!/usr/bin/env python3
"""What the sandbox namespace admits, evaluated here without an API server.

No Kubernetes API server can run on these machines, so the admission that deploy/kubernetes/
asks of one is evaluated by this module instead, from the shipped manifests themselves:

- the ValidatingAdmissionPolicy of deploy/kubernetes/pod-policy.yaml: its CEL expressions are
  parsed and evaluated by a small interpreter of the CEL subset they use (literals, field
  selection, has(), size(), startsWith(), the all()/exists() macros, !, &&, ||, ==, !=, ?:, +,
  in), with CEL's rules for errors: selecting a field a map lacks is an error, && and || absorb
  an error when the other side decides, and a validation that errs refuses (failurePolicy
  Fail);
- Pod Security "restricted" at the version the namespace pins (deploy/kubernetes/
  namespace.yaml), control by control as the Pod Security Standards define them, with the
  relaxation for pods in their own user namespace (hostUsers: false) of policy v1.34.

test/kubernetes/manifests_test.py uses it on sample pods; the API-server double
(apiserver_double.py) uses it to admit or refuse the pods the driver creates in the e2e tests.
"""
import os
import re

import yaml

DEPLOY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy", "kubernetes")


def load_documents(directory=DEPLOY):
    """Every YAML document of the manifests in directory, by file name."""
    docs = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith(".yaml"):
            with open(os.path.join(directory, name)) as f:
                docs[name] = [d for d in yaml.safe_load_all(f) if d]
    return docs


def of_kind(docs, kind):
    """The documents of one kind, from every file."""
    return [d for file_docs in docs.values() for d in file_docs if d.get("kind") == kind]


# ---- a CEL subset ----

class CelError(Exception):
    """An evaluation error (no such key, no such overload): the validation refuses."""


TOKEN = re.compile(r"\s*(?:(?P<num>\d+)|(?P<str>'[^']*'|\"[^\"]*\")|(?P<id>[A-Za-z_][A-Za-z0-9_]*)"
                   r"|(?P<op>&&|\|\||==|!=|<=|>=|[!()\[\].,?:+<>-]))")


def tokenize(text):
    """The expression's tokens, as (kind, value) pairs."""
    tokens, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise SyntaxError(f"CEL: cannot read {text[pos:pos + 20]!r}")
        kind = m.lastgroup
        value = m.group(kind)
        tokens.append((kind, value))
        pos = m.end()
    tokens.append(("end", None))
    return tokens


class Parser:
    """Recursive descent over CEL's grammar for the subset above; yields a tree of tuples."""

    def __init__(self, text):
        self.tokens, self.i = tokenize(text), 0

    def peek(self, value=None):
        """The next token (kind, value), or whether its value is value."""
        kind, val = self.tokens[self.i]
        return val == value if value is not None else (kind, val)

    def take(self, value=None):
        """Consume the next token, which must be value when one is given."""
        kind, val = self.tokens[self.i]
        if value is not None and val != value:
            raise SyntaxError(f"CEL: expected {value!r}, found {val!r}")
        self.i += 1
        return kind, val

    def parse(self):
        """The whole expression's tree; trailing tokens are a syntax error."""
        tree = self.conditional()
        if self.peek()[0] != "end":
            raise SyntaxError(f"CEL: unexpected {self.peek()[1]!r}")
        return tree

    def conditional(self):
        """c ? a : b, the lowest precedence."""
        test = self.binary(0)
        if self.peek("?"):
            self.take("?")
            yes = self.conditional()
            self.take(":")
            return ("?:", test, yes, self.conditional())
        return test

    LEVELS = [("||",), ("&&",), ("==", "!=", "<", "<=", ">", ">=", "in"), ("+", "-")]

    def binary(self, level):
        """Left-associative binary operators, by CEL's precedence (LEVELS, lowest first)."""
        if level == len(self.LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while self.peek()[1] in self.LEVELS[level]:
            op = self.take()[1]
            left = (op, left, self.binary(level + 1))
        return left

    def unary(self):
        """! and unary -."""
        if self.peek("!"):
            self.take()
            return ("!", self.unary())
        if self.peek("-"):
            self.take()
            return ("neg", self.unary())
        return self.member()

    def member(self):
        """Field selection, method calls and indexing after a primary."""
        node = self.primary()
        while True:
            if self.peek("."):
                self.take()
                name = self.take()[1]
                if self.peek("("):
                    node = self.call(name, node)
                else:
                    node = ("select", node, name)
            elif self.peek("["):
                self.take()
                index = self.conditional()
                self.take("]")
                node = ("index", node, index)
            else:
                return node

    def items(self, close):
        """Comma-separated expressions up to close (a call's arguments, a list's items)."""
        items = []
        while not self.peek(close):
            items.append(self.conditional())
            if self.peek(","):
                self.take()
        self.take(close)
        return items

    def call(self, name, target):
        """A call: the all()/exists() macros bind a variable; others are functions or methods."""
        self.take("(")
        args = self.items(")")
        if name in ("all", "exists") and target is not None:
            if len(args) != 2 or args[0][0] != "ident":
                raise SyntaxError(f"CEL: {name}() takes a variable and a predicate")
            return (name, target, args[0][1], args[1])
        return ("call", name, target, args)

    def primary(self):
        """Literals, identifiers, global calls, parentheses and list literals."""
        kind, value = self.take()
        if kind == "num":
            return ("lit", int(value))
        if kind == "str":
            return ("lit", value[1:-1])
        if value == "(":
            node = self.conditional()
            self.take(")")
            return node
        if value == "[":
            return ("list", self.items("]"))
        if kind == "id":
            if value in ("true", "false"):
                return ("lit", value == "true")
            if value == "null":
                return ("lit", None)
            if self.peek("("):
                return self.call(value, None)
            return ("ident", value)
        raise SyntaxError(f"CEL: unexpected {value!r}")


def cel_equal(a, b):
    """CEL equality: values of different types are never equal (true is not 1)."""
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    return a == b


def evaluate(node, env):
    """The value of a parsed expression in env (a dict of variables); CelError on an error."""
    op = node[0]
    if op == "lit":
        return node[1]
    if op == "ident":
        if node[1] not in env:
            raise CelError(f"undeclared reference to {node[1]!r}")
        return env[node[1]]
    if op == "list":
        return [evaluate(item, env) for item in node[1]]
    if op == "select":
        target = evaluate(node[1], env)
        if not isinstance(target, dict) or node[2] not in target:
            raise CelError(f"no such key: {node[2]}")
        return target[node[2]]
    if op == "index":
        target, index = evaluate(node[1], env), evaluate(node[2], env)
        try:
            return target[index]
        except (KeyError, IndexError, TypeError):
            raise CelError(f"no such key: {index}") from None
    if op in ("&&", "||"):
        return logical(op, node, env)
    if op == "!":
        return not boolean(evaluate(node[1], env))
    if op == "neg":
        return -evaluate(node[1], env)
    if op == "?:":
        return evaluate(node[2] if boolean(evaluate(node[1], env)) else node[3], env)
    if op in ("all", "exists"):
        return comprehension(op, node, env)
    if op == "call":
        return call(node, env)
    return compare(op, evaluate(node[1], env), evaluate(node[2], env))


def boolean(value):
    """A value a logical operator needs: only a bool will do."""
    if not isinstance(value, bool):
        raise CelError(f"no matching overload: {value!r} is not a bool")
    return value


def logical(op, node, env):
    """&& and || are commutative over errors: the side that decides wins over the other's error."""
    decides = op == "||"
    results = []
    for side in (node[1], node[2]):
        try:
            value = boolean(evaluate(side, env))
        except CelError as e:
            results.append(e)
            continue
        if value == decides:
            return decides
        results.append(value)
    for r in results:
        if isinstance(r, CelError):
            raise r
    return not decides


def comprehension(op, node, env):
    """all(): every element true; exists(): one true; errors absorbed as by && and ||."""
    target = evaluate(node[1], env)
    items = list(target.keys()) if isinstance(target, dict) else target
    if not isinstance(items, list):
        raise CelError(f"{op}() over a {type(target).__name__}")
    decides = op == "exists"
    error = None
    for item in items:
        try:
            value = boolean(evaluate(node[3], {**env, node[2]: item}))
        except CelError as e:
            error = e
            continue
        if value == decides:
            return decides
    if error:
        raise error
    return not decides


def call(node, env):
    """has(), size() and the string methods the policy uses."""
    _, name, target, args = node
    if name == "has" and target is None:
        if len(args) != 1 or args[0][0] != "select":
            raise SyntaxError("CEL: has() takes a field selection")
        holder = evaluate(args[0][1], env)
        if not isinstance(holder, dict):
            raise CelError("has() on a value without fields")
        return args[0][2] in holder and holder[args[0][2]] is not None
    values = [evaluate(a, env) for a in args]
    if name == "size" and target is None:
        return len(values[0])
    receiver = evaluate(target, env) if target is not None else None
    if name in ("startsWith", "endsWith", "contains") and isinstance(receiver, str):
        if not isinstance(values[0], str):
            raise CelError(f"no matching overload for {name}")
        return {"startsWith": receiver.startswith, "endsWith": receiver.endswith,
                "contains": receiver.__contains__}[name](values[0])
    raise CelError(f"no matching overload for {name}")


def compare(op, left, right):
    """==, !=, in, ordering and +: CEL's overloads for the types a pod holds."""
    if op == "==":
        return cel_equal(left, right)
    if op == "!=":
        return not cel_equal(left, right)
    if op == "in":
        if not isinstance(right, (list, dict)):
            raise CelError("no matching overload for in")
        return any(cel_equal(left, item) for item in right)
    if op == "+":
        if type(left) is not type(right) or isinstance(left, (bool, dict)):
            raise CelError("no matching overload for +")
        return left + right
    if type(left) is not type(right) or isinstance(left, bool):
        raise CelError(f"no matching overload for {op}")
    return {"<": left < right, "<=": left <= right, ">": left > right, ">=": left >= right,
            "-": left - right}[op]


# ---- the ValidatingAdmissionPolicy ----

def policy_parameters(docs, binding):
    """The ConfigMap the binding's paramRef names, or None (then every pod is refused)."""
    ref = binding["spec"].get("paramRef") or {}
    for cm in of_kind(docs, "ConfigMap"):
        meta = cm["metadata"]
        if meta.get("name") == ref.get("name") and meta.get("namespace") == ref.get("namespace"):
            return cm
    return None


def binding_selects(binding, namespace):
    """Whether the binding's namespaceSelector selects namespace (by its metadata.name label)."""
    selector = (binding["spec"].get("matchResources") or {}).get("namespaceSelector") or {}
    labels = {"kubernetes.io/metadata.name": namespace}
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items()) and \
        bool(selector.get("matchLabels"))


PARSED = {}


def parsed(expression):
    """An expression's tree, parsed once."""
    if expression not in PARSED:
        PARSED[expression] = Parser(expression).parse()
    return PARSED[expression]


def policy_refusals(pod, docs, namespace="mesh", params=None, skip=()):
    """The messages of the policy's validations that refuse pod (empty: admitted).

    Every bound ValidatingAdmissionPolicy that matches pods in namespace is evaluated; a missing
    parameter with parameterNotFoundAction Deny refuses.  params replaces the ConfigMap (the
    double's own image names); skip names rules not to evaluate.
    """
    refusals = []
    policies = {p["metadata"]["name"]: p for p in of_kind(docs, "ValidatingAdmissionPolicy")}
    for binding in of_kind(docs, "ValidatingAdmissionPolicyBinding"):
        policy = policies.get(binding["spec"].get("policyName"))
        if policy is None or not binding_selects(binding, namespace) or \
                "Deny" not in binding["spec"].get("validationActions", []):
            continue
        cm = params if params is not None else policy_parameters(docs, binding)
        if cm is None and policy["spec"].get("paramKind"):
            refusals.append(f"{policy['metadata']['name']}: parameter not found")
            continue
        env = {"object": pod, "params": cm}
        for v in policy["spec"].get("validations", []):
            if v["message"].split(":")[0] in skip:
                continue
            try:
                admitted = boolean(evaluate(parsed(v["expression"]), env))
            except CelError as e:
                admitted = False
                v = {**v, "message": f"{v['message']} (evaluation error: {e})"}
            if not admitted:
                refusals.append(v["message"])
    return refusals


# ---- Pod Security Standards ----

BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                      "persistentVolumeClaim", "projected", "secret"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies",
                "net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time",
                "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes"}


def containers_of(spec):
    """Every container of the pod: containers, initContainers, ephemeralContainers."""
    return [c for key in ("containers", "initContainers", "ephemeralContainers")
            for c in spec.get(key) or []]


def security(container):
    """A container's securityContext, or an empty one."""
    return container.get("securityContext") or {}


def baseline_violations(pod, version):
    """The Baseline controls pod breaks (names of the controls)."""
    spec, bad = pod.get("spec") or {}, []
    pod_sc = spec.get("securityContext") or {}
    user_ns = spec.get("hostUsers") is False and version >= (1, 34)
    everything = containers_of(spec)
    if any((pod_sc.get("windowsOptions") or {}).get("hostProcess") or
           (security(c).get("windowsOptions") or {}).get("hostProcess") for c in everything):
        bad.append("hostProcess")
    if any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")):
        bad.append("host namespaces")
    if any(security(c).get("privileged") for c in everything):
        bad.append("privileged")
    if any(set((security(c).get("capabilities") or {}).get("add") or []) - BASELINE_CAPABILITIES
           for c in everything):
        bad.append("capabilities")
    if any("hostPath" in v for v in spec.get("volumes") or []):
        bad.append("hostPath volumes")
    if any(p.get("hostPort") for c in everything for p in c.get("ports") or []):
        bad.append("host ports")
    profiles = [pod_sc.get("appArmorProfile")] + [security(c).get("appArmorProfile") for c in everything]
    if any(p and p.get("type") == "Unconfined" for p in profiles):
        bad.append("AppArmor")
    selinux = [pod_sc.get("seLinuxOptions")] + [security(c).get("seLinuxOptions") for c in everything]
    if any(o and (o.get("type") not in (None, "", "container_t", "container_init_t",
                                          "container_kvm_t", "container_engine_t")
                  or o.get("user") or o.get("role")) for o in selinux):
        bad.append("SELinux")
    if not user_ns and any(security(c).get("procMount") not in (None, "Default") for c in everything):
        bad.append("/proc mount type")
    seccomp = [pod_sc.get("seccompProfile")] + [security(c).get("seccompProfile") for c in everything]
    if any(s and s.get("type") == "Unconfined" for s in seccomp):
        bad.append("seccomp")
    if any(s.get("name") not in SAFE_SYSCTLS for s in pod_sc.get("sysctls") or []):
        bad.append("sysctls")
    return bad


def restricted_violations(pod, version=(1, 34)):
    """The Restricted controls pod breaks, Baseline's included (empty: admitted)."""
    spec, bad = pod.get("spec") or {}, baseline_violations(pod, version)
    pod_sc = spec.get("securityContext") or {}
    user_ns = spec.get("hostUsers") is False and version >= (1, 34)
    everything = containers_of(spec)
    if any(not (set(v) - {"name"}) <= RESTRICTED_VOLUMES for v in spec.get("volumes") or []):
        bad.append("volume types")
    if any(security(c).get("allowPrivilegeEscalation") is not False for c in everything):
        bad.append("privilege escalation")
    if not user_ns and (pod_sc.get("runAsNonRoot") is False or
                        any(security(c).get("runAsNonRoot") is False or
                            (security(c).get("runAsNonRoot") is None and pod_sc.get("runAsNonRoot") is not True)
                            for c in everything)):
        bad.append("running as non-root")
    if not user_ns and (pod_sc.get("runAsUser") == 0 or any(security(c).get("runAsUser") == 0 for c in everything)):
        bad.append("running as non-root user")
    pod_seccomp = (pod_sc.get("seccompProfile") or {}).get("type")
    for c in everything:
        own = (security(c).get("seccompProfile") or {}).get("type")
        if (own or pod_seccomp) not in ("RuntimeDefault", "Localhost"):
            bad.append("seccomp (restricted)")
            break
    for c in everything:
        caps = security(c).get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []) or set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            bad.append("capabilities (restricted)")
            break
    return bad


def namespace_level(docs, name="mesh"):
    """The namespace's enforced level and version, e.g. ("restricted", (1, 34))."""
    for ns in of_kind(docs, "Namespace"):
        if ns["metadata"]["name"] == name:
            labels = ns["metadata"].get("labels") or {}
            version = labels.get("pod-security.kubernetes.io/enforce-version", "latest")
            m = re.match(r"^v(\d+)\.(\d+)$", version)
            return labels.get("pod-security.kubernetes.io/enforce"), \
                (int(m.group(1)), int(m.group(2))) if m else (99, 0)
    return None, None


def pod_security_violations(pod, docs, namespace="mesh"):
    """What the namespace's enforced Pod Security level refuses in pod (empty: admitted)."""
    level, version = namespace_level(docs, namespace)
    if level == "restricted":
        return restricted_violations(pod, version)
    if level == "baseline":
        return baseline_violations(pod, version)
    return [] if level == "privileged" else [f"namespace {namespace} has no enforced level"]

"""tests/pod_security.py, the Pod Security Standards check, on small pods each made to break one rule.

A pod that meets "restricted" is changed in one field at a time; each change must be caught by the
profile that forbids it (and, for the restricted-only rules, pass "baseline"), so no rule of the check
can quietly stop working. The allowed values of each rule are checked too, so the check does not refuse
what the profiles let in.
"""
import copy

import pytest

from pod_security import PROFILES, pod_templates, violations


def restricted_pod() -> dict:
    """A pod template that meets both profiles: the smallest one that meets "restricted"."""
    return {
        "metadata": {"labels": {"app": "x"}},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "main", "image": "img", "ports": [{"containerPort": 2222}],
                            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                        {"name": "shm", "emptyDir": {"medium": "Memory"}}],
        },
    }


def changed(edit) -> dict:
    template = restricted_pod()
    edit(template["spec"], template["spec"]["containers"][0], template["metadata"])
    return template


def pod(**fields):
    return lambda spec, container, metadata: spec.update(fields)


def pod_context(**fields):
    return lambda spec, container, metadata: spec["securityContext"].update(fields)


def context(**fields):
    return lambda spec, container, metadata: container["securityContext"].update(fields)


def without_pod(field):
    return lambda spec, container, metadata: spec["securityContext"].pop(field)


def without(field):
    return lambda spec, container, metadata: container["securityContext"].pop(field)


def both(*edits):
    def edit(spec, container, metadata):
        for one in edits:
            one(spec, container, metadata)
    return edit


def another_container(field, **security):
    def edit(spec, container, metadata):
        other = copy.deepcopy(container)
        other["name"] = "other"
        other["securityContext"].update(security)
        spec[field] = [other]
    return edit


def host_in(where, action):
    def edit(spec, container, metadata):
        handler = {action: {"port": 80, "host": "10.0.0.1"}}
        if where in ("postStart", "preStop"):
            container["lifecycle"] = {where: handler}
        else:
            container[where] = handler
    return edit


# name: (the change, the first profile that forbids it, words its violation must contain)
BASELINE_RULES = {
    "host network": (pod(hostNetwork=True), "spec.hostNetwork"),
    "host PID": (pod(hostPID=True), "spec.hostPID"),
    "host IPC": (pod(hostIPC=True), "spec.hostIPC"),
    "privileged": (context(privileged=True), "privileged containers"),
    "privileged init container": (another_container("initContainers", privileged=True),
                                  "initContainers[other].securityContext.privileged"),
    "privileged ephemeral container": (another_container("ephemeralContainers", privileged=True),
                                       "ephemeralContainers[other].securityContext.privileged"),
    "capability beyond the baseline set": (context(capabilities={"drop": ["ALL"], "add": ["SYS_ADMIN"]}),
                                           "['SYS_ADMIN'] are beyond the baseline set"),
    "NET_RAW added": (context(capabilities={"drop": ["ALL"], "add": ["NET_RAW"]}), "['NET_RAW']"),
    "hostPath volume": (lambda spec, c, m: spec["volumes"].append({"name": "node", "hostPath": {"path": "/srv"}}),
                        "volumes[node]: hostPath volumes are not allowed"),
    "host port": (lambda spec, c, m: c["ports"][0].update(hostPort=2222), "hostPort: host ports are not allowed"),
    "AppArmor unconfined (pod)": (pod_context(appArmorProfile={"type": "Unconfined"}),
                                  "spec.securityContext.appArmorProfile.type"),
    "AppArmor unconfined (container)": (context(appArmorProfile={"type": "Unconfined"}),
                                        "containers[main].securityContext.appArmorProfile.type"),
    "AppArmor unconfined (annotation)": (
        lambda s, c, metadata: metadata.update(annotations={"container.apparmor.security.beta.kubernetes.io/main":
                                                            "unconfined"}),
        "AppArmor profile 'unconfined'"),
    "SELinux type": (context(seLinuxOptions={"type": "spc_t"}), "seLinuxOptions.type: 'spc_t'"),
    "SELinux user": (pod_context(seLinuxOptions={"user": "system_u"}), "seLinuxOptions.user"),
    "SELinux role": (context(seLinuxOptions={"role": "system_r"}), "seLinuxOptions.role"),
    "unmasked /proc": (context(procMount="Unmasked"), "procMount: 'Unmasked'"),
    "seccomp unconfined (pod)": (pod_context(seccompProfile={"type": "Unconfined"}),
                                 "spec.securityContext.seccompProfile.type: Unconfined"),
    "seccomp unconfined (container)": (context(seccompProfile={"type": "Unconfined"}),
                                       "containers[main].securityContext.seccompProfile.type: Unconfined"),
    "unsafe sysctl": (pod_context(sysctls=[{"name": "kernel.msgmax", "value": "65536"}]),
                      "'kernel.msgmax' is not a safe sysctl"),
    "Windows HostProcess": (context(windowsOptions={"hostProcess": True}), "HostProcess"),
    "host in a probe": (host_in("livenessProbe", "httpGet"), "livenessProbe.httpGet.host"),
    "host in a lifecycle hook": (host_in("preStop", "tcpSocket"), "lifecycle.preStop.tcpSocket.host"),
}
RESTRICTED_RULES = {
    "an NFS volume": (lambda spec, c, m: spec["volumes"].append({"name": "nfs", "nfs": {"server": "a", "path": "/"}}),
                      "volumes[nfs]: nfs volumes are not allowed"),
    "a gitRepo volume": (lambda spec, c, m: spec["volumes"].append({"name": "git", "gitRepo": {"repository": "r"}}),
                         "gitRepo volumes"),
    "runAsNonRoot unset": (without_pod("runAsNonRoot"), "containers[main]: runAsNonRoot must be true"),
    "runAsNonRoot false in the container": (context(runAsNonRoot=False), "runAsNonRoot must be true"),
    "runAsNonRoot false in the pod": (both(pod_context(runAsNonRoot=False), context(runAsNonRoot=True)),
                                      "spec.securityContext.runAsNonRoot: must not be false"),
    "runAsUser 0 (pod)": (pod_context(runAsUser=0), "spec.securityContext.runAsUser: must not be 0"),
    "runAsUser 0 (container)": (context(runAsUser=0), "containers[main].securityContext.runAsUser: must not be 0"),
    "privilege escalation unset": (without("allowPrivilegeEscalation"), "allowPrivilegeEscalation: must be false"),
    "privilege escalation allowed": (context(allowPrivilegeEscalation=True), "allowPrivilegeEscalation: must be false"),
    "seccomp unset": (without_pod("seccompProfile"), "seccompProfile.type must be RuntimeDefault or Localhost"),
    "capabilities not dropped": (without("capabilities"), "capabilities.drop: must contain ALL"),
    "a baseline capability added": (context(capabilities={"drop": ["ALL"], "add": ["SETUID"]}),
                                    "['SETUID'] are not allowed; at most NET_BIND_SERVICE"),
    "runAsNonRoot unset in an init container": (
        both(without_pod("runAsNonRoot"), another_container("initContainers"), context(runAsNonRoot=True)),
        "initContainers[other]: runAsNonRoot must be true"),
}
ALLOWED = {  # what each rule lets in; the pod must still meet "restricted"
    "NET_BIND_SERVICE added": context(capabilities={"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}),
    "seccomp Localhost in the container only": both(
        without_pod("seccompProfile"), context(seccompProfile={"type": "Localhost", "localhostProfile": "p.json"})),
    "runAsNonRoot in the container only": both(without_pod("runAsNonRoot"), context(runAsNonRoot=True)),
    "AppArmor RuntimeDefault and Localhost": both(
        pod_context(appArmorProfile={"type": "RuntimeDefault"}),
        context(appArmorProfile={"type": "Localhost", "localhostProfile": "k8s-x"}),
        lambda s, c, metadata: metadata.update(annotations={
            "container.apparmor.security.beta.kubernetes.io/main": "localhost/k8s-x"})),
    "SELinux container_t and a level": context(seLinuxOptions={"type": "container_t", "level": "s0:c1,c2"}),
    "a safe sysctl": pod_context(sysctls=[{"name": "net.ipv4.ip_local_port_range", "value": "1024 65535"}]),
    "hostPort 0, privileged false, procMount Default": both(
        lambda s, c, m: c["ports"][0].update(hostPort=0), context(privileged=False, procMount="Default"),
        pod(hostNetwork=False, hostPID=False, hostIPC=False)),
    "every restricted volume type": lambda spec, c, m: spec["volumes"].extend(
        {"name": kind.lower(), kind: {}} for kind in ("configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                                                      "persistentVolumeClaim", "projected", "secret")),
    "a Windows pod, without the Linux-only rules": both(
        pod(os={"name": "windows"}), without("allowPrivilegeEscalation"), without("capabilities"),
        without_pod("seccompProfile")),
}


def test_the_reference_pod_meets_both_profiles():
    for profile in PROFILES:
        assert violations(restricted_pod(), profile) == [], profile


@pytest.mark.parametrize("rule", list(BASELINE_RULES))
def test_baseline_catches(rule):
    edit, words = BASELINE_RULES[rule]
    template = changed(edit)
    found = violations(template, "baseline")
    assert len(found) == 1 and words in found[0], found
    assert any(words in line for line in violations(template, "restricted"))


@pytest.mark.parametrize("rule", list(RESTRICTED_RULES))
def test_restricted_catches_and_baseline_allows(rule):
    edit, words = RESTRICTED_RULES[rule]
    template = changed(edit)
    assert violations(template, "baseline") == []
    found = violations(template, "restricted")
    assert found and all("(restricted)" in line for line in found), found
    assert any(words in line for line in found), found


@pytest.mark.parametrize("variant", list(ALLOWED))
def test_what_the_rules_allow_passes(variant):
    assert violations(changed(ALLOWED[variant]), "restricted") == []


def test_a_root_pod_with_the_default_capabilities_is_baseline_only():
    template = {"spec": {"containers": [{"name": "sshd", "image": "img"}]}}
    assert violations(template, "baseline") == []
    assert len(violations(template, "restricted")) == 4  # runAsNonRoot, escalation, seccomp, capabilities


def test_an_unknown_profile_is_an_error():
    with pytest.raises(ValueError, match="privileged"):
        violations(restricted_pod(), "privileged")


def test_pod_templates_of_each_kind():
    template = restricted_pod()
    assert pod_templates({"kind": "Job", "spec": {"template": template}}) == {"pod": template}
    mpijob = {"kind": "MPIJob", "spec": {"mpiReplicaSpecs": {"Launcher": {"template": template},
                                                             "Worker": {"template": template}}}}
    assert set(pod_templates(mpijob)) == {"Launcher", "Worker"}
    assert set(pod_templates({"kind": "TFJob", "spec": {"tfReplicaSpecs": {"Worker": {"template": template}}}})) == \
        {"Worker"}
    assert pod_templates({"kind": "Service", "spec": {}}) == {}

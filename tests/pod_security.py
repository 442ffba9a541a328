"""The Kubernetes Pod Security Standards, "baseline" and "restricted", as a check of a pod template.

What Pod Security admission would refuse, written out as checks so that a test can say which profile a
rendered pod meets without an API server. `violations(template, profile)` takes a PodTemplateSpec
(`{"metadata": ..., "spec": ...}`; metadata may be absent) and returns one readable line per broken rule,
each starting with the field it is about; an empty list means the pod meets the profile.
`pod_templates(document)` finds the pod templates of a Job, an MPIJob or a TFJob.

Baseline: no host namespaces, no privileged containers, no capabilities added beyond the baseline list,
no hostPath volumes, no host ports, AppArmor and SELinux only as the runtime confines by default, the
default /proc mount, no Unconfined seccomp, only the namespaced "safe" sysctls, no Windows HostProcess,
no `host` in probes and lifecycle hooks. Restricted: all of that, plus only the volume types listed
below, allowPrivilegeEscalation false, running as non-root with a non-zero UID, a RuntimeDefault or
Localhost seccomp profile, and capabilities that drop ALL and add at most NET_BIND_SERVICE. As Pod
Security admission does, the three Linux-only restricted rules (privilege escalation, seccomp,
capabilities) are not applied to a pod whose `spec.os.name` is `windows`.

Fields the API server defaults (an unset hostNetwork is false) count as unset; fields an operator
adds later (the MPI Operator's ssh-key Secret and hostfile ConfigMap volumes) are not in the template
and are allowed by both profiles anyway.
"""
from __future__ import annotations

PROFILES = ("baseline", "restricted")

BASELINE_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
    "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})
RESTRICTED_ADDABLE_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
RESTRICTED_VOLUME_TYPES = frozenset({
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"})
SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes"})
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
APPARMOR_TYPES = frozenset({"RuntimeDefault", "Localhost"})
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
SECCOMP_TYPES = frozenset({"RuntimeDefault", "Localhost"})
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
HOOKS = ("postStart", "preStop")


def _containers(spec: dict):
    """(label, container) for every container of every kind in the pod spec."""
    for field in CONTAINER_LISTS:
        for container in spec.get(field) or []:
            yield f"{field}[{container.get('name', '?')}]", container


def _baseline(metadata: dict, spec: dict) -> list[str]:
    found = []
    pod_context = spec.get("securityContext") or {}
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            found.append(f"spec.{field}: host namespaces are not allowed")
    for volume in spec.get("volumes") or []:
        if "hostPath" in volume:
            found.append(f"volumes[{volume.get('name', '?')}]: hostPath volumes are not allowed "
                         f"({volume['hostPath'].get('path')})")
    for name in (pod_context.get("sysctls") or []):
        if name.get("name") not in SAFE_SYSCTLS:
            found.append(f"spec.securityContext.sysctls: {name.get('name')!r} is not a safe sysctl")
    for key, value in (metadata.get("annotations") or {}).items():
        if key.startswith(APPARMOR_ANNOTATION) and not (value == "runtime/default" or value.startswith("localhost/")):
            found.append(f"metadata.annotations[{key}]: AppArmor profile {value!r} is not allowed")
    contexts = [("spec.securityContext", pod_context)]
    contexts += [(f"{label}.securityContext", c.get("securityContext") or {}) for label, c in _containers(spec)]
    for where, context in contexts:
        apparmor = (context.get("appArmorProfile") or {}).get("type")
        if apparmor is not None and apparmor not in APPARMOR_TYPES:
            found.append(f"{where}.appArmorProfile.type: {apparmor!r} is not allowed")
        selinux = context.get("seLinuxOptions") or {}
        if selinux.get("type") not in (None, *SELINUX_TYPES):
            found.append(f"{where}.seLinuxOptions.type: {selinux['type']!r} is not allowed")
        for field in ("user", "role"):
            if selinux.get(field):
                found.append(f"{where}.seLinuxOptions.{field}: must not be set")
        if (context.get("seccompProfile") or {}).get("type") == "Unconfined":
            found.append(f"{where}.seccompProfile.type: Unconfined is not allowed")
        if (context.get("windowsOptions") or {}).get("hostProcess"):
            found.append(f"{where}.windowsOptions.hostProcess: Windows HostProcess containers are not allowed")
    for label, container in _containers(spec):
        context = container.get("securityContext") or {}
        if context.get("privileged"):
            found.append(f"{label}.securityContext.privileged: privileged containers are not allowed")
        added = set((context.get("capabilities") or {}).get("add") or []) - BASELINE_CAPABILITIES
        if added:
            found.append(f"{label}.securityContext.capabilities.add: {sorted(added)} are beyond the baseline set")
        if context.get("procMount") not in (None, "Default"):
            found.append(f"{label}.securityContext.procMount: {context['procMount']!r} is not allowed")
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                found.append(f"{label}.ports[{port.get('containerPort')}].hostPort: host ports are not allowed "
                             f"({port['hostPort']})")
        handlers = [(probe, container.get(probe) or {}) for probe in PROBES]
        handlers += [(f"lifecycle.{hook}", (container.get("lifecycle") or {}).get(hook) or {}) for hook in HOOKS]
        for where, handler in handlers:
            for action in ("httpGet", "tcpSocket"):
                if (handler.get(action) or {}).get("host"):
                    found.append(f"{label}.{where}.{action}.host: must not be set")
    return found


def _restricted(spec: dict) -> list[str]:
    found = []
    pod_context = spec.get("securityContext") or {}
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUME_TYPES | {"hostPath"}:  # hostPath: already a baseline violation
            found.append(f"volumes[{volume.get('name', '?')}]: {', '.join(sorted(kinds))} volumes are not "
                         "allowed (restricted)")
    if pod_context.get("runAsNonRoot") is False:
        found.append("spec.securityContext.runAsNonRoot: must not be false (restricted)")
    if pod_context.get("runAsUser") == 0:
        found.append("spec.securityContext.runAsUser: must not be 0 (restricted)")
    linux = (spec.get("os") or {}).get("name") != "windows"
    pod_seccomp = (pod_context.get("seccompProfile") or {}).get("type")
    for label, container in _containers(spec):
        context = container.get("securityContext") or {}
        non_root = context.get("runAsNonRoot", pod_context.get("runAsNonRoot"))
        if non_root is not True:
            found.append(f"{label}: runAsNonRoot must be true, in the pod's or the container's securityContext "
                         "(restricted)")
        if context.get("runAsUser") == 0:
            found.append(f"{label}.securityContext.runAsUser: must not be 0 (restricted)")
        if not linux:
            continue
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{label}.securityContext.allowPrivilegeEscalation: must be false (restricted)")
        seccomp = (context.get("seccompProfile") or {}).get("type", pod_seccomp)
        if seccomp not in SECCOMP_TYPES:
            found.append(f"{label}: seccompProfile.type must be RuntimeDefault or Localhost, in the pod's or the "
                         f"container's securityContext, not {seccomp!r} (restricted)")
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            found.append(f"{label}.securityContext.capabilities.drop: must contain ALL (restricted)")
        added = set(capabilities.get("add") or []) - RESTRICTED_ADDABLE_CAPABILITIES
        if added:
            found.append(f"{label}.securityContext.capabilities.add: {sorted(added)} are not allowed; "
                         "at most NET_BIND_SERVICE (restricted)")
    return found


def violations(template: dict, profile: str) -> list[str]:
    """Every rule of `profile` ("baseline" or "restricted") that the pod template breaks; [] when it meets it."""
    if profile not in PROFILES:
        raise ValueError(f"unknown Pod Security profile {profile!r}; one of {PROFILES}")
    metadata, spec = template.get("metadata") or {}, template["spec"]
    found = _baseline(metadata, spec)
    if profile == "restricted":
        found += _restricted(spec)
    return found


def pod_templates(document: dict) -> dict[str, dict]:
    """{role: pod template} of a Job ("pod"), an MPIJob or a TFJob (the replica names); {} for other kinds."""
    spec = document.get("spec") or {}
    if document.get("kind") == "Job":
        return {"pod": spec["template"]}
    replicas = spec.get("mpiReplicaSpecs") or spec.get("tfReplicaSpecs") or {}
    return {role: replica["template"] for role, replica in replicas.items()}

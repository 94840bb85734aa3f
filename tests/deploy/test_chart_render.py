"""The Helm chart rendered by the real helm (built with the test plane): lint, schema
refusals, shipped defaults, each actuator's exact host access, the scheduler wiring."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploylib import ACTUATORS, CHART, KUBE_VERSION, docs, find, helm, one, pod_spec, render

from specon import defaults

pytestmark = pytest.mark.plane


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("helm")


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


@pytest.mark.parametrize("actuator", ACTUATORS)
def test_helm_lint_passes(plane_bin: Path, home: Path, actuator: str) -> None:
    res = helm(plane_bin, "lint", "--strict", str(CHART), "--set", f"agent.actuator={actuator}",
               home=home)
    assert "1 chart(s) linted, 0 chart(s) failed" in res.stdout


@pytest.mark.parametrize(("replicas", "strategy"), [(1, "Recreate"), (2, None)])
def test_an_upgrade_never_runs_two_managers_without_a_lease(
        plane_bin: Path, home: Path, replicas: int, strategy: str | None) -> None:
    """One replica has no leader election: its Deployment is recreated on upgrade (the old pod
    gone before the new one starts), never rolled with both acting at once; with more replicas
    the Lease decides and the rolling update stays."""
    manager = one(docs(render(plane_bin, home, {"manager.replicas": replicas})),
                  "Deployment", "specon-manager")
    env = env_of(pod_spec(manager)["containers"][0])
    assert env["SPECON_MANAGER_LEADER_ELECTION"] == str(replicas > 1).lower()
    assert manager["spec"].get("strategy", {}).get("type") == strategy


@pytest.mark.parametrize(("values", "where"), [
    ({"agent.actuator": "podman"}, "/agent/actuator"),
    ({"algorithm.alpha": -0.1}, "/algorithm/alpha"),
    ({"algorithm.alhpa": 0.1}, "alhpa"),
    ({"scheduler.schedulerName": "default-scheduler"}, "/scheduler/schedulerName"),
    ({"scheduler.mode": "replace"}, "/scheduler/mode"),
    ({"agent.logDirs": ["var/log/pods"]}, "/agent/logDirs/0"),
    ({"sharedVolume.size": "lots"}, "/sharedVolume/size"),
    ({"manager.policy": "slaq"}, "/manager/policy"),  # a policy the agents cannot run
    ({"agent.policy": "oracle"}, "/agent/policy"),
    ({"mode": "dry-run"}, "/mode"),
])
def test_bad_values_fail_with_a_message_naming_the_value(
        plane_bin: Path, home: Path, values: dict[str, Any], where: str) -> None:
    from deploylib import set_args

    res = helm(plane_bin, "template", "x", str(CHART), "--kube-version", KUBE_VERSION,
               *set_args(values), home=home, check=False)
    assert res.returncode != 0
    assert "don't meet the specifications of the schema" in res.stderr
    assert where in res.stderr, res.stderr


def test_defaults_are_the_shipped_parameters(plane_bin: Path, home: Path) -> None:
    objs = docs(render(plane_bin, home))
    manager = one(objs, "Deployment", "specon-manager")
    env = env_of(pod_spec(manager)["containers"][0])
    assert float(env["SPECON_MANAGER_ALPHA"]) == defaults.ALPHA
    assert float(env["SPECON_MANAGER_INTERVAL_S"]) == defaults.INTERVAL_S
    assert float(env["SPECON_MANAGER_FLOWCON_ALPHA"]) == defaults.FLOWCON_ALPHA
    assert float(env["SPECON_MANAGER_FLOWCON_BETA"]) == defaults.FLOWCON_BETA
    assert (float(env["SPECON_MANAGER_WEIGHT_PROGRESSING"]),
            float(env["SPECON_MANAGER_WEIGHT_WATCHING"]),
            float(env["SPECON_MANAGER_WEIGHT_CONVERGED"])) == defaults.WEIGHTS
    agent_env = env_of(pod_spec(one(objs, "DaemonSet"))["containers"][0])
    # the shipped policy (docs/parameters.md, "What ships"), the same for manager and agents,
    # and the programs' own defaults the same again
    from specon_agent.settings import AgentSettings as Agent
    from specon_manager.settings import ManagerSettings as Manager

    assert env["SPECON_MANAGER_POLICY"] == agent_env["SPECON_AGENT_POLICY"] == defaults.POLICY
    assert Manager.model_fields["policy"].default == Agent.model_fields["policy"].default == (
        defaults.POLICY)
    assert float(agent_env["SPECON_AGENT_ALPHA"]) == defaults.ALPHA
    assert float(agent_env["SPECON_AGENT_INTERVAL_S"]) == defaults.INTERVAL_S
    # Every setting the chart passes is one the programs know (their settings forbid extras).
    from specon_agent.settings import AgentSettings
    from specon_manager.settings import ManagerSettings

    for name in env:
        if name.startswith("SPECON_MANAGER_"):
            assert name[15:].lower() in ManagerSettings.model_fields, name
    for name in agent_env:
        if name.startswith("SPECON_AGENT_"):
            assert name[13:].lower() in AgentSettings.model_fields, name


def test_the_policy_is_chosen_by_name_and_the_agents_follow_the_manager(
        plane_bin: Path, home: Path) -> None:
    from specon_agent.loop_config import agent_policy
    from specon_manager.settings import ManagerSettings

    objs = docs(render(plane_bin, home, {"manager.policy": "paper"}))
    agent_env = env_of(pod_spec(one(objs, "DaemonSet"))["containers"][0])
    assert agent_env["SPECON_AGENT_POLICY"] == "paper"
    objs = docs(render(plane_bin, home, {"agent.policy": "flowcon"}))
    agent_env = env_of(pod_spec(one(objs, "DaemonSet"))["containers"][0])
    assert agent_env["SPECON_AGENT_POLICY"] == "flowcon"
    # every name the schema lets through is one both programs run
    schema = json.loads((CHART / "values.schema.json").read_text())
    for name in schema["properties"]["manager"]["properties"]["policy"]["enum"]:
        assert agent_policy(name).name == ManagerSettings(kubernetes=False, policy=name).policy


def test_one_mode_sets_the_manager_and_every_agent_to_enforce_or_observe(
        plane_bin: Path, home: Path) -> None:
    from specon_agent.settings import AgentSettings
    from specon_manager.settings import ManagerSettings

    for values, mode in (({}, "enforce"), ({"mode": "observe"}, "observe")):
        objs = docs(render(plane_bin, home, values))
        agent_env = env_of(pod_spec(one(objs, "DaemonSet"))["containers"][0])
        manager_env = env_of(pod_spec(one(objs, "Deployment", "specon-manager"))["containers"][0])
        assert agent_env["SPECON_AGENT_ENFORCEMENT"] == mode
        assert manager_env["SPECON_MANAGER_ENFORCEMENT"] == mode
    # every mode the schema lets through is one both programs take
    schema = json.loads((CHART / "values.schema.json").read_text())
    for mode in schema["properties"]["mode"]["enum"]:
        assert ManagerSettings(kubernetes=False, enforcement=mode).enforcement == mode
        assert AgentSettings(enforcement=mode).enforcement == mode


def host_access(objs: list[dict[str, Any]]) -> dict[str, bool]:
    """hostPath -> mounted read-only, for the agent's container."""
    spec = pod_spec(one(objs, "DaemonSet"))
    paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    mounts = spec["containers"][0]["volumeMounts"]
    return {paths[m["name"]]: bool(m.get("readOnly")) for m in mounts if m["name"] in paths}


# Every actuator: the logs read-only, and its own state folder (the owners' original limits).
STATE = {"/var/log/pods": True, "/var/lib/specon-agent": False}


@pytest.mark.parametrize(("actuator", "expected"), [
    ("docker", {**STATE, "/var/lib/docker/containers": True, "/var/run/docker.sock": False}),
    # the pods' cgroup subtree only, never the host's whole cgroup tree
    ("cgroup", {**STATE, "/sys/fs/cgroup/kubepods.slice": False}),
    ("resize", STATE),
])
def test_agent_gets_exactly_its_actuators_host_access(
        plane_bin: Path, home: Path, actuator: str, expected: dict[str, bool]) -> None:
    objs = docs(render(plane_bin, home, {"agent.actuator": actuator}))
    assert host_access(objs) == expected
    spec = pod_spec(one(objs, "DaemonSet"))
    assert not spec.get("hostPID") and not spec.get("hostNetwork") and not spec.get("hostIPC")
    sec = spec["containers"][0]["securityContext"]
    assert not sec.get("privileged")
    assert sec["capabilities"] == {"drop": ["ALL"]}
    assert sec["readOnlyRootFilesystem"] is True
    rules = one(objs, "ClusterRole", "specon-agent")["rules"]
    resources = {r for rule in rules for r in rule["resources"]}
    assert ("pods/resize" in resources) == (actuator == "resize")
    # its limit Events (docs/agent.md, "Events"): events.k8s.io only, create and patch
    assert [r for r in rules if "events" in r["resources"]] == [
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}]
    # a resize is admitted only on the agent's own node (the policy goes with the verb)
    assert bool(find(objs, "ValidatingAdmissionPolicy")) == (actuator == "resize")
    env = env_of(spec["containers"][0])
    if actuator == "cgroup":
        assert env["SPECON_AGENT_CGROUP_ROOT"] == "/host/cgroup/kubepods.slice"
        objs = docs(render(plane_bin, home, {"agent.actuator": "cgroup",
                                             "agent.cgroup.cpuSubPath": "cpu\\,cpuacct",
                                             "agent.cgroup.kubepodsPath": "kubepods"}))
        # cgroup v1: the unified hierarchy too, read-only (PSI cpu.pressure)
        unified = {"/sys/fs/cgroup/unified": True}
        assert host_access(objs) == {**STATE, **unified,
                                     "/sys/fs/cgroup/cpu,cpuacct/kubepods": False}
        env = env_of(pod_spec(one(objs, "DaemonSet"))["containers"][0])
        assert env["SPECON_AGENT_CGROUP_ROOT"] == "/host/cgroup/cpu,cpuacct/kubepods"
        objs = docs(render(plane_bin, home, {"agent.actuator": "cgroup",
                                             "agent.cgroup.cpuSubPath": "cpu",
                                             "agent.cgroup.kubepodsPath": "kubepods"}))
        assert host_access(objs) == {**STATE, **unified, "/sys/fs/cgroup/cpu/kubepods": False,
                                     "/sys/fs/cgroup/cpuacct/kubepods": True}
        objs = docs(render(plane_bin, home, {"agent.actuator": "cgroup",
                                             "agent.cgroup.cpuSubPath": "cpu",
                                             "agent.cgroup.unifiedSubPath": "",
                                             "agent.cgroup.kubepodsPath": "kubepods"}))
        assert host_access(objs) == {**STATE, "/sys/fs/cgroup/cpu/kubepods": False,
                                     "/sys/fs/cgroup/cpuacct/kubepods": True}
        assert env["SPECON_AGENT_ORIGINALS_FILE"] == (
            "/var/lib/specon-agent/originals-$(NODE_NAME).json")
        assert (env["SPECON_AGENT_EVENTS"], env["SPECON_AGENT_EVENTS_WINDOW_S"]) == ("true", "60")
        objs = docs(render(plane_bin, home, {"agent.events.enabled": False}))
        assert not [r for r in one(objs, "ClusterRole", "specon-agent")["rules"]
                    if "events" in r["resources"]]
        assert env_of(pod_spec(one(objs, "DaemonSet"))["containers"][0])[
            "SPECON_AGENT_EVENTS"] == "false"
        objs = docs(render(plane_bin, home, {"agent.stateHostPath": ""}))
        assert "/var/lib/specon-agent" not in host_access(objs)
        assert "SPECON_AGENT_ORIGINALS_FILE" not in env_of(
            pod_spec(one(objs, "DaemonSet"))["containers"][0])


def test_second_scheduler_calls_the_managers_extender(plane_bin: Path, home: Path) -> None:
    objs = docs(render(plane_bin, home, {"scheduler.schedulerName": "specon"}))
    cfg = yaml.safe_load(one(objs, "ConfigMap", "specon-scheduler")["data"]["config.yaml"])
    assert cfg["kind"] == "KubeSchedulerConfiguration"
    assert [p["schedulerName"] for p in cfg["profiles"]] == ["specon"]
    (ext,) = cfg["extenders"]
    svc = one(objs, "Service", "specon-manager")
    ports = {p["name"]: p["port"] for p in svc["spec"]["ports"]}
    # mutual TLS on the extender's own port: the scheduler's client certificate, the CA
    assert ext["urlPrefix"] == f"https://specon-manager.specon-system.svc:{ports['extender']}"
    assert ext["enableHTTPS"] is True
    assert ext["tlsConfig"] == {"certFile": "/etc/specon-scheduler/tls/tls.crt",
                                "keyFile": "/etc/specon-scheduler/tls/tls.key",
                                "caFile": "/etc/specon-scheduler/tls/ca.crt"}
    assert (ext["filterVerb"], ext["prioritizeVerb"]) == ("filter", "prioritize")
    assert ext["nodeCacheCapable"] is True and ext["ignorable"] is True
    deploy = one(objs, "Deployment", "specon-scheduler")
    container = pod_spec(deploy)["containers"][0]
    assert container["image"] == "registry.k8s.io/kube-scheduler:v1.33.13"
    assert "--config=/etc/specon-scheduler/config.yaml" in container["command"]
    assert {"name": "tls", "secret": {"secretName": "specon-scheduler-tls"}} in pod_spec(
        deploy)["volumes"]
    env = env_of(pod_spec(one(objs, "Deployment", "specon-manager"))["containers"][0])
    assert env["SPECON_MANAGER_SCHEDULER_NAME"] == "specon"
    assert env["SPECON_MANAGER_EXTENDER_PORT"] == str(ports["extender"])
    assert env["SPECON_MANAGER_EXTENDER_CLIENT_CA_FILE"] == "/etc/specon/tls/ca.crt"


def test_existing_scheduler_mode_renders_only_the_snippet(plane_bin: Path, home: Path) -> None:
    objs = docs(render(plane_bin, home, {"scheduler.mode": "existing"}))
    assert not find(objs, "Deployment", "specon-scheduler")
    snippet = yaml.safe_load(one(objs, "ConfigMap", "specon-extender")["data"]["extenders.yaml"])
    assert snippet["extenders"][0]["urlPrefix"].startswith("https://specon-manager.")


def test_every_workload_runs_as_its_own_service_account(plane_bin: Path, home: Path) -> None:
    objs = docs(render(plane_bin, home))
    accounts = {o["metadata"]["name"] for o in find(objs, "ServiceAccount")}
    used = {pod_spec(o)["serviceAccountName"] for o in objs
            if o["kind"] in ("Deployment", "DaemonSet", "Job")}
    assert used == accounts == {"specon-manager", "specon-agent", "specon-scheduler",
                                "specon-agent-drain", "specon-manager-stop"}
    for b in find(objs, "ClusterRoleBinding") + find(objs, "RoleBinding"):
        assert [s["name"] for s in b["subjects"]] in (["specon-manager"], ["specon-agent"],
                                                      ["specon-scheduler"],
                                                      ["specon-agent-drain"],
                                                      ["specon-manager-stop"])


def test_uninstall_first_drains_the_agents_with_rights_to_nothing_else(
    plane_bin: Path, home: Path,
) -> None:
    """helm uninstall runs a pre-delete Job that deletes the agents and waits for them to put
    the limits back while their RBAC still exists (specon_manager/drain.py); its account may
    delete only this release's agent DaemonSet and list pods; every hook object goes once it
    has succeeded. The plane test tests/deploy/test_drain_plane.py runs it."""
    objs = docs(render(plane_bin, home))
    job = one(objs, "Job", "specon-agent-drain")
    hooked = [o for o in objs if (o["metadata"].get("annotations") or {}).get("helm.sh/hook")]
    assert {(o["kind"], o["metadata"]["name"]) for o in hooked} == {
        (k, n) for k in ("ServiceAccount", "Role", "RoleBinding", "Job")
        for n in ("specon-agent-drain", "specon-manager-stop")}
    for o in hooked:
        ann = o["metadata"]["annotations"]
        assert ann["helm.sh/hook"] == "pre-delete"
        assert ann["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
        assert int(ann["helm.sh/hook-weight"]) == (0 if o["kind"] == "Job" else -5)
    spec = pod_spec(job)
    cmd = spec["containers"][0]["command"]
    assert cmd[:3] == ["python", "-m", "specon_manager.drain"]
    args = dict(zip(cmd[3::2], cmd[4::2], strict=True))
    assert args["--daemonset"] == "specon-agent" and args["--namespace"] == "specon-system"
    assert args["--timeout-s"] == "120"
    agents = one(objs, "DaemonSet", "specon-agent")
    labels = agents["spec"]["template"]["metadata"]["labels"]
    wanted = dict(kv.split("=") for kv in args["--selector"].split(","))
    assert wanted.items() <= labels.items()
    assert wanted == agents["spec"]["selector"]["matchLabels"]
    assert spec["containers"][0]["image"] == pod_spec(
        one(objs, "Deployment", "specon-manager"))["containers"][0]["image"]
    assert one(objs, "Role", "specon-agent-drain")["rules"] == [
        {"apiGroups": ["apps"], "resources": ["daemonsets"], "resourceNames": ["specon-agent"],
         "verbs": ["delete"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    assert job["spec"]["backoffLimit"] == 0 and spec["restartPolicy"] == "Never"
    off = docs(render(plane_bin, home, {"agent.drainOnUninstallSeconds": 0}))
    assert [j["metadata"]["name"] for j in find(off, "Job")] == ["specon-manager-stop"]


def test_uninstall_first_stops_the_manager_with_rights_to_nothing_else(
    plane_bin: Path, home: Path,
) -> None:
    """helm uninstall runs a pre-delete Job that deletes the manager and waits until it has
    exited: on SIGTERM its leader ungates the replacements waiting in placing while its RBAC
    and the scheduler still exist (specon_manager/shutdown_handover.py). Its account may delete only
    this release's manager Deployment and list pods. tests/deploy/test_drain_plane.py runs
    it."""
    objs = docs(render(plane_bin, home))
    job = one(objs, "Job", "specon-manager-stop")
    spec = pod_spec(job)
    cmd = spec["containers"][0]["command"]
    assert cmd[:3] == ["python", "-m", "specon_manager.drain"]
    args = dict(zip(cmd[3::2], cmd[4::2], strict=True))
    assert args["--deployment"] == "specon-manager" and args["--timeout-s"] == "60"
    manager = one(objs, "Deployment", "specon-manager")
    wanted = dict(kv.split("=") for kv in args["--selector"].split(","))
    assert wanted == manager["spec"]["selector"]["matchLabels"]
    assert spec["containers"][0]["image"] == pod_spec(manager)["containers"][0]["image"]
    assert one(objs, "Role", "specon-manager-stop")["rules"] == [
        {"apiGroups": ["apps"], "resources": ["deployments"],
         "resourceNames": ["specon-manager"], "verbs": ["delete"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    for values in ({"manager.migration.stopOnUninstallSeconds": 0},
                   {"manager.migration.enabled": False}):
        off = docs(render(plane_bin, home, values))
        assert [j["metadata"]["name"] for j in find(off, "Job")] == ["specon-agent-drain"]


def test_shared_volume_claim_or_existing(plane_bin: Path, home: Path) -> None:
    objs = docs(render(plane_bin, home, {"sharedVolume.storageClass": "nfs"}))
    pvc = one(objs, "PersistentVolumeClaim", "specon-shared")
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["spec"]["storageClassName"] == "nfs"
    objs = docs(render(plane_bin, home, {"sharedVolume.existingClaim": "mine"}))
    assert not find(objs, "PersistentVolumeClaim")
    vols = pod_spec(one(objs, "DaemonSet"))["volumes"]
    assert {"name": "shared", "persistentVolumeClaim": {"claimName": "mine"}} in vols


def test_no_shared_agent_tokens_and_each_agent_proves_its_own_pod(
        plane_bin: Path, home: Path) -> None:
    objs = docs(render(plane_bin, home))
    # TLS only: no Secret of tokens
    assert sorted(o["metadata"]["name"] for o in find(objs, "Secret")) == [
        "specon-manager-tls", "specon-scheduler-tls"]
    spec = pod_spec(one(objs, "DaemonSet"))
    assert not [v for v in spec["volumes"] if "secret" in v]
    (identity,) = [v for v in spec["volumes"] if v["name"] == "manager-identity"]
    sources = identity["projected"]["sources"]
    assert sources[0] == {"serviceAccountToken": {"audience": "specon-manager",
                                                  "expirationSeconds": 3600, "path": "token"}}
    env = env_of(spec["containers"][0])
    assert env["SPECON_AGENT_MANAGER_URL"].startswith("https://")
    assert env["SPECON_AGENT_TOKEN_FILE"] == "/var/run/secrets/specon/token"
    menv = env_of(pod_spec(one(objs, "Deployment", "specon-manager"))["containers"][0])
    assert menv["SPECON_MANAGER_AGENT_AUTH"] == "tokenreview"
    assert menv["SPECON_MANAGER_AGENT_AUDIENCE"] == "specon-manager"
    assert json.loads(menv["SPECON_MANAGER_AGENT_SERVICE_ACCOUNTS"]) == [
        "specon-system:specon-agent"]
    # the CA the agents verify the manager with is the one that signed its certificate
    ca = one(objs, "ConfigMap", "specon-ca")["data"]["ca.crt"]
    secret = one(objs, "Secret", "specon-manager-tls")["data"]
    assert base64.b64decode(secret["ca.crt"]).decode() == ca


def test_tls_from_cert_manager_or_the_operator(plane_bin: Path, home: Path) -> None:
    objs = docs(render(plane_bin, home, {"tls.mode": "certManager",
                                         "tls.certManager.issuerRef.name": "ca-issuer"}))
    certs = {c["metadata"]["name"]: c["spec"] for c in find(objs, "Certificate")}
    assert set(certs) == {"specon-manager-tls", "specon-scheduler-tls"}
    assert "specon-manager.specon-system.svc" in certs["specon-manager-tls"]["dnsNames"]
    assert "client auth" in certs["specon-scheduler-tls"]["usages"]
    assert all(c["issuerRef"]["name"] == "ca-issuer" for c in certs.values())
    assert not find(objs, "Secret")
    objs = docs(render(plane_bin, home, {"tls.mode": "existing"}))
    assert not find(objs, "Secret") and not find(objs, "Certificate")
    from deploylib import set_args

    res = helm(plane_bin, "template", "x", str(CHART), "--kube-version", KUBE_VERSION,
               *set_args({"tls.mode": "certManager"}),
               home=home, check=False)
    assert res.returncode != 0 and "tls.certManager.issuerRef.name" in res.stderr


def test_pod_writes_are_bound_only_in_the_training_namespaces(
        plane_bin: Path, home: Path) -> None:
    objs = docs(render(plane_bin, home, {"manager.trainingNamespaces": ["team-a", "team-b"]}))
    writer = one(objs, "ClusterRole", "specon-manager-writer")
    assert {r for rule in writer["rules"] for r in rule["resources"]} == {
        "pods", "pods/eviction", "jobs", "statefulsets", "replicasets", "pytorchjobs", "events"}
    # events: the events.k8s.io group the manager posts to, and the core one beside it
    assert {g for rule in writer["rules"] if "events" in rule["resources"]
            for g in rule["apiGroups"]} == {"", "events.k8s.io"}
    bound = [b for b in find(objs, "RoleBinding") if b["roleRef"]["name"] == writer[
        "metadata"]["name"]]
    assert sorted(b["metadata"]["namespace"] for b in bound) == ["team-a", "team-b"]
    assert not [b for b in find(objs, "ClusterRoleBinding")
                if b["roleRef"]["name"] == "specon-manager-writer"]
    # the manager's cluster-wide role reads, and writes nothing but TokenReviews
    wide = one(objs, "ClusterRole", "specon-manager")
    for rule in wide["rules"]:
        assert set(rule["verbs"]) <= {"get", "list", "watch"} or rule["resources"] == [
            "tokenreviews"]
    objs = docs(render(plane_bin, home, {"manager.trainingNamespaces": ["*"]}))
    assert one(objs, "ClusterRoleBinding", "specon-manager-writer")


def test_the_manager_reads_and_records_on_the_kubeflow_owners(
        plane_bin: Path, home: Path) -> None:
    """PyTorchJobs hold a migration's record (get, list, patch where it writes); a JobSet is
    only read (its Job holds the record), never listed or written."""
    objs = docs(render(plane_bin, home, {"manager.trainingNamespaces": ["team-a"]}))

    def verbs(role: dict[str, Any], group: str, resource: str) -> set[str]:
        return {v for rule in role["rules"] if group in rule["apiGroups"]
                and resource in rule["resources"] for v in rule["verbs"]}

    wide = one(objs, "ClusterRole", "specon-manager")
    writer = one(objs, "ClusterRole", "specon-manager-writer")
    assert verbs(wide, "kubeflow.org", "pytorchjobs") == {"get", "list"}
    assert verbs(writer, "kubeflow.org", "pytorchjobs") == {"patch"}
    assert verbs(wide, "jobset.x-k8s.io", "jobsets") == {"get"}
    assert verbs(writer, "jobset.x-k8s.io", "jobsets") == set()


def test_dashboards_and_service_monitor_are_optional(plane_bin: Path, home: Path) -> None:
    objs = docs(render(plane_bin, home))
    assert not find(objs, "ServiceMonitor")
    assert not [o for o in find(objs, "ConfigMap") if "dashboard" in o["metadata"]["name"]]
    objs = docs(render(plane_bin, home, {"metrics.dashboards.enabled": True,
                                         "metrics.serviceMonitor.enabled": True}))
    assert len(find(objs, "ServiceMonitor")) == 2
    boards = [o for o in find(objs, "ConfigMap") if "dashboard" in o["metadata"]["name"]]
    assert {o["metadata"]["name"] for o in boards} == {"specon-dashboard-cluster",
                                                      "specon-dashboard-job"}
    for o in boards:
        assert o["metadata"]["labels"]["grafana_dashboard"] == "1"


def test_committed_plain_manifests_are_the_charts_rendering(plane_bin: Path, home: Path) -> None:
    from deploylib import DEPLOY

    committed = (DEPLOY / "specon.yaml").read_text()
    # With the certificates the operator makes (a generated CA in a committed file would be
    # every user's CA).
    fresh = render(plane_bin, home, {"tls.mode": "existing"}, release="specon",
                   namespace="specon-system", extra=("--no-hooks",))
    # no helm hook in plain manifests: applied with kubectl, the uninstall hook's Job would run
    # at once and delete the agents
    assert "helm.sh/hook" not in fresh
    assert committed.endswith(fresh), "deploy/specon.yaml is stale: run hack/render-deploy.sh"


def test_the_user_guide_shows_the_example_job_that_the_plane_test_applies() -> None:
    from deploylib import DEPLOY, ROOT

    guide = (ROOT / "docs" / "user-guide.md").read_text()
    example = (DEPLOY / "examples" / "training-job.yaml").read_text().rstrip()
    assert f"```yaml\n{example}\n```" in guide


def test_network_policies_are_optional_and_admit_only_the_chart_s_clients(
        plane_bin: Path, home: Path) -> None:
    """Issue 29, item 9: off by default (they need a CNI that enforces them); on, the manager's
    main port admits the agents and Prometheus, its extender port the scheduler only, the
    agents' metrics port Prometheus only, and nothing reaches the scheduler or the hook."""
    assert find(docs(render(plane_bin, home)), "NetworkPolicy") == []
    prom = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "mon"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prom"}}}
    extra = [{"ipBlock": {"cidr": "10.0.0.0/24"}}]
    objs = docs(render(plane_bin, home, {"networkPolicy.enabled": True,
                                         "networkPolicy.prometheus": prom,
                                         "networkPolicy.schedulerFrom": extra}))
    mgr = one(objs, "NetworkPolicy", "specon-manager")["spec"]
    assert mgr["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "manager"
    assert mgr["policyTypes"] == ["Ingress"]
    by_port = {r["ports"][0]["port"]: r["from"] for r in mgr["ingress"]}
    assert set(by_port) == {8080, 8443}
    main = by_port[8080]
    assert main[0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "agent"
    assert main[1:] == [prom]
    ext = by_port[8443]
    assert ext[0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "scheduler"
    assert ext[1:] == extra
    agent = one(objs, "NetworkPolicy", "specon-agent")["spec"]
    assert [(r["ports"][0]["port"], r["from"]) for r in agent["ingress"]] == [(9108, [prom])]
    deny = one(objs, "NetworkPolicy", "specon-deny-ingress")["spec"]
    assert "ingress" not in deny and deny["policyTypes"] == ["Ingress"]
    comps = [e for e in deny["podSelector"]["matchExpressions"]
             if e["key"] == "app.kubernetes.io/component"]
    assert comps[0]["values"] == ["scheduler", "agent-drain", "manager-stop"]
    # existing mode: only the peers named for the extender port (none: no rule for it)
    objs = docs(render(plane_bin, home, {"networkPolicy.enabled": True,
                                         "scheduler.mode": "existing"}))
    mgr = one(objs, "NetworkPolicy", "specon-manager")["spec"]
    assert [r["ports"][0]["port"] for r in mgr["ingress"]] == [8080]


@pytest.mark.parametrize(("replicas", "pdb"), [(1, False), (2, True)])
def test_the_manager_gets_a_disruption_budget_with_more_than_one_replica(
        plane_bin: Path, home: Path, replicas: int, pdb: bool) -> None:
    found = find(docs(render(plane_bin, home, {"manager.replicas": replicas})),
                 "PodDisruptionBudget")
    assert len(found) == int(pdb)
    if pdb:
        spec = found[0]["spec"]
        assert spec["minAvailable"] == 1
        assert spec["selector"]["matchLabels"]["app.kubernetes.io/component"] == "manager"


def test_priority_classes(plane_bin: Path, home: Path) -> None:
    objs = docs(render(plane_bin, home))
    assert pod_spec(one(objs, "DaemonSet"))["priorityClassName"] == "system-node-critical"
    assert "priorityClassName" not in pod_spec(one(objs, "Deployment", "specon-manager"))
    objs = docs(render(plane_bin, home, {"agent.priorityClassName": "",
                                         "manager.priorityClassName": "specon-high"}))
    assert "priorityClassName" not in pod_spec(one(objs, "DaemonSet"))
    assert pod_spec(one(objs, "Deployment", "specon-manager"))["priorityClassName"] == \
        "specon-high"


def test_kube_version_is_declared_and_checked(plane_bin: Path, home: Path) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["kubeVersion"] == ">=1.25.0-0"
    res = helm(plane_bin, "template", "x", str(CHART), "--kube-version", "v1.24.0", home=home,
               check=False)
    assert res.returncode != 0 and "kubeVersion" in res.stderr
    # the resize actuator needs in-place pod resize (1.33)
    res = helm(plane_bin, "template", "x", str(CHART), "--kube-version", "v1.32.0",
               "--set", "agent.actuator=resize", home=home, check=False)
    assert res.returncode != 0 and "needs Kubernetes 1.33" in res.stderr


def test_every_container_is_hardened_and_the_agent_is_root_only_where_it_must(
        plane_bin: Path, home: Path) -> None:
    for actuator in ACTUATORS:
        objs = docs(render(plane_bin, home, {"agent.actuator": actuator}))
        for o in objs:
            if o["kind"] not in ("Deployment", "DaemonSet", "Job"):
                continue
            spec = pod_spec(o)
            assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
            for c in spec["containers"]:
                sc = c["securityContext"]
                assert sc["allowPrivilegeEscalation"] is False, o["metadata"]["name"]
                assert sc["readOnlyRootFilesystem"] is True
                assert sc["capabilities"] == {"drop": ["ALL"]}
                assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
                root = o["kind"] == "DaemonSet"
                assert sc["runAsNonRoot"] is (not root)
    # non-root agents with the resize actuator (no host writes); refused for the others
    objs = docs(render(plane_bin, home, {"agent.actuator": "resize", "agent.runAsUser": 65532}))
    sc = pod_spec(one(objs, "DaemonSet"))["containers"][0]["securityContext"]
    assert (sc["runAsUser"], sc["runAsGroup"], sc["runAsNonRoot"]) == (65532, 65532, True)
    for actuator in ("cgroup", "docker"):
        res = helm(plane_bin, "template", "x", str(CHART), "--kube-version", KUBE_VERSION,
                   "--set", f"agent.actuator={actuator}", "--set", "agent.runAsUser=65532",
                   home=home, check=False)
        assert res.returncode != 0 and "writes files only root may" in res.stderr


def test_the_agent_has_minutes_to_start_before_its_liveness_probe_counts(
        plane_bin: Path, home: Path) -> None:
    """A cold-machine run of the real-node e2e (2026-11-28): after `helm upgrade` the new agent
    on a node its training jobs kept busy took 52 s to its first log line; the livenessProbe
    (20 s x 3) killed it at 60 s, and every restart again, so the limits its killed predecessor
    left were never put back (a 0.95-core quota outlived `helm uninstall`). A startupProbe
    holds the livenessProbe off until /healthz first answers, for up to 5 minutes."""
    agent = pod_spec(one(docs(render(plane_bin, home, {})), "DaemonSet"))["containers"][0]
    start, live = agent["startupProbe"], agent["livenessProbe"]
    assert start["httpGet"] == live["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert start["periodSeconds"] * start["failureThreshold"] >= 300
    assert live["periodSeconds"] * live["failureThreshold"] == 60  # a stalled loop: as before

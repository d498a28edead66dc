"""ccrun on Kubernetes: the manifests of configs/k8s/ run with exactly the environment their pods
get, two ccrun agents on loopback standing in for two pods.

A PyTorchJob's variables are computed here the way Kubeflow's training operator computes them
(kubeflow/training-operator, pkg/controller.v1/pytorch: envvar.go, master.go, elastic.go, and
its defaults in pkg/apis/kubeflow.org/v1/pytorch_defaults.go); an Indexed Job's pods get
JOB_COMPLETION_INDEX and the manifest's own env. Each test reads the command and the env from the
manifest itself, so the documented manifests and what is tested cannot drift apart. The pods' DNS
names are mapped to 127.0.0.1 and the store port to a free one; nothing else is changed.
"""
import os
import re
import subprocess

import pytest
import yaml

from helpers import binary, communicate_all, free_port, parse_env_lines

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = os.path.join(HERE, "..", "..", "configs", "k8s")
PRINT_ENV = os.path.join(HERE, "..", "integration", "print_env.py")
DEFAULT_PORT = 23456  # the operator's PyTorchJobDefaultPort, port name "pytorchjob-port"
COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


def load(name):
    with open(os.path.join(CONFIGS, name)) as f:
        return list(yaml.safe_load_all(f))


def container(template, name):
    found = [c for c in template["spec"]["containers"] if c["name"] == name]
    assert found, f"no container named {name!r} in the pod template"
    return found[0]


# --- the training operator's environment ------------------------------------------------------

def replica_port(job, rtype):
    for port in container(job["spec"]["pytorchReplicaSpecs"][rtype]["template"], "pytorch").get("ports", []):
        if port.get("name") == "pytorchjob-port":
            return port["containerPort"]
    return DEFAULT_PORT  # setPyTorchDefaultPort adds it when missing


def operator_env(job, rtype, index):
    """The variables the operator appends to replica `rtype` (Master or Worker) number `index`'s
    container, after its defaults (replicas 1, nprocPerNode "auto", elastic min/max = replicas)."""
    spec, name = job["spec"], job["metadata"]["name"]
    replicas = {r: s.get("replicas", 1) for r, s in spec["pytorchReplicaSpecs"].items()}
    total = sum(replicas.values())
    elastic = spec.get("elasticPolicy")
    nproc = spec.get("nprocPerNode")
    if nproc is None and (elastic is None or elastic.get("nProcPerNode") is None):
        nproc = "auto"
    env = {"PYTHONUNBUFFERED": "1"}
    if "Master" in replicas:
        port, addr = str(replica_port(job, "Master")), f"{name}-master-0"
        rank = index + 1 if rtype == "Worker" else index
        world = total * (int(nproc) if nproc is not None and nproc.isdigit() else 1)
        env.update({"MASTER_PORT": port, "PET_MASTER_PORT": port, "MASTER_ADDR": addr,
                    "PET_MASTER_ADDR": addr, "WORLD_SIZE": str(world), "RANK": str(rank),
                    "PET_NODE_RANK": str(rank)})
    if nproc is not None:
        env["PET_NPROC_PER_NODE"] = nproc
    if elastic is None:
        env["PET_NNODES"] = str(total)
        return env
    host = elastic.get("rdzvHost", f"{name}-worker-0")
    port = elastic.get("rdzvPort", replica_port(job, "Worker"))
    lo = elastic.get("minReplicas", elastic.get("maxReplicas", replicas["Worker"]))
    hi = elastic.get("maxReplicas", lo)
    env.update({"PET_RDZV_ENDPOINT": f"{host}:{port}",
                "PET_RDZV_BACKEND": elastic.get("rdzvBackend", "c10d"), "PET_NNODES": f"{lo}:{hi}"})
    if "maxRestarts" in elastic:
        env["PET_MAX_RESTARTS"] = str(elastic["maxRestarts"])
    if "nProcPerNode" in elastic:
        env["PET_NPROC_PER_NODE"] = str(elastic["nProcPerNode"])
    if "rdzvId" in elastic:
        env["PET_RDZV_ID"] = elastic["rdzvId"]
    if elastic.get("rdzvConf"):
        env["PET_RDZV_CONF"] = ",".join(f"{c['key']}={c['value']}" for c in elastic["rdzvConf"])
    if elastic.get("standalone"):
        env["PET_STANDALONE"] = ""
    return env


# --- the pods, on loopback --------------------------------------------------------------------

def kubelet_expand(arg, env):
    """Kubernetes' $(VAR) expansion of a command or args item: $(NAME) of a defined variable is
    its value, $$ is $, anything else stays as written."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), arg)


def manifest_env(c, field_values):
    """A container's own env list; valueFrom fieldRef items take `field_values[fieldPath]`."""
    env = {}
    for item in c.get("env", []):
        if "value" in item:
            env[item["name"]] = str(item["value"])
        else:
            env[item["name"]] = field_values[item["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


def on_loopback(env, names, port, free):
    """`env` with the pods' DNS `names` as 127.0.0.1 and the store `port` as `free`."""
    out = {}
    for k, v in env.items():
        host, _, p = v.rpartition(":") if k == "PET_RDZV_ENDPOINT" else (v, "", "")
        if host in names:
            v = "127.0.0.1" + (f":{free}" if p == str(port) else (f":{p}" if p else ""))
        elif k.endswith("MASTER_PORT") and v == str(port):
            v = str(free)
        out[k] = v
    return out


def run_pods(c, pod_envs):
    """Runs container `c`'s command (ccrun from this build) with print_env.py in place of its
    args, once per pod environment, all at once; returns {rank: worker env} over all pods."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("PET_", "SLURM_", "MASTER_", "TORCHELASTIC_"))
            and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "JOB_COMPLETION_INDEX")}
    assert c["command"][0] == "ccrun", c["command"]
    procs = []
    for env in pod_envs:
        argv = [binary("launcher", "ccrun")] + [kubelet_expand(a, env) for a in c["command"][1:]]
        procs.append(subprocess.Popen(argv + [PRINT_ENV], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, env={**base, **env},
                                      start_new_session=True))
    ranks = {}
    for rc, out, err in communicate_all(procs, timeout=60):
        assert rc == 0, err
        ranks.update(parse_env_lines(out))
    return ranks


def check_ranks(ranks, nodes, nproc, master_addr, master_port):
    assert sorted(ranks) == list(range(nodes * nproc))
    for rank, env in ranks.items():
        assert env["WORLD_SIZE"] == str(nodes * nproc)
        assert env["LOCAL_RANK"] == str(rank % nproc)
        assert env["GROUP_RANK"] == str(rank // nproc)
        assert env["MASTER_ADDR"] == master_addr
        if master_port is not None:
            assert env["MASTER_PORT"] == str(master_port)


# --- the tests ----------------------------------------------------------------------------------

def test_manifests_are_what_the_tests_run():
    """The manifests parse, and each names what the tests below rely on."""
    (job,) = load("pytorchjob.yaml")
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert set(specs) == {"Master", "Worker"}
    cmds = {r: container(s["template"], "pytorch")["command"] for r, s in specs.items()}
    assert cmds["Master"] == cmds["Worker"], "master and worker pods must run one command"
    (elastic,) = load("pytorchjob-elastic.yaml")
    assert set(elastic["spec"]["pytorchReplicaSpecs"]) == {"Worker"}
    service, batch_job = load("indexed-job.yaml")
    assert (service["kind"], service["spec"]["clusterIP"]) == ("Service", "None")
    assert batch_job["spec"]["completionMode"] == "Indexed"
    assert batch_job["spec"]["template"]["spec"]["subdomain"] == service["metadata"]["name"]
    assert service["spec"]["selector"] == {"job-name": batch_job["metadata"]["name"]}


def test_operator_env_matches_the_operator():
    """The operator's rules as this file models them, for the static manifest's two pods."""
    (job,) = load("pytorchjob.yaml")
    master, worker = operator_env(job, "Master", 0), operator_env(job, "Worker", 0)
    assert master == {"PYTHONUNBUFFERED": "1", "MASTER_PORT": "23456", "PET_MASTER_PORT": "23456",
                      "MASTER_ADDR": "ccrun-logreg-master-0", "PET_MASTER_ADDR": "ccrun-logreg-master-0",
                      "WORLD_SIZE": "4", "RANK": "0", "PET_NODE_RANK": "0",
                      "PET_NPROC_PER_NODE": "2", "PET_NNODES": "2"}
    assert {**master, "RANK": "1", "PET_NODE_RANK": "1"} == worker


def test_pytorchjob_master_and_worker():
    """Pods master-0 and worker-0 of a 2-replica PyTorchJob: ranks 0-1 on the master, 2-3 on the
    worker, world size 4 (the operator's WORLD_SIZE, which counts pods x nprocPerNode), master
    address and port the operator's."""
    (job,) = load("pytorchjob.yaml")
    port, free = replica_port(job, "Master"), free_port()
    names = {"ccrun-logreg-master-0"}
    envs = [on_loopback(operator_env(job, r, 0), names, port, free) for r in ("Master", "Worker")]
    c = container(job["spec"]["pytorchReplicaSpecs"]["Master"]["template"], "pytorch")
    ranks = run_pods(c, envs)
    check_ranks(ranks, nodes=2, nproc=2, master_addr="127.0.0.1", master_port=free)
    assert ranks[0]["WORLD_SIZE"] == envs[0]["WORLD_SIZE"]
    assert {ranks[r]["TORCHELASTIC_MAX_RESTARTS"] for r in ranks} == {"2"}  # the command's flag


def test_pytorchjob_elastic():
    """Two worker pods of an elastic PyTorchJob (c10d on worker-0, nnodes 1:2): the rendezvous
    gives the node ranks; both pods' ccruns meet and count 4 workers."""
    (job,) = load("pytorchjob-elastic.yaml")
    port, free = replica_port(job, "Worker"), free_port()
    names = {"ccrun-elastic-worker-0"}
    envs = [on_loopback(operator_env(job, "Worker", i), names, port, free) for i in range(2)]
    assert envs[0] == envs[1] and "PET_NODE_RANK" not in envs[0]
    assert envs[0]["PET_RDZV_ENDPOINT"] == f"127.0.0.1:{free}" and envs[0]["PET_NNODES"] == "1:2"
    c = container(job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"], "pytorch")
    ranks = run_pods(c, envs)
    assert sorted(ranks) == [0, 1, 2, 3]
    for rank, env in ranks.items():
        assert (env["WORLD_SIZE"], env["LOCAL_RANK"]) == ("4", str(rank % 2))
        assert env["GROUP_RANK"] == str(rank // 2)
        assert env["TORCHELASTIC_MAX_RESTARTS"] == "3"


def test_indexed_job_with_headless_service():
    """Pods 0 and 1 of the Indexed Job: the completion index is the node rank, pod 0's DNS name
    (through the headless Service) the master."""
    service, job = load("indexed-job.yaml")
    c = container(job["spec"]["template"], "trainer")
    master = f"{job['metadata']['name']}-0.{service['metadata']['name']}"
    free = free_port()
    envs = []
    for index in range(job["spec"]["completions"]):
        # The Job controller's variable, then the container's own env.
        env = {"JOB_COMPLETION_INDEX": str(index), **manifest_env(c, {COMPLETION_INDEX: str(index)})}
        assert env["PET_MASTER_ADDR"] == master, "the master must be pod 0's name under the Service"
        envs.append(on_loopback(env, {master}, env["PET_MASTER_PORT"], free))
    assert [kubelet_expand(a, envs[1]) for a in c["command"]][1:3] == ["--node-rank", "1"]
    ranks = run_pods(c, envs)
    nproc = int(envs[0]["PET_NPROC_PER_NODE"])
    check_ranks(ranks, nodes=2, nproc=nproc, master_addr="127.0.0.1", master_port=free)


def test_operator_standalone_is_on():
    """elasticPolicy.standalone: true reaches ccrun as PET_STANDALONE="" (the operator's value);
    ccrun takes it as on (torchrun fails on it: int(""))."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "SLURM_"))}
    r = subprocess.run([binary("launcher", "ccrun"), "--print-config", "--no-python", "true"],
                       env={**env, "PET_STANDALONE": ""}, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "standalone: true\n" in r.stdout
    r = subprocess.run([binary("launcher", "ccrun"), "--print-config", "--no-python", "true"],
                       env={**env, "PET_STANDALONE": "0"}, capture_output=True, text=True, timeout=30)
    assert "standalone: false\n" in r.stdout


@pytest.mark.parametrize("arg,expected", [("$(A)", "1"), ("--r=$(A)", "--r=1"), ("$(B)", "$(B)"),
                                          ("$$(A)", "$(A)"), ("a$$b", "a$b")])
def test_kubelet_expand(arg, expected):
    assert kubelet_expand(arg, {"A": "1"}) == expected

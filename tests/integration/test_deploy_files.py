"""The deployment files (docker/) against the binary they run: no Docker engine runs here,
so these check what can be checked without one. Every flag a compose service passes is one
its subcommand takes; the index gets the map (checkpoints); the cluster's Prometheus
scrapes every granary service on its port and the metrics path the server serves; Grafana
is provisioned with the shipped dashboard; `docker build` is not sent build trees."""
import os
import re
import subprocess

import yaml

from conftest import REPO

DOCKER = os.path.join(REPO, "docker")


def flags_of(granary_bin, subcommand):
    out = subprocess.run([granary_bin, subcommand, "--help"], capture_output=True, text=True,
                         timeout=30)
    return set(re.findall(r"--([a-z][a-z0-9-]*)", out.stdout + out.stderr))


def test_compose_cluster_matches_the_binary_and_its_monitoring(granary_bin):
    compose = yaml.safe_load(open(os.path.join(DOCKER, "compose.cluster.yml")))
    services = compose["services"]
    ports = {}
    for name, svc in services.items():
        if svc.get("image") != "granary:latest":
            continue
        cmd = svc["command"]
        known = flags_of(granary_bin, cmd[0])
        for arg in cmd[1:]:
            if arg.startswith("--"):
                assert arg[2:] in known, f"{name}: granary {cmd[0]} has no {arg}"
        listen = cmd[cmd.index("--listen") + 1]
        ports[name] = listen.rsplit(":", 1)[1]
        # A file a command names is mounted into the container.
        for arg in cmd:
            if arg.startswith("/etc/granary/"):
                assert any(v.endswith(":" + arg) or v.endswith(":" + arg + ":ro")
                           for v in svc.get("volumes", [])), (name, arg)
    index = services["index"]["command"]
    assert "--cluster" in index, "the index makes no checkpoints without the map"
    # The map's endpoints are the chunk servers' services and ports.
    import json
    cluster = json.load(open(os.path.join(DOCKER, "cluster.json")))
    host, port = cluster["index"].rsplit(":", 1)
    assert ports[host] == port
    for d in cluster["drives"]:
        host, port = d["endpoint"].rsplit(":", 1)
        assert ports[host] == port, d

    prom = yaml.safe_load(open(os.path.join(DOCKER, "prometheus.cluster.yml")))
    scraped = {}
    for job in prom["scrape_configs"]:
        assert job["metrics_path"] == "/_granary/metrics"
        for sc in job["static_configs"]:
            for target in sc["targets"]:
                host, port = target.rsplit(":", 1)
                scraped[host] = job["job_name"]
                assert ports[host] == port, target
    assert set(scraped) == set(ports), "every granary process is scraped"
    assert len({scraped["index"], scraped["gw0"], scraped["cs0"]}) == 3, \
        "index, gateways and chunk servers in jobs of their own"
    assert "./prometheus.cluster.yml:/etc/prometheus/prometheus.yml:ro" in \
        services["prometheus"]["volumes"]

    graf = services["grafana"]["volumes"]
    mounted = {v.split(":")[0]: v.split(":")[1] for v in graf}
    provider = yaml.safe_load(open(os.path.join(
        DOCKER, "grafana", "provisioning", "dashboards", "granary.yml")))
    path = provider["providers"][0]["options"]["path"]
    assert mounted["./grafana/granary.json"] == path + "/granary.json"
    source = yaml.safe_load(open(os.path.join(
        DOCKER, "grafana", "provisioning", "datasources", "prometheus.yml")))
    assert source["datasources"][0]["url"] == "http://prometheus:9090"


def test_docker_build_is_not_sent_build_trees():
    ignored = [line.strip() for line in open(os.path.join(REPO, ".dockerignore"))
               if line.strip() and not line.startswith("#")]
    for must in (".git", "build*/", "granary-data/"):
        assert must in ignored, must
    dockerfile = open(os.path.join(DOCKER, "Dockerfile")).read()
    assert "COPY . ." in dockerfile  # what the ignore file is for

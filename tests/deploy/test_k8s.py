"""deploy/k8s/*.yaml against the Kubernetes API schemas (the ``kubernetes-validate`` package, strict: unknown
fields are errors), and what ties them to streamd: the probes on /readyz and /healthz of the port the
config listens on, the config itself (streamd's own validation), preStop + the daemon's drain within
terminationGracePeriodSeconds, the Service's selector and port.  The Dockerfile (not built here) is
checked for the same port, user and config path."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from streamd.config import AppConfig, from_dict

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
KUBERNETES = "1.28.0"  # the oldest Kubernetes the manifests are meant for


def docs() -> dict[str, dict]:
    out = {}
    for path in sorted(K8S.glob("*.yaml")):
        for d in yaml.safe_load_all(path.read_text()):
            out[d["kind"]] = d
    return out


def test_manifests_match_the_kubernetes_schemas():
    kv = pytest.importorskip("kubernetes_validate", reason="needs kubernetes-validate (the test extra)")
    found = docs()
    assert set(found) == {"ConfigMap", "Deployment", "Service"}
    for d in found.values():
        kv.validate(d, KUBERNETES, strict=True)
    typo = yaml.safe_load(yaml.safe_dump(found["Deployment"]))  # the check bites: a misspelt field fails
    typo["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kv.ValidationError, match="readinesProbe"):
        kv.validate(typo, KUBERNETES, strict=True)


def test_manifests_fit_the_daemon():
    found = docs()
    cfg = from_dict(AppConfig, yaml.safe_load(found["ConfigMap"]["data"]["streamd.yaml"]))  # a valid config
    dep, svc = found["Deployment"], found["Service"]
    pod = dep["spec"]["template"]
    (c,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert cfg.server.host == "0.0.0.0" and ports["http"] == cfg.server.port
    ready, live = c["readinessProbe"]["httpGet"], c["livenessProbe"]["httpGet"]
    assert (ready["path"], ready["port"], live["path"], live["port"]) == ("/readyz", "http", "/healthz", "http")
    # the drain fits: preStop, then SIGTERM -> grace_seconds for the live streams -> close_timeout
    sleep = c["lifecycle"]["preStop"]["exec"]["command"]
    assert sleep[0] == "sleep"
    need = float(sleep[1]) + cfg.server.grace_seconds + cfg.server.close_timeout
    assert pod["spec"]["terminationGracePeriodSeconds"] >= need
    assert dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    # the config file the command names is the ConfigMap's key, mounted there
    assert c["command"][:4] == ["streamd", "serve", "--config", "/etc/streamd/streamd.yaml"]
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in pod["spec"]["volumes"]}
    (cm_vol,) = [n for n, v in vols.items() if "configMap" in v]
    assert vols[cm_vol]["configMap"]["name"] == found["ConfigMap"]["metadata"]["name"]
    assert mounts[cm_vol] == "/etc/streamd" and "streamd.yaml" in found["ConfigMap"]["data"]
    # the Service reaches these pods on that port
    labels = pod["metadata"]["labels"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert svc["spec"]["selector"].items() <= labels.items()
    assert [(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [(cfg.server.port, "http")]
    # the image: same port, user and config path; the browser page is the installed package's (no web_root)
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(rf"^EXPOSE {cfg.server.port}$", dockerfile, re.M)
    assert re.search(rf"^USER {pod['spec']['securityContext']['runAsUser']}$", dockerfile, re.M)
    assert '"--config", "/etc/streamd/streamd.yaml"' in dockerfile
    assert cfg.server.web_root == "" and "web_root" not in dockerfile and "COPY streamd ./streamd" in dockerfile


def test_the_image_drains_within_dockers_stop_timeout_and_builds_from_a_wheel_folder():
    """``docker stop`` kills after 10 s: the image's config bounds its drain (grace_seconds + close_timeout)
    below that; ``--build-arg WHEELS=DIR`` installs from a folder of the build context, no index."""
    import yaml

    from streamd.config import AppConfig, from_dict

    dockerfile = (ROOT / "Dockerfile").read_text()
    (printed,) = re.findall(r"printf '([^']*)' > /etc/streamd/streamd\.yaml", dockerfile)
    cfg = from_dict(AppConfig, yaml.safe_load(printed.replace("\\n", "\n")))
    assert cfg.server.grace_seconds + cfg.server.close_timeout < 10
    assert re.search(r"^ARG WHEELS=", dockerfile, re.M)
    assert dockerfile.count('--no-index --find-links "/context/$WHEELS"') == 2  # torch, then the package

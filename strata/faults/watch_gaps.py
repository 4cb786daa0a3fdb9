"""Watch gaps: the API server restarts under a running `strata ingest`, etcd is compacted, and the
ingest process is paused past the watch history while the cluster changes.

What must hold: afterwards `strata verify --against-cluster` finds no difference (the adapters
reconnect, and a 410 is bridged by a relist that publishes exactly the difference). Needs the
local stack's etcd and kube-apiserver (it restarts the API server: run it alone).
"""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from ingest.kube import KubeApi
from strata.errors import StrataError
from strata.faults import FaultContext, FaultResult
from strata.faults.common import STRATA, env_for, fresh_log, terminate


def run(ctx: FaultContext) -> FaultResult:
    from strata.devstack import Stack

    if not ctx.settings.kubeconfig:
        raise StrataError("the watch-gaps scenario needs the local cluster: set KUBECONFIG (strata dev up exports it)")
    stack = Stack(Path(ctx.settings.data_dir))
    result = FaultResult("watch-gaps")
    api = KubeApi(ctx.settings.kubeconfig)
    ns = f"faults-{uuid.uuid4().hex[:8]}"
    api.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    counter = iter(range(1_000_000))

    def churn(n: int) -> None:  # creates, updates and deletes: every kind of change
        for _ in range(n):
            i = next(counter)
            api.request("POST", f"/api/v1/namespaces/{ns}/pods", _pod(ns, f"p{i}"))
            if i % 3 == 1:
                api.request("PATCH", f"/api/v1/namespaces/{ns}/pods/p{i - 1}", {"metadata": {"labels": {"v": str(i)}}})
            if i % 3 == 2:
                api.request("DELETE", f"/api/v1/namespaces/{ns}/pods/p{i - 2}", gracePeriodSeconds=0)

    with fresh_log(ctx.settings, "watch") as settings:
        env = env_for(settings, STRATA_DB_URL=f"sqlite:///{ctx.workdir / 'c.db'}")
        ingest = subprocess.Popen([STRATA, "ingest"], env=env, stderr=subprocess.PIPE, text=True)
        try:
            assert ingest.stderr is not None
            if not ingest.stderr.readline().startswith("synced:"):
                raise StrataError("ingest did not sync")
            churn(10)

            ctx.log("  the API server restarts under the watches (connections drop mid-stream)")
            stack.apiserver.down()
            stack.apiserver.up(log=lambda _m: None)
            churn(10)
            _verified(result, env, "API server restart")

            ctx.log("  ingest paused; the cluster changes; etcd compacted; the API server restarts")
            ingest.send_signal(signal.SIGSTOP)
            churn(30)
            _compact(stack.etcd.url)
            stack.apiserver.down()  # its new watch cache starts after the paused adapter's version
            stack.apiserver.up(log=lambda _m: None)
            churn(5)
            ingest.send_signal(signal.SIGCONT)
            _verified(result, env, "pause past the watch history + compaction")
        finally:
            ingest.send_signal(signal.SIGCONT)
            terminate(ingest, 120)
            api.request("DELETE", f"/api/v1/namespaces/{ns}/pods", gracePeriodSeconds=0)
            api.request("DELETE", f"/api/v1/namespaces/{ns}")
    return result


def _verified(result: FaultResult, env: dict[str, str], what: str, timeout_s: float = 90.0) -> None:
    """Run `strata verify --against-cluster` until it finds no difference (the adapters catch up)."""
    result.runs += 1
    deadline = time.monotonic() + timeout_s
    while True:
        out = subprocess.run([STRATA, "verify", "--against-cluster"], env=env, capture_output=True, text=True)
        if out.returncode == 0:
            result.passed += 1
            return
        if time.monotonic() > deadline:
            differences = [line for line in out.stdout.splitlines() if line.strip()]
            result.digest_mismatches += 1
            result.records_lost += len(differences)
            result.notes.append(f"{what}: {len(differences)} difference(s), e.g. {differences[:1]}")
            return
        time.sleep(2.0)


def _compact(etcd_url: str) -> None:
    """Compact etcd at its current revision (the v3 JSON gateway; no etcdctl needed)."""
    key = base64.b64encode(b"/").decode()
    revision = int(_post(etcd_url, "/v3/kv/range", {"key": key, "limit": 1})["header"]["revision"])
    _post(etcd_url, "/v3/kv/compaction", {"revision": revision, "physical": True})


def _post(base: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        base + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def _pod(ns: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "annotations": {"scheduling.k8s.io/group-name": "g"}},
        "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}]},
    }

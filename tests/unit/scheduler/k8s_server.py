"""A loopback Kubernetes API for the official client: GET /api/v1/nodes, /api/v1/pods, GET and PATCH
/api/v1/nodes/{name}, answering with the recorded EKS shapes of tests/fixtures/kubernetes (see its README) and
refusing a request without the bearer token (401, as the API server does)."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from fmdoctor.loopback import KeepAliveHandler, serve_in_background

FIXTURES = Path(__file__).resolve().parent.parent.parent / "fixtures" / "kubernetes"
TOKEN = "k8s-test-token"


def load(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


@dataclass
class FakeApi:
    nodes: dict[str, Any]
    pods: dict[str, Any]
    seen: list[str] = field(default_factory=list)
    patches: list[tuple[str, Any]] = field(default_factory=list)
    deny: set[str] = field(default_factory=set)  # paths answered 403
    evictions: list[tuple[str, str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def node(self, name: str) -> dict[str, Any] | None:
        return next((n for n in self.nodes["items"] if n["metadata"]["name"] == name), None)


def _handler(api: FakeApi) -> type[KeepAliveHandler]:
    class Handler(KeepAliveHandler):
        def _send(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _status(self, code: int, reason: str, message: str) -> None:
            self._send(code, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                              "message": message, "reason": reason, "code": code})

        def _authorised(self) -> bool:
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                self._status(401, "Unauthorized", "Unauthorized")
                return False
            path = self.path.split("?")[0]
            with api.lock:
                api.seen.append(f"{self.command} {path}")
            if path in api.deny:
                self._status(403, "Forbidden", f'nodes is forbidden: User "fmdoctor" cannot list resource at {path}')
                return False
            return True

        def do_GET(self) -> None:  # noqa: N802
            if not self._authorised():
                return
            path = self.path.split("?")[0]
            if path == "/api/v1/nodes":
                self._send(200, api.nodes)
            elif path == "/api/v1/pods":
                query = self.path.partition("?")[2]
                selector = next((unquote(q.split("=", 1)[1]) for q in query.split("&")
                                 if q.startswith("fieldSelector=")), "")
                if selector.startswith("spec.nodeName="):
                    node = selector.split("=", 1)[1]
                    self._send(200, {**api.pods, "items": [p for p in api.pods["items"]
                                                           if p["spec"].get("nodeName") == node]})
                else:
                    self._send(200, api.pods)
            elif path.startswith("/api/v1/nodes/"):
                node = api.node(path.rsplit("/", 1)[1])
                self._send(200, node) if node else self._status(404, "NotFound", "node not found")
            else:
                self._status(404, "NotFound", "the server could not find the requested resource")

        def do_POST(self) -> None:  # noqa: N802
            if not self._authorised():
                return
            parts = self.path.split("?")[0].strip("/").split("/")
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
            # /api/v1/namespaces/{ns}/pods/{name}/eviction
            if len(parts) == 7 and parts[2] == "namespaces" and parts[4] == "pods" and parts[6] == "eviction":
                ns, name = parts[3], parts[5]
                with api.lock:
                    before = len(api.pods["items"])
                    api.pods["items"] = [p for p in api.pods["items"]
                                         if (p["metadata"]["namespace"], p["metadata"]["name"]) != (ns, name)]
                    api.evictions.append((ns, name, body.get("kind")))
                if len(api.pods["items"]) == before:
                    self._status(404, "NotFound", "pod not found")
                else:
                    self._send(201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201})
            else:
                self._status(404, "NotFound", "the server could not find the requested resource")

        def do_PATCH(self) -> None:  # noqa: N802
            if not self._authorised():
                return
            path = self.path.split("?")[0]
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
            node = api.node(path.rsplit("/", 1)[1]) if path.startswith("/api/v1/nodes/") else None
            if node is None:
                self._status(404, "NotFound", "node not found")
                return
            with api.lock:
                api.patches.append((self.headers.get("Content-Type", ""), body))
                spec = body.get("spec", {}) if isinstance(body, dict) else {}
                if "unschedulable" in spec:
                    if spec["unschedulable"]:
                        node["spec"]["unschedulable"] = True
                    else:
                        node["spec"].pop("unschedulable", None)
            self._send(200, node)

    return Handler


@contextmanager
def k8s_api(nodes: str = "eks-gpu-nodes.json", pods: str = "eks-gpu-pods.json") -> Iterator[tuple[str, FakeApi]]:
    api = FakeApi(copy.deepcopy(load(nodes)), copy.deepcopy(load(pods)))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(api))
    serve_in_background(server, "k8s-api")
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", api
    finally:
        server.shutdown()
        server.server_close()


def write_kubeconfig(path: Path, url: str, context: str = "eks-test", token: str = TOKEN) -> Path:
    """A kubeconfig as `aws eks update-kubeconfig` writes one, with a static token instead of the exec plugin."""
    config = {"apiVersion": "v1", "kind": "Config", "current-context": context,
              "clusters": [{"name": "eks-test", "cluster": {"server": url}}],
              "users": [{"name": "fmdoctor", "user": {"token": token}}],
              "contexts": [{"name": context, "context": {"cluster": "eks-test", "user": "fmdoctor"}}]}
    path.write_text(json.dumps(config), encoding="utf-8")
    return path

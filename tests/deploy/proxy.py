"""The admission webhook's TLS proxy: the reload loop, the manual openssl
recipe, and nginx run in front of a stand-in control API."""

from __future__ import annotations

import http.client
import http.server
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import yaml

from report import R


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def recipe_commands(webhook_yaml: str) -> list[str]:
    """The openssl recipe in deploy/k8s/webhook.yaml's comments, as shell commands."""
    lines = [line[1:] for line in webhook_yaml.splitlines() if line.startswith("#")]
    cmds, current = [], ""
    for line in lines:
        s = line.strip()
        if current:
            current += " " + s.rstrip("\\").strip()
            if not s.endswith("\\"):
                cmds.append(current)
                current = ""
            continue
        if s.startswith(("openssl ", "printf ")):
            if s.endswith("\\"):
                current = s.rstrip("\\").strip()
            else:
                cmds.append(s)
    return cmds


def check_proxy(root: Path, nginx: str | None, work: Path) -> None:
    section = "webhook proxy"
    cm = yaml.safe_load((root / "deploy" / "k8s" / "webhook-proxy-configmap.yaml").read_text())
    template = cm["data"]["webhook.conf.template"]
    script = cm["data"]["reload-on-renewal.sh"]
    R.check(
        "${GPULEDGER_WEBHOOK_TOKEN}" in template,
        section,
        "the nginx template takes the token from ${GPULEDGER_WEBHOOK_TOKEN}",
    )
    p = subprocess.run(["sh", "-n"], input=script, capture_output=True, text=True)
    R.check(p.returncode == 0, section, "reload-on-renewal.sh is valid sh", p.stderr.strip())

    tmp = Path(tempfile.mkdtemp(prefix="proxy-", dir=work))
    try:
        # The reload loop: a changed certificate triggers one reload.
        cert = tmp / "watched.crt"
        cert.write_text("one\n")
        marker = tmp / "reloaded"
        test_script = (
            script.replace("/etc/gpuledger/webhook-tls/tls.crt", str(cert))
            .replace("sleep 60", "sleep 0.2")
            .replace("nginx -s reload", f"touch {marker}")
        )
        (tmp / "reload.sh").write_text(test_script)
        proc = subprocess.Popen(["sh", str(tmp / "reload.sh")], start_new_session=True, stdout=subprocess.DEVNULL)
        proc.wait(timeout=10)
        time.sleep(0.5)
        quiet = not marker.exists()
        cert.write_text("two\n")
        deadline = time.time() + 5
        while time.time() < deadline and not marker.exists():
            time.sleep(0.1)
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        R.check(
            quiet and marker.exists(), section, "reload-on-renewal.sh reloads once the certificate changes, not before"
        )

        openssl = shutil.which("openssl")
        if not openssl:
            R.skip(section, "openssl not found: the manual certificate recipe and the TLS proxy not tested")
            return
        cmds = recipe_commands((root / "deploy" / "k8s" / "webhook.yaml").read_text())
        ok = bool(cmds)
        for c in cmds:
            p = subprocess.run(["bash", "-c", c], cwd=tmp, capture_output=True, text=True)
            if p.returncode != 0:
                ok = False
                R.fail(section, f"recipe step failed: {c[:80]}…: {p.stderr.strip()[-300:]}")
                break
        if ok:
            p = subprocess.run(
                [openssl, "verify", "-CAfile", "ca.crt", "tls.crt"], cwd=tmp, capture_output=True, text=True
            )
            san = subprocess.run(
                [openssl, "x509", "-in", "tls.crt", "-noout", "-ext", "subjectAltName"],
                cwd=tmp,
                capture_output=True,
                text=True,
            )
            ok = p.returncode == 0 and "DNS:gpuledger-webhook.gpuledger.svc" in san.stdout
            R.check(
                ok,
                section,
                f"the openssl recipe in deploy/k8s/webhook.yaml ({len(cmds)} steps) makes a CA and a serving certificate for gpuledger-webhook.gpuledger.svc",
                p.stdout + p.stderr + san.stdout,
            )
        if not ok:
            return
        if not nginx:
            R.skip(section, "nginx not found: the TLS proxy was not run (set GPULEDGER_NGINX or install nginx)")
            return

        # Run the proxy in front of a stand-in control API.
        seen: list[dict] = []

        class Upstream(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                seen.append(
                    {"method": self.command, "path": self.path, "auth": self.headers.get("authorization"), "body": body}
                )
                out = (
                    b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}'
                    if self.path != "/healthz"
                    else b"ok\n"
                )
                self.send_response(200)
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_GET = do_POST = _answer

            def log_message(self, *a) -> None:
                pass

        upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
        threading.Thread(target=upstream.serve_forever, daemon=True).start()
        up_port = upstream.server_address[1]
        tls_port = free_port()
        token = "proxy-test-scheduler-token"
        conf_d = tmp / "conf.d"
        conf_d.mkdir()
        rendered = (
            template.replace("${GPULEDGER_WEBHOOK_TOKEN}", token)
            .replace("listen 8443 ssl", f"listen 127.0.0.1:{tls_port} ssl")
            .replace("127.0.0.1:8081", f"127.0.0.1:{up_port}")
            .replace("/etc/gpuledger/webhook-tls/", f"{tmp}/")
        )
        (conf_d / "webhook.conf").write_text(rendered)
        main = tmp / "nginx.conf"
        temp_paths = "\n".join(
            f"    {d}_temp_path {tmp}/{d};" for d in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        main.write_text(
            f"daemon off;\nmaster_process off;\npid {tmp}/nginx.pid;\nerror_log stderr notice;\n"
            f"events {{ worker_connections 64; }}\n"
            f"http {{\n    access_log off;\n{temp_paths}\n    include {conf_d}/*.conf;\n}}\n"
        )
        p = subprocess.run(
            [nginx, "-t", "-p", str(tmp), "-e", "stderr", "-c", str(main)], capture_output=True, text=True
        )
        if not R.check(
            p.returncode == 0, section, "nginx -t accepts the rendered webhook.conf", p.stderr.strip()[-500:]
        ):
            return
        server = subprocess.Popen(
            [nginx, "-p", str(tmp), "-e", "stderr", "-c", str(main)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            ctx = ssl.create_default_context(cafile=str(tmp / "ca.crt"))
            deadline = time.time() + 10
            while time.time() < deadline:
                try:
                    socket.create_connection(("127.0.0.1", tls_port), timeout=0.5).close()
                    break
                except OSError:
                    time.sleep(0.1)

            def call(method: str, path: str, body: bytes | None = None, auth: str | None = None):
                conn = http.client.HTTPSConnection("127.0.0.1", tls_port, context=ctx, timeout=10)
                # The API server connects to the Service's DNS name.
                conn.sock = ctx.wrap_socket(
                    socket.create_connection(("127.0.0.1", tls_port), timeout=10),
                    server_hostname="gpuledger-webhook.gpuledger.svc",
                )
                headers = {"content-type": "application/json"}
                if auth:
                    headers["authorization"] = auth
                conn.request(method, path, body=body, headers=headers)
                r = conn.getresponse()
                r.read()
                conn.close()
                return r.status

            review = json.dumps(
                {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u1"}}
            ).encode()
            status = call("POST", "/v1/k8s/admission", review, auth="Bearer forged")
            last = seen[-1] if seen else {}
            R.check(
                status == 200 and last.get("auth") == f"Bearer {token}" and last.get("body") == review,
                section,
                "POST /v1/k8s/admission over TLS (CA-verified, SNI gpuledger-webhook.gpuledger.svc) reaches the API with the scheduler token, not the caller's",
                f"status {status}, upstream saw {last}",
            )
            before = len(seen)
            s404 = call("POST", "/v1/events", b"{}")
            s403 = call("GET", "/v1/k8s/admission")
            R.check(
                s404 == 404 and s403 == 403 and len(seen) == before,
                section,
                "every other path is 404 and other methods 403, none reaching the API",
                f"{s404}, {s403}",
            )
            s200 = call("GET", "/healthz")
            R.check(
                s200 == 200 and seen and seen[-1]["path"] == "/healthz" and not seen[-1]["auth"],
                section,
                "GET /healthz is proxied without a token (the probes)",
            )
        finally:
            server.terminate()
            try:
                server.wait(timeout=5)
            except subprocess.TimeoutExpired:
                server.kill()
            upstream.shutdown()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

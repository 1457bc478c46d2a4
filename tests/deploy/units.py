"""deploy/systemd, and every flag and GPULEDGER_* variable in deploy/
against the built binaries' --help."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from objects import args_of, containers, ident, pod_spec
from report import R


def read_unit(path: Path) -> configparser.ConfigParser:
    cp = configparser.ConfigParser(
        strict=False, interpolation=None, delimiters=("=",), comment_prefixes=("#", ";"), empty_lines_in_values=False
    )
    cp.optionxform = str  # keys are case-sensitive in units
    cp.read_string(path.read_text())
    return cp


def unit_values(path: Path, section: str, key: str) -> list[str]:
    """Every value of a key (units repeat keys, configparser keeps the last)."""
    out, current = [], None
    for line in path.read_text().splitlines():
        s = line.strip()
        if s.startswith("[") and s.endswith("]"):
            current = s[1:-1]
        elif current == section and "=" in s and not s.startswith(("#", ";")):
            k, v = s.split("=", 1)
            if k.strip() == key:
                out.append(v.strip())
    return out


def check_systemd(root: Path, analyze: str | None, work: Path) -> None:
    section = "systemd"
    sdir = root / "deploy" / "systemd"
    units = sorted(sdir.glob("*.service"))
    names = {u.name for u in units}
    want = {"gpuledger-collector.service", "gpuledger-processor.service", "gpuledger-query.service"}
    R.check(want <= names, section, "collector, processor and query units exist", str(sorted(want - names)))

    for u in units:
        problems = []
        try:
            cp = read_unit(u)
        except configparser.Error as e:
            R.fail(section, f"{u.name}: does not parse: {e}")
            continue

        def get(section_name: str, key: str, cp: configparser.ConfigParser = cp) -> str | None:
            return cp.get(section_name, key, fallback=None)

        if not get("Unit", "Description"):
            problems.append("[Unit] Description")
        exec_start = get("Service", "ExecStart") or ""
        if not exec_start.lstrip("-@:+!").startswith("/"):
            problems.append("[Service] ExecStart with an absolute path")
        if not get("Install", "WantedBy"):
            problems.append("[Install] WantedBy")
        hardening = {
            "Restart": "on-failure",
            "NoNewPrivileges": "yes",
            "ProtectSystem": "strict",
            "PrivateTmp": "yes",
        }
        for k, v in hardening.items():
            if get("Service", k) != v:
                problems.append(f"[Service] {k}={v}")
        if not get("Service", "User"):
            problems.append("[Service] User (not root)")
        # Each StateDirectory is writable and declared as such.
        rw = " ".join(unit_values(u, "Service", "ReadWritePaths")).split()
        for d in " ".join(unit_values(u, "Service", "StateDirectory")).split():
            if f"/var/lib/{d}" not in rw:
                problems.append(f"ReadWritePaths lacks /var/lib/{d}")
        # Environment files: under /etc/gpuledger, each with an example here.
        for ef in unit_values(u, "Service", "EnvironmentFile"):
            p = ef.lstrip("-")
            if not p.startswith("/etc/gpuledger/") or not p.endswith(".env"):
                problems.append(f"EnvironmentFile {ef} is not /etc/gpuledger/*.env")
            elif not (sdir / (Path(p).name + ".example")).is_file():
                problems.append(f"no example for {p} (deploy/systemd/{Path(p).name}.example)")
        if u.name == "gpuledger-collector.service":
            prevent = " ".join(unit_values(u, "Service", "RestartPreventExitStatus")).split()
            if "3" not in prevent:
                problems.append("RestartPreventExitStatus includes 3 (NVML missing)")
            for forbidden in ("PrivateDevices", "DevicePolicy", "DeviceAllow", "ProtectClock"):
                if get("Service", forbidden) not in (None, "no", "false", "auto"):
                    problems.append(f"{forbidden} would hide /dev/nvidia* from NVML")
        for p in problems:
            R.fail(section, f"{u.name}: missing or wrong: {p}")
        if not problems:
            R.ok(section, f"{u.name}: structure, restart policy, hardening and state paths")

    for envf in sorted(sdir.glob("*.env.example")):
        bad = []
        for i, line in enumerate(envf.read_text().splitlines(), 1):
            s = line.strip()
            if not s or s.startswith("#"):
                continue
            if not re.match(r"^GPULEDGER_[A-Z0-9_]+=\S*$", s):
                bad.append(f"line {i}: {s[:60]!r}")
        R.check(not bad, section, f"{envf.name}: only comments and GPULEDGER_*=value lines", "; ".join(bad))

    if not analyze:
        R.skip(section, "systemd-analyze not found: `systemd-analyze verify` not run (structure checked above)")
        return
    # verify needs the ExecStart binaries: stand-ins in a scratch folder.
    tmp = Path(tempfile.mkdtemp(prefix="units-", dir=work))
    (tmp / "bin").mkdir()
    for b in ("gpuledger-collector", "gpuledger-processor", "gpuledger-query"):
        stub = tmp / "bin" / b
        stub.write_text("#!/bin/sh\nexit 0\n")
        stub.chmod(0o755)
    copies = []
    for u in units:
        text = u.read_text().replace("/usr/local/bin/", f"{tmp}/bin/")
        (tmp / u.name).write_text(text)
        copies.append(str(tmp / u.name))
    p = subprocess.run([analyze, "verify", "--man=no", *copies], capture_output=True, text=True)
    out = (p.stdout + p.stderr).strip()
    unit_lines = [line for line in out.splitlines() if str(tmp) in line or ".service" in line]
    environment_trouble = p.returncode != 0 and not unit_lines
    if environment_trouble:
        R.skip(section, f"systemd-analyze verify could not run here ({out[:200]}): structural checks stand")
    else:
        R.check(
            p.returncode == 0 and not unit_lines,
            section,
            f"systemd-analyze verify ({len(copies)} units, no warning)",
            out[:800],
        )
    shutil.rmtree(tmp, ignore_errors=True)


def help_text(binary: Path, args: list[str]) -> str:
    p = subprocess.run([str(binary), *args, "--help"], capture_output=True, text=True, timeout=30)
    return p.stdout + p.stderr


# The crates each binary is built from: a binary older than any of their
# sources may lack a flag the manifests already use.
CRATES = {
    "gpuledger-collector": ("collector", "common", "schemas"),
    "gpuledger-processor": ("processor", "common", "schemas"),
    "gpuledger-query": ("query", "common", "schemas"),
}


def newest_source(root: Path, crates) -> float:
    newest = 0.0
    for c in crates:
        for f in (root / c).rglob("*"):
            if f.suffix in (".rs", ".toml") and "target" not in f.parts:
                newest = max(newest, f.stat().st_mtime)
    return newest


def choices(text: str) -> dict[str, set[str]]:
    """The values an option accepts, where --help lists them (`Possible
    values:` or `[possible values: …]`), by flag and by environment name."""
    out: dict[str, set[str]] = {}
    blocks = re.split(r"\n(?=\s{2,}(?:-\w, )?--[a-z0-9])", text)
    for block in blocks:
        flag = re.match(r"\s*(?:-\w, )?(--[a-z0-9][a-z0-9-]*)", block)
        if not flag:
            continue
        values: set[str] = set()
        listed = re.search(r"Possible values:\n((?:\s+- [^\n]*\n?)+)", block)
        if listed:
            values = set(re.findall(r"^\s+- ([^:\s]+)", listed.group(1), re.M))
        short = re.search(r"\[possible values: ([^\]]+)\]", block)
        if short:
            values |= {v.strip() for v in short.group(1).split(",")}
        if not values:
            continue
        out[flag.group(1)] = values
        env = re.search(r"\[env: (GPULEDGER_[A-Z0-9_]+)", block)
        if env:
            out[env.group(1)] = values
    return out


def check_flags(root: Path, binaries: dict[str, Path], static: list[dict]) -> None:
    section = "flags"
    subcommands = {"gpuledger-collector": ["run"], "gpuledger-processor": ["run"], "gpuledger-query": ["serve"]}
    helps: dict[str, str] = {}
    for b, sub in subcommands.items():
        path = binaries.get(b)
        if path is None or not path.is_file():
            R.skip(section, f"no built {b} found: its flags and GPULEDGER_* names not checked against --help")
            continue
        if path.stat().st_mtime < newest_source(root, CRATES[b]):
            R.skip(section, f"{path} is older than its sources: rebuild (cargo build) to check {b}'s flags")
            continue
        helps[b] = help_text(path, []) + help_text(path, sub)
        R.note(section, f"{b}: checking against {path}")
    if not helps:
        return
    flags = {b: set(re.findall(r"(--[a-z0-9][a-z0-9-]*)", h)) for b, h in helps.items()}
    envs = {b: set(re.findall(r"\[env: (GPULEDGER_[A-Z0-9_]+)", h)) for b, h in helps.items()}
    all_envs = set().union(*envs.values())
    accepts = {b: choices(h) for b, h in helps.items()}
    complete = len(helps) == len(subcommands)  # "no binary reads X" needs all three

    problems = []
    # Container args in deploy/k8s.
    for o in static:
        ps = pod_spec(o)
        if ps is None:
            continue
        for c in containers(ps):
            cmd = c.get("command") or []
            if not cmd or not str(cmd[0]).startswith("/usr/local/bin/gpuledger-"):
                continue
            b = Path(cmd[0]).name
            if b not in helps:
                continue
            for a in args_of(c)[1:]:
                if a.startswith("--") and a.split("=", 1)[0] not in flags[b]:
                    problems.append(f"{ident(o)}: {b} has no flag {a.split('=', 1)[0]}")
                name, _, value = a.partition("=")
                if value and name in accepts[b] and value not in accepts[b][name]:
                    problems.append(f"{ident(o)}: {b} {name}={value}: not one of {sorted(accepts[b][name])}")
            for e in c.get("env") or []:
                if e["name"].startswith("GPULEDGER_") and e["name"] not in envs[b]:
                    problems.append(f"{ident(o)}: {b} reads no {e['name']}")
                ok = accepts[b].get(e["name"])
                if ok and "value" in e and str(e["value"]) not in ok:
                    problems.append(f"{ident(o)}: {b} {e['name']}={e['value']}: not one of {sorted(ok)}")
    for cm in [x for x in static if x["kind"] == "ConfigMap"] if complete else []:
        for k, v in (cm.get("data") or {}).items():
            if k.startswith("GPULEDGER_") and k not in all_envs:
                problems.append(f"{ident(cm)}: no binary reads {k}")
            for b in helps:
                ok = accepts[b].get(k)
                if ok and str(v) not in ok:
                    problems.append(f"{ident(cm)}: {k}={v}: {b} accepts only {sorted(ok)}")
    # The ConfigMap's commented-out settings and the systemd files.
    commented = re.findall(r"#\s*(GPULEDGER_[A-Z0-9_]+):", (root / "deploy" / "k8s" / "configmap.yaml").read_text())
    for k in commented if complete else []:
        if k not in all_envs:
            problems.append(f"configmap.yaml mentions {k}, which no binary reads")
    sdir = root / "deploy" / "systemd"
    per_file = {
        "collector.env.example": "gpuledger-collector",
        "processor.env.example": "gpuledger-processor",
        "query.env.example": "gpuledger-query",
    }
    for f in sorted(sdir.glob("*.env.example")):
        b = per_file.get(f.name)
        if (b and b not in helps) or (not b and not complete):
            continue
        for k in re.findall(r"^#?\s*(GPULEDGER_[A-Z0-9_]+)=", f.read_text(), re.M):
            if (b and k not in envs[b]) or (not b and k not in all_envs):
                problems.append(f"{f.name}: {k} is read by {b + ' not' if b else 'no binary'}")
    for u in sorted(sdir.glob("*.service")):
        b = u.stem
        if b not in helps:
            continue
        for v in unit_values(u, "Service", "Environment"):
            k = v.split("=", 1)[0]
            if k.startswith("GPULEDGER_") and k not in envs.get(b, set()):
                problems.append(f"{u.name}: {b} reads no {k}")
        for a in " ".join(unit_values(u, "Service", "ExecStart")).split():
            if a.startswith("--") and a.split("=", 1)[0] not in flags.get(b, set()):
                problems.append(f"{u.name}: {b} has no flag {a}")
    for p in problems:
        R.fail(section, p)
    if not problems:
        R.ok(
            section, f"every flag and GPULEDGER_* variable in deploy/ for {', '.join(sorted(helps))} is one it accepts"
        )

"""Checks one round of collector events (JSON lines on stdin) for
plausibility: one inventory, at least one device, memory totals above
zero, well-formed uuids, MIG instances that name their parent and profile,
one sample per device. Exits 1 and names every problem found."""

import json
import re
import sys

UUID = re.compile(r"^(GPU|MIG)-[0-9a-fA-F-]{8,}$")


def problems(events):
    inventories = [e for e in events if e["type"] == "NodeInventory"]
    samples = [e for e in events if e["type"] == "GpuSample"]
    found = []
    if len(inventories) != 1:
        found.append(f"{len(inventories)} NodeInventory events, expected 1")
    devices = inventories[0]["devices"] if inventories else []
    if not devices:
        found.append("no device found")
    for d in devices:
        name = d["device_uuid"]
        if not UUID.match(name):
            found.append(f"malformed uuid {name}")
        if d["memory_bytes"] <= 0:
            found.append(f"{name}: memory total {d['memory_bytes']}")
        if not 1 <= d["slices"] <= d["max_slices"]:
            found.append(f"{name}: slices {d['slices']}/{d['max_slices']}")
        is_mig = name.startswith("MIG-")
        if is_mig != (d.get("parent_gpu_uuid") is not None):
            found.append(f"{name}: MIG device and parent disagree")
        if is_mig and not d.get("mig_profile"):
            found.append(f"{name}: MIG device without a profile")
    if len(samples) != len(devices):
        found.append(f"{len(samples)} samples for {len(devices)} devices")
    for s in samples:
        if s["mem_total_bytes"] <= 0:
            found.append(f"sample of {s['device_uuid']}: memory total {s['mem_total_bytes']}")
        if s.get("parent_gpu_uuid") and s.get("mem_util_pct") is not None:
            found.append(f"sample of {s['device_uuid']}: a MIG device reports memory utilization")
    migs = sum(1 for d in devices if d.get("parent_gpu_uuid"))
    print(f"devices: {len(devices)}, MIG instances: {migs}, samples: {len(samples)}")
    return found


def main():
    events = [json.loads(line) for line in sys.stdin if line.strip()]
    found = problems(events)
    for p in found:
        print("PROBLEM:", p)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Writes a month of ledger events for the demo as NDJSON on stdout.

Four tenants share two pools through November 2026: an H100 pool with one
GPU split into MIG instances, and an H200 pool. Jobs arrive through the
month with their admission requests, some fail and are retried, one
reservation is confirmed and one rejected for double booking, a team
bursts, a GPU fails for a day, storage and egress are metered daily, and
prices change mid-month. The same seed gives the same events.

The generator keeps each tenant's running GE within its quota plus burst,
so every request it makes is one the ledger can admit; the ledger still
decides everything (kinds, bursts, reclassification, credits).

Usage: demo_ledger.py [--seed N] [--cluster NAME]
"""

import argparse
import json
import random
from datetime import datetime, timedelta, timezone

START = datetime(2026, 11, 1, tzinfo=timezone.utc)
END = datetime(2026, 12, 1, tzinfo=timezone.utc)

H100 = "NVIDIA H100 80GB HBM3"
H200 = "NVIDIA H200"

# tenant → (pool, nominal GE, burst GE, job sizes in (slices, max_slices), hours range, work unit)
TENANTS = {
    "team-llm": ("h200", 6, 4, [(2, 1), (4, 1), (1, 1)], (6, 40), "steps"),
    "team-research": ("h200", 3, 2, [(1, 1), (2, 1)], (2, 12), "experiments"),
    "team-vision": ("h100", 3, 1, [(1, 1), (3, 7), (1, 7)], (1, 10), "images"),
    "team-search": ("h100", 2, 0, [(1, 7), (2, 7), (1, 1)], (0.5, 6), "documents"),
}


def ts(t):
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


class Ledger:
    def __init__(self, cluster):
        self.cluster = cluster
        self.events = []
        self.n = 0

    def add(self, event_type, at, source, **fields):
        self.n += 1
        event = {
            "type": event_type,
            "event_id": f"demo-{self.n:06d}",
            "event_time": ts(at),
            "source": source,
            "cluster": self.cluster,
        }
        event.update(fields)
        self.events.append((at, self.n, event))


def inventory(ledger):
    """Two nodes per pool. h100-n01's first GPU is split 3g+2g+1g+1g."""
    devices = {"h100": [], "h200": []}
    for node in ("h100-n01", "h100-n02"):
        listed = []
        for i in range(4):
            uuid = f"GPU-{node}-{i}"
            if node == "h100-n01" and i == 0:
                for j, (profile, slices) in enumerate(
                    [("3g.40gb", 3), ("2g.20gb", 2), ("1g.10gb", 1), ("1g.10gb", 1)]
                ):
                    listed.append({"device_uuid": f"MIG-{node}-0-{j}", "parent_gpu_uuid": uuid,
                                   "model": H100, "slices": slices, "max_slices": 7,
                                   "memory_bytes": slices * 10_000_000_000, "mig_profile": profile})
            else:
                listed.append({"device_uuid": uuid, "model": H100, "slices": 7, "max_slices": 7,
                               "memory_bytes": 80_000_000_000})
        devices["h100"].extend(listed)
        ledger.add("NodeInventory", START, "gpuledger-collector", pool="h100", node=node, devices=listed)
    for node in ("h200-n01", "h200-n02"):
        listed = [{"device_uuid": f"GPU-{node}-{i}", "model": H200, "slices": 7, "max_slices": 7,
                   "memory_bytes": 141_000_000_000} for i in range(8)]
        devices["h200"].extend(listed)
        ledger.add("NodeInventory", START, "gpuledger-collector", pool="h200", node=node, devices=listed)
    return devices


def price_books(ledger):
    def book(version, effective, h100, h200, idle):
        ledger.add("PriceBook", effective, "finance-pricing", version=version,
                   effective_from=ts(effective), currency="USD",
                   rates=[{"model": H100, "reserved_per_gpu_hour": h100[0],
                           "quota_per_gpu_hour": h100[1], "on_demand_per_gpu_hour": h100[2]},
                          {"model": H200, "reserved_per_gpu_hour": h200[0],
                           "quota_per_gpu_hour": h200[1], "on_demand_per_gpu_hour": h200[2]}],
                   energy_per_kwh="0.12", storage_per_gb_month="0.08", egress_per_gb="0.05",
                   overhead_pct="8", reservation_charge="window", idle_distribution=idle)
    book(1, datetime(2026, 10, 1, tzinfo=timezone.utc), ("1.75", "2.10", "3.50"),
         ("2.45", "2.80", "4.90"), "central")
    # Mid-month: H200 gets cheaper and idle capacity is shared out.
    book(2, datetime(2026, 11, 16, tzinfo=timezone.utc), ("1.75", "2.10", "3.50"),
         ("2.30", "2.60", "4.60"), "proportional")


def pick(free, slices, max_slices):
    """Devices that together hold exactly slices/max_slices GE, or None."""
    whole = [d for d in free if d["slices"] == d["max_slices"]]
    if max_slices == 1:
        return whole[:slices] if len(whole) >= slices else None
    exact = [d for d in free if d["slices"] == slices and d["max_slices"] == max_slices]
    return exact[:1] or None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--cluster", default="demo")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    ledger = Ledger(args.cluster)

    price_books(ledger)
    devices = inventory(ledger)
    for tenant, (pool, nominal, burst, *_rest) in TENANTS.items():
        ledger.add("TenantPolicy", START, "gpuledger-admin", pool=pool, tenant=tenant,
                   nominal_ge=str(nominal), burst_ge=str(burst),
                   monthly_budget="25000" if tenant == "team-llm" else None, enforcement="deny")

    # Reservations: spare on h200 is 16 − 9 = 7 GE. team-llm books 5 GE for
    # three days; team-research's 4 GE overlapping it is rejected; its 2 GE
    # window later in the month is confirmed.
    asked = datetime(2026, 11, 3, tzinfo=timezone.utc)
    for rid, tenant, ge, start, end in [
        ("res-llm-1", "team-llm", 5, datetime(2026, 11, 10, tzinfo=timezone.utc), datetime(2026, 11, 13, tzinfo=timezone.utc)),
        ("res-research-1", "team-research", 4, datetime(2026, 11, 11, tzinfo=timezone.utc), datetime(2026, 11, 12, tzinfo=timezone.utc)),
        ("res-research-2", "team-research", 2, datetime(2026, 11, 20, tzinfo=timezone.utc), datetime(2026, 11, 22, tzinfo=timezone.utc)),
    ]:
        ledger.add("ReservationRequest", asked, "gpuledger-admin", pool="h200", reservation_id=rid,
                   tenant=tenant, slices=ge, max_slices=1, start=ts(start), end=ts(end))

    # A GPU fails for a day.
    failed_gpu, failed_from, failed_to = "GPU-h200-n01-3", datetime(2026, 11, 20, 10, tzinfo=timezone.utc), datetime(2026, 11, 21, 10, tzinfo=timezone.utc)
    ledger.add("DeviceHealth", failed_from, "gpuledger-collector", pool="h200", node="h200-n01",
               device_uuid=failed_gpu, state="failed", xid=79, reason="XID 79: GPU has fallen off the bus")
    ledger.add("DeviceHealth", failed_to, "gpuledger-collector", pool="h200", node="h200-n01",
               device_uuid=failed_gpu, state="healthy", reason="replaced")

    # Jobs, simulated in time order: each tenant submits when its running GE
    # leaves room within quota + burst and devices are free.
    busy = {}  # device uuid → end time
    running = {t: [] for t in TENANTS}  # tenant → [(end, ge)]
    t = START + timedelta(minutes=30)
    job_no = 0
    while t < END - timedelta(hours=2):
        for tenant, (pool, nominal, burst, sizes, hours, unit) in TENANTS.items():
            running[tenant] = [(e, g) for e, g in running[tenant] if e > t]
            if rng.random() > 0.35:
                continue
            slices, max_slices = rng.choice(sizes)
            ge = slices / max_slices
            if sum(g for _, g in running[tenant]) + ge > nominal + burst + 1e-9:
                continue
            broken = failed_from <= t < failed_to
            free = [d for d in devices[pool] if busy.get(d["device_uuid"], START) <= t
                    and not (broken and d["device_uuid"] == failed_gpu)]
            chosen = pick(free, slices, max_slices)
            if chosen is None:
                continue
            job_no += 1
            job = f"{tenant.split('-')[1]}-{job_no:04d}"
            hours_run = rng.uniform(*hours)
            end = min(t + timedelta(hours=hours_run), END - timedelta(hours=1))
            # One job in six fails and is retried on the same devices.
            attempts = [("failed", t + (end - t) / 3), ("completed", end)] if rng.random() < 1 / 6 else [("completed", end)]
            start = t
            for attempt, (state, stop) in enumerate(attempts, start=1):
                ledger.add("AdmissionRequest", start, "k8s-admission-webhook", pool=pool,
                           request_id=f"adm-{job}-{attempt}", job_id=job, attempt=attempt,
                           tenant=tenant, slices=slices, max_slices=max_slices)
                ledger.add("JobEvent", start, "slurm-prolog", pool=pool, job_id=job, attempt=attempt,
                           tenant=tenant, state="started", devices=[d["device_uuid"] for d in chosen])
                extra = {}
                if state == "completed":
                    extra = {"work_units": str(rng.randint(10, 5000) * 100), "work_unit_name": unit}
                else:
                    extra = {"exit_code": 137, "reason": "OOM killed"}
                ledger.add("JobEvent", stop, "slurm-epilog", pool=pool, job_id=job, attempt=attempt,
                           tenant=tenant, state=state, **extra)
                start = stop
            for d in chosen:
                busy[d["device_uuid"]] = end
            running[tenant].append((end, ge))
        t += timedelta(minutes=rng.choice([20, 40, 60, 90]))

    # Storage and egress, metered daily.
    day = START
    while day < END:
        for tenant, (pool, *_rest) in TENANTS.items():
            ledger.add("UsageRecord", day + timedelta(days=1), "storage-exporter", pool=pool, tenant=tenant,
                       kind="storage_gb_hours", quantity=str(rng.randint(500, 4000) * 24),
                       start=ts(day), end=ts(day + timedelta(days=1)))
            ledger.add("UsageRecord", day + timedelta(days=1), "network-exporter", pool=pool, tenant=tenant,
                       kind="egress_bytes", quantity=str(rng.randint(1, 400) * 1_000_000_000),
                       start=ts(day), end=ts(day + timedelta(days=1)))
        day += timedelta(days=1)

    # Time passes in both pools every hour, and the month closes.
    hour = START
    while hour <= END:
        for pool in ("h100", "h200"):
            ledger.add("Clock", hour, "gpuledger-demo", pool=pool, now=ts(hour))
        hour += timedelta(hours=1)

    for _, _, event in sorted(ledger.events, key=lambda e: (e[0], e[1])):
        print(json.dumps({k: v for k, v in event.items() if v is not None}, separators=(",", ":")))


if __name__ == "__main__":
    main()

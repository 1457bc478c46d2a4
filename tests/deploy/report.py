"""PASS / FAIL / SKIP / NOTE lines and the closing summary."""

from __future__ import annotations

from collections import Counter, defaultdict


class Report:
    def __init__(self) -> None:
        self.require_all = False
        self.counts: dict[str, Counter] = defaultdict(Counter)
        self.failures: list[str] = []
        self.skips: list[str] = []
        self.notes: list[str] = []

    def _line(self, status: str, section: str, message: str) -> None:
        print(f"{status:<5} {section}: {message}", flush=True)
        self.counts[section][status] += 1

    def ok(self, section: str, message: str) -> None:
        self._line("PASS", section, message)

    def fail(self, section: str, message: str) -> None:
        self._line("FAIL", section, message)
        self.failures.append(f"{section}: {message}")

    def skip(self, section: str, message: str) -> None:
        self._line("SKIP", section, message)
        self.skips.append(f"{section}: {message}")

    def note(self, section: str, message: str) -> None:
        self._line("NOTE", section, message)
        self.notes.append(f"{section}: {message}")

    def check(self, cond: bool, section: str, message: str, detail: str = "") -> bool:
        if cond:
            self.ok(section, message)
        else:
            self.fail(section, f"{message}{': ' + detail if detail else ''}")
        return cond

    def summary(self) -> int:
        print()
        print("== summary " + "=" * 60)
        total = Counter()
        for section in self.counts:
            c = self.counts[section]
            total.update(c)
            print(
                f"  {section:<22} pass {c['PASS']:>3}  fail {c['FAIL']:>3}  skip {c['SKIP']:>2}"
                + (f"  note {c['NOTE']}" if c["NOTE"] else "")
            )
        print(f"  {'total':<22} pass {total['PASS']:>3}  fail {total['FAIL']:>3}  skip {total['SKIP']:>2}")
        for title, items in (("skipped", self.skips), ("notes", self.notes), ("FAILED", self.failures)):
            if items:
                print(f"\n{title}:")
                for item in items:
                    print(f"  - {item}")
        print()
        print(f"{total['PASS']} passed, {total['FAIL']} failed, {total['SKIP']} skipped")
        if self.require_all and self.skips:
            print("GPULEDGER_REQUIRE_ALL=1: skipped checks count as failures")
            return 1
        return 1 if self.failures else 0


R = Report()

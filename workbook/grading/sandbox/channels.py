"""The two channels a run writes to, read as they come: the report pipe (``ReportReader``: the
authenticated records, in order, each with the judge's stamp and when it arrived and what the
whole run had used by then) and the output (``OutputDrain``: only its tail is kept).
"""
from __future__ import annotations

import dataclasses
import functools
import threading
import time

from workbook.grading import protocol

#: How much of a run's output (stdout and stderr together) the grader keeps: the last bytes.
OUTPUT_TAIL = 8192
#: Longest report line the reader buffers; longer junk is skipped without being stored.
LINE_MAX = 65536
#: The most records, and bytes of report lines (signed or not), the grader takes from one
#: run: it keeps them in its own memory, outside the run's limits.  An honest run sends a
#: few per test (the judge lets ten notes through per test, each cut to 500 characters).
RECORDS_MAX, REPORT_BYTES_MAX = 5000, 8 << 20


class ReportReader(threading.Thread):
    """Reads report lines from the pipe and keeps the authenticated records, in order."""

    def __init__(self, fd: int, key: bytes, run_cpu=lambda: None) -> None:
        super().__init__(name="report-reader", daemon=True)
        self.fd, self.key, self.run_cpu = fd, key, run_cpu
        self.records: list[protocol.Record] = []
        self.stamps: list[protocol.Stamp] = []  # one a record: as signed, and as read
        self.forged = 0
        self.violation: str | None = None
        self.imported = threading.Event()  # the learner file has been imported (or failed)
        self.ended_at: float | None = None  # when the run reported its end
        self.wake = threading.Event()      # set on either of those (and by the run's exit)
        self.flooded = False  # more than the caps: the run is stopped (``runner._watch``)
        self.tampered = False  # an integrity record came: the run is stopped, decided
        self.received = 0     # bytes of report lines read

    def run(self) -> None:
        with open(self.fd, "rb") as pipe:
            overlong = False
            for line in iter(functools.partial(pipe.readline, LINE_MAX), b""):
                self.received += len(line)
                if self.received > REPORT_BYTES_MAX and not self.flooded:
                    self.flood(f"over {REPORT_BYTES_MAX} bytes of report lines")
                if not overlong and not self.flooded:  # the rest of an over-long line is
                    self.feed(line)                     # read, never stored
                overlong = not line.endswith(b"\n")

    def flood(self, what: str) -> None:
        """Stop taking records; the run is stopped as soon as the watch wakes."""
        self.flooded = True
        self.violation = self.violation or f"the report flooded the grader ({what})"
        self.wake.set()

    def feed(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            decoded = protocol.read_line(self.key, line)
        except protocol.ProtocolError as exc:
            self.violation = self.violation or f"a malformed report record: {exc}"
            return
        if decoded is None:
            self.forged += 1
            return
        seq, record, stamp = decoded
        if self.violation:
            return
        if len(self.records) >= RECORDS_MAX:
            self.flood(f"over {RECORDS_MAX} records")
            return
        if seq != len(self.records):
            self.violation = f"report record {seq} arrived where {len(self.records)} was due"
            return
        self.records.append(record)
        self.stamps.append(dataclasses.replace(stamp, arrived=time.monotonic(),
                                               run_cpu=self.run_cpu()))
        if isinstance(record, (protocol.Collected, protocol.ImportFailed)):
            self.imported.set()
            self.wake.set()
        elif isinstance(record, protocol.End):
            self.ended_at = time.monotonic()
            self.wake.set()
        elif isinstance(record, protocol.Tampered):
            self.tampered = True
            self.wake.set()


class OutputDrain(threading.Thread):
    """Reads the run's stdout/stderr to the end, keeping only the last ``OUTPUT_TAIL`` bytes."""

    def __init__(self, fd: int) -> None:
        super().__init__(name="output-drain", daemon=True)
        self.fd = fd
        self.tail = bytearray()
        self.total = 0

    def run(self) -> None:
        with open(self.fd, "rb", buffering=0) as pipe:
            for chunk in iter(functools.partial(pipe.read, 1 << 16), b""):
                self.total += len(chunk)
                self.tail += chunk
                del self.tail[:-OUTPUT_TAIL]

    def text(self) -> str:
        return bytes(self.tail).decode("utf-8", "replace")

"""Fuzz a live ember cluster's wire protocol with mutated valid requests (docs/protocol.md,
"Hostile input").

Starts a LocalCluster (real ZooKeeper, real broker processes), creates the fuzzer's own topics
and groups, then sends ``--frames`` hostile frames (``wire_mutator``) over many concurrent
connections, each a pipeline of soft mutations ended by an ApiVersions sentinel or by one fatal
frame, while a well-behaved Producer/Consumer/Admin works on its own topic. Findings (each is a
failure):

* a broker process died, stopped answering a fresh connection, or logged a traceback or ERROR;
* a soft pipeline was closed by the broker (only a failed acks=0 produce may do that), or a
  fatal frame's connection was not closed; a response that is not a well-formed frame, or whose
  correlation ids are out of order;
* a broker's RSS after the run exceeds ``2 x before + 100 MB``, or its connections do not
  return to their number before the run (a connection held after its client left);
* the well-behaved client failed, stalled, or its topic does not hold exactly the records it
  was acknowledged; any partition's log fails validation or has an offset gap (``log_audit``).

A pipeline whose sentinel is not answered in ``--answer-timeout`` seconds is closed and counted
(a mutated request may ask the broker to wait, e.g. a fetch with a huge ``max_wait_ms``); its
mutations are listed so a real hang can be told apart.

    .venv/bin/python tests/fuzz/broker_fuzz.py --frames 1000000 --seed 1 [--brokers 1]
    .venv/bin/python tests/fuzz/broker_fuzz.py --protocol kafka --frames 1000000 --seed 1

``--max-size-share`` makes that share of connections send one frame of the largest declared size
the broker takes (``socket.request.max.bytes``, 100 MiB): an ApiVersions padded to it, sent whole
(it must be answered) or stopped part-way (closed by ``connections.max.idle.ms``, or reset by the
client), so ``queued.max.request.bytes`` is tried with the frames it exists for. A frame waits for
room behind them (one 100 MiB frame at a time under the fuzz brokers' 32 MiB), and one that waits
longer than ``connections.max.idle.ms`` has its connection closed, by design: in that mode a closed
connection of well-formed frames is no finding (the well-behaved client must still be served):

    .venv/bin/python tests/fuzz/broker_fuzz.py --protocol ember --frames 3000 --max-size-share 0.05

``--protocol kafka`` fuzzes the brokers' Kafka listeners instead, with mutated Kafka requests
(``kafka_mutator``); there a request whose bytes were damaged may be answered or have its
connection closed, as Kafka does, and no error count is read from responses.
"""
from __future__ import annotations

import argparse
import asyncio
import random
import re
import socket
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kafka_mutator import KafkaRequestTemplates, KafkaResponseReader, encode, mutate_kafka
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.api_versions.v3.response import ApiVersionsResponse
from kio.serial import entity_reader
from log_audit import AuditResult, audit_logs
from well_behaved import WellBehavedClient
from wire_mutator import FuzzTargets, Mutant, RequestTemplates, mutate

from ember.client import Admin
from ember.client.metadata import MetadataClient
from ember.errors import EmberError, TopicAlreadyExists
from ember.launcher.local import LocalCluster, broker_responds
from ember.wire.api_keys import ApiKey
from ember.wire.frame import FRAME_LENGTH, decode_response, encode_request

FUZZ_TOPICS = {"fz-a": 3, "fz-b": 1, "fz-c": 2}
FUZZ_GROUPS = ("fzg-1", "fzg-2", "fzg-3")
#: Longer than any fuzz name, so no bit flip of one can name it.
GOOD_TOPIC = "well-behaved-client-topic"
GOOD_GROUP = "well-behaved-client-group"
SENTINEL_ID = -7
#: Broker settings of the fuzz cluster: stalled fuzz connections (a lying length prefix) close fast.
#: The fuzzed brokers bound their request memory (queued.max.request.bytes, -1 by default as in Kafka):
#: the run checks that the bound holds under hostile frames.
BROKER_CONFIG = {"connections.max.idle.ms": "5000", "group.initial.rebalance.delay.ms": "100",
                 "zookeeper.session.timeout.ms": "10000", "queued.max.request.bytes": str(32 << 20)}
RSS_FACTOR, RSS_SLACK_KB = 2, 100 * 1024
SOCKET_SLACK = 10
WARM_UP_S = 60.0
PROBE_INTERVAL_S = 5.0
#: How often each broker's RSS is sampled during the run (its maximum is reported and bounded).
RSS_SAMPLE_INTERVAL_S = 1.0
#: A sample this much above the run's maximum so far records the pipelines in flight ("RSS rises").
RSS_RISE_KB = 20 * 1024
MAX_RSS_RISES = 20
PROGRESS_INTERVAL_S = 60.0
PROBE_TIMEOUT_S = 10.0
#: Mutated requests may delete the fuzz topics (an api key turned into DeleteTopics): recreate them.
RECREATE_INTERVAL_S = 2.0
#: Share of connections reset right after their frames are sent, unread (a client that crashed).
ABANDON_SHARE = 0.05
#: socket.request.max.bytes of the fuzz brokers (the default): the largest frame --max-size-share sends.
MAX_FRAME_BYTES = 100 * 1024 * 1024
_ZEROS = bytes(1 << 20)


@dataclass
class FuzzConfig:
    frames: int = 20_000
    seed: int = 1
    brokers: int = 1
    protocol: str = "ember"            # or "kafka": the brokers' Kafka listeners
    connections: int = 16
    pipeline: int = 48                 # most frames per connection
    answer_timeout_s: float = 20.0
    max_seconds: float = 3600.0
    max_size_share: float = 0.0        # connections sending one frame of socket.request.max.bytes
    #: Replay only these pipelines (indices from a run's "RSS rises" lines): each is rebuilt from (seed, index).
    only_pipelines: tuple[int, ...] = ()
    progress: bool = False             # a line to stderr every PROGRESS_INTERVAL_S


@dataclass
class ProcessStats:
    rss_kb: int
    peak_kb: int
    sockets: int      # open connections (files grow legitimately: segments roll)
    files: int


@dataclass
class FuzzReport:
    frames: int = 0
    fatal_frames: int = 0
    pipelines: int = 0
    answered_pipelines: int = 0
    abandoned: int = 0
    responses: int = 0
    error_codes: Counter = field(default_factory=Counter)
    unanswered: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    before: dict[int, ProcessStats] = field(default_factory=dict)
    after: dict[int, ProcessStats] = field(default_factory=dict)
    #: Largest RSS (kB) sampled during the run, per broker, and how many samples were taken.
    rss_max_kb: dict[int, int] = field(default_factory=dict)
    rss_samples: int = 0
    #: Each new RSS maximum (by RSS_RISE_KB or more): when, how high, and the pipelines in flight then.
    rss_rises: list[str] = field(default_factory=list)
    apis: set[str] = field(default_factory=set)
    recreated_topics: int = 0
    good_records: int = 0
    good_rounds: int = 0
    good_longest_round_s: float = 0.0
    audit: AuditResult | None = None

    def summary(self) -> str:
        lines = [f"frames {self.frames} ({self.fatal_frames} fatal) of {len(self.apis)} request types in {self.seconds:.0f}s "
                 f"({self.frames / max(self.seconds, 1e-9):.0f}/s), {self.pipelines} connections "
                 f"({self.abandoned} reset unread), {self.answered_pipelines} answered to the end, "
                 f"{self.responses} responses",
                 "error codes: " + ", ".join(f"{code}:{n}" for code, n in self.error_codes.most_common())]
        for broker_id, before in sorted(self.before.items()):
            after = self.after.get(broker_id, before)
            lines.append(f"broker {broker_id}: RSS {before.rss_kb // 1024} MB -> {after.rss_kb // 1024} MB "
                         f"(sampled max {self.rss_max_kb.get(broker_id, 0) // 1024} MB over {self.rss_samples} samples, "
                         f"peak {after.peak_kb // 1024} MB), sockets {before.sockets} -> {after.sockets}, "
                         f"other open files {before.files} -> {after.files}")
        lines.append(f"well-behaved client: {self.good_records} records acknowledged in {self.good_rounds} rounds, "
                     f"longest round {self.good_longest_round_s:.1f}s")
        if self.audit:
            lines.append(f"log audit: {self.audit.partitions} partitions, {self.audit.batches} batches, "
                         f"{self.audit.records} records, {self.audit.undecodable} accepted batches with a valid CRC "
                         f"but no Arrow payload")
        if self.rss_rises:
            lines.append("RSS rises (replay with --pipelines I,J,...):")
            lines += [f"  {r}" for r in self.rss_rises]
        lines.append(f"fuzz topics deleted by fuzzed requests and recreated: {self.recreated_topics}")
        lines.append(f"unanswered pipelines (closed by the fuzzer): {len(self.unanswered)}")
        lines += [f"  {u}" for u in self.unanswered[:20]]
        lines.append(f"findings: {len(self.findings)}")
        lines += [f"  {f}" for f in self.findings[:50]]
        return "\n".join(lines)


def process_stats(pid: int) -> ProcessStats:
    status = Path(f"/proc/{pid}/status").read_text()
    kb = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(VmRSS|VmHWM):\s+(\d+) kB", status, re.M)}
    targets = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            targets.append(str(fd.readlink()))
        except OSError:
            pass     # closed meanwhile
    sockets = sum(t.startswith("socket:") for t in targets)
    return ProcessStats(kb["VmRSS"], kb["VmHWM"], sockets, len(targets) - sockets)


# -- the protocols ------------------------------------------------------------------------------

@dataclass(frozen=True)
class MaxSizeMutant(Mutant):
    """A frame declaring ``len(data) + pad`` bytes: ``data`` (length prefix and header) is followed
    by ``pad`` zero bytes, written in chunks (never built whole); ``sent`` of them go out before the
    client stops (all: the frame is whole and answered)."""
    pad: int = 0
    sent: int = 0


def max_size_mutant(protocol: str, rng: random.Random, correlation_id: int) -> MaxSizeMutant:
    """An ApiVersions request padded to MAX_FRAME_BYTES, whole or stopped part-way (a stalled client:
    the broker closes it after connections.max.idle.ms, holding its budget charge meanwhile)."""
    if protocol == "kafka":     # ApiVersions v0, header v1 (null client id); the padding is ignored
        head = (18).to_bytes(2, "big") + (0).to_bytes(2, "big") + correlation_id.to_bytes(4, "big") + b"\xff\xff"
    else:
        head = b"".join(encode_request(ApiKey.API_VERSIONS, 0, correlation_id, {}))[FRAME_LENGTH.size:]
    pad = MAX_FRAME_BYTES - len(head)
    data = FRAME_LENGTH.pack(MAX_FRAME_BYTES) + head
    if rng.random() < 0.5:
        return MaxSizeMutant(data, False, f"max-size frame {MAX_FRAME_BYTES} bytes", pad=pad, sent=pad)
    sent = rng.randrange(pad)
    return MaxSizeMutant(data, True, f"max-size frame {MAX_FRAME_BYTES} bytes stalled after {sent}", pad=pad, sent=sent)


@dataclass(frozen=True)
class Dialect:
    """How the fuzzer speaks to one kind of listener: where, what it sends, how it ends a
    pipeline (a request that is always answered) and how it reads a response frame's body."""
    addresses: list[tuple[str, int]]
    mutant: Callable[[random.Random, int, bool], Mutant]      # (rng, correlation id, allow_fatal)
    sentinel: bytes
    answer: Callable[[bytes, bytes], tuple[int, object]]      # (body, request frame) -> (correlation id, error code)


def ember_dialect(cluster: LocalCluster, targets: FuzzTargets, seed: int) -> Dialect:
    templates = RequestTemplates(targets, random.Random(seed))

    def answer(body: bytes, request: bytes) -> tuple[int, object]:
        response = decode_response(body)
        return response.correlation_id, response.body.get("error_code")

    return Dialect([(b.host, b.port) for b in cluster.brokers.values()],
                   lambda rng, i, fatal: mutate(templates.random(rng), i, rng, allow_fatal=fatal),
                   b"".join(encode_request(ApiKey.API_VERSIONS, 0, SENTINEL_ID, {})), answer)


def kafka_dialect(cluster: LocalCluster, targets: FuzzTargets, seed: int) -> Dialect:
    addresses = [(host, int(port)) for host, port in (a.rsplit(":", 1) for a in cluster.kafka_bootstrap.split(","))]
    served = kafka_api_versions(addresses[0])
    templates = KafkaRequestTemplates(targets, served, random.Random(seed))
    read = KafkaResponseReader(served)
    return Dialect(addresses, lambda rng, i, fatal: mutate_kafka(templates.random(rng), i, rng, allow_fatal=fatal),
                   encode(_kafka_api_versions_request(), SENTINEL_ID), read)


def _kafka_api_versions_request() -> ApiVersionsRequest:
    return ApiVersionsRequest(client_software_name="ember-fuzz", client_software_version="1")


def kafka_api_versions(address: tuple[str, int]) -> list[tuple[int, int, int]]:
    """(api key, min, max) the Kafka listener at ``address`` advertises."""
    with socket.create_connection(address, timeout=PROBE_TIMEOUT_S) as sock:
        sock.sendall(encode(_kafka_api_versions_request(), 1))
        stream = sock.makefile("rb")
        body = stream.read(FRAME_LENGTH.unpack(stream.read(4))[0])
    response = entity_reader(ApiVersionsResponse)(body, 4)[0]    # after the correlation id: header v0
    return [(int(k.api_key), int(k.min_version), int(k.max_version)) for k in response.api_keys]


# -- one fuzz connection -------------------------------------------------------------------------

@dataclass
class _Pipeline:
    index: int
    address: tuple[str, int]
    mutants: list[Mutant]
    abandon: bool = False      # reset the connection right after sending, as a crashed client would
    #: The broker may close it before the end although every frame is well-formed: with max-size frames in the
    #: run, a frame that waits for room in queued.max.request.bytes longer than connections.max.idle.ms is closed.
    may_wait_out: bool = False
    client_port: int = 0       # the connection's local port: the broker's log names it on a close

    @property
    def fatal(self) -> bool:
        return bool(self.mutants) and self.mutants[-1].fatal

    @property
    def may_close(self) -> bool:
        """Whether the broker may close this connection before answering the sentinel."""
        return self.may_wait_out or any(m.fatal or m.silent or m.lenient for m in self.mutants)

    def describe(self) -> str:
        return (f"pipeline {self.index} from port {self.client_port} to {self.address[1]}: "
                + " | ".join(m.what for m in self.mutants))


class _Fuzzer:
    def __init__(self, config: FuzzConfig, cluster: LocalCluster, dialect: Dialect, report: FuzzReport) -> None:
        self.config, self.cluster, self.dialect, self.report = config, cluster, dialect, report
        self.addresses = dialect.addresses
        self._next_pipeline = 0
        self._deadline = 0.0
        self._started = time.monotonic()
        self._in_flight: dict[int, _Pipeline] = {}

    def pipeline(self) -> _Pipeline | None:
        if self.config.only_pipelines and self._next_pipeline >= len(self.config.only_pipelines):
            return None
        index = self.config.only_pipelines[self._next_pipeline] if self.config.only_pipelines else self._next_pipeline
        self._next_pipeline += 1
        rng = random.Random(f"{self.config.seed}/{index}")
        count = min(rng.randint(1, self.config.pipeline), self.config.frames - self.report.frames)
        if self.config.max_size_share and rng.random() < self.config.max_size_share and count:
            return _Pipeline(index, rng.choice(self.addresses), [max_size_mutant(self.config.protocol, rng, 0)],
                             abandon=rng.random() < 0.25, may_wait_out=True)
        mutants = [self.dialect.mutant(rng, i, i == count - 1 and rng.random() < 0.5) for i in range(count)]
        return _Pipeline(index, rng.choice(self.addresses), mutants, abandon=rng.random() < ABANDON_SHARE,
                         may_wait_out=self.config.max_size_share > 0)

    async def run(self) -> None:
        self._started = time.monotonic()
        self._deadline = self._started + self.config.max_seconds
        workers = [asyncio.create_task(self._worker()) for _ in range(self.config.connections)]
        background = [asyncio.create_task(self._probe_forever()), asyncio.create_task(self._recreate_forever()),
                      asyncio.create_task(self._sample_rss_forever())]
        try:
            await asyncio.gather(*workers)
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)

    async def _worker(self) -> None:
        while self.report.frames < self.config.frames and time.monotonic() < self._deadline \
                and len(self.report.findings) < 100:
            pipeline = self.pipeline()
            if pipeline is None or not pipeline.mutants:
                return
            self.report.frames += len(pipeline.mutants)
            self.report.fatal_frames += sum(m.fatal for m in pipeline.mutants)
            self.report.apis.update(m.what.split(":")[0].split(" ")[0] for m in pipeline.mutants)
            self.report.pipelines += 1
            self._in_flight[pipeline.index] = pipeline
            try:
                await self._send(pipeline)
            finally:
                del self._in_flight[pipeline.index]

    async def _send(self, pipeline: _Pipeline) -> None:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(*pipeline.address), PROBE_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError) as exc:
            self.report.findings.append(f"cannot connect to broker at {pipeline.address}: {exc!r}")
            return
        pipeline.client_port = writer.get_extra_info("sockname")[1]
        responses = asyncio.create_task(self._read(pipeline, reader))
        try:
            for mutant in pipeline.mutants:
                writer.write(mutant.data)
                await writer.drain()
                if isinstance(mutant, MaxSizeMutant):
                    await _write_zeros(writer, mutant.sent)
            if pipeline.abandon:
                self.report.abandoned += 1
                responses.cancel()
                writer.transport.abort()
                await asyncio.gather(responses, return_exceptions=True)
                return
            if not pipeline.fatal:
                writer.write(self.dialect.sentinel)
                await writer.drain()
        except (ConnectionError, OSError):
            pass   # the broker closed the connection; _read judges whether it should have
        try:
            await asyncio.wait_for(responses, self.config.answer_timeout_s + 5)
        except asyncio.TimeoutError:
            pass
        finally:
            writer.transport.abort()

    async def _read(self, pipeline: _Pipeline, reader: asyncio.StreamReader) -> None:
        """Read responses until the sentinel, the broker closing, or the answer timeout."""
        deadline = time.monotonic() + self.config.answer_timeout_s
        last_id = -1
        sent_ids = set(range(len(pipeline.mutants)))
        while True:
            remaining = deadline - time.monotonic()
            try:
                head = await asyncio.wait_for(reader.readexactly(FRAME_LENGTH.size), max(remaining, 0.01))
                body = await asyncio.wait_for(reader.readexactly(FRAME_LENGTH.unpack(head)[0]), max(remaining, 0.01))
            except asyncio.TimeoutError:
                what = "fatal frame's connection stayed open" if pipeline.fatal else "no sentinel answer"
                self.report.unanswered.append(f"{what}: {pipeline.describe()[:600]}")
                return
            except (asyncio.IncompleteReadError, ConnectionError, OSError):
                if not pipeline.may_close:
                    self.report.findings.append(f"the broker closed a connection of well-formed requests: "
                                                f"{pipeline.describe()[:600]}")
                return
            try:
                correlation_id, error_code = self.dialect.answer(body, self._request_frame(pipeline, body))
            except (EmberError, ValueError) as exc:
                self.report.findings.append(f"malformed response ({exc}): {pipeline.describe()[:300]}")
                return
            self.report.responses += 1
            if correlation_id == SENTINEL_ID:
                self.report.answered_pipelines += 1
                return
            if correlation_id not in sent_ids or correlation_id <= last_id:
                self.report.findings.append(f"response correlation id {correlation_id} out of order "
                                            f"(after {last_id}): {pipeline.describe()[:300]}")
                return
            last_id = correlation_id
            self.report.error_codes[error_code] += 1

    def _request_frame(self, pipeline: _Pipeline, body: bytes) -> bytes:
        """The frame a response answers (its correlation id is the mutant's index)."""
        correlation_id = int.from_bytes(body[:4], "big", signed=True)
        if 0 <= correlation_id < len(pipeline.mutants):
            return pipeline.mutants[correlation_id].data
        return self.dialect.sentinel

    async def _sample_rss_forever(self) -> None:
        """Each broker's RSS every RSS_SAMPLE_INTERVAL_S, the run long: a request that briefly takes
        memory shows here even when the broker gives it back before the run ends."""
        pids = {i: b.pid for i, b in self.cluster.brokers.items() if b.pid}
        next_progress = time.monotonic() + PROGRESS_INTERVAL_S
        while True:
            for broker_id, pid in pids.items():
                try:
                    rss = process_stats(pid).rss_kb
                except OSError:
                    continue
                highest = self.report.rss_max_kb.get(broker_id, 0)
                if highest and rss >= highest + RSS_RISE_KB and len(self.report.rss_rises) < MAX_RSS_RISES:
                    self._record_rise(broker_id, rss)
                self.report.rss_max_kb[broker_id] = max(highest, rss)
            self.report.rss_samples += 1
            if self.config.progress and time.monotonic() >= next_progress:
                next_progress += PROGRESS_INTERVAL_S
                print(f"{time.monotonic() - self._started:.0f}s: {self.report.frames} frames, RSS max "
                      + ", ".join(f"{k // 1024} MB" for k in self.report.rss_max_kb.values()), file=sys.stderr, flush=True)
            await asyncio.sleep(RSS_SAMPLE_INTERVAL_S)

    def _record_rise(self, broker_id: int, rss_kb: int) -> None:
        """Which pipelines were in flight when a broker's RSS rose to a new maximum: the frames that may
        have taken it (a pipeline is rebuilt from the seed and its index, so ``--pipelines`` replays it)."""
        in_flight = " || ".join(p.describe()[:400] for p in sorted(self._in_flight.values(), key=lambda p: p.index))
        self.report.rss_rises.append(f"{time.monotonic() - self._started:.0f}s, frame {self.report.frames}: broker "
                                     f"{broker_id} RSS {rss_kb // 1024} MB; pipelines "
                                     f"{','.join(str(i) for i in sorted(self._in_flight))} in flight: {in_flight}")

    async def _probe_forever(self) -> None:
        """Every broker process alive and answering a fresh connection, all run long."""
        while True:
            await asyncio.sleep(PROBE_INTERVAL_S)
            for problem in await asyncio.to_thread(broker_problems, self.cluster):
                self.report.findings.append(problem)


    async def _recreate_forever(self) -> None:
        with Admin(self.cluster.bootstrap) as admin:
            while True:
                await asyncio.sleep(RECREATE_INTERVAL_S)
                self.report.recreated_topics += await asyncio.to_thread(create_fuzz_topics, admin, len(self.addresses))


async def _write_zeros(writer: asyncio.StreamWriter, size: int) -> None:
    while size > 0:
        chunk = min(size, len(_ZEROS))
        writer.write(_ZEROS[:chunk])
        await writer.drain()
        size -= chunk


def create_fuzz_topics(admin: Admin, brokers: int) -> int:
    """Create the fuzz topics that do not exist (at start, and after a fuzzed delete)."""
    created = 0
    existing = set(admin.list_topics())
    for topic, partitions in FUZZ_TOPICS.items():
        if topic not in existing:
            try:
                admin.create_topic(topic, partitions=partitions, replication_factor=min(3, brokers),
                                   config={"segment.bytes": str(1 << 20)} if topic == "fz-c" else None)
                created += 1
            except TopicAlreadyExists:
                pass
    return created


def _running(pid: int) -> bool:
    """The process exists and has not exited (a zombie waits for its parent to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def broker_problems(cluster: LocalCluster) -> list[str]:
    problems = []
    for broker_id, broker in cluster.brokers.items():
        if broker.pid is None or not _running(broker.pid):
            problems.append(f"broker {broker_id} exited; see {broker.log_path}")
        elif not broker_responds(broker.host, broker.port, PROBE_TIMEOUT_S):
            problems.append(f"broker {broker_id} did not answer ApiVersions within {PROBE_TIMEOUT_S:.0f}s")
    return problems


def log_findings(cluster: LocalCluster) -> list[str]:
    """ERROR lines and tracebacks in the broker logs, one finding per distinct message and
    exception (messages cut short: they may quote hostile input)."""
    findings: Counter = Counter()
    for broker in cluster.brokers.values():
        message = ""
        lines = broker.log_path.read_text(errors="replace").splitlines()
        for number, line in enumerate(lines):
            if re.match(r"^\d{4}-\d\d-\d\d ", line):
                message = line[24:160]
                if " ERROR " in line and not (number + 1 < len(lines) and lines[number + 1].startswith("Traceback")):
                    findings[f"broker {broker.broker_id}: {message}"] += 1
            elif line.startswith("Traceback"):
                error = next((ln for ln in lines[number + 1:] if not ln.startswith((" ", "Traceback", "\n"))), "?")
                findings[f"broker {broker.broker_id}: {message} -> {error[:160]}"] += 1
    return [f"{text} (x{count})" for text, count in findings.items()]


# -- the run -------------------------------------------------------------------------------------

def _setup(cluster: LocalCluster) -> FuzzTargets:
    with Admin(cluster.bootstrap) as admin:
        create_fuzz_topics(admin, len(cluster.brokers))
        admin.create_topic(GOOD_TOPIC, partitions=3, replication_factor=min(3, len(cluster.brokers)))
    metadata = MetadataClient(cluster.bootstrap)
    try:
        producer_ids = tuple(metadata.request(ApiKey.INIT_PRODUCER_ID, {}).body["producer_id"] for _ in range(3))
    finally:
        metadata.close()
    return FuzzTargets(FUZZ_TOPICS, FUZZ_GROUPS, tuple(cluster.brokers), producer_ids)


def _settle_sockets(cluster: LocalCluster, report: FuzzReport, timeout_s: float = 60.0) -> None:
    """Wait (bounded) until every broker's connections are back near their number before the run."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        report.after = {i: process_stats(b.pid) for i, b in cluster.brokers.items() if b.pid}
        if all(report.after[i].sockets <= report.before[i].sockets + SOCKET_SLACK for i in report.after):
            return
        time.sleep(1.0)


def run(config: FuzzConfig, data_dir: Path) -> FuzzReport:
    report = FuzzReport()
    with LocalCluster(data_dir, broker_count=config.brokers, broker_config=BROKER_CONFIG) as cluster:
        targets = _setup(cluster)
        dialect = (kafka_dialect if config.protocol == "kafka" else ember_dialect)(cluster, targets, config.seed)
        good = WellBehavedClient(cluster.bootstrap, GOOD_TOPIC, 3, GOOD_GROUP)
        good.start()
        warm_until = time.monotonic() + WARM_UP_S       # connections open, group joined
        while good.rounds < 3 and good.is_alive() and time.monotonic() < warm_until:
            time.sleep(0.1)
        report.before = {i: process_stats(b.pid) for i, b in cluster.brokers.items() if b.pid}
        started = time.monotonic()
        asyncio.run(_Fuzzer(config, cluster, dialect, report).run())
        report.seconds = time.monotonic() - started
        report.findings += broker_problems(cluster)
        good.stop()
        report.good_records, report.good_rounds = good.acknowledged, good.rounds
        report.good_longest_round_s = good.longest_round_s
        report.findings += good.verify()
        _settle_sockets(cluster, report)
        for broker_id, before in report.before.items():
            after = report.after[broker_id]
            if after.rss_kb > RSS_FACTOR * before.rss_kb + RSS_SLACK_KB:
                report.findings.append(f"broker {broker_id} RSS grew from {before.rss_kb} kB to {after.rss_kb} kB")
            if report.rss_max_kb.get(broker_id, 0) > RSS_FACTOR * before.rss_kb + RSS_SLACK_KB:
                report.findings.append(f"broker {broker_id} RSS reached {report.rss_max_kb[broker_id]} kB during the "
                                       f"run ({before.rss_kb} kB before)")
            if after.sockets > before.sockets + SOCKET_SLACK:
                report.findings.append(f"broker {broker_id} holds {after.sockets} connections, "
                                       f"{before.sockets} before the run")
        report.audit = audit_logs(cluster.bootstrap, must_decode=[GOOD_TOPIC])
        report.findings += report.audit.problems
        report.findings += log_findings(cluster)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=FuzzConfig.frames)
    parser.add_argument("--seed", type=int, default=FuzzConfig.seed)
    parser.add_argument("--brokers", type=int, default=FuzzConfig.brokers)
    parser.add_argument("--protocol", choices=("ember", "kafka"), default=FuzzConfig.protocol,
                        help="which listener to fuzz (default: %(default)s)")
    parser.add_argument("--connections", type=int, default=FuzzConfig.connections)
    parser.add_argument("--max-minutes", type=float, default=FuzzConfig.max_seconds / 60)
    parser.add_argument("--max-size-share", type=float, default=FuzzConfig.max_size_share,
                        help="share of connections sending one frame of socket.request.max.bytes (100 MiB)")
    parser.add_argument("--pipelines", default="",
                        help="replay only these pipelines (comma-separated indices, as the 'RSS rises' lines name them)")
    parser.add_argument("--progress", action="store_true", help="print frames and RSS to stderr every minute")
    parser.add_argument("--data", type=Path, help="cluster directory (default: a temporary one)")
    args = parser.parse_args(argv)
    config = FuzzConfig(frames=args.frames, seed=args.seed, brokers=args.brokers, protocol=args.protocol,
                        connections=args.connections, max_size_share=args.max_size_share,
                        max_seconds=args.max_minutes * 60, progress=args.progress,
                        only_pipelines=tuple(int(i) for i in args.pipelines.split(",") if i))
    with tempfile.TemporaryDirectory(prefix="ember-fuzz-") as tmp:
        report = run(config, args.data or Path(tmp))
    print(report.summary())
    return 1 if report.findings else 0


if __name__ == "__main__":
    sys.exit(main())

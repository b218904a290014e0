"""The wire-protocol fuzzer's CI variants: mutated requests to a live 1-broker cluster (real
ZooKeeper, real broker process), on ember's listener and on its Kafka listener. The long run (a million frames, 1 or 3 brokers) is
``tests/fuzz/broker_fuzz.py`` (docs/protocol.md, "Hostile input")."""
from __future__ import annotations

import random
from pathlib import Path

import pytest
from broker_fuzz import FuzzConfig, run
from wire_mutator import FuzzTargets, RequestTemplates, mutate

from ember.wire.api_keys import KAFKA_LISTENER_ONLY, ApiKey

pytestmark = pytest.mark.integration


def test_broker_survives_mutated_requests_and_a_good_client_keeps_working(tmp_path: Path) -> None:
    report = run(FuzzConfig(frames=30_000, seed=11, brokers=1, max_seconds=240), tmp_path)
    print(report.summary())
    assert report.frames == 30_000
    assert not report.findings, report.summary()
    # The run did reach the broker's every corner: answers, refusals, closed connections.
    assert report.error_codes[0] and report.error_codes[42] and report.error_codes[35]
    assert report.fatal_frames and report.answered_pipelines
    assert report.good_records and report.audit is not None and report.audit.batches


def test_kafka_listener_survives_mutated_requests_and_answers_what_clients_can_decode(tmp_path: Path) -> None:
    report = run(FuzzConfig(frames=20_000, seed=4, brokers=1, max_seconds=240, protocol="kafka"), tmp_path)
    print(report.summary())
    assert report.frames == 20_000
    assert not report.findings, report.summary()    # includes every response decoding with its schema
    # Answers, Kafka's refusals (unknown topic, unsupported version, invalid request, invalid record).
    assert report.error_codes[0] and report.error_codes[3] and report.error_codes[35]
    assert report.error_codes[42] and report.error_codes[87]
    assert report.fatal_frames and report.answered_pipelines
    assert report.good_records and report.audit is not None and report.audit.batches


def test_mutations_are_reproducible_from_the_seed() -> None:
    targets = FuzzTargets({"fz-a": 3}, ("fzg-1",), (1,), (1000,))

    def frames(seed: int) -> list[bytes]:
        rng = random.Random(seed)
        templates = RequestTemplates(targets, random.Random(seed))
        return [mutate(templates.random(rng), i, rng, allow_fatal=i % 7 == 0).data for i in range(300)]

    assert frames(5) == frames(5)
    assert frames(5) != frames(6)


def test_every_api_has_a_valid_template() -> None:
    templates = RequestTemplates(FuzzTargets({"fz-a": 3}, ("fzg-1",), (1,), (1000,)), random.Random(1))
    rng = random.Random(2)
    keys = {templates.random(rng).api_key for _ in range(3000)}
    assert keys >= {int(k) for k in ApiKey if k not in KAFKA_LISTENER_ONLY}

"""``ember produce TOPIC``: one record per stdin line, read as kafka-console-producer reads them
(``--property parse.key=true``, ``parse.headers=true`` and their separators), sent by a producer
configured with Kafka's names (``--producer-property``, ``--producer.config``)."""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ember.client import Producer
from ember.client.properties import client_keywords
from ember.commands.topics import (
    TopicCheck,
    add_bootstrap,
    bootstrap_default,
    client_options,
    parse_configs,
)
from ember.errors import InvalidConfig
from ember.record.header import COMPRESSION_TYPES
from ember.security.client import OPTION_NAMES, SecurityOptions
from ember.wire.config_def import read_properties

#: The producer keywords the command's own flags set, and their defaults (acks=all as Kafka's tool).
FLAG_DEFAULTS: dict[str, Any] = {"acks": "all", "linger_ms": 5, "compression_type": "none",
                                 "max_request_size": 1024 * 1024, "max_block_ms": 60000}

Header = tuple[str, bytes | None]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("produce", help="send stdin lines to a topic, one record per line "
                                                   "(kafka-console-producer)")
    parser.add_argument("topic")
    add_bootstrap(parser)
    parser.add_argument("--key-separator", metavar="SEP",
                        help="split each line at the first SEP into key and value, as --property parse.key=true "
                             "--property key.separator=SEP, except that lines without SEP are sent without a key")
    parser.add_argument("--property", action="append", default=[], metavar="NAME=VALUE",
                        help="how lines are read, kafka-console-producer's properties (repeatable): "
                             "parse.key=true splits KEY<key.separator>VALUE (default separator: tab); "
                             "parse.headers=true reads H1:V1,H2:V2<headers.delimiter> before them (headers.delimiter "
                             "default tab, headers.separator default ',', headers.key.separator default ':'); "
                             "null.marker=S sends S as a null key, value or header value; ignore.error=true "
                             "sends a line lacking a separator as it is instead of stopping")
    parser.add_argument("--producer-property", action="append", default=[], metavar="NAME=VALUE",
                        help="a producer config by its Kafka name, e.g. enable.idempotence=false or batch.size=65536 "
                             "(repeatable; wins over --producer.config; the flags below win over both)")
    parser.add_argument("--producer.config", dest="producer_config", metavar="FILE",
                        help="producer configs and security settings (Kafka's names) from a properties file, "
                             "e.g. conf/client.properties; its bootstrap.servers is used unless --bootstrap or "
                             "$EMBER_BOOTSTRAP is given")
    parser.add_argument("--acks", "--request-required-acks", dest="acks", choices=["0", "1", "all", "-1"],
                        help="acks (default: all)")
    parser.add_argument("--partition", type=int, help="send every record to this partition")
    parser.add_argument("--max-request-size", type=int, metavar="BYTES",
                        help="largest request (so largest record) the producer sends (max.request.size; default: "
                             "1048576); the topic's max.message.bytes must allow larger records too")
    parser.add_argument("--linger-ms", type=float, metavar="MS", help="linger.ms (default: 5)")
    parser.add_argument("--compression", "--compression-codec", dest="compression", choices=sorted(COMPRESSION_TYPES),
                        help="compression.type (default: none); gzip and snappy reach Kafka consumers as sent")
    parser.add_argument("--wait-for-topic", action="store_true",
                        help="if the topic does not exist, wait up to --max-block-ms for it to be created "
                             "(default: fail at once, naming the command that creates it)")
    parser.add_argument("--max-block-ms", type=int, metavar="MS",
                        help="longest a send waits for topic metadata or buffer space (default: 60000)")
    parser.set_defaults(func=produce)


def produce(args: argparse.Namespace) -> int:
    line_format = LineFormat.from_args(args)
    options = producer_options(args)
    security = SecurityOptions(**{k: v for k, v in options.items() if k in OPTION_NAMES})   # type: ignore[typeddict-item]
    max_block_ms = options["max_block_ms"]
    failures: list[BaseException] = []
    count = 0
    with TopicCheck(args, security=security) as check:   # fails at once when no broker answers
        if args.wait_for_topic:
            if check.topic(args.topic) is None:
                print(f"topic {args.topic!r} does not exist yet: waiting up to {max_block_ms} ms for it to be "
                      f"created (--wait-for-topic, --max-block-ms)", file=sys.stderr, flush=True)
        elif (info := check.topic(args.topic)) is None:
            raise check.missing(args.topic, "--wait-for-topic")
        elif args.partition is not None and args.partition >= len(info.partitions):
            raise SystemExit(f"error: topic {args.topic!r} has {len(info.partitions)} partitions (0 to "
                             f"{len(info.partitions) - 1}), so there is no partition {args.partition}; add "
                             f"partitions with `ember topics alter {args.topic} --partitions {args.partition + 1}"
                             f"{check._bootstrap_option()}`, or send to one that exists")
    bad_line: LineError | None = None
    with Producer(args.bootstrap, **options) as producer:
        for number, raw in enumerate(sys.stdin.buffer, 1):
            try:
                key, value, headers = line_format.parse(raw.rstrip(b"\r\n"), number)
            except LineError as exc:
                bad_line = exc
                break
            producer.send(args.topic, value, key=key, headers=headers,
                          partition=args.partition).add_errback(failures.append)
            count += 1
        producer.flush()
    if failures:
        print(f"{count - len(failures)} of {count} records sent to {args.topic}; first error: "
              f"{type(failures[0]).__name__}: {failures[0]}", file=sys.stderr)
        return 1
    print(f"{count} record{'' if count == 1 else 's'} sent to {args.topic}", file=sys.stderr)
    if bad_line is not None:
        print(f"error: {bad_line}; stopped there", file=sys.stderr)
        return 1
    return 0


def producer_options(args: argparse.Namespace) -> dict[str, Any]:
    """The producer's keywords: the flags' defaults, then ``--command-config``'s security settings,
    ``--producer.config``, ``--producer-property`` and the flags given, each winning over the ones
    before (as kafka-console-producer merges them). Sets ``args.bootstrap`` from the file's
    ``bootstrap.servers`` when neither ``--bootstrap`` nor $EMBER_BOOTSTRAP gives the brokers."""
    options: dict[str, Any] = {**FLAG_DEFAULTS, **client_options(args)}
    if args.producer_config:
        path = Path(args.producer_config)
        if not path.is_file():
            raise InvalidConfig(f"--producer.config {path}: no such file")
        options.update(client_keywords(read_properties(path), Producer, f"--producer.config {path}"),
                       settings_from="the --producer.config file (or --command-config)")
    options.update(client_keywords(parse_configs(args.producer_property, "--producer-property"), Producer,
                                   "--producer-property"))
    flags = {"acks": args.acks, "linger_ms": args.linger_ms, "compression_type": args.compression,
             "max_request_size": args.max_request_size, "max_block_ms": args.max_block_ms}
    options.update({name: value for name, value in flags.items() if value is not None})
    bootstrap = options.pop("bootstrap_servers", None)
    if bootstrap is not None and args.bootstrap == bootstrap_default() and not os.environ.get("EMBER_BOOTSTRAP"):
        args.bootstrap = bootstrap
    if options["acks"] in ("0", "1", "-1"):
        options["acks"] = int(options["acks"])
    return options


class LineError(ValueError):
    """A line that does not have the format the ``--property`` settings describe."""


@dataclass(frozen=True)
class LineFormat:
    """kafka-console-producer's line format (the properties of its LineMessageReader)."""
    parse_key: bool = False
    key_separator: bytes = b"\t"
    parse_headers: bool = False
    headers_delimiter: bytes = b"\t"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    null_marker: bytes | None = None
    ignore_error: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "LineFormat":
        """From ``--key-separator`` and the ``--property`` settings (which win); unknown names fail."""
        given: dict[str, Any] = {}
        if args.key_separator is not None:
            given.update(parse_key=True, key_separator=args.key_separator.encode(), ignore_error=True)
        for name, value in parse_configs(args.property, "--property", strip=False).items():
            field = name.lower().replace(".", "_")
            if field not in cls.__dataclass_fields__:
                raise InvalidConfig(f"--property {name}: unknown; supported: "
                                    f"{', '.join(f.replace('_', '.') for f in cls.__dataclass_fields__)}")
            if field in ("parse_key", "parse_headers", "ignore_error"):
                if value.lower() not in ("true", "false"):
                    raise InvalidConfig(f"--property {name}={value}: expected true or false")
                given[field] = value.lower() == "true"
            elif not value and field != "null_marker":
                raise InvalidConfig(f"--property {name} is empty: give the separator")
            else:
                given[field] = value.encode() if value else None
        line_format = cls(**given)
        if line_format.parse_headers and len({line_format.headers_delimiter, line_format.headers_separator,
                                               line_format.headers_key_separator}) < 3:
            raise InvalidConfig("--property headers.delimiter, headers.separator and headers.key.separator must "
                                "differ from each other")
        return line_format

    def parse(self, line: bytes, number: int) -> tuple[bytes | None, bytes | None, list[Header] | None]:
        """(key, value, headers) of one line; LineError when a separator is missing (unless ignore.error)."""
        headers_text = self._cut(self.parse_headers, line, 0, self.headers_delimiter, "headers.delimiter", number)
        start = 0 if headers_text is None else len(headers_text) + len(self.headers_delimiter)
        key = self._cut(self.parse_key, line, start, self.key_separator, "key.separator", number)
        value = line[start if key is None else start + len(key) + len(self.key_separator):]
        headers = None if headers_text is None or headers_text == self.null_marker else \
            self._headers(headers_text, number)
        return self._nullable(key), self._nullable(value), headers

    def _cut(self, enabled: bool, line: bytes, start: int, separator: bytes, name: str, number: int) -> bytes | None:
        """The text from ``start`` to ``separator``; None when not enabled, or missing with ignore.error."""
        if not enabled:
            return None
        end = line.find(separator, start)
        if end < 0:
            if self.ignore_error:
                return None
            raise LineError(f"line {number} has no {name} {separator.decode(errors='replace')!r}: "
                            f"{line[:80].decode(errors='replace')!r} (set --property {name}=..., or --property "
                            f"ignore.error=true to send such lines as they are)")
        return line[start:end]

    def _headers(self, text: bytes, number: int) -> list[Header]:
        pairs = text.split(self.headers_separator)
        while pairs and not pairs[-1]:   # as Java's String.split: trailing empty pairs dropped
            pairs.pop()
        headers: list[Header] = []
        for pair in pairs:
            key, sep, value = pair.partition(self.headers_key_separator)
            if not sep and not self.ignore_error:
                raise LineError(f"line {number}: header {pair.decode(errors='replace')!r} has no "
                                f"headers.key.separator {self.headers_key_separator.decode(errors='replace')!r}")
            if key == self.null_marker:
                raise LineError(f"line {number}: a header key cannot be the null.marker (header keys are never null)")
            headers.append((key.decode(errors="replace"), self._nullable(value) if sep else None))
        return headers

    def _nullable(self, text: bytes | None) -> bytes | None:
        return None if text is None or text == self.null_marker else text

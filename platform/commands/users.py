"""``ember users add|list|remove``: SCRAM users, through any broker (Kafka's
AlterUserScramCredentials, so only a salted password leaves this machine).

The password comes from ``--password-file``, else ``$EMBER_USER_PASSWORD``, else a prompt, never
from the command line (where ``ps`` and shell histories would keep it).
"""
from __future__ import annotations

import argparse
import getpass
import os
import sys
from pathlib import Path

from ember.client import Admin
from ember.commands.topics import add_bootstrap, client_options
from ember.errors import InvalidConfig
from ember.security.sasl.scram import DEFAULT_ITERATIONS, SCRAM_MECHANISMS

PASSWORD_ENV = "EMBER_USER_PASSWORD"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("users", help="add, list and remove SCRAM users (SASL)")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    add = actions.add_parser("add", help="create a user or change its password")
    add.add_argument("user")
    add.add_argument("--password-file", metavar="FILE",
                     help=f"read the password from FILE (first line); default: ${PASSWORD_ENV}, else a prompt")
    add.add_argument("--mechanism", action="append", choices=SCRAM_MECHANISMS,
                     help="SCRAM mechanism to create the credential for (repeatable; default: both)")
    add.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS,
                     help=f"PBKDF2 iterations, 4096-16384 (default {DEFAULT_ITERATIONS})")
    add.set_defaults(func=add_user)

    listing = actions.add_parser("list", help="users and their SCRAM mechanisms")
    listing.set_defaults(func=list_users)

    remove = actions.add_parser("remove", help="remove a user's credentials (it can no longer authenticate)")
    remove.add_argument("user")
    remove.add_argument("--mechanism", action="append", choices=SCRAM_MECHANISMS,
                        help="remove only this mechanism's credential (repeatable; default: all)")
    remove.set_defaults(func=remove_user)

    for action in (add, listing, remove):
        add_bootstrap(action)


def _password(args: argparse.Namespace) -> str:
    if args.password_file:
        path = Path(args.password_file)
        if not path.is_file():
            raise InvalidConfig(f"--password-file {path}: no such file")
        lines = path.read_text().splitlines()
        password = lines[0] if lines else ""
    elif os.environ.get(PASSWORD_ENV):
        password = os.environ[PASSWORD_ENV]
    elif sys.stdin.isatty():
        password = getpass.getpass(f"password for {args.user}: ")
        if getpass.getpass("again: ") != password:
            raise InvalidConfig("the passwords do not match")
    else:
        password = sys.stdin.readline().rstrip("\n")
    if not password:
        raise InvalidConfig(f"empty password for {args.user}: give --password-file, ${PASSWORD_ENV} or type one")
    return password


def add_user(args: argparse.Namespace) -> int:
    password = _password(args)
    with Admin(args.bootstrap, **client_options(args)) as admin:
        admin.set_user_password(args.user, password, args.mechanism or SCRAM_MECHANISMS, args.iterations)
    print(f"user {args.user}: {', '.join(args.mechanism or SCRAM_MECHANISMS)} set ({args.iterations} iterations)")
    return 0


def list_users(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap, **client_options(args)) as admin:
        users = admin.describe_users()
    for user, mechanisms in sorted(users.items()):
        print(f"{user}\t" + ", ".join(f"{m} (iterations={i})" for m, i in sorted(mechanisms.items())))
    return 0


def remove_user(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap, **client_options(args)) as admin:
        admin.delete_user(args.user, args.mechanism)
    print(f"user {args.user}: {', '.join(args.mechanism) if args.mechanism else 'all credentials'} removed")
    return 0

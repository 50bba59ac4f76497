"""Where the team store is and where its password comes from (no server needed)."""

from pathlib import Path

import pytest

from overbrainer.cli.main import main
from overbrainer.events.errors import StoreError
from overbrainer.events.pg import (
    diagnose,
    eventsourcing_env,
    parse_url,
    read_passfile,
    sources,
)
from overbrainer.events.store import describe_store

CANARY = "pw-canary-7f3a9e"


def _passfile(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "pgpass"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_passfile_follows_libpq_rules(tmp_path: Path) -> None:
    path = _passfile(
        tmp_path,
        "# team database\n"
        "\n"
        "db.example:5432:other:alice:wrong-db\n"
        "db.example:5432:team:alice:first\\:with\\\\colon\n"
        "db.example:5432:team:alice:second\n"
        "*:*:*:bob:bob-anywhere\n",
    )
    assert read_passfile(path, "db.example", 5432, "team", "alice") == "first:with\\colon"
    assert read_passfile(path, "elsewhere", 6000, "x", "bob") == "bob-anywhere"
    assert read_passfile(path, "db.example", 5433, "team", "alice") is None


def test_passfile_readable_by_others_is_ignored_like_libpq(tmp_path: Path) -> None:
    path = _passfile(tmp_path, f"*:*:*:*:{CANARY}\n", mode=0o644)
    assert read_passfile(path, "h", 5432, "d", "u") is None
    target = parse_url("postgresql://u@h/d", {"PGPASSFILE": str(path)})
    message = diagnose(target, "fe_sendauth: no password supplied")
    assert "chmod 600" in message and str(path) in message
    assert CANARY not in message


def test_password_precedence_url_then_pgpassword_then_service_then_passfile(
    tmp_path: Path,
) -> None:
    passfile = _passfile(tmp_path, "*:*:*:*:from-passfile\n")
    service = tmp_path / "services.conf"
    service.write_text(
        "[team]\nhost=svc.example\nport=6543\ndbname=svcdb\nuser=svcuser\n"
        "password=from-service\nsslmode=require\n"
    )
    env = {"PGPASSFILE": str(passfile), "PGSERVICEFILE": str(service)}

    plain = parse_url("postgresql://alice@db.example/team", env)
    assert (plain.password, plain.current_password()) == (None, "from-passfile")
    assert (
        parse_url(
            "postgresql://alice@db.example/team", {**env, "PGPASSWORD": "from-env"}
        ).current_password()
        == "from-env"
    )
    in_url = parse_url("postgresql://alice:from%20url@db.example/team", {**env, "PGPASSWORD": "x"})
    assert in_url.current_password() == "from url"

    via_service = parse_url("postgresql:///?service=team", env)
    assert via_service.where == "svc.example:6543/svcdb"
    assert via_service.user == "svcuser"
    assert via_service.current_password() == "from-service"
    assert dict(via_service.options) == {"sslmode": "require"}
    # The URL's own parts win over the service's.
    assert parse_url("postgresql://bob@other/db2?service=team", env).where == "other:6543/db2"


def test_defaults_come_from_libpq_environment() -> None:
    target = parse_url(
        "postgresql:///team", {"PGHOST": "pg.internal", "PGPORT": "6000", "PGUSER": "carol"}
    )
    assert (target.host, target.port, target.dbname, target.user) == (
        "pg.internal",
        6000,
        "team",
        "carol",
    )


def test_bad_urls_and_unknown_services_say_what_to_fix(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match=r"unknown parameter.*frobnicate"):
        parse_url("postgresql://h/d?frobnicate=1", {})
    with pytest.raises(StoreError, match="not a valid"):
        parse_url("postgresql://h:notaport/d", {})
    with pytest.raises(StoreError, match="no PostgreSQL service 'nope'"):
        parse_url("postgresql://h/d?service=nope", {"PGSERVICEFILE": str(tmp_path / "none")})


def test_eventsourcing_settings_hold_no_password() -> None:
    target = parse_url(f"postgresql://alice:{CANARY}@db.example:5439/team", {})
    env = eventsourcing_env(target)
    assert CANARY not in repr(env) and CANARY not in repr(target)
    assert "POSTGRES_PASSWORD" not in env
    assert env["POSTGRES_CONNECT_TIMEOUT"] == "5"
    # The topic resolves to a function that gives the password at connect time.
    from eventsourcing.utils import resolve_topic

    source = resolve_topic(env["POSTGRES_GET_PASSWORD_TOPIC"])
    assert source() == CANARY
    assert source is getattr(sources, env["POSTGRES_GET_PASSWORD_TOPIC"].rpartition(".")[2])
    assert describe_store(f"postgresql://alice:{CANARY}@db.example:5439/team") == (
        "PostgreSQL at db.example:5439/team"
    )


def test_diagnosis_scrubs_the_password_and_names_the_fix() -> None:
    target = parse_url(f"postgresql://alice:{CANARY}@db.example:5439/team", {})
    raw = f'connection failed: password authentication failed for user "alice" ({CANARY})'
    message = diagnose(target, raw)
    assert CANARY not in message
    assert "db.example:5439/team" in message and "OVERBRAINER_STORE__URL" in message
    refused = diagnose(
        target, 'connection to server at "db.example", port 5439 failed: Connection refused'
    )
    assert "refused the connection" in refused and "pg_isready -h db.example -p 5439" in refused
    dropped = diagnose(target, "consuming input failed: server closed the connection unexpectedly")
    assert "closed the connection (did the server stop or restart?)" in dropped
    missing = diagnose(target, 'FATAL: database "team" does not exist')
    assert "createdb -h db.example -p 5439 -U alice team" in missing


def test_a_password_in_the_toml_url_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "overbrainer.toml").write_text(
        f'[store]\nurl = "postgresql://alice:{CANARY}@db.example/team"\n'
    )
    assert main(["-C", str(tmp_path), "runs", "ls"]) == 1
    err = capsys.readouterr().err
    assert "may not hold" in err and "~/.pgpass" in err
    assert CANARY not in err


def test_migrate_refuses_a_password_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "-C",
            str(tmp_path),
            "store",
            "migrate",
            "--to",
            f"postgresql://alice:{CANARY}@db.example/team",
        ]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "PGPASSWORD" in err and CANARY not in err

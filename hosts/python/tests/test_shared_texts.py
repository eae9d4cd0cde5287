"""The store texts the package ships (`turnstile_scheduler/shared/store/`, copied by setup.py)
are the repository's `shared/store/` files byte for byte, the one source the JS package ships
too; the shared stores read them."""

from __future__ import annotations

from pathlib import Path

from turnstile_scheduler.shared._texts import STATEMENT_NAMES, redis_script, sqlite_texts, store_text

SOURCE = Path(__file__).resolve().parents[3] / "shared" / "store"


def test_the_shipped_store_texts_are_the_repositorys_byte_for_byte() -> None:
    names = sorted(p.name for p in SOURCE.iterdir())
    assert names == ["postgres.sql", "redis.lua", "sqlite-statements.json", "sqlite.sql"]
    for name in names:
        assert store_text(name) == (SOURCE / name).read_bytes(), f"the installed {name} differs from shared/store/{name}: reinstall (cargo xtask py)"


def test_the_schema_its_version_every_statement_the_redis_script_and_the_postgres_schema() -> None:
    version, sql = sqlite_texts()
    assert version == 3
    assert "VALUES ('schema', '3')" in sql["schema"]
    assert tuple(sql) == ("schema", *STATEMENT_NAMES)
    assert all("turnstile_shared_" in text for text in sql.values())
    assert redis_script().startswith("-- Turnstile shared keys, script 1")
    postgres = store_text("postgres.sql").decode()
    assert postgres.startswith("-- Turnstile shared keys on Postgres, schema 1")
    assert "VALUES ('schema', '1')" in postgres

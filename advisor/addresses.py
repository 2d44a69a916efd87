"""The addresses a config names, checked before anything heavy is imported: the tracking store
(`tracking.uri`) and the study's storage (`search.storage`). A bad one is one line in a moment,
not after MLflow's and Optuna's imports (2-3 s), and before anything is measured or written."""

from __future__ import annotations

import os
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Optional

from advisor.config import AdvisorConfig
from advisor.errors import UserError
from advisor.secrets import shown

TRACKING_SCHEMES = ("http", "https", "sqlite", "postgresql", "mysql", "mssql", "file", "databricks")
POSTGRES_DRIVERS = (("psycopg", "postgresql+psycopg"), ("psycopg2", "postgresql+psycopg2"), ("pg8000", "postgresql+pg8000"))


SERVED_SCHEMES = ("http", "https", "databricks")  # a tracking server: its own artifact root, requests hold no lock


def store_scheme(uri: str) -> str:
    """A store URI's kind, its driver left out: 'postgresql' for postgresql+psycopg://..."""
    return urllib.parse.urlparse(uri).scheme.split("+")[0]


def tracking_uri(config: AdvisorConfig) -> str:
    """The config's URI, else MLflow's own environment variable, else sqlite next to the config."""
    return config.tracking.uri or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(config.root / 'mlflow.db').resolve()}"


def health_request(uri: str) -> urllib.request.Request:
    """A tracking server's /health, its login (user:password@ in the URI) sent as basic auth:
    urllib takes a URL's login for a part of the host name."""
    import base64

    parsed = urllib.parse.urlparse(uri)
    bare = parsed._replace(netloc=parsed.hostname + (f":{parsed.port}" if parsed.port else ""))
    request = urllib.request.Request(f"{bare.geturl().rstrip('/')}/health")
    if parsed.username is not None:
        login = f"{urllib.parse.unquote(parsed.username)}:{urllib.parse.unquote(parsed.password or '')}"
        request.add_header("Authorization", "Basic " + base64.b64encode(login.encode()).decode())
    return request


def check_tracking(config: AdvisorConfig) -> None:
    """One line, before anything is measured or written, when the tracking URI cannot work."""
    uri = tracking_uri(config)
    parsed, scheme = urllib.parse.urlparse(uri), store_scheme(uri)
    store = local_sqlite_path(uri)  # the file sqlite opens (a relative path: from the working folder)
    hint = "use http://host:port for a tracking server, or leave tracking.uri unset for a sqlite store next to the config"
    if scheme not in TRACKING_SCHEMES:
        raise UserError(f"tracking.uri: {uri!r} is not a tracking URI; {hint}")
    if scheme in ("http", "https"):
        try:
            urllib.request.urlopen(health_request(uri), timeout=10).read()
        except Exception as exc:  # refused, unknown host, timeout, an HTTP error
            raise UserError(f"tracking.uri: no MLflow tracking server answers at {uri} ({type(exc).__name__}: "
                            f"{shown(str(exc))[:200]}); start it (mlflow server), or {hint.split(', or ')[1]}") from None
    elif store is not None and not store.parent.is_dir():
        raise UserError(f"tracking.uri: the folder of {uri} does not exist ({store.parent}); create it, or "
                        f"{hint.split(', or ')[1]}")
    elif store is not None:
        check_sqlite_file(store)
    elif scheme == "file" and not (Path(parsed.path).is_dir() or Path(parsed.path).parent.is_dir()):
        raise UserError(f"tracking.uri: neither {parsed.path} nor its folder exists; create it, or "
                        f"{hint.split(', or ')[1]}")
    elif scheme in ("postgresql", "mysql", "mssql"):
        from sqlalchemy.engine import make_url

        try:
            make_url(uri).get_dialect().import_dbapi()
        except Exception as exc:
            raise UserError(f"tracking.uri: cannot use {uri!r} ({type(exc).__name__}: {exc}); install its driver, "
                            f"or {hint}") from None


def check_sqlite_file(path: Path) -> None:
    """`path` can be a sqlite store: absent or empty (sqlite makes it), or a database."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(16)
    except FileNotFoundError:
        return
    except OSError:
        head = None
    if head not in (b"", b"SQLite format 3\x00"):
        raise UserError(f"tracking.uri: {path} is not a SQLite database (or cannot be read); move it away, or point "
                        "tracking.uri elsewhere")


def local_sqlite_path(uri: str) -> Optional[Path]:
    """The file a local sqlite store URI opens; None for any other store."""
    parsed = urllib.parse.urlparse(uri)
    if store_scheme(uri) != "sqlite" or not parsed.path or parsed.path == "/:memory:":
        return None
    return Path(parsed.path[1:]).absolute()  # what sqlite opens: sqlite:///relative, sqlite:////absolute


def unwritable_store(config: AdvisorConfig) -> str:
    """Why a local sqlite store cannot take this session's runs (a read-only file, folder or
    file system), in words; "" where it can, or the store is not a local file. A write is tried
    and rolled back: permissions alone say nothing to root, nor of a read-only mount."""
    import sqlite3
    import tempfile

    path = local_sqlite_path(tracking_uri(config))
    if path is None:
        return ""
    try:
        if not path.exists():
            tempfile.TemporaryFile(dir=path.parent).close()  # sqlite must create the file there
            return ""
        connection = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=30)
        try:
            connection.execute("BEGIN IMMEDIATE")
            connection.execute("CREATE TABLE advisor_write_probe (x)")  # the folder takes the journal file
            connection.execute("ROLLBACK")
        finally:
            connection.close()
    except (OSError, sqlite3.Error) as exc:
        return f"{path} cannot be written ({shown(str(exc))[:120]})"
    return ""


def check_store_exists(config: AdvisorConfig) -> None:
    """Reading a local sqlite store that is not there would create an empty one: say so instead."""
    path = local_sqlite_path(tracking_uri(config))
    if path is not None:
        if not path.exists():
            raise UserError(f"no MLflow store at {path} yet; run advisor optimize first")
        check_sqlite_file(path)


def check_storage(config: AdvisorConfig) -> None:
    """One line, before anything is measured or written, when the study's storage cannot work."""
    url = config.search.storage
    if not url:
        return
    url = with_driver(url)
    hint = ("use postgresql://user:password@host/db (its driver installed), sqlite:///path/to/study.db, a journal "
            "file path, or leave search.storage unset for a journal file next to the config")
    if "://" not in url:
        if not Path(url).parent.is_dir():
            raise UserError(f"search.storage: the folder of the journal file {url} does not exist; create it, or {hint}")
        return
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    try:
        make_url(url).get_dialect().import_dbapi()
    except Exception as exc:
        raise UserError(f"search.storage: cannot use {url!r} ({type(exc).__name__}: {exc}); {hint}") from None
    engine = create_engine(url, connect_args={"connect_timeout": 10} if url.startswith("postgresql") else {})
    try:
        engine.connect().close()
    except Exception as exc:  # the driver's own error, first line: refused, unknown host, bad password
        first = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise UserError(f"search.storage: cannot connect to {url!r} ({first}); start the database or fix the URL") from None
    finally:
        engine.dispose()


def with_driver(url: str) -> str:
    """A plain postgresql:// URL with the PostgreSQL driver that is installed (SQLAlchemy's
    default may not be); any other URL as it is."""
    if not url.startswith("postgresql://"):
        return url
    import importlib.util

    for module, scheme in POSTGRES_DRIVERS:
        if importlib.util.find_spec(module) is not None:
            return scheme + url[len("postgresql"):]
    return url  # check_storage names the missing driver

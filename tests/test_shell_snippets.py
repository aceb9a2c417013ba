"""Every shell and TOML snippet of the README and of docs/ runs as written, or says on its page why
not and what runs it instead, so a snippet cannot drift from the code.

A comment line right before a ``sh`` fence says how it is tested (clauses separated by ``;``):

- ``run`` -- run with bash (``set -euo pipefail``), ``.venv/bin`` first on PATH, no ``RTROUTE_*``
  variable inherited, in a scratch directory holding links to the checkout's ``examples``,
  ``scripts`` and ``.venv``. Options: ``copy`` (in a copy of the checkout's files instead: for
  scripts that build there), ``sidecar=NAME`` (a sidecar serves NAME meanwhile), ``http=PORT``
  (its ops endpoint), ``token`` (that endpoint wants a token, given to the snippet as ``$TOKEN``
  and ``RTROUTE_HTTP_TOKEN``), ``user=NAME:PASSWORD`` (that user exists on the broker,
  permissions on ``/`` and the ``monitoring`` tag), ``queue=NAME``, ``file=NAME`` (exist before),
  ``serve=PORT`` (the snippet's last command is a server: it must answer on PORT, then it gets
  SIGTERM and must log its ``stopped`` line). A snippet naming ``127.0.0.1:567X`` runs on the
  test leg whose broker that is; one with a broker option and no port, on 127.0.0.1:5672.
- ``covered-by PATH...[: LINE]`` -- the test or script PATH runs the snippet (or only its lines
  starting with LINE, the rest being run): each PATH exists and names each command of it.
- ``excerpt REASON`` -- a form or a fragment, not run.

Whatever the clause, every ``rtroute ...`` command of a snippet is parsed by the CLI itself (its
commands, options and values), so a renamed option fails here even in an excerpt. Every ``toml``
fence is a configuration ``rtroute config check`` accepts.
"""
from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import click
import pika
import pytest

from rtroute.cli import main

from .conftest import BROKER_URI, DEFAULT_URI, MANAGEMENT_URI, management_client, wait_for
from .processes import RtrouteProcess, port_open, stop_group
from .sidecar.conftest import delete_layouts

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"(?:<!-- snippet-test: (?P<need>[^>]*?) -->\n)?```(?P<lang>sh|toml)\n"
                    r"(?P<code>.*?)```", re.DOTALL)
_PORT = re.compile(r"127\.0\.0\.1:(567[0-9])\b")
_BROKER_OPTIONS = ("sidecar", "user", "queue", "serve")


class Snippet:
    """One fence: where it is, its code, and its test clauses."""

    def __init__(self, page: Path, line: int, lang: str, code: str, need: str) -> None:
        self.where = f"{page.relative_to(ROOT)}:{line}"
        self.lang, self.code = lang, code
        self.clauses = [c.strip() for c in need.split(";") if c.strip()]

    def clause(self, kind: str) -> str | None:
        return next((c[len(kind):].lstrip(":").strip() for c in self.clauses
                     if c == kind or c.startswith((kind + " ", kind + ":"))), None)

    def options(self) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for word in (self.clause("run") or "").split():
            key, _, value = word.partition("=")
            found.setdefault(key, []).append(value)
        return found

    def broker_port(self) -> str | None:
        """The AMQP port of the broker the snippet runs against, or None if it needs none."""
        named = _PORT.search(self.code)
        if named:
            return named.group(1)
        needs = self.clause("run") is not None and any(k in self.options()
                                                        for k in _BROKER_OPTIONS)
        return "5672" if needs else None

    def commands(self) -> list[list[str]]:
        """Each command line as words: continuations joined, comments dropped."""
        text = re.sub(r"\\\n", " ", self.code)
        found = []
        for line in text.splitlines():
            with contextlib.suppress(ValueError):
                words = shlex.split(line, comments=True)
                if words:
                    found.append(words)
        return found


def _snippets() -> list[Snippet]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in _FENCE.finditer(text):
            line = text.count("\n", 0, match.start("code"))
            found.append(Snippet(page, line, match["lang"], match["code"], match["need"] or ""))
    return found


SNIPPETS = _snippets()
SHELL = [s for s in SNIPPETS if s.lang == "sh"]


def _params(snippets: list[Snippet]) -> list:
    return [pytest.param(s, id=s.where, marks=[pytest.mark.broker] if s.broker_port() else [])
            for s in snippets]


# -- every snippet: classified, and its rtroute commands parse -----------------------------------

def test_every_shell_snippet_says_how_it_is_tested():
    unmarked = [s.where for s in SHELL
                if not any(s.clause(k) is not None for k in ("run", "covered-by", "excerpt"))]
    assert len(SHELL) >= 20
    assert not unmarked, f"add <!-- snippet-test: run|covered-by|excerpt ... --> before {unmarked}"


def _rtroute_calls(snippet: Snippet) -> list[list[str]]:
    """The arguments of each ``rtroute`` call (``[--x]`` forms unbracketed)."""
    calls = []
    for words in snippet.commands():
        for i, word in enumerate(words):
            if word == "rtroute" or word.endswith("/rtroute"):
                args = []
                for arg in words[i + 1:]:
                    if arg in ("|", "&&", ";", "||"):
                        break
                    bare = arg.removeprefix("[")
                    bare = bare.removesuffix("]") if "[" not in bare else bare
                    if bare or not arg:
                        args.append(bare)
                calls.append(args)
                break
    return calls


def _all_commands(command: click.Command) -> Iterator[click.Command]:
    yield command
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            yield from _all_commands(sub)


@contextlib.contextmanager
def _no_file_checks() -> Iterator[None]:
    """The CLI's parameters without their file checks (an excerpt names files of the reader's)."""
    saved = []
    for command in _all_commands(main):
        for param in command.params:
            saved.append((param, param.type, param.callback))
            param.callback = None
            if isinstance(param.type, click.File):
                param.type = click.STRING
            elif isinstance(param.type, click.Path):
                param.type = click.Path(dir_okay=param.type.dir_okay,
                                        file_okay=param.type.file_okay)
    try:
        yield
    finally:
        for param, kind, callback in saved:
            param.type, param.callback = kind, callback


def parse_rtroute(args: list[str]) -> list[str]:
    """Parses ``rtroute ARGS`` as the CLI would and returns the command path; raises its error."""
    command: click.Command = main
    parent, name, path = None, "rtroute", []
    with _no_file_checks():
        while True:
            ctx = command.make_context(name, list(args), parent=parent)
            if not isinstance(command, click.Group):
                return path
            rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
            if not rest:
                return path
            name, sub, args = command.resolve_command(ctx, rest)
            command, parent = sub, ctx
            path.append(name)


@pytest.mark.parametrize("snippet", [pytest.param(s, id=s.where) for s in SHELL
                                     if _rtroute_calls(s)])
def test_every_rtroute_command_of_a_snippet_parses(snippet):
    for args in _rtroute_calls(snippet):
        try:
            parse_rtroute(args)
        except click.ClickException as error:
            pytest.fail(f"{snippet.where}: rtroute {shlex.join(args)}: {error.format_message()}")


def test_the_parser_check_catches_a_renamed_option_and_command():
    with pytest.raises(click.NoSuchOption):
        parse_rtroute(["divert", "add", "x", "--address", "a", "--forwarding-adress", "b"])
    with pytest.raises(click.UsageError, match="No such command"):
        parse_rtroute(["divrt", "list"])
    assert parse_rtroute(["shovel", "run", "--erlang-config", "missing.config"]) == [
        "shovel", "run"]


# -- covered-by: what runs it instead ------------------------------------------------------------

@pytest.mark.parametrize("snippet", [pytest.param(s, id=s.where) for s in SHELL
                                     if s.clause("covered-by")])
def test_a_covered_snippet_names_what_runs_it(snippet):
    paths, _, only = snippet.clause("covered-by").partition(":")
    texts = []
    for path in paths.split():
        assert (ROOT / path).is_file(), f"{snippet.where}: covered-by {path}: no such file"
        texts.append((ROOT / path).read_text())
    calls = [parse_rtroute(args) for args in _rtroute_calls(snippet)]
    scripts = [Path(w).name for words in snippet.commands() for w in words
               if w.endswith(".sh") and (not only or " ".join(words).startswith(only.strip()))]
    for name in [c[-1] for c in calls if c] + scripts:
        assert any(re.search(rf"\b{re.escape(name)}\b", t) for t in texts), \
            f"{snippet.where}: none of {paths.split()} runs {name!r}"


# -- run: as written --------------------------------------------------------------------------------

def _leg_port() -> str:
    return str(pika.URLParameters(BROKER_URI).port)


def _environment(bin_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RTROUTE_")}
    env["PATH"] = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), env["PATH"]])
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _workdir(tmp_path: Path, copy: bool) -> Path:
    work = tmp_path / "work"
    if copy:
        files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                               check=True, capture_output=True, text=True).stdout.split("\n")
        for name in filter(None, files):
            if (ROOT / name).is_file():
                (work / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, work / name)
        return work
    work.mkdir()
    for name in ("examples", "scripts", ".venv"):
        (work / name).symlink_to(ROOT / name)
    return work


def _bin_dir(tmp_path: Path) -> Path:
    """A directory first on PATH: ``sudo`` for root where none is installed (CI runs as root)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if shutil.which("sudo") is None and os.geteuid() == 0:
        (bin_dir / "sudo").write_text('#!/bin/sh\nexec "$@"\n')
        (bin_dir / "sudo").chmod(0o755)
    return bin_dir


@contextlib.contextmanager
def _broker_user(spec: str) -> Iterator[None]:
    user, _, password = spec.partition(":")
    api = management_client()
    api.request("PUT", f"users/{user}", {"password": password, "tags": "monitoring"})
    api.request("PUT", f"permissions/%2F/{user}", {"configure": ".*", "write": ".*", "read": ".*"})
    try:
        yield
    finally:
        api.request("DELETE", f"users/{user}")


@contextlib.contextmanager
def _queues(names: list[str]) -> Iterator[None]:
    connection = pika.BlockingConnection(pika.URLParameters(BROKER_URI))
    channel = connection.channel()
    for name in names:
        channel.queue_declare(name)
    try:
        yield
    finally:
        for name in names:
            channel.queue_delete(name)
        connection.close()


@contextlib.contextmanager
def _sidecar(tmp_path: Path, name: str, port: int | None, token: str | None) -> Iterator[None]:
    extra = ["--management-uri", MANAGEMENT_URI] if BROKER_URI != DEFAULT_URI else []
    env = {"RTROUTE_HTTP_TOKEN": token} if token else {}
    with _environ(env):
        sidecar = RtrouteProcess("rtroute.cli", ["run", "--uri", BROKER_URI, "--rtopic", name,
                                                 *extra], tmp_path / "sidecar.log", port=port)

    def running() -> bool:
        if sidecar.proc.poll() is not None:
            pytest.fail(f"the sidecar exited:\n{sidecar.log()}")
        return any(e.get("state") == "running" and e["name"] == name
                   for e in (sidecar.status() or {}).get("exchanges", []))

    try:
        wait_for(running, 20)
        yield
    finally:
        sidecar.terminate()
        sidecar.stop()
        delete_layouts([name])


@contextlib.contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _serve(code: str, work: Path, env: dict[str, str], port: int, log: Path) -> None:
    """Runs a snippet ending in a server: it answers on ``port``; SIGTERM stops it cleanly."""
    _wait_free(port)
    with open(log, "wb") as out:
        proc = subprocess.Popen(["bash", "-c", "set -euo pipefail\n" + code], cwd=work, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    try:
        while not port_open(port):
            if proc.poll() is not None:
                pytest.fail(f"exited with {proc.returncode}:\n{log.read_text()}")
            if time.monotonic() > deadline:
                pytest.fail(f"nothing answers on {port} after 60 s:\n{log.read_text()}")
            time.sleep(0.05)
        _probe(port)
    finally:
        stop_group(proc, log)
    output = log.read_text()
    assert "Traceback" not in output, output
    assert re.search(r"\bstopped\b", output), f"no 'stopped' line:\n{output}"


def _wait_free(port: int, timeout: float = 30) -> None:
    """Waits until nothing listens on ``port`` (a server of a test before may still be stopping);
    fails naming what holds it."""
    deadline = time.monotonic() + timeout
    while port_open(port):
        if time.monotonic() > deadline:
            holder = subprocess.run(["ss", "-ltnp", f"sport = :{port}"], capture_output=True,
                                    text=True, check=False).stdout
            pytest.fail(f"port {port} is taken before the snippet runs:\n{holder}")
        time.sleep(0.1)


def _probe(port: int) -> None:
    """What the server answers: an AMQP port opens a connection as the test's own user; an
    HTTP port says it is alive."""
    if port in (8419, 8420, 8421):
        import urllib.request
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/livez", timeout=5) as answer:
            assert answer.status == 200
        return
    user = pika.URLParameters(BROKER_URI).credentials
    connection = pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", port, credentials=user, connection_attempts=20, retry_delay=0.25))
    connection.channel().exchange_declare("amq.topic", "topic", passive=True)
    connection.close()


RUN = [s for s in SHELL if s.clause("run") is not None]


@pytest.mark.parametrize("snippet", _params(RUN))
def test_the_shell_snippet_runs_as_written(snippet, tmp_path, request):
    port = snippet.broker_port()
    if port and port != _leg_port():
        pytest.skip(f"the snippet names the broker on 127.0.0.1:{port}, not this leg's")
    if "sudo " in snippet.code and shutil.which("sudo") is None and os.geteuid() != 0:
        pytest.skip("the snippet uses sudo, which this machine lacks")
    options = snippet.options()
    code = snippet.code
    covered = snippet.clause("covered-by")
    if covered and ":" in covered:
        only = covered.partition(":")[2].strip()
        code = "\n".join(x for x in code.splitlines() if not x.startswith(only))
    work = _workdir(tmp_path, "copy" in options)
    env = _environment(_bin_dir(tmp_path))
    token = uuid.uuid4().hex if "token" in options else None
    if token:
        env["TOKEN"] = env["RTROUTE_HTTP_TOKEN"] = token
    for name in options.get("file", []):
        (work / name).write_text('{"snippet": true}\n')
    with contextlib.ExitStack() as stack:
        for spec in options.get("user", []):
            stack.enter_context(_broker_user(spec))
        if options.get("queue"):
            stack.enter_context(_queues(options["queue"]))
        for name in options.get("sidecar", []):
            http = options.get("http", [None])[0]
            stack.enter_context(_sidecar(tmp_path, name, int(http) if http else None, token))
        if "serve" in options:
            _serve(code, work, env, int(options["serve"][0]), tmp_path / "serve.log")
            return
        done = subprocess.run(["bash", "-c", "set -euo pipefail\n" + code], cwd=work, env=env,
                              capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"{snippet.where} exited {done.returncode}:\n" \
                                 f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr, done.stderr


# -- toml: configurations rtroute accepts ------------------------------------------------------------

@pytest.mark.parametrize("snippet", [pytest.param(s, id=s.where) for s in SNIPPETS
                                     if s.lang == "toml" and s.clause("excerpt") is None])
def test_every_toml_snippet_is_a_configuration_rtroute_accepts(snippet, tmp_path):
    path = tmp_path / "rtroute.toml"
    path.write_text(snippet.code)
    done = subprocess.run([sys.executable, "-m", "rtroute.cli", "config", "check", str(path)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"{snippet.where}:\n{done.stdout}{done.stderr}"

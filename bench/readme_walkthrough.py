"""Run the README's "Using it" commands top to bottom on a fresh clone and check each stated result.

The ```bash block(s) between "## Using it" and the next "## " heading are read from the clone's
README.md, one command per line (a trailing backslash continues it, ``#`` starts a comment), and run
in order by bash in the clone, as a new user would, with this checkout's ``.venv`` first on PATH: the
README and task files are the clone's, the code run is the ``pdbgym`` installed in ``.venv`` (an editable
install of this checkout; PYTHONPATH is left alone, since a PYTHONPATH naming a clone changes what the
sandboxed test runs of ``tasks synth`` see). Placeholders are replaced by real things built
first (``SUBSTITUTIONS``): a random-weight 1-layer Llama saved over the embedded SmolLM2 tokenizer for
``path/to/model``, and a ``transformers serve`` of that model on loopback for the server URL. A line
that needs a person (``--policy human``) is skipped with its reason. ``--quick`` shrinks the costly
commands (``QUICK``: fewer tasks, runs and steps, short turns), and prints each line as run.

Each command's exit status and its stated result (``CHECKS``: files written, JSON keys, outcomes) are
checked; the end is a table: command, seconds, ok / failed / skipped, reason, and a last row that fails
if the commands left ``git status --porcelain`` of the clone different from before (a path they write
that .gitignore does not cover). Exit 1 if any failed.

Usage: .venv/bin/python bench/readme_walkthrough.py [--clone PATH | --repo PATH] [--quick]
       [--no-server] [--keep] [--timeout-s 1800] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVER_URL = "http://127.0.0.1:30000"
QUICK_TASKS = ("calc-lexer-hang", "latency-percentiles", "logstats-level-counts")

# README text -> what the walkthrough puts there. The one place README and script meet: a new
# placeholder in the README needs a row here.
SUBSTITUTIONS = {
    "path/to/model": "{model}",   # a tiny random Llama over SmolLM2's tokenizer (built first)
    SERVER_URL: "{server}",       # transformers serve of that model on a free loopback port
}
# Lines not run, with the reason printed in the table.
SKIPS = {
    "--policy human": "needs a person at the terminal (tests/agent/test_human_policy.py drives it in tmux)",
}
# --quick: (pattern, replacement) applied in order; each change is printed beside the command.
QUICK = [
    (r"tasks validate builtin", "tasks validate {quick_tasks}"),
    (r"--tasks builtin\b", "--tasks {quick_tasks}"),
    (r"--max 30\b", "--max 10"),
    (r"(cache build --policy \{server\}.*?)--runs 4", r"\1--runs 1 --max-new-tokens 16 --turn-budget 3"),
    (r"--max-steps 20\b", "--max-steps 2 --rank 4 --eval-steps 1 --device cpu"),
    (r"--steps 10 --group 4\b", "--steps 1 --group 2 --max-new-tokens 6 --max-context-tokens 4096 --curriculum fixed "
                               "--budget-start 2 --budget-end 2 --save-steps 1 --device cpu"),
    (r"(pdbgym eval --tasks.*?)--runs 8\b", r"\1--runs 2 --max-new-tokens 160 --turn-budget 3"),  # constrained: >= 137
    (r"(eval select .*?--out runs/select)", r"\1 --runs 1 --turn-budget 3 --max-new-tokens 64"),
    (r"(--policy rl) --turn-budget 5", r"\1 --turn-budget 2 --max-new-tokens 16"),
]


def _files(folder: Path, pattern: str) -> int:
    return len(list(folder.glob(pattern)))


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


def _check_split(work: Path, out: str) -> str | None:
    splits = _json(work / "splits.json")
    empty = [name for name in ("val", "test") if not splits.get("splits", splits).get(name)]
    return f"empty split(s) {empty} in splits.json" if empty else None


def _check_cache(folder: str, solved: bool = False) -> Callable[[Path, str], str | None]:
    def check(work: Path, out: str) -> str | None:
        if not (work / folder / "manifest.json").is_file():
            return f"{folder}/manifest.json missing"
        if _files(work / folder, "*/*.pt") == 0:
            return f"no .pt record files under {folder}"
        if solved:
            pdbgym = str(Path(sys.executable).parent / "pdbgym")
            summary = json.loads(subprocess.run([pdbgym, "cache", "summary", folder, "--json"], cwd=work,
                                                capture_output=True, text=True, check=True).stdout)
            text = json.dumps(summary)
            if '"solved"' not in text:
                return f"no solved episode in {folder}'s summary"
        return None
    return check


def _reasons() -> tuple[str, ...]:
    from pdbgym.termination import TERMINATION_REASONS

    return tuple(TERMINATION_REASONS)


def _expect(condition: Callable[[Path, str], bool], reason: str) -> Callable[[Path, str], str | None]:
    return lambda work, out: None if condition(work, out) else reason


# Stated results: the first pattern found in a command decides its check (exit status 0 is always needed).
CHECKS: list[tuple[str, Callable[[Path, str], str | None]]] = [
    ("tasks list", _expect(lambda w, o: "builtin__calc-lexer-hang" in o, "calc-lexer-hang not listed")),
    ("tasks synth", _expect(lambda w, o: _files(w / "runs/synth", "*/task.json") > 0, "no task written")),
    ("tasks split", _check_split),
    ("--policy scripted --transcript", _expect(
        lambda w, o: _json(w / "runs/episode.json").get("termination_reason") == "solved", "episode not solved")),
    ("--out caches/oracle", _check_cache("caches/oracle", solved=True)),
    ("--out caches/teacher", _check_cache("caches/teacher")),
    ("cache convert", _expect(lambda w, o: (w / "caches/teacher.parquet").stat().st_size > 0, "no parquet")),
    ("train corpus", _expect(lambda w, o: _json(w / "runs/corpus/corpus.json")["examples_kept"] > 0,
                             "corpus kept no example")),
    ("train sft", _expect(lambda w, o: (w / "runs/sft/adapter/pdbgym_train.json").is_file()
                          and (w / "runs/sft/training_report.html").is_file(), "adapter or report missing")),
    ("train grpo", _expect(lambda w, o: _json(w / "runs/grpo/grpo_run.json").get("steps", 0) >= 1,
                           "grpo_run.json without a step")),
    ("divergence", _expect(lambda w, o: _json(w / "kl.json").get("students"), "kl.json has no students")),
    ("eval plan", _expect(lambda w, o: json.loads(o[o.index("{"):])["tasks_needed"] > 0, "no tasks_needed")),
    ("eval select", _expect(lambda w, o: "chose " in o and (w / "runs/select/report-test/report.html").is_file(),
                            "no choice printed or no report on test")),
    ("pdbgym eval ", _expect(lambda w, o: {"base", "sft", "guided"} <= set(_json(w / "summary.json")["arms"])
                             and (w / "runs/eval/report.html").is_file(), "arms or report missing")),
    ("adapters lineage", _expect(lambda w, o: "sft" in o, "sft not in the chain")),
    ("--policy rl", _expect(lambda w, o: any(f" {reason} " in o for reason in _reasons()),
                            "no termination reason printed")),
    ("adapters merge", _expect(lambda w, o: _files(w / "merged", "*.safetensors") > 0, "no merged weights")),
]


def readme_commands(readme: Path) -> list[str]:
    """The commands of the ```bash blocks under "## Using it", continuations joined, comments kept."""
    text = readme.read_text()
    start = text.index("## Using it")
    end = text.find("\n## ", start + 1)
    section = text[start:end if end > 0 else None]
    commands: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S):
        pending = ""
        for line in block.splitlines():
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1].rstrip() + " "
                continue
            line = re.sub(r"\s+", " ", pending + line.strip()).strip()
            pending = ""
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


def strip_comment(command: str) -> str:
    return re.sub(r"\s+#.*$", "", command)


def build_model(folder: Path) -> Path:
    """A random-weight 1-layer Llama over the embedded SmolLM2 tokenizer, saved as a HF folder."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from pdbgym.agent.backends.embedded import load_embedded_tokenizer

    tokenizer = load_embedded_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16384,
                         tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id,
                         bos_token_id=tokenizer.bos_token_id)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def quick_tasks(clone: Path, folder: Path) -> Path:
    """A folder of three built-in tasks (copied from the clone) for --quick."""
    import shutil

    for name in QUICK_TASKS:
        shutil.copytree(clone / "pdbgym/tasks/builtin" / name, folder / name, symlinks=True)
    return folder


def start_server(model: Path, log: Path, env: dict) -> tuple[subprocess.Popen, str]:
    """`transformers serve MODEL` on a free loopback port; (process, base URL) once /health answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    argv = [sys.executable, "-c", "from transformers.cli.transformers import main; main()", "serve", str(model),
            "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]
    with open(log, "wb") as out:
        server = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 240
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as reply:
                if reply.status == 200:
                    return server, url
        except OSError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            stop_server(server)
            raise RuntimeError(f"transformers serve did not come up: {log.read_text()[-2000:]}")
        time.sleep(0.5)


def stop_server(server: subprocess.Popen) -> None:
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=15)


def prepare(command: str, values: dict[str, str], quick: bool) -> str:
    """The command as run: placeholders substituted, then the --quick shrinkage."""
    for text, slot in SUBSTITUTIONS.items():
        command = command.replace(text, slot)
    if quick:
        for pattern, replacement in QUICK:
            command = re.sub(pattern, replacement, command)
    return command.format(**values)


def run_one(command: str, work: Path, env: dict, timeout_s: float) -> tuple[float, str | None, str]:
    """(seconds, failure reason or None, output) of one README line run by bash in ``work``."""
    started = time.monotonic()
    try:
        done = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return time.monotonic() - started, f"timed out after {timeout_s:.0f} s", ""
    seconds = time.monotonic() - started
    output = done.stdout + done.stderr
    if done.returncode != 0:
        tail = " | ".join(output.strip().splitlines()[-3:])[:300]
        return seconds, f"exit {done.returncode}: {tail}", output
    bare = strip_comment(command)
    for pattern, check in CHECKS:
        if pattern in bare:
            try:
                return seconds, check(work, output), output
            except (OSError, ValueError, KeyError, TypeError, subprocess.CalledProcessError) as error:
                return seconds, f"result check: {type(error).__name__}: {error}"[:300], output
    return seconds, None, output


def git_status(clone: Path) -> set[str]:
    """``git status --porcelain`` lines of the clone (untracked folders listed file by file)."""
    done = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=clone,
                          capture_output=True, text=True, check=True)
    return set(done.stdout.splitlines())


def status_row(before: set[str], after: set[str]) -> tuple[str, float, str, str]:
    """The table's last row: failed, naming the paths, when the commands changed the clone's git status."""
    changed = sorted(after - before)
    if not changed:
        return "git status --porcelain", 0.0, "ok", ""
    shown = ", ".join(line[3:] for line in changed[:8]) + (f" and {len(changed) - 8} more" if len(changed) > 8 else "")
    return "git status --porcelain", 0.0, "failed", f"the commands left in the clone: {shown}"


def table(rows: list[tuple[str, float, str, str]], markdown: bool) -> str:
    if markdown:
        lines = ["| command | s | result | reason |", "|---|---:|---|---|"]
        lines += [f"| `{c}` | {s:.1f} | {r} | {why.replace('|', '/')} |" for c, s, r, why in rows]
        return "\n".join(lines)
    return "\n".join(f"{s:8.1f}  {r:7}  {c}" + (f"\n{'':19}{why}" if why else "") for c, s, r, why in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repo", type=Path, default=ROOT, help="repository to git clone (default: this one)")
    parser.add_argument("--clone", type=Path,
                        help="run in this existing clone instead of cloning --repo (its runs/, caches/ ... are written)")
    parser.add_argument("--quick", action="store_true", help="shrink the costly commands (see QUICK)")
    parser.add_argument("--no-server", action="store_true", help="skip the server line (no transformers serve)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument("--timeout-s", type=float, default=1800, help="limit of one command")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="pdbgym-readme-"))
    clone = args.clone
    if clone is None:
        clone = tmp / "clone"
        subprocess.run(["git", "clone", "-q", str(args.repo), str(clone)], check=True)
    clone = clone.resolve()
    work = clone  # the README's commands run where a new user types them: the clone's root
    status_before = git_status(clone)
    env = {**os.environ, "PDBGYM_HOME": str(tmp / "home"), "HF_HUB_OFFLINE": "1",
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    values = {"model": str(build_model(tmp / "tiny-model")), "server": SERVER_URL,
              "quick_tasks": str(quick_tasks(clone, tmp / "quick-tasks")) if args.quick else "builtin"}
    print(f"clone {clone}  model {values['model']}" + ("  --quick" if args.quick else ""), flush=True)
    server = None
    server_skip = "--no-server" if args.no_server else None
    if not args.no_server:
        try:
            server, values["server"] = start_server(Path(values["model"]), tmp / "serve.log", env)
        except RuntimeError as error:
            server_skip = str(error)[:200]
    rows: list[tuple[str, float, str, str]] = []
    try:
        for line in readme_commands(clone / "README.md"):
            shown = strip_comment(line)
            skip = next((why for text, why in SKIPS.items() if text in line), None)
            if SERVER_URL in line and server_skip:
                skip = f"no server: {server_skip}"
            if skip:
                rows.append((shown, 0.0, "skipped", skip))
                print(f"skip  {shown}\n      {skip}", flush=True)
                continue
            command = prepare(line, values, args.quick)
            changed = strip_comment(command) != shown.replace(SERVER_URL, values["server"]).replace(
                "path/to/model", values["model"])
            print(f"run   {shown}" + (f"\n  as  {strip_comment(command)}" if changed else ""), flush=True)
            seconds, reason, _ = run_one(command, work, env, args.timeout_s)
            rows.append((shown, seconds, "failed" if reason else "ok", reason or ""))
            print(f"      {seconds:.1f} s {'FAILED: ' + reason if reason else 'ok'}", flush=True)
    finally:
        if server is not None:
            stop_server(server)
    rows.append(status_row(status_before, git_status(clone)))
    print(table(rows, args.markdown))
    failed = sum(row[2] == "failed" for row in rows)
    total = sum(row[1] for row in rows)
    print(f"{len(rows)} commands, {failed} failed, {sum(r[2] == 'skipped' for r in rows)} skipped, {total:.0f} s")
    if args.keep or failed:  # kept to look into; say how much disk it holds and how to free it
        size = sum(p.lstat().st_size for p in tmp.rglob("*") if p.is_file() and not p.is_symlink())
        print(f"kept {tmp} ({size / 1e6:.0f} MB: the clone, its runs and caches, a tiny model, a PDBGYM_HOME); "
              f"remove it with: rm -rf {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m bench fuzz --mode try``: hostile run directories, hostile scripts and signals at
random times through ``scaldiag try``; no case may exit 70, hang, leave a process of its script
behind, or change a file outside its run directory.

Two kinds of case, drawn 35 : 65.

*Refused before round 0* (``_refusal``): a user's folder and a run directory whose record is
damaged or crafted: run.json's command (not a list, items that are not text, a FIFO, /dev/zero, a
directory, a missing file, a huge file), its ``cwd`` and ``script`` (missing, relative, another
digest, another path), its ``writes`` (not an object, paths that are not text, "/"), a ``try`` that
is a link into the user's folder, a file or a FIFO, and unfinished journals (entries that remove or
replace the user's files, signed with another key or none, torn lines, backups named ``../x``);
``try``'s own flags (``--budget-s nan``, ``--rounds 0``, ``--json`` on run.json, on the script).

*Rounds* (``_rounds``): a real run directory, profiled once per fuzz run (``build_template``: a
tiny PyTorch CPU script with a slow Dataset, whose finding SD101 is a DataLoader-workers fix try
can apply), copied, its run.json pointed at a case's own user folder: the script (absolute path,
its sha256), its ``cwd``, its ``writes``. The script is hostile and fast: it saves ``model.pt``,
appends to ``train.log``, writes through an absolute path into another folder, replaces a
checkpoint by ``os.replace``, makes folders (new ones and inside existing ones), removes, renames,
truncates and chmods the user's files, writes through ``os.open``, through a subprocess and through
libc (the writes no hook sees), forks children (that write, that outlive the script, that write
after it ended), ignores SIGTERM or SIGINT, sleeps for ever, exits non-zero, raises, kills itself,
prints bytes that are not text; one case in ten builds the template's DataLoader, so the fix's
workers run. Every case has a small ``--budget-s`` (0.3-3 s: the wall hits rounds in progress);
half get SIGINT, SIGTERM or SIGHUP at a random time (one in five twice), and one in eight SIGKILL,
then a second ``try`` that must put the unfinished journal back first.

Each case runs ``try`` in a process of its own, forked from the worker (scaldiag imported once),
in a session of its own. Verified per case: the exit code is one ``try`` documents (0, 1, 2, 128+N
of the signal sent, or death by the signal sent); no hang (the case's wall is budget +
``GRACE_S`` + 40 s); every file and folder of the user's two folders as before (bytes, mode,
mtime), and nothing new there, except a file written through a subprocess or libc where ``try``
named it or ``--allow-uncontained-writes`` was given (docs/try.md: such writes are found, not
contained); nothing in ``try``'s own working directory; no process of the case left running (each
one carries the case's marker in its environment). The counts of cases that reached round 0, got a
signal while a side ran, and were stopped by the budget are part of the result.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

SCRIPT_TEXT = "print('the user s script')\n"
MARKER_ENV = "SCALDIAG_FUZZ_CASE"  # every process of a case carries it: a leftover is found by it
TEMPLATE_ENV = "SCALDIAG_FUZZ_TRY_TEMPLATE"  # the template run directory and its finding
ROUND_SHARE = 0.65
UNCONTAINED = ("sub.txt", "native.txt")  # written where no hook sees: try finds them, said

TEMPLATE_SCRIPT = """
import torch
from torch.utils.data import DataLoader, Dataset


class SlowItems(Dataset):
    def __len__(self):
        return 4 * 16

    def __getitem__(self, i):
        label = sum(j * j for j in range(i % 7, 20000)) % 10  # plain Python: input-bound
        return torch.rand(8), label


model = torch.nn.Linear(8, 10)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in DataLoader(SlowItems(), batch_size=4, num_workers=0):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""

# What a hostile script does, one snippet each (its working directory is the user's folder; OTHER
# is another folder of the user's, written through its absolute path).
BEHAVIOURS = {
    "save model": 'open("model.pt", "wb").write(os.urandom(64))',
    "append log": 'open("train.log", "a").write("epoch done\\n")',
    "absolute path": 'open(os.path.join(OTHER, "out.txt"), "w").write("elsewhere")',
    "new file elsewhere": 'open(os.path.join(OTHER, "new.txt"), "w").write("new")',
    "replace checkpoint": (
        'open("ckpt.pt.tmp", "wb").write(b"ckpt")\nos.replace("ckpt.pt.tmp", "ckpt.pt")'
    ),
    "new folders": (
        'os.makedirs("runs/exp1", exist_ok=True)\nopen("runs/exp1/m.txt", "w").write("1")'
    ),
    "into an existing folder": (
        'os.makedirs("data/new/deep", exist_ok=True)\nopen("data/new/deep/y", "w").write("1")\n'
        'open("data/added.bin", "wb").write(b"1")'
    ),
    "remove": 'os.remove("data/x.bin")',
    "rmtree": 'shutil.rmtree("data")',
    "rename": 'os.rename("model.pt", "model.old")',
    "chmod": 'os.chmod("train.log", 0o600)',
    "truncate": 'os.truncate("train.log", 1)',
    "os.open": (
        'fd = os.open("model.pt", os.O_WRONLY | os.O_TRUNC)\nos.write(fd, b"os.open")\nos.close(fd)'
    ),
    "writes in a loop": (
        "for i in range(40):\n"
        '    open("model.pt", "wb").write(str(i).encode())\n'
        '    open("train.log", "a").write("step\\n")\n'
        "    time.sleep(0.02)"
    ),
    "subprocess": 'subprocess.run(["sh", "-c", "echo sub > sub.txt"])',
    "libc": (
        "libc = ctypes.CDLL(None)\n"
        'fd = libc.open(b"native.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)\n'
        'libc.write(fd, b"native", 6)\nlibc.close(fd)'
    ),
    "fork, child writes": (
        "pid = os.fork()\n"
        "if pid == 0:\n"
        '    open("child.txt", "w").write("c")\n'
        '    open("model.pt", "ab").write(b"child")\n'
        "    os._exit(0)\n"
        "os.waitpid(pid, 0)"
    ),
    "fork, child outlives": (
        "if os.fork() == 0:\n"
        "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "    time.sleep(3600)\n"
        "    os._exit(0)"
    ),
    "fork, child writes late": (
        "if os.fork() == 0:\n"
        "    time.sleep(0.7)\n"
        '    open("model.pt", "wb").write(b"after the script ended")\n'
        "    os._exit(0)"
    ),
    "ignores SIGTERM": "signal.signal(signal.SIGTERM, signal.SIG_IGN)",
    "carries on after SIGINT": "signal.signal(signal.SIGINT, lambda *a: print('carry on'))",
    "garbage": (
        'sys.stdout.buffer.write(os.urandom(300))\nsys.stderr.write("\\x1b[2J\\u202e\\x07")'
    ),
    "sleeps": "time.sleep(random.random())",
}
ENDINGS = {
    "exits 0": "",
    "exits 3": "sys.exit(3)",
    "raises": "raise RuntimeError('boom')",
    "SIGSEGV": "os.kill(os.getpid(), signal.SIGSEGV)",
    "sleeps for ever": "while True:\n    time.sleep(0.1)",
    "busy for ever": "while True:\n    pass",
}
PRELUDE = "import ctypes, os, random, shutil, signal, subprocess, sys, time\nOTHER = sys.argv[1]\n"


def _digests(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_symlink():
            out[str(p)] = "link " + os.readlink(p)
        elif p.is_file():
            st = p.stat()
            digest = hashlib.sha256(p.read_bytes()).hexdigest()
            out[str(p)] = f"{digest} {st.st_mode:o} {st.st_mtime_ns}"
        elif p.is_dir():
            out[str(p)] = f"dir {p.stat().st_mode:o}"
    return out


def build_template(where: Path) -> tuple[Path, str]:
    """A real run directory, profiled here (a few seconds), and a finding of it whose fix ``try``
    applies; ScaldiagError-free or RuntimeError where none could be made."""
    from scaldiag.commands.try_fix import fix_for

    root = Path(__file__).resolve().parents[2]
    folder = where / "template"
    folder.mkdir(parents=True)
    (folder / "train.py").write_text(TEMPLATE_SCRIPT)
    why = "no run directory"
    for attempt in range(3):  # a finding measured under load: drawn again where it missed
        out = folder / f"runs{attempt}"
        done = subprocess.run(
            [sys.executable, "-m", "scaldiag", "profile", "-q", "--out", str(out), "train.py"],
            cwd=folder,
            env={**os.environ, "PYTHONPATH": str(root)},
            capture_output=True,
            text=True,
            timeout=300,
        )
        why = done.stderr.strip()[-300:]
        for run_dir in sorted(out.glob("*")):
            for finding in ("SD101", "SD211", "SD207"):
                try:
                    fix_for(finding, run_dir)
                    return run_dir, finding
                except Exception as exc:  # not this finding: the next
                    why = str(exc)
    raise RuntimeError(f"no run directory with a finding try can apply under {folder}: {why}")


def _proc_with(marker: bytes) -> list[tuple[int, bytes]]:
    """The live processes whose environment holds ``marker`` (pid, command line)."""
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if marker not in Path(f"/proc/{entry.name}/environ").read_bytes():
                continue
            stat_text = Path(f"/proc/{entry.name}/stat").read_text()
            if stat_text.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                continue  # dead, waiting to be reaped
            out.append((int(entry.name), Path(f"/proc/{entry.name}/cmdline").read_bytes()))
        except OSError:
            continue
    return out


class TryCases:
    """``make`` draws a case, ``run`` runs it in a process of its own (its signals), ``verify``
    checks what it left; ``tally`` counts what the cases reached."""

    slow_s = 60  # a try case's own wall is its budget + GRACE_S + 40 s: over this, a failure
    abort_s = 180
    debug_again = False  # an exit 70 is not run again in the worker: try's rounds need a process

    def __init__(self):
        # imported once here, so that each case's fork starts with scaldiag loaded
        import scaldiag.cli  # noqa: F401
        import scaldiag.collect.launcher  # noqa: F401
        import scaldiag.commands.try_fix  # noqa: F401
        import scaldiag.pipeline  # noqa: F401
        from bench.fuzz import run as fuzz

        self.fuzz = fuzz
        self.env: dict[str, str | None] = {}
        self.cases: dict[str, dict] = {}
        self.tally: collections.Counter = collections.Counter()
        template = os.environ.get(TEMPLATE_ENV, "")
        self.template, _, self.finding = template.rpartition(":")

    # --- drawing a case

    def make(self, rng, work: Path):
        if self.template and rng.random() < ROUND_SHARE:
            return self._rounds(rng, work)
        return self._refusal(rng, work)

    def _plan(self, work: Path, users: list[Path], **more) -> dict:
        here = work / "tryhere"  # try's own working directory: nothing may land there
        here.mkdir()
        plan = {
            "env": {"XDG_CACHE_HOME": str(work / "cache"), **self.env},
            "users": users,
            "before": {str(u): _digests(u) for u in users},
            "here": here,
            "signals": [],
            "again": None,
            "timeout_s": 60.0,
            "allow": False,
            "rounds": False,
            **more,
        }
        self.cases[str(work)] = plan
        return plan

    def _user(self, work: Path) -> Path:
        user = work / "user"
        (user / "data").mkdir(parents=True)
        (user / "train.py").write_text(SCRIPT_TEXT)
        (user / "model.pt").write_bytes(b"the user's weights")
        (user / "train.log").write_text("a line\n")
        (user / "data" / "x.bin").write_bytes(bytes(range(256)))
        return user

    def _rounds(self, rng, work: Path):
        from scaldiag.collect.script_file import identity

        user, other = self._user(work), work / "other"
        other.mkdir()
        (other / "out.txt").write_text("the user's other file\n")
        (user / "ckpt.pt").write_bytes(b"a checkpoint")
        torch = rng.random() < 0.1
        picked = rng.sample(sorted(BEHAVIOURS), rng.randint(1, 4))
        ending = rng.choice(sorted(ENDINGS))
        body = [BEHAVIOURS[b] for b in picked]
        if torch:  # the template's training: the fix's DataLoader workers run
            body.insert(rng.randint(0, len(body)), TEMPLATE_SCRIPT)
        (user / "train.py").write_text(PRELUDE + "\n".join([*body, ENDINGS[ending]]) + "\n")
        run_dir = work / "run"
        shutil.copytree(self.template, run_dir, symlinks=True)
        run = json.loads((run_dir / "run.json").read_text())
        script = user / "train.py"
        uncontained = [str(user / u) for u in UNCONTAINED]
        run.update(
            command=["python", str(script), str(other)],
            cwd=str(user),
            script=identity(str(script)),
            writes={
                "python_paths": [str(user / "model.pt"), str(other / "out.txt")],
                "uncontained_paths": (
                    uncontained[:1] if "subprocess" in picked and rng.random() < 0.5 else []
                ),
            },
        )
        if rng.random() < 0.1:
            run.pop("writes")  # a run profiled before writes were recorded
        (run_dir / "run.json").write_text(json.dumps(run))
        finding = self.finding if rng.random() < 0.95 else rng.choice(["SD105", "SD999"])
        budget_s = round(rng.uniform(0.3, 3.0), 2)
        argv = ["try", str(run_dir), finding, f"--budget-s={budget_s}"]
        argv += ["--rounds", str(rng.randint(1, 3)), "--max-rounds", str(rng.randint(1, 4))]
        allow = rng.random() < 0.15
        argv += ["--allow-uncontained-writes"] if allow else []
        if rng.random() < 0.15:
            argv += ["--json", str(work / "out.json")]
        from scaldiag.collect.try_rounds import GRACE_S

        plan = self._plan(
            work,
            [user, other],
            allow=allow,
            rounds=True,
            run_dir=run_dir,
            timeout_s=budget_s + GRACE_S + 40 + (30 if torch else 0),
        )
        draw = rng.random()
        if draw < 0.125:  # try itself killed mid-round, then a try that must put it back
            plan["signals"] = [(rng.uniform(0.2, 2.5), signal.SIGKILL)]
            plan["again"] = ["try", str(run_dir), finding, "--budget-s=3", "--rounds", "1"]
        elif draw < 0.625:
            sig = rng.choice([signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
            plan["signals"] = [(rng.uniform(0.0, 3.0), sig)]
            if rng.random() < 0.2:
                second = rng.choice([sig, signal.SIGINT, signal.SIGTERM])
                plan["signals"].append((plan["signals"][0][0] + rng.uniform(0, 1.0), second))
        what = f"rounds: {', '.join(picked)}; {ending}{'; torch' if torch else ''}"
        sent = ", ".join(f"{signal.Signals(s).name} at {t:.2f} s" for t, s in plan["signals"])
        return f"{what}; {sent or 'no signal'}", (argv,)

    # --- refused before round 0

    def _refusal(self, rng, work: Path):
        from scaldiag.collect.script_file import identity
        from scaldiag.collect.write_journal import signed

        user = self._user(work)
        run_dir = work / "run"
        run_dir.mkdir()
        script = user / "train.py"
        run = {
            "command": ["python", str(script)],
            "cwd": str(user),
            "script": identity(str(script)),
        }
        log: list[str] = []
        for _ in range(rng.randint(1, 3)):
            op = rng.choice(
                ["command", "command", "cwd", "script", "writes", "try_dir", "journal", "journal"]
            )
            log.append(self._damage(op, rng, run, run_dir, user, work, signed))
        if rng.random() < 0.05:
            (run_dir / "run.json").write_bytes(rng.choice([b"", b"[]", b"{", b"\xff\xfe"]))
            log.append("run.json unreadable")
        else:
            (run_dir / "run.json").write_bytes(self.fuzz._dumps(run))
        argv = ["try", str(run_dir), rng.choice(["SD101", "SD999", "SD211", "", "../x"])]
        argv += self._flags(rng, run_dir, script, work, log)
        self._plan(work, [user])
        return "; ".join(log), (argv,)

    def _damage(self, op, rng, run, run_dir, user, work, signed) -> str:
        weird = self.fuzz._weird(rng)
        if op == "command":
            fifo = work / "fifo.py"
            if not fifo.exists():
                os.mkfifo(fifo)
            huge = work / "huge.py"
            choice = rng.choice(["notlist", "items", "fifo", "zero", "dir", "missing", "huge"])
            run["command"] = {
                "notlist": weird,
                "items": ["python", rng.choice([3, None, [], {}, "", "a\0b"]), weird],
                "fifo": ["python", str(fifo)],
                "zero": ["python", "/dev/zero"],
                "dir": ["python", str(user / "data")],
                "missing": ["python", str(user / "nope.py")],
                "huge": ["python", str(huge)],
            }[choice]
            if choice == "huge":
                with open(huge, "wb") as f:
                    f.truncate(80 << 20)  # sparse: a file of script size it is not
            if choice in ("fifo", "zero", "dir", "missing", "huge"):
                run.pop("script", None)
            return f"command {choice}"
        if op == "cwd":
            run["cwd"] = rng.choice([weird, "relative", str(work / "gone"), None, str(user)])
            return f"cwd={run['cwd']!r:.40}"
        if op == "script":
            how = rng.choice(["drop", "digest", "path", "weird"])
            if how == "drop":
                run.pop("script", None)
            elif how == "digest":
                kept = run.get("script") if isinstance(run.get("script"), dict) else {}
                run["script"] = {**kept, "sha256": "0" * 64}
            elif how == "path":
                run["script"] = {"path": str(user / "model.pt"), "sha256": "1" * 64}
            else:
                run["script"] = weird
            return f"script {how}"
        if op == "writes":
            run["writes"] = rng.choice(
                [weird, {"uncontained_paths": weird}, {"python_paths": ["/", 5, None]},
                 {"uncontained_paths": [str(user / "model.pt")]}]
            )  # fmt: skip
            return f"writes={run['writes']!r:.40}"
        if op == "try_dir":
            how = rng.choice(["link", "file", "fifo"])
            target = run_dir / "try"
            if target.exists() or target.is_symlink():
                return "try dir kept"
            if how == "link":
                target.symlink_to(user)
            elif how == "file":
                target.write_text("x")
            else:
                os.mkfifo(target)
            return f"try/ is a {how}"
        return self._journal(rng, run_dir, user, signed)

    def _journal(self, rng, run_dir, user, signed) -> str:
        """An unfinished journal that would change the user's files, were it applied."""
        root = run_dir / "try"
        if root.exists() and not root.is_dir() or root.is_symlink():
            return "journal skipped (try/ is not a folder)"
        journal = root / str(rng.randint(1, 3)) / "0-baseline.journal"
        (journal / "backups").mkdir(parents=True, exist_ok=True)
        (journal / "backups" / "ab").write_text("an attacker's bytes")
        target = str(rng.choice([user / "model.pt", user / "data", user / "train.log", user]))
        entries = [
            {"path": target, "existed": False},
            {"path": target, "existed": True, "kind": "file", "how": "link", "backup": "ab",
             "mode": 0o644, "ino": 1, "size_bytes": 1},
            {"path": target, "existed": True, "kind": "file", "how": "copy",
             "backup": "../../../../user/model.pt", "mode": 0o777, "ino": 1, "size_bytes": 1,
             "mtime_ns": 0, "atime_ns": 0},
            {"path": target, "existed": True, "kind": "symlink", "target": "/etc/passwd"},
        ]  # fmt: skip
        key = rng.choice([None, os.urandom(32)])
        lines = [
            json.dumps(signed(e, key) if key else e) for e in rng.sample(entries, rng.randint(1, 4))
        ]
        text = "\n".join(lines) + rng.choice(["\n", "", '\n{"path": "/', "\n[1, 2]\n"])
        (journal / "journal.jsonl").write_text(text)
        return f"journal on {Path(target).name}, {'another key' if key else 'unsigned'}"

    def _flags(self, rng, run_dir, script, work, log) -> list[str]:
        flags = []
        if rng.random() < 0.15:
            value = rng.choice(["nan", "inf", "-1", "0", "1e308", "-inf", "1", "600"])
            flags.append(f"--budget-s={value}")  # "=": argparse would take -inf for a flag
        if rng.random() < 0.1:
            flags += ["--rounds", rng.choice(["0", "-3", "101", "1", "3"])]
        if rng.random() < 0.1:
            flags += ["--max-rounds", rng.choice(["0", "1000", "2", "12"])]
        if rng.random() < 0.3:
            out = rng.choice(
                [run_dir / "run.json", run_dir / "try" / "x.json", script, work / "no" / "x.json",
                 work / "out.json", run_dir, Path("")]
            )  # fmt: skip
            flags += ["--json", str(out) if str(out) != "." else ""]
        if rng.random() < 0.2:
            flags.append("--allow-uncontained-writes")
        log.append(" ".join(flags) or "no flags")
        return flags

    # --- running a case

    def run(self, argv: list[str], work: Path) -> tuple[object, str]:
        """(the exit code, or "hang"; try's stderr): ``try`` in a process of its own, the case's
        signals sent at their times; then, where try was killed, the try that puts it back."""
        plan = self.cases[str(work)]
        code, err = self._one(argv, work, plan, plan["signals"], "first")
        plan["first"] = code
        plan["err"] = err
        if plan["again"] and code == -signal.SIGKILL:
            self.tally["killed mid-try, then a second try"] += 1
            code, more = self._one(plan["again"], work, plan, [], "again")
            err += more
        plan["err"] = err
        return code, err

    def _one(self, argv, work, plan, signals, name) -> tuple[object, str]:
        out, err = work / f"{name}.out", work / f"{name}.err"
        pid = os.fork()
        if pid == 0:  # the try process: a session of its own, as under a batch scheduler
            _child(argv, plan, work, out, err)
        started = time.monotonic()
        pending = sorted(signals)
        status = None
        while status is None:
            done, raw = os.waitpid(pid, os.WNOHANG)
            if done:
                status = os.waitstatus_to_exitcode(raw)
                break
            now = time.monotonic() - started
            while pending and pending[0][0] <= now:
                _, sig = pending.pop(0)
                plan.setdefault("sent", set()).add(sig)
                if plan["rounds"] and self._side_running(work):
                    plan["mid_side"] = True
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            if now > plan["timeout_s"]:
                plan["hang"] = f"still running after {now:.0f} s"
                self._kill_all(work)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                status = "hang"
                break
            time.sleep(0.02)
        text = err.read_text(errors="replace") if err.exists() else ""
        return status, text

    def _side_running(self, work: Path) -> bool:
        marker = f"{MARKER_ENV}={work}\0".encode()
        return any(b"scaldiag.collect.bootstrap" in cmd for _, cmd in _proc_with(marker))

    def _kill_all(self, work: Path) -> list[str]:
        """The case's processes still alive, each SIGKILLed (so the fuzz goes on): their lines."""
        marker = f"{MARKER_ENV}={work}\0".encode()
        left = _proc_with(marker)
        for pid, _ in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        return [
            f"pid {pid}: " + cmd.replace(b"\0", b" ").decode(errors="replace")[:120]
            for pid, cmd in left
        ]

    # --- what the case left

    def verify(self, work: Path, argv, result) -> str | None:
        """The user's folders as they were, nothing in try's own folder, no process left, an exit
        code try documents; the first failure found, or None."""
        plan = self.cases.pop(str(work), None)
        if plan is None:
            return None
        problems = []
        time.sleep(0.05)  # the case's last processes are being reaped
        left = self._kill_all(work)
        if left:
            self.tally["leftover processes"] += 1
            problems.append("processes left running: " + "; ".join(left[:3]))
        problems += self._changes(plan)
        if any(plan["here"].iterdir()):
            problems.append(f"try wrote into its own working directory: {os.listdir(plan['here'])}")
        problems += self._code(plan, result)
        self._count(plan, result)
        return "; ".join(problems) or None

    def _changes(self, plan) -> list[str]:
        err = plan.get("err", "")
        changed = []
        for user in plan["users"]:
            before, after = plan["before"][str(user)], _digests(user)
            for k in sorted(set(before) | set(after)):
                if before.get(k) == after.get(k):
                    continue
                said = Path(k).name in UNCONTAINED and (
                    plan["allow"] or k in err or plan.get("first") == -signal.SIGKILL
                )
                if not said:  # docs/try.md: an uncontained write is found and said, not undone
                    changed.append(k)
        if not changed:
            return []
        return ["files changed outside the run directory: " + ", ".join(changed[:5])]

    def _code(self, plan, result) -> list[str]:
        sent = plan.get("sent", set()) - {signal.SIGKILL}
        if result == "hang":
            self.tally["hangs"] += 1
            return [f"hang: {plan.get('hang')}"]
        documented = {0, 1, 2} | {128 + s for s in sent} | {-s for s in sent}
        if result not in documented:
            return [f"exit {result}, not a code try documents here (signals sent: {sorted(sent)})"]
        return []

    def _count(self, plan, result) -> None:
        if not plan["rounds"]:
            self.tally["refused before round 0 (by design)"] += 1
            return
        self.tally["with rounds' run directory"] += 1
        run_dir = plan["run_dir"]
        if any(run_dir.glob("try/*/0-baseline")):
            self.tally["reached round 0"] += 1
        if plan.get("sent"):
            self.tally["got a signal"] += 1
        if plan.get("mid_side"):
            self.tally["signal while a side ran"] += 1
        with contextlib.suppress(OSError, ValueError):
            kept = json.loads((run_dir / "try.json").read_text())
            if kept.get("stopped") == "budget":
                self.tally["stopped by the budget"] += 1
            if kept.get("stopped", "").startswith("signal"):
                self.tally["stopped by a signal (try.json)"] += 1


def _child(argv, plan, work: Path, out: Path, err: Path) -> None:
    """The forked try process: never returns."""
    code = 99
    try:
        os.setsid()
        for fd, path in ((1, out), (2, err)):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        for sig in (signal.SIGALRM, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        root = str(Path(__file__).resolve().parents[2])
        os.environ.update({k: v for k, v in plan["env"].items() if v is not None})
        os.environ.update({MARKER_ENV: str(work), "PYTHONPATH": root})
        os.chdir(plan["here"])
        from scaldiag.cli import main

        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # escaped main: said, and counted as uncaught (99)
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code if isinstance(code, int) and 0 <= code < 256 else 99)


def template_env(where: Path) -> str:
    """``TEMPLATE_ENV``'s value: the template run directory built in ``where``, and its finding."""
    run_dir, finding = build_template(where)
    return f"{run_dir}:{finding}"

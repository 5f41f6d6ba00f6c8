"""``python -m bench fuzz --mode try``: hostile run directories, commands and arguments through
``scaldiag try``; no case may exit 70, hang, or change a file outside its run directory.

Each case builds, in its own folder, a user's folder (a script, a model file, a log, a folder of
data: their bytes recorded) and a run directory whose record is damaged or crafted: run.json's
command (not a list, items that are not text, a FIFO, /dev/zero, a directory, a missing file, a
path through the user's folder, a huge file), its ``cwd`` and ``script`` (missing, relative, another
digest, another path), its ``writes`` (not an object, paths that are not text, "/"), a ``try`` that
is a link into the user's folder, a file or a FIFO, and unfinished journals (entries that remove or
replace the user's files, signed with another key or none, torn lines, backups named ``../x``);
``try``'s own flags are drawn too (``--budget-s nan``, ``--rounds 0``, ``--json`` on run.json, on
the script, into a missing folder). ``verify`` then compares the user's folder with its recorded
bytes: a change there is a failure ("lost output"). No case reaches a round (the run has no
finding), so the fuzz measures what try does before running anything; the rounds themselves,
signals and the budget are tests/test_try_safety.py's.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

SCRIPT_TEXT = "print('the user s script')\n"


def _digests(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_symlink():
            out[str(p)] = "link " + os.readlink(p)
        elif p.is_file():
            out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
        elif p.is_dir():
            out[str(p)] = "dir"
    return out


class TryCases:
    def __init__(self):
        from bench.fuzz import run as fuzz

        self.fuzz = fuzz
        self.env: dict[str, str | None] = {}
        self.before: dict[str, dict] = {}

    def _user(self, work: Path) -> Path:
        user = work / "user"
        (user / "data").mkdir(parents=True)
        (user / "train.py").write_text(SCRIPT_TEXT)
        (user / "model.pt").write_bytes(b"the user's weights")
        (user / "train.log").write_text("a line\n")
        (user / "data" / "x.bin").write_bytes(bytes(range(256)))
        return user

    def make(self, rng, work: Path):
        from scaldiag.collect.script_file import identity
        from scaldiag.collect.write_journal import signed

        user = self._user(work)
        self.env = {"XDG_CACHE_HOME": str(work / "cache")}
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
        self.before[str(work)] = _digests(user)
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

    def verify(self, work: Path, argv, result) -> str | None:
        """The user's folder as it was: a changed file is what this mode looks for."""
        before = self.before.pop(str(work), None)
        after = _digests(work / "user")
        if before is None or after == before:
            return None
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        return "files changed outside the run directory: " + ", ".join(changed[:5])

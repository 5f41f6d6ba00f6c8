"""Does TF's MWMS two-worker job (tests/multinode_tf_job.py) abort without scaldiag as with it? python bench/tf_abort_probe.py N: N rounds, each a plain job and a profiled one, alternating order; one JSON line a job."""
import json, os, socket, subprocess, sys, time
ROOT = "/work/main"
PY = f"{ROOT}/.venv/bin/python"
def ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks: s.bind(("127.0.0.1", 0))
    out = [s.getsockname()[1] for s in socks]
    for s in socks: s.close()
    return out
def job(with_scaldiag, k):
    workers = [f"127.0.0.1:{p}" for p in ports(2)]
    procs = []
    for i in range(2):
        env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "tensorflow",
               "TF_CONFIG": json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}})}
        cmd = [PY, f"{ROOT}/tests/multinode_tf_job.py", "--steps", "12"]
        if with_scaldiag:
            cmd = [PY, "-m", "scaldiag", "profile", "-q", "--out", f"/tmp/abort/runs/{k}_{i}", *cmd[1:2], "--", "--steps", "12"]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd="/tmp/abort"))
    res = []
    for p in procs:
        try:
            _, err = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            p.kill(); _, err = p.communicate(); res.append(("timeout", "")); continue
        heap = [l for l in err.splitlines() if "invalid pointer" in l or "double free" in l or "corrupted" in l]
        res.append((p.returncode, heap[:1]))
    return res
n = int(sys.argv[1])
for k in range(n):
    for side in ((False, True) if k % 2 == 0 else (True, False)):
        t = time.time()
        r = job(side, k)
        print(json.dumps({"k": k, "scaldiag": side, "result": r, "s": round(time.time() - t, 1)}), flush=True)

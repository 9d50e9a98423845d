"""Multi-process harness and shared helpers for the torch_chorus tests.

The tests run a top-level worker function of a test module in N fresh Python
processes (``subprocess`` running ``python -c ...``, not multiprocessing: the
children never re-import the parent's ``__main__``, whatever runs pytest), one
per rank, on loopback only.  Each child:

  * dies with the parent (PR_SET_PDEATHSIG) and kills itself at the run's hard
    deadline (a watchdog thread), so that nothing outlives the test;
  * imports torch (and torch_chorus, which registers the "chorus" backend);
  * optionally initialises the default process group (``init=`` below);
  * calls ``fn(ctx)`` and writes its return value or the exception (pickled) to
    a result file;
  * waits until the parent says every rank has reported or exited (a release
    file: a rank must not tear its process group down while a peer still runs),
    then destroys the process group and exits.

The parent polls, kills every child (its own process group, by pid) at the
deadline or when the test ends, and returns a ``RankResult`` per rank.  Nothing
here waits without a bound.

Worker functions take one argument, a ``Ctx`` (rank, world_size, port, tmpdir,
args, ...), and return something picklable (plain Python data; tensors are
fine).  Keep many checks in one run: each process costs 1-2 s to start.
"""

import collections
import contextlib
import datetime
import importlib
import importlib.util
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))

# Multiplies every deadline of the harness and every time bound the tests
# assert (slow machines, sanitizer builds): TORCH_CHORUS_TEST_TIME_SCALE=3.
TIME_SCALE = float(os.environ.get("TORCH_CHORUS_TEST_TIME_SCALE", "1") or "1")


def scaled(seconds):
    return seconds * TIME_SCALE


# Seconds a rank that reported waits for the parent's release past the
# deadline, where the parent kills it: only an orphan (parent gone) gets there.
_ORPHAN_WAIT_S = 30


# ---------------------------------------------------------------------------
# Import checks (parent side)
# ---------------------------------------------------------------------------

_IMPORT_STATE = {}


def _try_import(name):
    if name not in _IMPORT_STATE:
        try:
            mod = importlib.import_module(name)
            _IMPORT_STATE[name] = (mod, None)
        except Exception as e:  # noqa: BLE001 - any import failure means skip
            _IMPORT_STATE[name] = (None, "%s: %s" % (type(e).__name__, e))
    return _IMPORT_STATE[name]


def require_torch():
    """Skips the calling test module unless torch.distributed with Gloo works."""
    import pytest

    mod, err = _try_import("torch")
    if mod is None:
        pytest.skip("cannot import torch (%s); use the system python "
                    "(/usr/bin/python3) that has PyTorch" % err,
                    allow_module_level=True)
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with Gloo is not available in this torch",
                    allow_module_level=True)
    return mod


def require_backend():
    """Skips the calling test module unless torch and torch_chorus import."""
    import pytest

    require_torch()
    mod, err = _try_import("torch_chorus")
    if mod is None:
        hint = ""
        try:
            spec = importlib.util.find_spec("torch_chorus")
        except Exception:  # noqa: BLE001
            spec = None
        if spec is not None and spec.origin:
            hint = (" (found the package at %s, without a usable _C: with "
                    "'python -m pytest' the current directory comes first on "
                    "sys.path; run from another directory or with python -P)"
                    % os.path.dirname(spec.origin))
        pytest.skip("cannot import torch_chorus (%s)%s; put the directory that "
                    "contains the torch_chorus package (with _C.so) on "
                    "PYTHONPATH" % (err, hint), allow_module_level=True)
    return mod


def _backend_pythonpath():
    """Directories the children need on sys.path: this folder, the one that
    holds torch_chorus (as the parent found it), and the parent's PYTHONPATH."""
    paths = [HERE]
    spec = None
    try:
        spec = importlib.util.find_spec("torch_chorus")
    except Exception:  # noqa: BLE001
        spec = None
    if spec is not None and spec.origin:
        pkg_dir = os.path.dirname(spec.origin)  # .../torch_chorus
        paths.append(os.path.dirname(pkg_dir))
    elif spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            paths.append(os.path.dirname(loc))
    old = os.environ.get("PYTHONPATH", "")
    if old:
        paths.extend(p for p in old.split(os.pathsep) if p)
    seen, out = set(), []
    for p in paths:
        if p not in seen:
            seen.add(p)
            out.append(p)
    return os.pathsep.join(out)


# ---------------------------------------------------------------------------
# Ports
# ---------------------------------------------------------------------------

def free_port():
    """A currently free TCP port on 127.0.0.1 (the kernel picks it)."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------

class RankResult:
    """What one rank did.

    status: "ok" (fn returned), "error" (fn or init raised), "died" (the
    process exited without reporting), "timeout" (killed at the deadline before
    reporting), "killed" (killed before reporting because another rank had
    died: launch(kill_on_death=...)).
    """

    def __init__(self, rank):
        self.rank = rank
        self.status = "missing"
        self.value = None
        self.exc_type = None      # name of the exception's type, "error" only
        self.exc_msg = None
        self.traceback = None
        self.phase = None         # "init" or "fn", "error" only
        self.elapsed = None       # seconds fn (and init) took
        self.exitcode = None
        self.hung_at_exit = False  # reported, then did not exit within grace
        self.teardown_error = None  # destroy_process_group raised
        self.stdout_tail = ""
        self.stderr_tail = ""
        self.partials = []  # what the rank handed over with ctx.report()

    def describe(self, tail=True):
        lines = ["rank %d: %s (exitcode %s, %.1fs)" % (
            self.rank, self.status, self.exitcode,
            self.elapsed if self.elapsed is not None else -1.0)]
        if self.status == "error":
            lines.append("  %s in %s: %s" % (self.exc_type, self.phase, self.exc_msg))
            if self.traceback:
                lines.append("  " + self.traceback.strip().replace("\n", "\n  "))
        if self.hung_at_exit:
            lines.append("  reported its result but did not exit (killed)")
        if self.teardown_error:
            lines.append("  destroy_process_group raised: %s" % self.teardown_error)
        if tail and self.stderr_tail.strip():
            lines.append("  --- stderr tail ---\n  " +
                         self.stderr_tail.strip().replace("\n", "\n  "))
        if tail and self.stdout_tail.strip() and self.status != "ok":
            lines.append("  --- stdout tail ---\n  " +
                         self.stdout_tail.strip().replace("\n", "\n  "))
        return "\n".join(lines)

    def __repr__(self):
        return "<RankResult rank=%d status=%s>" % (self.rank, self.status)


class HarnessFailure(AssertionError):
    pass


def describe_all(results, tail=True):
    return "\n".join(r.describe(tail=tail) for r in results)


# ---------------------------------------------------------------------------
# Context handed to workers (child side)
# ---------------------------------------------------------------------------

class Ctx:
    def __init__(self, spec, rank):
        self.rank = rank
        self.world_size = spec["world_size"]
        self.port = spec["port"]
        self.tmpdir = spec["tmpdir"]
        self.args = spec["args"]
        self.kwargs = spec["kwargs"]
        self.backend = spec["backend"]
        self.init = spec["init"]
        self.pg_timeout = spec["pg_timeout"]
        self.deadline = spec["deadline_ts"]  # absolute time.time()

    def seconds_left(self):
        return self.deadline - time.time()

    def report(self, obj):
        """Hands obj to the parent now (it arrives even if this process dies
        later): RankResult.partials, in order."""
        self._nreports = getattr(self, "_nreports", 0) + 1
        _write_pickle(os.path.join(self.tmpdir, "partial_%d_%06d.pkl" % (
            self.rank, self._nreports)), obj)

    def log(self, *parts):
        print("[rank %d %.3f]" % (self.rank, time.time() % 1000), *parts, flush=True)


def init_process_group(ctx, method=None, backend=None, timeout=None, rank=None,
                       world_size=None):
    """Initialises the default process group the way ``method`` says:
    "tcp" (tcp://127.0.0.1:PORT), "file" (file://TMPDIR/initfile), "env"
    (env://, MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE set here), "store_tcp"
    (store=TCPStore, rank 0 hosts it), "store_file" (store=FileStore)."""
    import torch.distributed as dist

    method = method or ctx.init or "tcp"
    backend = backend or ctx.backend
    rank = ctx.rank if rank is None else rank
    ws = ctx.world_size if world_size is None else world_size
    td = datetime.timedelta(seconds=timeout if timeout is not None else ctx.pg_timeout)
    if method == "tcp":
        dist.init_process_group(backend, init_method="tcp://127.0.0.1:%d" % ctx.port,
                                rank=rank, world_size=ws, timeout=td)
    elif method == "file":
        path = os.path.join(ctx.tmpdir, "initfile")
        dist.init_process_group(backend, init_method="file://" + path,
                                rank=rank, world_size=ws, timeout=td)
    elif method == "env":
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(ctx.port)
        os.environ["RANK"] = str(rank)
        os.environ["WORLD_SIZE"] = str(ws)
        dist.init_process_group(backend, init_method="env://", timeout=td)
    elif method == "store_tcp":
        store = dist.TCPStore("127.0.0.1", ctx.port, ws, rank == 0, timeout=td)
        dist.init_process_group(backend, store=store, rank=rank, world_size=ws,
                                timeout=td)
    elif method == "store_file":
        store = dist.FileStore(os.path.join(ctx.tmpdir, "filestore"), ws)
        dist.init_process_group(backend, store=store, rank=rank, world_size=ws,
                                timeout=td)
    else:
        raise ValueError("unknown init method %r" % (method,))


# ---------------------------------------------------------------------------
# Child entry point
# ---------------------------------------------------------------------------

def _write_pickle(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        pickle.dump(obj, f)
    os.replace(tmp, path)


def _picklable(value):
    try:
        pickle.dumps(value)
        return value
    except Exception:  # noqa: BLE001
        return repr(value)


def _set_pdeathsig():
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except Exception:  # noqa: BLE001 - best effort
        pass


def _watchdog(deadline_ts):
    def run():
        while True:
            left = deadline_ts - time.time()
            if left <= 0:
                sys.stderr.write("torch_mp watchdog: hard deadline reached, exiting\n")
                sys.stderr.flush()
                os._exit(124)
            time.sleep(min(left, 1.0))

    t = threading.Thread(target=run, name="torch_mp-watchdog", daemon=True)
    t.start()


def _load_worker(module_name, module_file, fn_name):
    mod = sys.modules.get(module_name)
    if mod is None:
        spec = importlib.util.spec_from_file_location(module_name, module_file)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = mod
        spec.loader.exec_module(mod)
    return getattr(mod, fn_name)


def _child_main():
    spec_path, rank = sys.argv[1], int(sys.argv[2])
    with open(spec_path, "rb") as f:
        spec = pickle.load(f)
    _set_pdeathsig()
    if os.getppid() != spec["parent_pid"]:  # the parent died before prctl
        os._exit(125)
    _watchdog(spec["deadline_ts"] + 2.0)
    result_path = os.path.join(spec["tmpdir"], "result_%d.pkl" % rank)
    teardown_path = os.path.join(spec["tmpdir"], "teardown_%d.pkl" % rank)
    release_path = os.path.join(spec["tmpdir"], "release")
    out = {"rank": rank, "status": None}
    phase = "import"
    t0 = time.time()
    ctx = Ctx(spec, rank)
    try:
        if spec["need_torch"]:
            import torch  # noqa: F401
            import torch.distributed  # noqa: F401,F811
        if spec["import_backend"]:
            import torch_chorus  # noqa: F401,F811
        fn = _load_worker(spec["module_name"], spec["module_file"], spec["fn_name"])
        t0 = time.time()
        if spec["init"]:
            phase = "init"
            init_process_group(ctx)
        phase = "fn"
        value = fn(ctx)
        out.update(status="ok", value=_picklable(value))
    except BaseException as e:  # noqa: BLE001 - report everything, SystemExit too
        out.update(status="error", exc_type=type(e).__name__, exc_msg=str(e),
                   traceback=traceback.format_exc(), phase=phase)
    out["elapsed"] = time.time() - t0
    sys.stdout.flush()
    sys.stderr.flush()
    _write_pickle(result_path, out)
    # Wait for the parent's word that every rank has reported (or died). The
    # parent kills every rank still running at the deadline: a rank that tore
    # its process group down there itself would fail a peer still blocked in a
    # collective (an error, not the timeout it is) before the parent looks. It
    # waits past the deadline only in case the parent is gone.
    while (not os.path.exists(release_path)
           and time.time() < spec["deadline_ts"] + _ORPHAN_WAIT_S):
        time.sleep(0.02)
    teardown = None
    if spec["destroy"]:
        try:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                dist.destroy_process_group()
        except BaseException as e:  # noqa: BLE001
            teardown = "%s: %s" % (type(e).__name__, e)
    _write_pickle(teardown_path, teardown)
    sys.stdout.flush()
    sys.stderr.flush()
    # A normal interpreter exit: a backend that hangs in its destructors shows
    # up as hung_at_exit in the parent.


# ---------------------------------------------------------------------------
# Parent side: launching
# ---------------------------------------------------------------------------

def _tail(path, limit=4000):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _kill_group(proc):
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the child leads its own group
    except (ProcessLookupError, PermissionError):
        try:
            proc.kill()
        except ProcessLookupError:
            pass


def launch(fn, world_size, **kw):
    """Runs ``fn(ctx)`` in ``world_size`` processes; returns [RankResult].
    See _launch_once for the keywords.  A run whose init failed because the
    port picked for it was taken in the meantime runs once more."""
    results = _launch_once(fn, world_size, **kw)
    if kw.get("init", "tcp") and any(
            r.status == "error" and r.phase == "init" and r.exc_msg and
            ("Address already in use" in r.exc_msg or "EADDRINUSE" in r.exc_msg)
            for r in results):
        results = _launch_once(fn, world_size, **kw)
    return results


def _launch_once(fn, world_size, args=(), kwargs=None, init="tcp", backend="chorus",
                 pg_timeout=60, deadline=120, exit_grace=20, env=None,
                 import_backend=None, need_torch=True, destroy=True, rank_env=None,
                 kill_on_death=None):
    """Runs ``fn(ctx)`` in ``world_size`` processes; returns [RankResult].

    init: None (the worker initialises itself), or a method of
      ``init_process_group`` ("tcp", "file", "env", "store_tcp", "store_file").
    pg_timeout: the process group's timeout, seconds.
    deadline: seconds (times TIME_SCALE) after which every child still running
      is killed; reaching it is never silent (status "timeout"/hung_at_exit).
    exit_grace: seconds a rank may take to exit once every rank reported.
    env: extra environment for every child; rank_env: {rank: {var: value}}.
    import_backend: import torch_chorus in the child (default: backend ==
      "chorus").
    kill_on_death: seconds after a rank died without reporting (crashed)
      when the others are killed too (None: they run on to the deadline, as
      tests of a dead peer want).
    """
    if import_backend is None:
        import_backend = backend == "chorus"
    deadline = scaled(deadline)
    exit_grace = scaled(exit_grace)
    module = sys.modules[fn.__module__]
    tmpdir = tempfile.mkdtemp(prefix="torch_chorus_test_")
    start = time.time()
    spec = {
        "module_name": fn.__module__,
        "module_file": os.path.abspath(module.__file__),
        "fn_name": fn.__name__,
        "world_size": world_size,
        "port": free_port(),
        "tmpdir": tmpdir,
        "args": args,
        "kwargs": dict(kwargs or {}),
        "backend": backend,
        "init": init,
        "pg_timeout": pg_timeout,
        "deadline_ts": start + deadline,
        "parent_pid": os.getpid(),
        "import_backend": import_backend,
        "need_torch": need_torch,
        "destroy": destroy,
    }
    spec_path = os.path.join(tmpdir, "spec.pkl")
    _write_pickle(spec_path, spec)
    child_env = dict(os.environ)
    child_env["PYTHONPATH"] = _backend_pythonpath()
    # Loopback only: chorus's data connections too (its own choice would be
    # the interface that routes to the master, which on 127.0.0.1 is lo anyway
    # for most set-ups, but not every one).
    child_env.setdefault("CHORUS_SOCKET_IFNAME", "lo")
    child_env.setdefault("OMP_NUM_THREADS", "1")
    child_env.setdefault("MKL_NUM_THREADS", "1")
    child_env["PYTHONUNBUFFERED"] = "1"
    child_env["PYTHONDONTWRITEBYTECODE"] = "1"
    for var in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                "LOCAL_WORLD_SIZE", "GROUP_RANK"):
        child_env.pop(var, None)  # only the "env" init method sets these
    if env:
        child_env.update(env)
    code = ("import sys; sys.path.insert(0, %r); import torch_mp; "
            "torch_mp._child_main()" % HERE)
    procs = []
    results = [RankResult(r) for r in range(world_size)]
    outs = []
    try:
        for r in range(world_size):
            e = dict(child_env)
            if rank_env and r in rank_env:
                e.update(rank_env[r])
            so = open(os.path.join(tmpdir, "stdout_%d.txt" % r), "wb")
            se = open(os.path.join(tmpdir, "stderr_%d.txt" % r), "wb")
            outs += [so, se]
            procs.append(subprocess.Popen(
                [sys.executable, "-c", code, spec_path, str(r)],
                stdin=subprocess.DEVNULL, stdout=so, stderr=se, env=e,
                cwd=tmpdir, start_new_session=True))
        released_at = None
        death_at = None
        stop = "exited"
        reported = [False] * world_size
        while True:
            now = time.time()
            for r, p in enumerate(procs):
                if not reported[r] and os.path.exists(
                        os.path.join(tmpdir, "result_%d.pkl" % r)):
                    reported[r] = True
            done = [reported[r] or procs[r].poll() is not None
                    for r in range(world_size)]
            if released_at is None and all(done):
                with open(os.path.join(tmpdir, "release"), "w"):
                    pass
                released_at = now
            if all(p.poll() is not None for p in procs):
                break
            if now >= spec["deadline_ts"]:
                stop = "deadline"
                break
            if released_at is not None and now - released_at > exit_grace:
                stop = "exit_grace"
                break
            if kill_on_death is not None and death_at is None and any(
                    p.poll() is not None and not os.path.exists(
                        os.path.join(tmpdir, "result_%d.pkl" % r))
                    for r, p in enumerate(procs)):
                death_at = now
            if death_at is not None and now - death_at > kill_on_death:
                stop = "peer_died"
                break
            time.sleep(0.02)
        # Kill every child still running at once (one killed first could
        # make the others fail and report after the deadline), then sort out
        # who had reported before.
        reported = [os.path.exists(os.path.join(tmpdir, "result_%d.pkl" % r))
                    for r in range(world_size)]
        alive = [p.poll() is None for p in procs]
        for r, p in enumerate(procs):
            if alive[r]:
                _kill_group(p)
        for r, p in enumerate(procs):
            if alive[r]:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
                if reported[r]:
                    results[r].hung_at_exit = True
                else:
                    # "killed": stopped because another rank had crashed
                    results[r].status = "killed" if stop == "peer_died" else "timeout"
            results[r].exitcode = p.poll()
    finally:
        for p in procs:
            _kill_group(p)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for f in outs:
            f.close()
    for r in range(world_size):
        res = results[r]
        res.stdout_tail = _tail(os.path.join(tmpdir, "stdout_%d.txt" % r))
        res.stderr_tail = _tail(os.path.join(tmpdir, "stderr_%d.txt" % r))
        rp = os.path.join(tmpdir, "result_%d.pkl" % r)
        if res.status not in ("timeout", "killed") and os.path.exists(rp):
            try:
                with open(rp, "rb") as f:
                    out = pickle.load(f)
            except Exception as e:  # noqa: BLE001
                out = {"status": "error", "exc_type": "HarnessError",
                       "exc_msg": "unreadable result: %s" % e, "phase": "harness"}
            res.status = out["status"]
            res.value = out.get("value")
            res.exc_type = out.get("exc_type")
            res.exc_msg = out.get("exc_msg")
            res.traceback = out.get("traceback")
            res.phase = out.get("phase")
            res.elapsed = out.get("elapsed")
        elif res.status not in ("timeout", "killed"):
            res.status = "died"
        prefix = "partial_%d_" % r
        for name in sorted(n for n in os.listdir(tmpdir)
                           if n.startswith(prefix) and n.endswith(".pkl")):
            try:
                with open(os.path.join(tmpdir, name), "rb") as f:
                    res.partials.append(pickle.load(f))
            except Exception:  # noqa: BLE001 - a torn file of a killed rank
                pass
        tp = os.path.join(tmpdir, "teardown_%d.pkl" % r)
        if os.path.exists(tp):
            try:
                with open(tp, "rb") as f:
                    res.teardown_error = pickle.load(f)
            except Exception:  # noqa: BLE001
                pass
    if not os.environ.get("TORCH_CHORUS_TEST_KEEP_TMP"):
        import shutil

        shutil.rmtree(tmpdir, ignore_errors=True)
    return results


def run_ok(fn, world_size, **kw):
    """``launch`` that requires every rank to return normally and exit cleanly;
    returns the list of values (index = rank).  A rank that crashes gets the
    others killed 5 s later (they would wait for it until their timeout)."""
    kw.setdefault("kill_on_death", 5)
    t0 = time.time()
    results = launch(fn, world_size, **kw)
    bad = [r for r in results
           if r.status != "ok" or r.hung_at_exit or r.teardown_error
           or r.exitcode not in (0, None)]
    if bad:
        raise HarnessFailure("%s on %d ranks failed after %.1fs:\n%s" % (
            fn.__name__, world_size, time.time() - t0, describe_all(results)))
    return [r.value for r in results]


# ---------------------------------------------------------------------------
# Helpers for workers
# ---------------------------------------------------------------------------

def call_with_timeout(fn, timeout, *args, **kwargs):
    """Runs fn in a daemon thread; returns (outcome, value_or_exception, seconds)
    with outcome "ok", "raised" or "hung" (still running after timeout)."""
    box = {}

    def run():
        t = time.time()
        try:
            box["value"] = fn(*args, **kwargs)
            box["outcome"] = "ok"
        except BaseException as e:  # noqa: BLE001
            box["value"] = e
            box["outcome"] = "raised"
        box["elapsed"] = time.time() - t

    t0 = time.time()
    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(timeout)
    if th.is_alive():
        return "hung", None, time.time() - t0
    return box["outcome"], box["value"], box["elapsed"]


def stable_seed(*parts):
    """A seed that is the same in every process (unlike hash())."""
    return zlib.crc32("|".join(str(p) for p in parts).encode()) & 0x7FFFFFFF


class Failures:
    """Collects named check failures inside a worker.

    ``check`` counts a check under the current family and records a failure
    message when it does not hold.  ``result()`` is what the worker returns.
    """

    def __init__(self, rank, world_size):
        self.rank = rank
        self.world_size = world_size
        self.family = None
        self.counts = collections.Counter()
        self.failures = collections.defaultdict(list)
        self.aborted = {}

    def set_family(self, family):
        self.family = family

    def fail(self, label, msg):
        self.failures[self.family].append(
            "ws=%d rank=%d %s: %s" % (self.world_size, self.rank, label, msg))

    def check(self, label, ok, msg=""):
        self.counts[self.family] += 1
        if not ok:
            self.fail(label, msg or "check failed")
        return ok

    def result(self):
        return {"counts": dict(self.counts),
                "failures": {k: list(v) for k, v in self.failures.items()},
                "aborted": dict(self.aborted)}


def merge_family_results(values):
    """Merges Failures.result() of all ranks: {family: (count, [failures])}."""
    out = {}
    for v in values:
        for fam, n in v["counts"].items():
            c, f = out.get(fam, (0, []))
            out[fam] = (c + n, f)
        for fam, fl in v["failures"].items():
            c, f = out.get(fam, (0, []))
            out[fam] = (c, f + fl)
        for fam, msg in v["aborted"].items():
            c, f = out.get(fam, (0, []))
            out[fam] = (c, f + ["aborted: " + msg])
    return out


def format_failures(fails, limit=40):
    shown = fails[:limit]
    more = len(fails) - len(shown)
    return "\n".join(shown) + ("\n... and %d more" % more if more > 0 else "")


# ---------------------------------------------------------------------------
# Comparisons (import torch when called)
# ---------------------------------------------------------------------------

def compare(got, exp, tol=None):
    """None if got matches exp (exactly, or within tol=(rtol, atol)), else why not."""
    import torch

    if not isinstance(got, torch.Tensor):
        return "got %r, expected a tensor" % (type(got).__name__,)
    if got.dtype != exp.dtype:
        return "dtype %s, expected %s" % (got.dtype, exp.dtype)
    if tuple(got.shape) != tuple(exp.shape):
        return "shape %s, expected %s" % (tuple(got.shape), tuple(exp.shape))
    if got.numel() == 0:
        return None
    if tol is None:
        if torch.equal(got, exp):
            return None
        bad = (got != exp).reshape(-1)
    else:
        gd, ed = got.double(), exp.double()
        if torch.allclose(gd, ed, rtol=tol[0], atol=tol[1]):
            return None
        bad = ~torch.isclose(gd, ed, rtol=tol[0], atol=tol[1]).reshape(-1)
    idx = int(bad.nonzero()[0])
    gf, ef = got.reshape(-1), exp.reshape(-1)
    diff = (got.double() - exp.double()).abs().max().item()
    return ("%d of %d elements differ (tol %s); first at flat index %d: got %s, "
            "expected %s; max abs diff %g" % (int(bad.sum()), got.numel(), tol, idx,
                                              gf[idx].item(), ef[idx].item(), diff))


def compare_lists(got, exp, tol=None):
    if not isinstance(got, (list, tuple)):
        return "got %s, expected a list of %d tensors" % (type(got).__name__, len(exp))
    if len(got) != len(exp):
        return "got %d tensors, expected %d" % (len(got), len(exp))
    for i, (g, e) in enumerate(zip(got, exp)):
        if isinstance(e, (list, tuple)):
            m = compare_lists(g, e, tol)
        else:
            m = compare(g, e, tol)
        if m:
            return "[%d]: %s" % (i, m)
    return None

"""The examples a newcomer starts from run as the README says: torchrun, 2 ranks."""
import os
import shutil
import subprocess
import sys

import pytest

import torch_mp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _torchrun(script, *args):
    torch_mp.require_backend()
    torchrun = shutil.which("torchrun") or pytest.skip("no torchrun on PATH")
    # torch 1.13 knows only the '_' spellings; its default --redirects 0 breaks on Python 3.11.
    cmd = [torchrun, "--nproc_per_node", "2", "--redirects", "2", "--tee", "2",
           "--master_port", str(torch_mp.free_port()), os.path.join(ROOT, "examples", "torch", script), *args]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_allreduce_example():
    out = _torchrun("allreduce.py")
    assert "all_reduce over 2 ranks: [1.0, 3.0, 5.0, 7.0, 9.0, 11.0, 13.0, 15.0]" in out, out
    assert out.count("ok (broadcast received [3.0, 1.0, 4.0, 1.0, 5.0])") == 2, out


def test_ddp_example():
    out = _torchrun("ddp.py")
    assert "[chorus] 2 replicas equal" in out, out

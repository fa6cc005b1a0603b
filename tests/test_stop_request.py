"""The stop request (what train.sbatch writes on Slurm's pre-timeout signal, and gpu_smoke's forced stop): a file
in the run folder with its reason. The trainer's side runs for real in tests/test_slurm.py (SIGUSR1 to a real
job); tests/test_gpu_smoke.py's stand-in trainer keeps the same protocol."""

from __future__ import annotations

from dara.run_folder import STOP_REQUEST
from dara.verl.stop_request import clear_stop_request, request_stop, stop_requested


def test_request_is_a_file_with_its_reason(tmp_path):
    assert stop_requested(tmp_path) is None
    path = request_stop(tmp_path, "time limit near (SIGUSR1)\n")
    assert path == tmp_path / STOP_REQUEST and stop_requested(tmp_path) == "time limit near (SIGUSR1)"
    clear_stop_request(tmp_path)
    clear_stop_request(tmp_path)  # twice: no error
    assert stop_requested(tmp_path) is None and list(tmp_path.iterdir()) == []

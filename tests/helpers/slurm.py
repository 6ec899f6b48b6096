"""What Slurm says of a job (`scontrol show job`)."""

from __future__ import annotations

import re
import subprocess


def job_field(job_id: str, name: str) -> str:
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, timeout=30,
                         check=False).stdout
    match = re.search(rf"\b{name}=(\S+)", out)
    return match.group(1) if match else ""

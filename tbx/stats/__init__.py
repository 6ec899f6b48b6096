"""Statistics over stored verdicts, pure: pass@k and intervals (`metrics`), Jeffreys difficulty bands
(`difficulty`), the frozen pool's strategies (`pool`), adaptive probing's stopping rules (`adaptive`), the
paired per-task difference (`paired`) and cost (`cost`). No I/O: the stages and the report feed them records."""
